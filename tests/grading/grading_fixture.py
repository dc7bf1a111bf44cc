"""A tiny chapter in nbgrader source format, written the way CONTRIBUTING.md says: a locked
setup cell, three exercises (answer cell + test cell with visible and hidden checks, all via
``helpers.book.checks``) and one written answer graded by hand."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NAME = "99_demo"
SETUP = """from helpers.book.notebook import setup
from helpers.book.checks import check_float, check_int, check_tensor
import torch

DEVICE = setup()"""

# answer grade_id -> (points, solution body, a wrong body, visible checks, hidden checks)
EXERCISES = {
    "ch99_square": (
        1,
        "def square(n):\n    ### BEGIN SOLUTION\n    return n * n\n    ### END SOLUTION",
        "def square(n):\n    return n + n",
        "check_int(square(3), 9, 'square(3)')",
        "check_int(square(12345), 12345 ** 2, 'square(12345)')\n"
        "check_int(square(0), 0, 'square(0)')",
    ),
    "ch99_mean": (
        2,
        "def mean(xs):\n    ### BEGIN SOLUTION\n    return float(sum(xs)) / len(xs)\n"
        "    ### END SOLUTION",
        "def mean(xs):\n    return float(sum(xs)) / (len(xs) + 1)",
        "check_float(mean([1, 2, 3]), 2.0, 'mean([1, 2, 3])')",
        "check_float(mean([7]), 7.0, 'mean([7])')\n"
        "check_float(mean([0.5, 1.5, 4.0, 6.0]), 3.0, 'mean of four')",
    ),
    "ch99_double": (
        3,
        "def double(t):\n    ### BEGIN SOLUTION\n    return t * 2\n    ### END SOLUTION",
        "def double(t):\n    return t + 1",
        "check_tensor(double(torch.ones(2)), torch.full((2,), 2.0), 'double(ones)')",
        "check_tensor(double(torch.arange(5.0)), torch.arange(5.0) * 2, 'double(arange)')",
    ),
}
WRITTEN_ID, WRITTEN_POINTS = "ch99_written_why", 2
MAX_AUTO = sum(points for points, *_ in EXERCISES.values())


def meta(grade_id: str, *, grade=False, solution=False, locked=False, points=None) -> dict:
    info = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}  # fmt: skip
    if points is not None:
        info["points"] = points
    return {"nbgrader": info}


def with_hidden_tests(visible: str, hidden: str) -> str:
    return f"{visible}\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS"


def source_notebook() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell("# A demo chapter", metadata=meta("ch99_intro", locked=True)),
        new_code_cell(SETUP, metadata=meta("ch99_setup", locked=True)),
    ]
    for answer_id, (points, solution, _, visible, hidden) in EXERCISES.items():
        cells.append(new_code_cell(solution, metadata=meta(answer_id, solution=True)))
        cells.append(
            new_code_cell(with_hidden_tests(visible, hidden),
                          metadata=meta(f"{answer_id}_test", grade=True, locked=True,
                                        points=points))
        )  # fmt: skip
    cells.append(
        new_markdown_cell(
            "### BEGIN SOLUTION\nBecause decode reads every weight per token.\n"
            "**Rubric**: 2 points for naming weight reads.\n### END SOLUTION",
            metadata=meta(WRITTEN_ID, grade=True, solution=True, points=WRITTEN_POINTS),
        )
    )
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}  # fmt: skip
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write_source(source: Path) -> Path:
    path = source / NAME / f"{NAME}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(source_notebook(), path)
    return path
