"""Bad input: each case is named in the report, that student is flagged, the batch goes on;
and the three ways in (LMS zip, folder, nbgrader exchange) and the command line."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from grading_fixture import EXERCISES, MAX_AUTO, NAME
from grading_support import SANDBOX, demo_answers, fill, needs_bwrap, release_of, submit

from grading import grader, ingest, report
from grading.release import ROOT

ALL_RIGHT = {a: "right" for a in EXERCISES}


def perfect(demo) -> nbformat.NotebookNode:
    return fill(release_of(demo["release"], NAME), demo_answers(ALL_RIGHT))


@pytest.fixture(scope="module")
def batch(demo, tmp_path_factory):
    course_dir = tmp_path_factory.mktemp("bad")
    release = release_of(demo["release"], NAME)
    good = perfect(demo)
    submit(course_dir, "corrupt", NAME, b'{"cells": [ not json')
    submit(course_dir, "garbage", NAME, bytes(range(256)) * 10)
    submit(course_dir, "renamed", NAME, good, file_name="Untitled.ipynb")
    (course_dir / "submitted" / "nonotebook" / NAME).mkdir(parents=True)
    (course_dir / "submitted" / "nonotebook" / NAME / "answers.pdf").write_bytes(b"%PDF")
    submit(course_dir, "stranger", NAME, good)
    submit(course_dir, "twice", NAME, good)
    submit(course_dir, "twice", NAME, release, file_name=f"{NAME}-1.ipynb")
    deleted = fill(release, demo_answers(ALL_RIGHT))
    deleted.cells = [c for c in deleted.cells
                     if c.metadata.get("nbgrader", {}).get("grade_id") != "ch99_mean"]  # fmt: skip
    submit(course_dir, "deleted", NAME, deleted)
    cheat = fill(release, demo_answers({"ch99_square": "wrong", "ch99_mean": "right",
                                        "ch99_double": "right"}))  # fmt: skip
    for cell in cheat.cells:
        info = cell.metadata.get("nbgrader", {})
        if info.get("grade_id") == "ch99_square_test":
            cell.source = "pass"  # an emptied test cell
            info["points"] = 100  # and inflated points
    submit(course_dir, "cheat", NAME, cheat)
    roster = ["corrupt", "garbage", "renamed", "nonotebook", "twice", "deleted", "cheat",
              "absent"]  # fmt: skip
    results = grader.grade_batch(demo["assignment"], course_dir, roster, isolation=SANDBOX,
                                 progress=False)  # fmt: skip
    paths = report.write_reports(results, demo["assignment"], course_dir)
    return {r.student: r for r in results}, paths


def flags(batch, student) -> str:
    return " | ".join(batch[0][student].flags)


def test_corrupt_notebooks_are_named_and_score_zero(batch):
    for student in ("corrupt", "garbage"):
        assert "corrupt notebook" in flags(batch, student)
        assert batch[0][student].score == 0


def test_wrong_file_name_is_flagged_and_still_graded(batch):
    assert "wrong file name: Untitled.ipynb" in flags(batch, "renamed")
    assert batch[0]["renamed"].score == MAX_AUTO


def test_missing_notebook_and_missing_student(batch):
    assert "missing notebook" in flags(batch, "nonotebook")
    assert "answers.pdf" in flags(batch, "nonotebook")
    assert "missing notebook" in flags(batch, "absent")
    assert batch[0]["absent"].score == 0


def test_unknown_student_is_flagged_and_graded(batch):
    assert "unknown student" in flags(batch, "stranger")
    assert batch[0]["stranger"].score == MAX_AUTO


def test_duplicate_submission_grades_the_expected_name(batch):
    assert f"duplicate submission: graded {NAME}.ipynb" in flags(batch, "twice")
    assert batch[0]["twice"].score == MAX_AUTO


def test_deleted_answer_cell_costs_only_that_question(batch):
    statuses = {q.grade_id: q.status for q in batch[0]["deleted"].questions}
    assert statuses["ch99_mean_test"] == "missing"
    assert batch[0]["deleted"].score == MAX_AUTO - EXERCISES["ch99_mean"][0]


def test_edited_tests_and_points_are_ignored(batch):
    assert "edited locked cell ch99_square_test" in flags(batch, "cheat")
    scores = {q.grade_id: (q.score, q.points) for q in batch[0]["cheat"].questions}
    assert scores["ch99_square_test"] == (0, 1)
    assert batch[0]["cheat"].score == MAX_AUTO - 1


def test_report_names_every_flagged_student(batch):
    summary = batch[1]["summary"].read_text()
    for student in ("corrupt", "garbage", "renamed", "nonotebook", "stranger", "twice",
                    "deleted", "cheat", "absent"):  # fmt: skip
        assert f"**{student}**" in summary, student
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO(batch[1]["csv"].read_text()))}
    assert "wrong file name" in rows["renamed"]["flags"] and rows["renamed"]["auto_score"] == "6"
    reasons = list(csv.DictReader(io.StringIO(batch[1]["reasons"].read_text())))
    assert {"student": "deleted", "question": "ch99_mean_test", "score": "0", "points": "2",
            "status": "missing", "reason": "answer cell ch99_mean not found"} in reasons
    assert {(r["student"], r["status"]) for r in reasons} >= {("corrupt", "corrupt"),
                                                              ("absent", "missing")}


def make_zip(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16  # a symlink
            zf.writestr(info, "/etc/passwd")
    return path


def test_zip_ingest_canvas_and_moodle_names(demo, tmp_path):
    good = nbformat.writes(perfect(demo)).encode()
    archive = make_zip(tmp_path / "download.zip", {
        f"alice_1234_5678_{NAME}.ipynb": good,
        f"bob_late_1235_5679_{NAME}-1.ipynb": good,
        f"Carol Smith_777_assignsubmission_file_/{NAME}.ipynb": good,
        "../../escape.ipynb": good,
        "README.txt": b"hello",
    }, link=f"mallory_1_2_{NAME}.ipynb")  # fmt: skip
    submitted = tmp_path / "submitted"
    notes = ingest.from_zip(archive, NAME, submitted)
    assert (submitted / "alice" / NAME / f"{NAME}.ipynb").read_bytes() == good
    assert (submitted / "bob" / NAME / f"{NAME}-1.ipynb").is_file()
    assert (submitted / "Carol_Smith" / NAME / f"{NAME}.ipynb").is_file()
    assert sorted(p.name for p in submitted.iterdir()) == ["Carol_Smith", "alice", "bob"]
    text = "\n".join(notes)
    assert "escape.ipynb: skipped (a path outside the archive)" in text
    assert "README.txt: skipped" in text and "skipped (a link)" in text
    assert ingest.from_zip(archive, NAME, submitted) == notes  # idempotent
    bad = tmp_path / "broken.zip"
    bad.write_bytes(b"PK\x03\x04 not really")
    assert "not a readable zip archive" in ingest.from_zip(bad, NAME, submitted)[0]


def test_exchange_ingest_takes_the_latest(demo, tmp_path):
    inbound = tmp_path / "exchange" / "llm101" / "inbound"
    old, new = b'{"old": 1}', nbformat.writes(perfect(demo)).encode()
    for stamp, data in (("2026-01-01 10:00:00.000000 UTC", old),
                        ("2026-01-02 09:00:00.000000 UTC", new)):  # fmt: skip
        folder = inbound / f"alice+{NAME}+{stamp}+abc"
        folder.mkdir(parents=True)
        (folder / f"{NAME}.ipynb").write_bytes(data)
    (inbound / "bob+other_assignment+2026-01-01 10:00:00.000000 UTC+x").mkdir()
    ingest.from_exchange(tmp_path / "exchange", "llm101", NAME, tmp_path / "submitted")
    assert (tmp_path / "submitted" / "alice" / NAME / f"{NAME}.ipynb").read_bytes() == new
    assert not (tmp_path / "submitted" / "bob").exists()


def run_cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "grading", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)  # fmt: skip


@needs_bwrap
def test_cli_grades_a_zip_end_to_end(demo, tmp_path):
    good = nbformat.writes(perfect(demo)).encode()
    archive = make_zip(tmp_path / "download.zip", {
        f"alice_1_2_{NAME}.ipynb": good,
        f"bob_3_4_{NAME}.ipynb": b"not a notebook",
        "notes.txt": b"no student in this name",
    })  # fmt: skip
    roster = tmp_path / "roster.txt"
    roster.write_text("alice\nbob\ncarol\n")
    result = run_cli("grade", NAME, "--course", str(tmp_path / "course"), "--source",
                     str(demo["source"]), "--from-zip", str(archive), "--roster", str(roster),
                     "--jobs", "2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "3 students graded, 2 need attention" in result.stdout
    assert "bob: corrupt notebook" in result.stdout and "carol: missing notebook" in result.stdout
    rows = (tmp_path / "course" / "reports" / NAME / "grades.csv").read_text().splitlines()
    assert rows[1].startswith(f"alice,{NAME},1,2,3,,6,6,,2,6,8,")
    summary = (tmp_path / "course" / "reports" / NAME / "summary.md").read_text()
    assert "notes.txt: skipped (no student in the file name)" in summary
    assert "**bob**: corrupt notebook" in summary and "**carol**: missing notebook" in summary


def test_cli_refuses_without_a_sandbox_unless_unsafe(demo, tmp_path):
    result = run_cli("grade", NAME, "--course", str(tmp_path), "--source", str(demo["source"]),
                     path="/nonexistent")  # fmt: skip
    assert result.returncode == 2
    assert "--unsafe" in result.stderr


def test_check_prints_each_question(demo, tmp_path):
    partial = fill(release_of(demo["release"], NAME),
                   demo_answers({"ch99_square": "right", "ch99_mean": "wrong",
                                 "ch99_double": "right"}))  # fmt: skip
    path = tmp_path / f"{NAME}.ipynb"
    nbformat.write(partial, path)
    result = run_cli("check", str(path), "--source", str(demo["source"]))
    assert result.returncode == 1, result.stderr
    lines = result.stdout
    assert "ch99_square_test" in lines and "1/1   passed" in lines
    assert "0/2   failed: AssertionError: mean([1, 2, 3])" in lines
    assert "autograded: 4/6 (+2 graded by hand)" in lines, lines
