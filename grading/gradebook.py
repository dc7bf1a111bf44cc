"""nbgrader's gradebook, for the written answers: after a batch, the autograded scores go
into ``course/gradebook.db`` and each student's notebook into
``course/autograded/<student>/<assignment>/``, so the instructor grades the written answers
in formgrader (``cd grading && jupyter lab``, or ``nbgrader formgrader``) and ``nbgrader
export`` works. Manual scores given there flow back into our grades CSV.

Only this (trusted) process writes the gradebook, through nbgrader's own API; student code
never runs with it in view. Rerunning keeps every manual score.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import warnings
from pathlib import Path

import nbformat
import nbgrader.api
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from nbgrader.dbutil import _temp_alembic_ini
from sqlalchemy.exc import SAWarning
from traitlets.config import Config

from grading.course import Assignment
from grading.results import StudentResult, write_atomically
from grading.submissions import SubmittedNotebooks, graded_notebook


def db_url(course: Path) -> str:
    return f"sqlite:///{(course / 'gradebook.db').resolve()}"


def register(assignment: Assignment, course: Path, source: Path) -> None:
    """Record the assignment's cells and points in the gradebook, with nbgrader's own
    ``generate_assignment`` (its release goes to a throwaway folder, not notebooks/), run in
    this process through nbgrader's Python API: a ``nbgrader`` command would start Python
    and import Jupyter again (about 5 s of a core)."""
    course.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="register-") as tmp, _alembic_head_here():
        folders = CourseDirectory(root=str(course.resolve()),
                                  source_directory=str(source.resolve()),
                                  release_directory=tmp, db_url=db_url(course))  # fmt: skip
        done = NbGraderAPI(coursedir=folders, config=Config()).generate_assignment(
            assignment.name, force=True)  # fmt: skip
    if not done["success"]:
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{done.get('error', '')}")


_ALEMBIC_LOCK = threading.Lock()


@contextlib.contextmanager
def _alembic_head_here():
    """While it lasts, a new gradebook learns the head of nbgrader's migrations from
    alembic's API in this process. nbgrader asks the ``alembic heads`` command (a Python of
    its own: 2.5 s of a core, and not found when the venv is not activated); the answer is
    the same revision."""
    with _ALEMBIC_LOCK:
        asked = nbgrader.api.get_alembic_version

        def head() -> str:
            with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
                return ScriptDirectory.from_config(AlembicConfig(ini)).get_current_head()

        nbgrader.api.get_alembic_version = head
        try:
            yield
        finally:
            nbgrader.api.get_alembic_version = asked


class Registration:
    """:func:`register`, once per source notebook, in a thread of its own: ``grade``
    starts it before the batch (nbgrader's ``generate_assignment`` takes seconds, most of
    them importing), and :func:`sync` waits for it."""

    def __init__(self, assignment: Assignment, course: Path, source: Path):
        self.error: Exception | None = None
        marker = course / f".registered-{assignment.name}"
        self.thread = None
        if not (marker.is_file() and marker.read_text() == assignment.digest):
            self.thread = threading.Thread(target=self._run, daemon=True,
                                           args=(assignment, course, source, marker))  # fmt: skip
            self.thread.start()

    def _run(self, assignment: Assignment, course: Path, source: Path, marker: Path) -> None:
        try:
            register(assignment, course, source)
            write_atomically(marker, assignment.digest)
        except Exception as error:  # noqa: BLE001 - raised by wait(), in the caller
            self.error = error

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error


def sync(
    results: list[StudentResult],
    assignment: Assignment,
    course: Path,
    source: Path,
    registration: Registration | None = None,
    submitted: SubmittedNotebooks | None = None,
) -> None:
    """Write autograded notebooks and scores for formgrader; keep manual scores.
    ``submitted``: the batch's notebooks, read once and shared with the feedback pages."""
    submitted = submitted or SubmittedNotebooks(course, assignment.name)
    (registration or Registration(assignment, course, source)).wait()
    with warnings.catch_warnings(), Gradebook(db_url(course)) as gb:
        # nbgrader's own update_or_create_submission trips SQLAlchemy's autoflush warnings
        warnings.simplefilter("ignore", SAWarning)
        for result in results:
            nb = graded_notebook(result, assignment, submitted.of(result), hidden=True)
            target = course / "autograded" / result.student / assignment.name
            write_atomically(target / assignment.notebook_name, nbformat.writes(nb))
            gb.update_or_create_student(result.student)
            gb.update_or_create_submission(assignment.name, result.student)
            for question in result.questions:
                grade = gb.find_grade(question.grade_id, assignment.name, assignment.name,
                                      result.student)  # fmt: skip
                if question.score is not None:
                    grade.auto_score, grade.needs_manual_grade = question.score, False
                else:
                    grade.auto_score = None
                    grade.needs_manual_grade = grade.manual_score is None
            gb.db.commit()


def manual_scores(course: Path, assignment: Assignment) -> dict[tuple[str, str], float]:
    """(student, grade_id) → the score given by hand in formgrader, where there is one."""
    if not (course / "gradebook.db").is_file():
        return {}
    scores = {}
    with Gradebook(db_url(course)) as gb:
        try:
            submissions = gb.assignment_submissions(assignment.name)
        except MissingEntry:
            return {}
        for submission in submissions:
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.manual_score is not None:
                        scores[(submission.student.id, grade.name)] = grade.manual_score
    return scores

