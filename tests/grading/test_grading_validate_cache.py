"""Chapters 4 and 5 under plain nbgrader, cut to their graded cells like the others
(validate_support.py): their tests call the cache defeat, whose plan follows the cache size
in force, so ``make test`` runs this file at TEXTBOOK_LLC_BYTES of 8 MiB, 260 MiB and 1 GiB.
The chapters run whole at each size under nbval (tests/plugins/cache_chapters.py)."""

from __future__ import annotations

import pytest
from validate_support import CACHE_CHAPTERS, chapter_tests

pytestmark = pytest.mark.cache_size

verdicts, test_chapter_validates_and_release_fails_every_test = chapter_tests(
    list(CACHE_CHAPTERS))
