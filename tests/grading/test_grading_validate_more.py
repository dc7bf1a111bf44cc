"""The other half of the chapters under plain nbgrader (see test_grading_validate.py): a
file of its own, so that ``--dist loadfile`` runs it beside the first half."""

from __future__ import annotations

from test_grading_validate import CHAPTERS
from validate_support import chapter_tests

verdicts, test_chapter_validates_and_release_fails_every_test = chapter_tests(CHAPTERS[1::2])
