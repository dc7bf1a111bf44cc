"""Plain nbgrader with the course config (grading/nbgrader_config.py): the source
validates, the release fails every test, and stderr from an honest answer costs nothing."""

from __future__ import annotations

import nbformat
from grading_fixture import NAME
from grading_support import fill, nbgrader_validate, release_of, solutions_of
from validate_support import CACHE_CHAPTERS, chapter_tests

from grading import course
from grading.release import chapters

# Chapters 4 and 5 at three cache sizes: test_grading_validate_cache.py.
CHAPTERS = [chapter for chapter in chapters() if chapter not in CACHE_CHAPTERS]


def test_fixture_validates_and_release_fails_every_test(demo):
    source = nbgrader_validate(course.source_notebook(NAME, demo["source"]))
    assert "Success! Your notebook passes all the tests." in source.stdout, source.stdout
    release = nbgrader_validate(course.source_notebook(NAME, demo["release"]), invert=True)
    assert "Success! The notebook does not pass any tests." in release.stdout, release.stdout


def test_validate_passes_an_honest_answer_that_writes_to_stderr(demo, tmp_path):
    warning = ("import sys, warnings\n\ndef square(n):\n    warnings.warn('slow path')\n"
               "    print('note', file=sys.stderr)\n    return n * n")  # fmt: skip
    answers = solutions_of(demo["source"], NAME) | {"ch99_square": warning}
    path = tmp_path / f"{NAME}.ipynb"
    nbformat.write(fill(release_of(demo["release"], NAME), answers), path)
    result = nbgrader_validate(path)
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout


# Half the chapters; the others in test_grading_validate_more.py, which --dist loadfile runs
# beside this file.
verdicts, test_chapter_validates_and_release_fails_every_test = chapter_tests(CHAPTERS[0::2])
