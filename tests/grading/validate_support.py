"""Plain ``nbgrader validate`` on the chapters, each run for one purpose.

A chapter runs top to bottom once in ``make test``: under nbval, which checks that every
cell runs and its stored outputs reproduce (chapters 4 and 5, which time memory, once at each
cache size ``make test`` sets: tests/plugins/cache_chapters.py). What ``nbgrader validate``
adds is its own verdict on the graded cells, and a test cell depends only on the setup cell
and its own answer cell (CONTRIBUTING.md; the grader, which runs each question alone, holds
every chapter to it in test_grading_chapters.py). So the solutions and the release are
validated cut to their nbgrader cells, outputs cleared: the same verdict, without executing
the chapter's measurements a second and a third time. Chapters 4 and 5 are validated so at
each cache size (test_grading_validate_cache.py): their tests call the cache defeat.

One ``nbgrader validate`` process takes every chapter of a test file (and one ``--invert``
every release), as an instructor may run it on a folder: a process starts in about 1.7 s
(two chapters took 9.6 s in two processes, 7.9 s in one, on a 2-core CPU), and ``make test``
starts 18 fewer of them than with one a notebook."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from grading_support import nbgrader_validate

from grading import course
from grading.release import RELEASE, SOURCE

PASSES = "Success! Your notebook passes all the tests."
FAILS_ALL = "Success! The notebook does not pass any tests."
CACHE_CHAPTERS = ("04_timing", "05_matmuls")
# What nbgrader logs before each notebook it validates (at log level INFO, which we set).
VALIDATING = re.compile(r"^\[ValidateApp \| INFO\] Validating '(.+)'$", re.M)


def graded_cells(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` with only its nbgrader cells, outputs cleared."""
    nb = nbformat.read(path, as_version=4)
    nb.cells = [cell for cell in nb.cells if course.meta(cell)]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def validate_cut(paths: list[Path], folder: Path, invert: bool = False) -> dict[str, str]:
    """One ``nbgrader validate`` (``--invert``) on each of ``paths`` cut to its graded cells,
    written to ``folder``: what it printed for each, by notebook name. A notebook nbgrader
    never reached (it stops at a fatal error) gets the whole output, which says why."""
    folder.mkdir(parents=True, exist_ok=True)
    cuts = []
    for path in paths:
        cuts.append(folder / path.name)
        nbformat.write(graded_cells(path), cuts[-1])
    output = nbgrader_validate(*cuts, invert=invert, merged=True).stdout
    parts = VALIDATING.split(output)  # text before the first, then (path, its text) pairs
    said = {Path(path).stem: text for path, text in zip(parts[1::2], parts[2::2], strict=True)}
    return {cut.stem: said.get(cut.stem, f"nbgrader never validated it:\n{output}")
            for cut in cuts}  # fmt: skip


def validate_chapters(chapters: list[str], folder: Path) -> dict[str, tuple[str, str]]:
    """What plain nbgrader says of each chapter: (its solutions, its release ``--invert``),
    each cut to its graded cells."""
    releases = [course.source_notebook(chapter, RELEASE) for chapter in chapters]
    missing = [path for path in releases if not path.is_file()]
    assert not missing, f"run `make release`: {missing} missing"
    sources = validate_cut([course.source_notebook(c, SOURCE) for c in chapters],
                           folder / "source")  # fmt: skip
    released = validate_cut(releases, folder / "release", invert=True)
    return {chapter: (sources[chapter], released[chapter]) for chapter in chapters}


def chapter_tests(chapters: list[str]):
    """A test module's fixture and test for ``chapters``: the fixture validates them all in
    one process per verdict (``validate_chapters``), and the test, one per chapter, holds the
    chapter's solutions to passing every test under plain nbgrader and its release to
    passing none. A test file assigns both at module level, so pytest collects them there."""

    @pytest.fixture(scope="module")
    def verdicts(tmp_path_factory):
        return validate_chapters(chapters, tmp_path_factory.mktemp("validate"))

    @pytest.mark.parametrize("chapter", chapters)
    def test_chapter_validates_and_release_fails_every_test(chapter, verdicts):
        source, release = verdicts[chapter]
        assert PASSES in source, source
        assert FAILS_ALL in release, release

    return verdicts, test_chapter_validates_and_release_fails_every_test
