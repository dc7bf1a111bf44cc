"""Grade submissions: pick and parse a submission's notebook and run its answers in the
sandbox (:func:`grade_submission`, which ``grade``'s batch and Gradescope both call), and
store one result per student of a batch (:func:`grade_batch`).

The course folder follows nbgrader's layout: ``submitted/<student>/<assignment>/`` in,
``grades/<assignment>/<student>.json`` out (written by this process only, atomically). A
stored result is reused when the submission, the source and this grader are unchanged, so
an interrupted batch resumes and a rerun does no work and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from grading import sandbox
from grading.course import Assignment, meta
from grading.results import (
    QuestionResult,
    StudentResult,
    instructor_only,
    stored,
    write_atomically,
)
from grading.submissions import CorruptNotebook, parse, pick_notebook

RESULTS_VERSION = 1  # bump when grading changes, so stored results are redone


def submission_key(folder: Path, assignment: Assignment) -> str:
    digest = hashlib.sha256(f"{RESULTS_VERSION}:{assignment.digest}".encode())
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.is_symlink():
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def answers_and_flags(
    nb: nbformat.NotebookNode, assignment: Assignment
) -> tuple[dict[str, str], list[str]]:
    """The student's answer cells by grade_id (never their tests, points or locked cells),
    and flags for cells that were deleted, duplicated or edited."""
    by_id: dict[str, list] = {}
    for cell in nb.cells:
        grade_id = meta(cell).get("grade_id")
        if isinstance(grade_id, str):
            by_id.setdefault(grade_id, []).append(cell)
    flags, answers = [], {}
    for exercise in assignment.exercises:
        cells = [c for c in by_id.get(exercise.answer_id, []) if c.cell_type == "code"]
        if len(cells) > 1:
            flags.append(f"duplicate cell {exercise.answer_id}: graded the last one")
        if cells:
            answers[exercise.answer_id] = cells[-1].source
    for grade_id, source in assignment.locked.items():
        cells = by_id.get(grade_id, [])
        if not cells:
            flags.append(f"deleted locked cell {grade_id} (the instructor's copy was used)")
        elif any(c.source.strip() != source.strip() for c in cells):
            flags.append(f"edited locked cell {grade_id} (the instructor's copy was used)")
    return answers, flags


def grade_notebook(
    nb: nbformat.NotebookNode,
    assignment: Assignment,
    limits: sandbox.Limits,
    isolation: sandbox.Isolation,
) -> tuple[list[QuestionResult], list[str]]:
    """Per-question results for one parsed notebook."""
    answers, flags = answers_and_flags(nb, assignment)
    present = [e for e in assignment.exercises if e.answer_id in answers]
    outcomes = sandbox.run(
        [sandbox.Question.of(assignment.setup, e, answers[e.answer_id]) for e in present],
        limits, isolation=isolation)  # fmt: skip
    by_test = {e.test_id: o for e, o in zip(present, outcomes, strict=True)}
    results = []
    for exercise in assignment.exercises:
        outcome = by_test.get(exercise.test_id)
        if outcome is None:
            results.append(
                QuestionResult(exercise.test_id, exercise.points, 0.0, "missing",
                               f"answer cell {exercise.answer_id} not found")
            )  # fmt: skip
        else:
            score = exercise.points if outcome.passed else 0.0
            results.append(
                QuestionResult(exercise.test_id, exercise.points, score, outcome.status,
                               outcome.detail)
            )  # fmt: skip
    results += [QuestionResult(w.grade_id, w.points, None, "manual") for w in assignment.written]
    return results, flags


def zero(assignment: Assignment, status: str, detail: str) -> list[QuestionResult]:
    auto = [QuestionResult(e.test_id, e.points, 0.0, status, detail) for e in assignment.exercises]
    return auto + [QuestionResult(w.grade_id, w.points, None, "manual") for w in assignment.written]


def grade_submission(
    folder: Path,
    assignment: Assignment,
    limits: sandbox.Limits,
    isolation: sandbox.Isolation,
    student: str = "submission",
    key: str = "",
    nested: bool = False,
) -> StudentResult:
    """Grade the notebook in one submission folder (``nested``: look in its subfolders when
    its top has none); never raises for a bad submission: a missing, unreadable or corrupt
    notebook scores 0, flagged with why."""
    path, flags = pick_notebook(folder, assignment.notebook_name, nested)
    if path is None:
        questions = zero(assignment, "missing", "no notebook submitted")
        return StudentResult(student, assignment.name, questions, flags, "", key)
    name = str(path.relative_to(folder))
    try:
        nb = parse(path.read_bytes())
    except (OSError, CorruptNotebook) as error:
        flags.append(f"corrupt notebook {name}: {error}")
        questions = zero(assignment, "corrupt", "the notebook could not be read")
        return StudentResult(student, assignment.name, questions, flags, name, key)
    questions, more = grade_notebook(nb, assignment, limits, isolation)
    return StudentResult(student, assignment.name, questions, flags + more, name, key)


def submitted_answers(folder: Path, assignment: Assignment, nested: bool = False
                      ) -> dict[str, str]:  # fmt: skip
    """The answer cells graded from one submission folder, by grade_id ({} if none)."""
    path, _ = pick_notebook(folder, assignment.notebook_name, nested)
    try:
        return answers_and_flags(parse(path.read_bytes()), assignment)[0] if path else {}
    except (OSError, CorruptNotebook):
        return {}


COPIED = ("flag", "zero")  # what `grade --copied` does with an answer that matches a copy
COPIED_DETAIL = "your answer matches code found elsewhere (your instructor has the details)"


def _check_copied(copied: str) -> None:
    if copied not in COPIED:
        raise ValueError(f"copied must be one of {', '.join(COPIED)}, not {copied!r}")


def copy_matches(answers: dict[str, dict[str, str]], released: dict[str, str]) -> dict:
    """student -> the copies among their answers, each ``{"grade_id", "flag"}``
    (:func:`grading.copies.copy_flags`): compared with the library and with the same
    question's answers of the others, the released cells being what everyone starts from."""
    from grading import copies  # copydetect loads matplotlib: only a comparison pays for it

    return copies.records(copies.copy_flags(answers, boilerplate=released))


