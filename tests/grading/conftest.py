"""A temporary course: the fixture chapter's source and its release made by nbgrader; and a
Python that a user of no account can run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import grading_fixture as fixture  # noqa: E402

from grading import course, gradescope  # noqa: E402
from grading.release import generate_release


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> dict:
    """The fixture chapter: source, nbgrader release, and its Assignment."""
    root = tmp_path_factory.mktemp("demo")
    fixture.write_source(root / "source")
    generate_release(None, root / "source", root / "release")
    return {
        "source": root / "source",
        "release": root / "release",
        "assignment": course.load(fixture.NAME, root / "source"),
    }


@pytest.fixture(scope="session")
def shared_python():
    """A Python that a user of no account can run, as setup.sh's venv on Gradescope is: this
    one, unless it lives under a private folder (pyenv under /root): then a venv of the
    system's Python of the same version over this venv's packages, in a public folder."""
    if os.geteuid() != 0 or not gradescope.unprivileged_import_fails():
        yield sys.executable
        return
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    assert system.is_file(), f"no {system}: cannot make a Python that other users can run"
    folder = Path(tempfile.mkdtemp(prefix="gradescope-python-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(folder)], check=True)
        ours = next(p for p in sys.path if p.endswith("site-packages"))
        pth = folder / "lib" / version / "site-packages" / "parent.pth"
        pth.write_text(f"import site; site.addsitedir({ours!r})\n")
        python = str(folder / "bin" / "python")
        # nbgrader runs `alembic` from PATH to set up a gradebook
        alembic = folder / "bin" / "alembic"
        alembic.write_text(f'#!/bin/sh\nexec {python} -m alembic "$@"\n')
        alembic.chmod(0o755)
        assert gradescope.unprivileged_import_fails(python) == ""
        yield python
    finally:
        shutil.rmtree(folder)
