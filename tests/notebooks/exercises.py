"""Run one exercise of a chapter outside Jupyter, with any answer substituted.

An exercise is the chapter's setup cell, an answer cell and its test cell (CONTRIBUTING.md).
The test cell's hidden block is self-contained, so it can run alone: that is how the
mutation tests prove the *hidden* tests reject a wrong answer.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"
HIDDEN = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS\n(.*?)^[ \t]*### END HIDDEN TESTS\n?", re.S | re.M
)
SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?", re.S | re.M)


@dataclass(frozen=True)
class Exercise:
    chapter: str
    name: str
    setup: str
    answer: str
    test: str

    @property
    def hidden(self) -> str:
        return "\n".join(HIDDEN.findall(self.test))

    @property
    def visible(self) -> str:
        return HIDDEN.sub("", self.test)

    @property
    def stub(self) -> str:
        """The answer as the release shows it."""
        return SOLUTION.sub(lambda m: f"{m.group(1)}raise NotImplementedError()\n", self.answer)


def chapters() -> list[str]:
    return sorted(p.parent.name for p in SOLUTIONS.glob("*/*.ipynb") if p.stem == p.parent.name)


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


@functools.cache
def exercises(chapter: str) -> dict[str, Exercise]:
    """Every autograded exercise of a chapter, by answer grade_id."""
    nb = nbformat.read(SOLUTIONS / chapter / f"{chapter}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    setup = "\n".join(c.source for c in code if _grade_id(c).endswith("_setup"))
    by_id = {_grade_id(c): c for c in code if _grade_id(c)}
    found = {}
    for grade_id, cell in by_id.items():
        meta = cell.metadata["nbgrader"]
        if meta.get("solution") and f"{grade_id}_test" in by_id:
            test = by_id[f"{grade_id}_test"].source
            found[grade_id] = Exercise(chapter, grade_id, setup, cell.source, test)
    return found


def run(exercise: Exercise, answer: str | None = None, part: str = "all") -> None:
    """Execute setup, ``answer`` (default: the solution), then the test cell's ``part``
    ("all", "visible" or "hidden"); an AssertionError means the tests rejected the answer."""
    tests = {"all": exercise.test, "visible": exercise.visible, "hidden": exercise.hidden}[part]
    namespace: dict = {"__name__": "__main__"}
    with reproducible_urandom(exercise.name):
        for source in (exercise.setup, exercise.answer if answer is None else answer, tests):
            exec(compile(source, f"<{exercise.name}>", "exec"), namespace)  # noqa: S102


@contextlib.contextmanager
def reproducible_urandom(name: str):
    """``os.urandom`` returns the same bytes for every run of one exercise here.

    A hidden test that draws its inputs at grading time (chapter 9's design problem seeds
    its scenarios from ``os.urandom``) then draws the same ones for the solution and for each
    wrong answer, so the planner's cached searches serve every run after the first instead of
    being redone for each mutant: minutes of CI. The grader itself draws anew for every
    submission; this harness checks what the hidden tests reject, on one fixed draw."""
    real = os.urandom
    stream = random.Random(name)
    os.urandom = stream.randbytes
    try:
        yield
    finally:
        os.urandom = real


def rejected(exercise: Exercise, answer: str, part: str = "hidden") -> bool:
    """True if the tests fail ``answer`` with an AssertionError (the checkers' verdict)."""
    try:
        run(exercise, answer, part)
    except AssertionError:
        return True
    return False
