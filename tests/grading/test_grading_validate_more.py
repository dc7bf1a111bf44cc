"""The other half of the chapters under plain nbgrader (see test_grading_validate.py): a
file of its own, so that ``--dist loadfile`` runs it beside the first half."""

from __future__ import annotations

import pytest
from test_grading_validate import CHAPTERS
from validate_support import check_chapter_validates, validate_chapters

HALF = CHAPTERS[1::2]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return validate_chapters(HALF, tmp_path_factory.mktemp("validate"))


@pytest.mark.parametrize("chapter", HALF)
def test_chapter_validates_and_release_fails_every_test(chapter, verdicts):
    check_chapter_validates(verdicts, chapter)
