"""The other half of the chapters under plain nbgrader (see test_grading_validate.py): a
file of its own, so that ``--dist loadfile`` runs it beside the first half."""

from __future__ import annotations

import pytest
from grading_support import check_chapter_validates

from grading import build


@pytest.mark.parametrize("chapter", build.chapters()[1::2])
def test_chapter_validates_and_release_fails_every_test(chapter):
    check_chapter_validates(chapter)
