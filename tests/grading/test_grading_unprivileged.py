"""The grader as an ordinary user: an instructor on a shared server or a JupyterHub is
usually not root. Run as root, this test runs the grader's own tests again as a user of no
account (uid 65534), with and without bubblewrap: scores and the instructor's files left
byte-identical (the round trip), isolation between submissions and a killed zygote costing
one question (the attacks), no route to a reference nor to a hidden test, the note
``grade`` prints once on what an ordinary user loses (the command line), a notebook it
cannot read graded as a corrupt one and users of their own refused without root. Each of
those files already expects what an ordinary user gets where it differs from root (one user for
the answer and the tester, so an answer can kill its zygote and costs only that question).

Run as an ordinary user, those files run as that user in this same session, and this one
has nothing to add.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
SUITES = ["tests/grading/test_grading_roundtrip.py", "tests/grading/test_grading_isolation.py",
          "tests/grading/test_grading_reference_routes.py",
          "tests/grading/test_grading_cell_ids.py",
          "tests/grading/test_grading_submissions.py"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="an ordinary user runs those files directly")
def test_the_grader_holds_as_an_ordinary_user(shared_python):
    with tempfile.TemporaryDirectory(prefix="grade-as-nobody-") as scratch:
        os.chown(scratch, NOBODY, NOBODY)
        home = Path(scratch, "home")
        home.mkdir()
        os.chown(home, NOBODY, NOBODY)
        path = os.pathsep.join([str(Path(shared_python).parent), os.environ.get("PATH", "")])
        # (that Python's prefix may be another venv's: nbconvert's templates are in ours)
        env = {"PATH": path, "HOME": str(home),
               "JUPYTER_PATH": str(Path(sys.prefix, "share", "jupyter")),
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}
        done = subprocess.run(
            [shared_python, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider",
             "-n", "0", "--basetemp", str(Path(scratch, "tmp"))],
            user=NOBODY, group=NOBODY, extra_groups=[], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert " passed" in tail and " skipped" not in tail, tail
    print(tail.splitlines()[-1], file=sys.stderr)
