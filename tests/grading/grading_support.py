"""Helpers for the grading tests: build submissions from a release by putting answers into
answer cells, and put them in a course folder."""

from __future__ import annotations

import copy
import hashlib
import html.parser
import os
import subprocess
import sys
from pathlib import Path

import grading_fixture as fixture
import nbformat
import pytest

from grading import course, sandbox
from grading.release import ROOT
from helpers.measuring import ceilings

BWRAP = sandbox.bwrap_works()
# the tests' isolation: the sandbox where bubblewrap starts, else none (as --unsafe grades)
SANDBOX = sandbox.Isolation.BWRAP if BWRAP else sandbox.Isolation.NONE
needs_bwrap = pytest.mark.skipif(
    not BWRAP, reason="bubblewrap is not available (make system-packages)"
)


def release_of(release_dir: Path, name: str) -> nbformat.NotebookNode:
    return nbformat.read(release_dir / name / f"{name}.ipynb", as_version=4)


def fill(release: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of the release notebook with these answer cells' sources replaced."""
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        grade_id = course.meta(cell).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nb


def solutions_of(source_dir: Path, name: str) -> dict[str, str]:
    """Every answer cell's solution (code and written), by grade_id, from the source."""
    nb = nbformat.read(course.source_notebook(name, source_dir), as_version=4)
    solved = [c for c in nb.cells if course.meta(c).get("solution")]
    return {course.meta(c)["grade_id"]: c.source for c in solved}


def demo_answers(kind: dict[str, str]) -> dict[str, str]:
    """``kind``: answer grade_id -> "right" or "wrong" (fixture bodies)."""
    return {
        answer_id: fixture.EXERCISES[answer_id][1 if how == "right" else 2]
        for answer_id, how in kind.items()
    }


def submit(course_dir: Path, student: str, name: str, nb_or_bytes, file_name=None) -> Path:
    folder = course_dir / "submitted" / student / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (file_name or f"{name}.ipynb")
    if isinstance(nb_or_bytes, bytes):
        path.write_bytes(nb_or_bytes)
    else:
        nbformat.write(nb_or_bytes, path)
    return path


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def hidden_lines(source_dir: Path, name: str) -> list[str]:
    """Lines of the hidden test blocks that appear nowhere in the student release."""
    assignment = course.load(name, source_dir)
    release = "\n".join(cell.source for cell in assignment.release.cells)
    lines = []
    for exercise in assignment.exercises:
        lines += [line.strip() for line in exercise.full.splitlines()
                  if line.strip() and line.strip() not in release]  # fmt: skip
    return lines


def page_text(path: Path) -> str:
    """The text a browser shows (syntax highlighting splits code into many tags)."""
    parts: list[str] = []
    skipping: list[str] = []  # inside <style> or <script>: not text a reader sees

    class Text(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag in ("style", "script"):
                skipping.append(tag)

        def handle_endtag(self, tag):
            if skipping and tag == skipping[-1]:
                skipping.pop()

        def handle_data(self, data):
            if not skipping:
                parts.append(data)

    Text().feed(path.read_text(encoding="utf-8"))
    return "".join(parts)


def nbgrader_validate(*paths: Path, invert: bool = False,
                      merged: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """Plain ``nbgrader validate`` on ``paths``, run from grading/ so it reads the course
    config. The chapters' matmul ceilings are measured on one GEMM (``ceilings.GEMMS_ENV``):
    what is validated is which tests pass, and the default GEMMs take 15–18 s of each run of
    chapters 4 and 5 on a 2-core CPU without bf16 arithmetic. Unbuffered, so that the log
    line nbgrader writes to stderr before each notebook ("Validating 'PATH'") and the verdict
    it writes to stdout after it keep their order in ``stdout`` when ``merged``."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
           ceilings.GEMMS_ENV: "1024x1024x1024", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    command = [sys.executable, "-m", "nbgrader", "validate", "--ValidateApp.log_level=INFO",
               *map(str, paths)] + (["--invert"] if invert else [])  # fmt: skip
    streams = {"stdout": subprocess.PIPE,
               "stderr": subprocess.STDOUT if merged else subprocess.PIPE}  # fmt: skip
    return subprocess.run(command, cwd=ROOT / "grading", env=env, text=True, timeout=600,
                          **streams)  # fmt: skip
