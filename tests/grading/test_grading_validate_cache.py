"""Chapters 4 and 5 under plain nbgrader, cut to their graded cells like the others
(validate_support.py): their tests call the cache defeat, whose plan follows the cache size
in force, so ``make test`` runs this file at TEXTBOOK_LLC_BYTES of 8 MiB, 260 MiB and 1 GiB.
The chapters run whole at each size under nbval (tests/plugins/cache_chapters.py)."""

from __future__ import annotations

import pytest
from validate_support import CACHE_CHAPTERS, check_chapter_validates, validate_chapters

pytestmark = pytest.mark.cache_size


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return validate_chapters(list(CACHE_CHAPTERS), tmp_path_factory.mktemp("validate"))


@pytest.mark.parametrize("chapter", CACHE_CHAPTERS)
def test_measuring_chapter_validates_and_release_fails_every_test(chapter, verdicts):
    check_chapter_validates(verdicts, chapter)
