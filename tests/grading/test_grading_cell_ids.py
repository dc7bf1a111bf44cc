"""Notebooks without cell ids (nbformat 4.5+ wants one on every cell; many editors and
older tools leave them out) are graded without a flood of nbformat's
MissingIDFieldWarning, and the student's file is never rewritten."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import nbformat
from grading_fixture import EXERCISES, MAX_AUTO, NAME
from grading_support import demo_answers, fill, release_of, submit

from grading import commands, submissions
from grading.release import ROOT

ALL_RIGHT = {a: "right" for a in EXERCISES}


def without_ids(demo) -> bytes:
    data = json.loads(nbformat.writes(fill(release_of(demo["release"], NAME),
                                           demo_answers(ALL_RIGHT))))  # fmt: skip
    assert data["nbformat"] == 4 and data["nbformat_minor"] >= 5
    for cell in data["cells"]:
        del cell["id"]
    return json.dumps(data).encode()


def test_parse_adds_ids_without_warning(demo):
    raw = without_ids(demo)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nb = submissions.parse(raw)
    assert not [w for w in caught if "MissingIDField" in w.category.__name__], caught
    ids = [cell.get("id") for cell in nb.cells]
    assert all(ids) and len(set(ids)) == len(ids)


def test_grade_is_quiet_and_leaves_the_file_alone(demo, tmp_path):
    raw = without_ids(demo)
    course_dir = tmp_path / "course"
    path = submit(course_dir, "alice", NAME, raw)
    result = subprocess.run(
        [sys.executable, "-m", "grading", "grade", NAME, "--course", str(course_dir),
         "--source", str(demo["source"]), "--jobs", "1"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "MissingIDField" not in result.stdout + result.stderr, result.stderr
    # as an ordinary user, it says once what that loses against grading as root
    said = (result.stdout + result.stderr).count(commands.ORDINARY_USER)
    assert said == (0 if os.geteuid() == 0 else 1), result.stderr
    assert path.read_bytes() == raw  # the ids went into our copy only
    graded = json.loads((course_dir / "grades" / NAME / "alice.json").read_text())
    assert sum(q["score"] or 0 for q in graded["questions"]) == MAX_AUTO, graded