class CopyChecker:
    """:func:`copy_matches` in a process of its own (``python -m grading.copies``), started
    as a batch starts: it makes the library's fingerprints (about 4 s of one core) while the
    sandboxes run, and never holds the GIL the grading threads need."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "grading.copies"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)  # fmt: skip

    def matches(self, answers: dict[str, dict[str, str]], released: dict[str, str]) -> dict:
        request = json.dumps({"answers": answers, "released": released})
        out, _ = self.process.communicate(request)
        if self.process.returncode != 0:
            raise RuntimeError(f"the copy check failed (exit status {self.process.returncode})")
        return json.loads(out)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def flag_copies(results: list[StudentResult], matches: dict, assignment: Assignment,
                copied: str = "flag") -> None:  # fmt: skip
    """Flag each match (:func:`copy_matches`) for the instructor, never the student (it
    may name another student); with ``copied="zero"`` the matched question also scores 0
    with a reason the student reads. In place; a batch's flags are made afresh on every
    run, since they depend on every submission."""
    _check_copied(copied)
    tests = {e.answer_id: e.test_id for e in assignment.exercises}
    for result in results:
        found = matches.get(result.student, [])
        result.flags += [instructor_only(match["flag"]) for match in found]
        if copied != "zero":
            continue
        zeroed = {tests.get(match["grade_id"]) for match in found}
        for question in result.questions:
            if question.grade_id in zeroed and question.score:
                question.score, question.status = 0.0, "copied"
                question.detail = COPIED_DETAIL


def students_in(submitted: Path, assignment: str) -> list[str]:
    if not submitted.is_dir():
        return []
    return sorted(p.name for p in submitted.iterdir() if (p / assignment).is_dir())


def grade_batch(
    assignment: Assignment,
    course: Path,
    roster: Iterable[str] | None = None,
    jobs: int | None = None,
    limits: sandbox.Limits | None = None,
    *,
    isolation: sandbox.Isolation,
    progress: bool = True,
    copied: str = "flag",
) -> list[StudentResult]:
    """Grade every submission of ``assignment`` under ``course/submitted`` (resuming from
    stored results), plus a zero for each roster student who submitted nothing; answers
    that match a copy are flagged (and with ``copied="zero"`` score 0: :func:`flag_copies`).

    A notebook is looked for at the top of each student's folder only: that is where the
    ingest puts it, and a stored result is reused by those files alone
    (:func:`submission_key`), so a nested one could be graded stale."""
    limits = limits or sandbox.Limits()
    _check_copied(copied)
    workers = jobs or os.cpu_count() or 1
    copier = CopyChecker()
    try:
        submitted, results_dir = course / "submitted", course / "grades" / assignment.name
        roster_set = set(roster) if roster is not None else None
        students = students_in(submitted, assignment.name)
        everyone = sorted(set(students) | (roster_set or set()))
        results: dict[str, StudentResult] = {}
        todo = []
        for student in everyone:
            key = submission_key(submitted / student / assignment.name, assignment)
            previous = stored(results_dir / f"{student}.json", key)
            if previous is not None:
                results[student] = previous
            else:
                todo.append((student, key))
        # the templates start now, while the rest of the batch is set up
        sandbox.prestart(min(workers, len(todo)), limits, isolation=isolation)
        with (
            ThreadPoolExecutor(max_workers=workers) as pool,
            tqdm(total=len(everyone), initial=len(results), desc=f"grading {assignment.name}",
                 unit="student", disable=not progress) as bar,
        ):  # fmt: skip
            futures = {
                pool.submit(grade_submission, submitted / s / assignment.name, assignment, limits,
                            isolation, s, key): s
                for s, key in todo
            }  # fmt: skip
            try:
                for future in as_completed(futures):
                    student = futures[future]
                    try:
                        results[student] = future.result()
                    except Exception as error:  # the grader's own failure: not stored, so a
                        results[student] = StudentResult(  # rerun tries this student again
                            student, assignment.name,
                            zero(assignment, "crash", "the grader failed on this submission"),
                            [f"grader error (rerun to retry): {type(error).__name__}: {error}"],
                        )  # fmt: skip
                    else:
                        write_atomically(results_dir / f"{student}.json",
                                         results[student].to_json())  # fmt: skip
                    bar.update()
            except BaseException:  # Ctrl-C: stop queued work; what is stored stays for a resume
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        if roster_set is not None:  # the roster may change between runs: not stored
            for student in set(everyone) - roster_set:
                results[student].flags.insert(0, "unknown student: not on the roster")
        answers = {s: submitted_answers(submitted / s / assignment.name, assignment)
                   for s in students}  # fmt: skip
        matches = copier.matches(answers, assignment.released_answers)
    finally:  # also on Ctrl-C: no process left behind
        copier.close()
        sandbox.stop_idle()
    flag_copies([results[s] for s in students], matches, assignment, copied)
    return [results[s] for s in everyone]
