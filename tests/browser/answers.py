"""What a student who solved a chapter submits, for the browser tests: the release with the
answer cells' sources taken from solutions/, less the solution markers (a student's notebook
has none)."""

from __future__ import annotations

import nbformat

from grading.course import meta
from grading.release import SOURCE

MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def solutions(chapter: str) -> dict[str, str]:
    """grade_id -> the model answer of each answer cell (code and written), markers dropped."""
    nb = nbformat.read(SOURCE / chapter / f"{chapter}.ipynb", as_version=4)
    return {meta(cell)["grade_id"]: "\n".join(line for line in cell.source.splitlines()
                                              if line.strip() not in MARKERS)
            for cell in nb.cells if meta(cell).get("solution")}  # fmt: skip


def filled(release: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """``release`` with the answer cells named in ``answers`` given those sources."""
    for cell in release.cells:
        if meta(cell).get("grade_id") in answers:
            cell.source = answers[meta(cell)["grade_id"]]
    return release
