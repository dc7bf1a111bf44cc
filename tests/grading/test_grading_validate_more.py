"""The other half of the chapters under plain nbgrader (see test_grading_validate.py): a
file of its own, so that ``--dist loadfile`` runs it beside the first half."""

from __future__ import annotations

import pytest
from test_grading_validate import CHAPTERS
from validate_support import check_chapter_validates


@pytest.mark.parametrize("chapter", CHAPTERS[1::2])
def test_chapter_validates_and_release_fails_every_test(chapter, tmp_path):
    check_chapter_validates(chapter, tmp_path)
