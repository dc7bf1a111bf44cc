"""Plain ``nbgrader validate`` on the chapters, each run for one purpose.

A chapter runs top to bottom once in ``make test``: under nbval, which checks that every
cell runs and its stored outputs reproduce (chapters 4 and 5, which time memory, once at each
cache size ``make test`` sets: tests/plugins/cache_chapters.py). What ``nbgrader validate``
adds is its own verdict on the graded cells, and a test cell depends only on the setup cell
and its own answer cell (CONTRIBUTING.md; the grader, which runs each question alone, holds
every chapter to it in test_grading_chapters.py). So the solutions and the release are
validated cut to their nbgrader cells, outputs cleared: the same verdict, without executing
the chapter's measurements a second and a third time. Chapters 4 and 5 are validated so at
each cache size (test_grading_validate_cache.py): their tests call the cache defeat."""

from __future__ import annotations

from pathlib import Path

import nbformat
from grading_support import nbgrader_validate

from grading import course
from grading.release import RELEASE, SOURCE

PASSES = "Success! Your notebook passes all the tests."
FAILS_ALL = "Success! The notebook does not pass any tests."
CACHE_CHAPTERS = ("04_timing", "05_matmuls")


def graded_cells(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` with only its nbgrader cells, outputs cleared."""
    nb = nbformat.read(path, as_version=4)
    nb.cells = [cell for cell in nb.cells if course.meta(cell)]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def validate_cut(path: Path, folder: Path, invert: bool = False) -> str:
    """``nbgrader validate`` (``--invert``) on ``path`` cut to its graded cells; its stdout."""
    cut = folder / path.name
    nbformat.write(graded_cells(path), cut)
    return nbgrader_validate(cut, invert=invert).stdout


def check_chapter_validates(chapter: str, folder: Path) -> None:
    """The chapter's solutions pass every test under plain nbgrader, its release none, each
    cut to its graded cells."""
    source = course.source_notebook(chapter, SOURCE)
    release = course.source_notebook(chapter, RELEASE)
    assert release.is_file(), "run `make release`"
    out = validate_cut(source, folder)
    assert PASSES in out, out
    (folder / "release").mkdir()
    out = validate_cut(release, folder / "release", invert=True)
    assert FAILS_ALL in out, out
