"""A graded submission's record: each question's result, stored as JSON and read back, and
how a result reads to people (the verdict of each status, a score as a number, and what of
it the student sees: :func:`shown_to_student`, :func:`student_flags`).

Written by the grader (``grades/<assignment>/<student>.json``), read by the records
(reports, the gradebook) and the commands; every file the grader writes is written
atomically (:func:`write_atomically`), so an interrupted run leaves no half-written file.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERDICT = {
    "passed": "passed",
    "failed": "failed",
    "hidden": "passed the visible tests, failed the hidden tests",
    "error": "your answer cell raised an error",
    "timeout": "ran out of time",
    "limit": "hit a resource limit",
    "crash": "crashed",
    "missing": "no answer found",
    "corrupt": "the notebook could not be read",
    "setup": "the setup cell failed (tell your instructor)",
    "manual": "graded by hand",
    "copied": "scored 0 as a copy",
}
# A question's detail the student never reads: a hidden test's failure (it would tell the
# hidden test) and a pass (it has nothing to say).
NO_DETAIL = {"passed", "hidden"}
# A flag for the instructor's records only (grades.csv, reasons, the summary, the batch's
# output), never for the student's feedback, Gradescope's results or `check`: make one
# with :func:`instructor_only`.
INSTRUCTOR_ONLY = "instructor only: "


@dataclass
class QuestionResult:
    grade_id: str
    points: float
    score: float | None  # None: graded by hand (written answers)
    status: str  # passed, failed, hidden, error, timeout, limit, crash, missing, corrupt,
    # manual, copied
    detail: str = ""


@dataclass
class StudentResult:
    student: str
    assignment: str
    questions: list[QuestionResult]
    flags: list[str] = field(default_factory=list)
    file: str = ""  # the notebook graded, relative to the student's folder
    key: str = ""  # what it was graded from (submission, source, grader)

    @property
    def score(self) -> float:
        return sum(q.score or 0.0 for q in self.questions)

    @property
    def max_auto(self) -> float:
        return sum(q.points for q in self.questions if q.score is not None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StudentResult:
        data = json.loads(text)
        data["questions"] = [QuestionResult(**q) for q in data["questions"]]
        return cls(**data)


def stored(path: Path, key: str) -> StudentResult | None:
    """The result stored at ``path`` if it was graded from ``key``; None if there is none,
    it cannot be read, or it is stale."""
    try:
        result = StudentResult.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return result if result.key == key else None


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def verdict(status: str) -> str:
    return VERDICT.get(status, status)


def shown_to_student(question: QuestionResult, between: str = ": ") -> str:
    """What the student reads of one question, wherever they read it: its verdict, then
    (after ``between``) its detail, unless the status hides it (:data:`NO_DETAIL`) or
    the detail only repeats the verdict."""
    said = verdict(question.status)
    if question.status in NO_DETAIL or question.detail in ("", said):
        return said
    return f"{said}{between}{question.detail}"


def instructor_only(flag: str) -> str:
    """``flag`` marked for the instructor's records alone (see :data:`INSTRUCTOR_ONLY`)."""
    return INSTRUCTOR_ONLY + flag


def student_flags(flags: list[str]) -> list[str]:
    """The flags a student may read: all but the instructor-only ones."""
    return [flag for flag in flags if not flag.startswith(INSTRUCTOR_ONLY)]


def number(value: float | None) -> str:
    """A score as people write it: 2, 1.5, or blank for none."""
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
