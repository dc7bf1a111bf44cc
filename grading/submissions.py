"""A student's submitted notebook: which file is graded, read safely, and the notebook as
graded (the release with the student's answers and the grader's verdicts).

The records of a batch (feedback pages, nbgrader's gradebook) all read a graded submission:
:class:`SubmittedNotebooks` parses each one once and hands the same notebook to both.
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from pathlib import Path

import nbformat
from nbformat.validator import normalize

from grading.course import Assignment, meta
from grading.results import StudentResult, number, shown_to_student

MAX_NOTEBOOK_BYTES = 50 << 20


class CorruptNotebook(ValueError):
    pass


def parse(raw: bytes) -> nbformat.NotebookNode:
    """A submitted notebook, or CorruptNotebook saying why not."""
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise CorruptNotebook(f"larger than {MAX_NOTEBOOK_BYTES >> 20} MiB")
    try:
        nb = nbformat.reads(with_cell_ids(raw.decode("utf-8-sig")), as_version=4)
        cells = list(nb.cells)
        for cell in cells:
            kinds = ("code", "markdown", "raw")
            if not isinstance(cell.source, str) or cell.cell_type not in kinds:
                raise ValueError("a cell has no text source or an unknown type")
    except Exception as error:  # nbformat raises many types on hostile JSON
        raise CorruptNotebook(f"{type(error).__name__}: {str(error)[:200]}") from None
    return nb


def with_cell_ids(text: str) -> str:
    """The notebook's JSON with an id on every cell where its format (4.5+) wants one, by
    nbformat's own ``normalize``: this copy only, never the student's file. Otherwise
    nbformat warns (MissingIDFieldWarning) once per cell of every such submission."""
    try:
        data = json.loads(text)
    except ValueError:
        return text  # nbformat.reads says what is wrong with it
    cells = data.get("cells") if isinstance(data, dict) else None
    if not (isinstance(cells, list) and data.get("nbformat") == 4
            and isinstance(data.get("nbformat_minor"), int) and data["nbformat_minor"] >= 5
            and any(isinstance(c, dict) and "id" not in c for c in cells)):  # fmt: skip
        return text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warnings are about what normalize repairs
        _, data = normalize(data)
    return json.dumps(data)


def pick_notebook(
    folder: Path, expected: str, nested: bool = False
) -> tuple[Path | None, list[str]]:
    """The notebook to grade in a submission folder, and flags about the choice: the one
    named ``expected`` at its top, else the newest there; with ``nested`` and none at the
    top, the one notebook in its subfolders (an uploaded zip, a repository)."""
    found = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and not p.is_symlink())
    if not found and nested and folder.is_dir():
        chosen, flags = _nested_notebook(folder, expected)
        if chosen is not None or flags:
            return chosen, flags
    if not found:
        others = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        extra = f" (found: {', '.join(others[:5])})" if others else ""
        return None, [f"missing notebook: no {expected}{extra}"]
    exact = [p for p in found if p.name == expected]
    chosen = exact[0] if exact else max(found, key=lambda p: (p.stat().st_mtime, p.name))
    flags = []
    if not exact:
        flags.append(f"wrong file name: {chosen.name} (expected {expected})")
    if len(found) > 1:
        others = ", ".join(p.name for p in found if p != chosen)
        flags.append(f"duplicate submission: graded {chosen.name}, ignored {others}")
    return chosen, flags


def _nested_notebook(folder: Path, expected: str) -> tuple[Path | None, list[str]]:
    """The one notebook under ``folder``'s subfolders (or the one named ``expected``, with
    a flag); None and no flag when there is none."""
    nested = []
    for top, dirs, files in os.walk(folder):  # not following links out of the submission
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        nested += [Path(top, f) for f in sorted(files) if f.endswith(".ipynb")]
    nested = [p for p in nested if p.is_file() and not p.is_symlink()]
    if not nested:
        return None, []
    exact = [p for p in nested if p.name == expected]
    if len(exact) == 1 and len(nested) == 1:
        return exact[0], []
    names = ", ".join(str(p.relative_to(folder)) for p in nested)
    if len(exact) != 1:
        return None, [f"cannot tell which notebook to grade: found {names} "
                      f"(submit one, named {expected})"]  # fmt: skip
    return exact[0], [f"graded {exact[0].relative_to(folder)}, ignored the others ({names})"]


class SubmittedNotebooks:
    """The notebook each result was graded from, under ``course/submitted/``, parsed the
    first time it is asked for and remembered: the feedback pages and the gradebook of one
    batch read each submission once."""

    def __init__(self, course: Path, assignment: str):
        self.folder = course / "submitted"
        self.assignment = assignment
        self._parsed: dict[tuple[str, str], nbformat.NotebookNode | None] = {}

    def of(self, result: StudentResult) -> nbformat.NotebookNode | None:
        """The graded notebook of ``result``; None when it had none, or it is corrupt or
        gone (its records then show the release with no answers)."""
        if not result.file:
            return None
        key = (result.student, result.file)
        if key not in self._parsed:
            path = self.folder / result.student / self.assignment / result.file
            try:
                self._parsed[key] = parse(path.read_bytes())
            except (OSError, CorruptNotebook):
                self._parsed[key] = None
        return self._parsed[key]


def graded_notebook(
    result: StudentResult,
    assignment: Assignment,
    submission: nbformat.NotebookNode | None,
    hidden: bool = False,
) -> nbformat.NotebookNode:
    """The release notebook (no solutions) with the student's answers put in and each test
    cell's output replaced by the grader's verdict. Test cells show only their visible part
    unless ``hidden`` (the instructor's copy for formgrader)."""
    nb = copy.deepcopy(assignment.release)
    answers: dict[str, str] = {}
    if submission is not None:
        for cell in submission.cells:
            grade_id = meta(cell).get("grade_id")
            if isinstance(grade_id, str) and meta(cell).get("solution"):
                answers[grade_id] = cell.source  # the last one wins, as when grading
    by_id = {q.grade_id: q for q in result.questions}
    full = {e.test_id: e.full for e in assignment.exercises}
    for cell in nb.cells:
        grade_id = meta(cell).get("grade_id")
        if grade_id in answers and meta(cell).get("solution"):
            cell.source = answers[grade_id]
        if hidden and grade_id in full:
            cell.source = full[grade_id]
        if cell.cell_type == "code" and grade_id in by_id:
            q = by_id[grade_id]
            shown = shown_to_student(q, between="\n")
            text = f"{number(q.score)} / {number(q.points)}: {shown}"
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
    return nb
