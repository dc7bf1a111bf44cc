"""A temporary course: the fixture chapter's source and its release made by nbgrader."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import grading_fixture as fixture  # noqa: E402

from grading import build, course  # noqa: E402


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> dict:
    """The fixture chapter: source, nbgrader release, and its Assignment."""
    root = tmp_path_factory.mktemp("demo")
    fixture.write_source(root / "source")
    build.release(None, root / "source", root / "release")
    return {
        "source": root / "source",
        "release": root / "release",
        "assignment": course.load(fixture.NAME, root / "source"),
    }
