"""What an assignment asks, read from the instructor's source notebook only.

Everything the grader trusts comes from here: the setup cell, each exercise's test cell
(whole, and without its hidden tests, cleared by nbgrader's own ``ClearHiddenTests``), the
points, and the student release (nbgrader's ``ClearSolutions``, ``ClearHiddenTests`` and
``ClearOutput``). A submission contributes nothing but the source of its answer cells.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests, ClearOutput, ClearSolutions

from grading.names import called, defined_names, used

CONFIG = Path(__file__).with_name("nbgrader_config.py")
SOLUTION = re.compile(r"### BEGIN SOLUTION\n?(.*?)### END SOLUTION", re.S)


@dataclass(frozen=True)
class Exercise:
    test_id: str  # grade_id of the test cell, e.g. ch01_matmul_flops_test
    answer_id: str  # grade_id of the answer cell it tests, e.g. ch01_matmul_flops
    points: float
    full: str  # the whole test cell, hidden tests included
    visible: str  # what the student sees
    names: tuple[str, ...] = ()  # what the answer must define (from the solution cell)
    references: tuple[str, ...] = ()  # what the tests call that the solution does not
    tools: tuple[str, ...] = ()  # what the model solution uses: real for the answer too


@dataclass(frozen=True)
class Written:
    grade_id: str
    points: float


@dataclass(frozen=True)
class Assignment:
    name: str
    setup: str
    exercises: list[Exercise]
    written: list[Written]
    release: nbformat.NotebookNode = field(repr=False)
    digest: str  # of the source notebook: results graded against another source are redone

    @property
    def notebook_name(self) -> str:
        return f"{self.name}.ipynb"

    @property
    def max_auto(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_written(self) -> float:
        return sum(w.points for w in self.written)

    @property
    def released_answers(self) -> dict[str, str]:
        """grade_id -> each answer cell as released (``raise NotImplementedError()``
        inside): what every submission starts from, so no copy (grading.copies)."""
        return {meta(c)["grade_id"]: c.source for c in self.release.cells
                if c.cell_type == "code" and meta(c).get("solution")}  # fmt: skip

    @property
    def locked(self) -> dict[str, str]:
        """grade_id → release source of every locked cell (for spotting edits)."""
        return {
            meta(c)["grade_id"]: c.source
            for c in self.release.cells
            if meta(c).get("locked") and not meta(c).get("solution")
        }


def meta(cell: nbformat.NotebookNode) -> dict:
    nbgrader = cell.get("metadata", {}).get("nbgrader", {})
    return nbgrader if isinstance(nbgrader, dict) else {}


def source_notebook(name: str, source: Path) -> Path:
    return source / name / f"{name}.ipynb"


def load(name: str, source: Path) -> Assignment:
    """Read ``source/name/name.ipynb`` (nbgrader source format)."""
    path = source_notebook(name, source)
    raw = path.read_bytes()
    nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    setup = [c.source for c in code if str(meta(c).get("grade_id", "")).endswith("_setup")]
    if not code:
        raise ValueError(f"{path}: no code cells (the first one is the setup cell)")
    hide = ClearHiddenTests()
    exercises, written, last_answer = [], [], None
    names: dict[str, tuple[str, ...]] = {}
    solutions: dict[str, str] = {}
    for cell in nb.cells:
        info = meta(cell)
        if cell.cell_type == "code" and info.get("solution"):
            last_answer = info["grade_id"]
            names[last_answer] = defined_names(cell.source)
            solutions[last_answer] = cell.source
        elif cell.cell_type == "code" and info.get("grade"):
            test_id = info["grade_id"]
            answer_id = test_id.removesuffix("_test")
            if answer_id == test_id or answer_id not in _ids(nb):
                answer_id = last_answer  # not named by convention: the answer just above
            if answer_id is None:
                raise ValueError(f"{path}: test cell {test_id} has no answer cell above it")
            visible, _ = hide.preprocess_cell(copy.deepcopy(cell), {}, 0)
            own = names.get(answer_id, ())
            references = called(cell.source) - called(solutions.get(answer_id, "")) - set(own)
            tools = used(solutions.get(answer_id, ""))
            exercises.append(
                Exercise(test_id, answer_id, float(info.get("points", 0)), cell.source,
                         visible.source, own, tuple(sorted(references)), tuple(sorted(tools)))
            )  # fmt: skip
        elif cell.cell_type == "markdown" and info.get("grade"):
            written.append(Written(info["grade_id"], float(info.get("points", 0))))
    return Assignment(
        name=name,
        setup="\n".join(setup) if setup else code[0].source,
        exercises=exercises,
        written=written,
        release=release_notebook(nb),
        digest=hashlib.sha256(raw).hexdigest(),
    )


def _ids(nb: nbformat.NotebookNode) -> set[str]:
    return {meta(c).get("grade_id") for c in nb.cells}


def release_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student version, in memory, by nbgrader's own preprocessors."""
    release = copy.deepcopy(nb)
    resources: dict = {}
    for preprocessor in (ClearSolutions(), ClearHiddenTests(), ClearOutput()):
        release, resources = preprocessor.preprocess(release, resources)
    return release


def self_check(config: Path = CONFIG) -> bool:
    """The course setting ``c.SelfCheck.rubrics`` in ``grading/nbgrader_config.py``: True
    makes the release carry each written answer's model answer and rubric, for
    ``python -m grading check --rubrics``. Off by default: a classroom release then holds
    none."""
    from traitlets.config.loader import PyFileConfigLoader

    loaded = PyFileConfigLoader(config.name, path=str(config.parent)).load_config()
    return loaded.get("SelfCheck", {}).get("rubrics", False) is True


def model_answers(nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> the model answer and rubric of each written answer, from the source
    notebook (what lies between ``### BEGIN SOLUTION`` and ``### END SOLUTION``), or from
    a release made with the setting on (``metadata.self_check.model_answer``)."""
    found = {}
    for cell in nb.cells:
        info = meta(cell)
        if cell.cell_type != "markdown" or not (info.get("grade") and info.get("solution")):
            continue
        embedded = cell.get("metadata", {}).get("self_check", {})
        if isinstance(embedded, dict) and isinstance(embedded.get("model_answer"), str):
            found[info["grade_id"]] = embedded["model_answer"]
        elif "### BEGIN SOLUTION" in cell.source:
            found[info["grade_id"]] = "\n".join(SOLUTION.findall(cell.source)).strip()
    return found


def with_model_answers(release: nbformat.NotebookNode, source: nbformat.NotebookNode) -> bool:
    """Put the source's model answers in the release's written cells (cell metadata, which
    nbgrader's checksums do not cover); True if there were any."""
    answers = model_answers(source)
    for cell in release.cells:
        grade_id = meta(cell).get("grade_id")
        if cell.cell_type == "markdown" and grade_id in answers:
            cell.metadata["self_check"] = {"model_answer": answers[grade_id]}
    return bool(answers)
