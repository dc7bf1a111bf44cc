"""The student release holds no solution, no hidden test and no output (``make
check-release`` separately fails CI when notebooks/ is stale), and JupyterLab's Validate
button reads the course config."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from grading_fixture import NAME
from grading_support import fill, release_of, solutions_of

from grading import course
from grading.release import RELEASE, ROOT, SOURCE, chapters

REGION = {
    "solution": re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S),
    "hidden": re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S),
}


def secret_lines(cell_source: str, kind: str) -> set[str]:
    """Lines inside a cell's solution or hidden-test regions that appear nowhere else in it."""
    inside = {line.strip() for region in REGION[kind].findall(cell_source)
              for line in region.splitlines() if line.strip()}  # fmt: skip
    outside = {line.strip() for line in REGION[kind].sub("", cell_source).splitlines()}
    return inside - outside


def leaks(release: nbformat.NotebookNode, source: nbformat.NotebookNode) -> list[str]:
    """Everything in a release notebook that a student must not see."""
    problems = []
    by_id = {course.meta(c).get("grade_id"): c for c in release.cells}
    for cell in release.cells:
        if cell.cell_type == "code" and cell.outputs:
            problems.append(f"{course.meta(cell).get('grade_id', '?')}: has outputs")
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS"):
            if marker in cell.source:
                problems.append(f"{course.meta(cell).get('grade_id', '?')}: {marker}")
    for cell in source.cells:
        grade_id = course.meta(cell).get("grade_id")
        released = by_id.get(grade_id)
        for kind in REGION:
            for line in secret_lines(cell.source, kind):
                if released is not None and line in released.source:
                    problems.append(f"{grade_id}: {kind} line {line!r}")
    return problems


def test_fixture_release_is_clean_and_the_check_can_fail(demo):
    source = nbformat.read(course.source_notebook(NAME, demo["source"]), as_version=4)
    assert leaks(release_of(demo["release"], NAME), source) == []
    assert len(leaks(source, source)) >= 4  # the source itself leaks: the check has teeth


@pytest.mark.parametrize("chapter", chapters())
def test_chapter_release_is_clean(chapter):
    path = course.source_notebook(chapter, RELEASE)
    assert path.is_file(), "run `make release`"
    source = nbformat.read(course.source_notebook(chapter, SOURCE), as_version=4)
    assert leaks(nbformat.read(path, as_version=4), source) == []


VALIDATE_BUTTON = """
import sys
from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler
from nbgrader.validator import Validator
config = ValidateAssignmentHandler.load_config(None)  # what the Validate button does
print(Validator(config=config).validate(sys.argv[1]))
"""


def test_validate_button_uses_the_course_config(demo, tmp_path):
    """With JUPYTER_CONFIG_PATH=grading (how JupyterLab should be started), the Validate
    button's handler loads grading/nbgrader_config.py: a warning costs nothing."""
    warning = ("import warnings\n\ndef square(n):\n    warnings.warn('slow path')\n"
               "    return n * n")  # fmt: skip
    answers = solutions_of(demo["source"], NAME) | {"ch99_square": warning}
    path = tmp_path / f"{NAME}.ipynb"
    nbformat.write(fill(release_of(demo["release"], NAME), answers), path)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "grading"),
           "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}  # fmt: skip
    result = subprocess.run([sys.executable, "-c", VALIDATE_BUTTON, str(path)], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.stdout.strip() == "{}", result.stdout + result.stderr
