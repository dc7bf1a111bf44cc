"""Chapters 4 and 5 under plain nbgrader, their solutions run whole: their tests check what
the chapter measured (cache defeat, ceilings), so they must hold at any cache size.
``make test`` runs this file at TEXTBOOK_LLC_BYTES of 8 MiB, 260 MiB and 1 GiB."""

from __future__ import annotations

import pytest
from validate_support import CACHE_CHAPTERS, check_chapter_validates

pytestmark = pytest.mark.cache_size


@pytest.mark.parametrize("chapter", CACHE_CHAPTERS)
def test_measuring_chapter_validates_whole_and_release_fails_every_test(chapter, tmp_path):
    check_chapter_validates(chapter, tmp_path, whole_source=True)
