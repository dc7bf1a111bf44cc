"""Which notebook of a submission is graded, a bad one graded as a zero that says why
(grader.grade_submission), and a batch's records reading each graded submission once
(SubmittedNotebooks)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from grading import grader, submissions
from grading.results import QuestionResult, StudentResult
from grading.sandbox import Isolation, Limits


def _result(student: str, file: str) -> StudentResult:
    return StudentResult(student, "01_x", [QuestionResult("q", 1.0, 1.0, "passed")], file=file)


def test_each_submission_is_parsed_once_and_shared(tmp_path, monkeypatch):
    folder = tmp_path / "submitted" / "ada" / "01_x"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    (folder / "01_x.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    calls = []
    real = submissions.parse
    monkeypatch.setattr(submissions, "parse", lambda raw: calls.append(raw) or real(raw))
    notebooks = submissions.SubmittedNotebooks(tmp_path, "01_x")
    first = notebooks.of(_result("ada", "01_x.ipynb"))
    second = notebooks.of(_result("ada", "01_x.ipynb"))
    assert first is second and first.cells[0].source == "x = 1"
    assert len(calls) == 1


def test_no_file_a_gone_file_and_a_corrupt_one_read_as_none(tmp_path):
    folder = tmp_path / "submitted" / "bob" / "01_x"
    folder.mkdir(parents=True)
    (folder / "bad.ipynb").write_text("{not json", encoding="utf-8")
    notebooks = submissions.SubmittedNotebooks(tmp_path, "01_x")
    assert notebooks.of(_result("bob", "")) is None
    assert notebooks.of(_result("bob", "gone.ipynb")) is None
    assert notebooks.of(_result("bob", "bad.ipynb")) is None


def _files(folder: Path, *names: str) -> Path:
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}", encoding="utf-8")
    return folder


@pytest.mark.parametrize("files, chosen, flag", [
    (["01_x.ipynb", "repo/01_x.ipynb"], "01_x.ipynb", None),  # the top first
    (["repo/01_x.ipynb"], "repo/01_x.ipynb", None),
    (["repo/mine.ipynb"], None, "cannot tell which notebook to grade: found repo/mine.ipynb "
     "(submit one, named 01_x.ipynb)"),
    (["a/01_x.ipynb", "b/01_x.ipynb"], None, "cannot tell which notebook to grade: found "
     "a/01_x.ipynb, b/01_x.ipynb (submit one, named 01_x.ipynb)"),
    (["a/01_x.ipynb", "a/scratch.ipynb"], "a/01_x.ipynb",
     "graded a/01_x.ipynb, ignored the others (a/01_x.ipynb, a/scratch.ipynb)"),
    ([".git/01_x.ipynb", "__pycache__/01_x.ipynb", "a/.ipynb_checkpoints/01_x.ipynb",
      "notes.txt"], None, "missing notebook: no 01_x.ipynb (found: .git, __pycache__, a, "
     "notes.txt)"),
])  # fmt: skip
def test_a_nested_notebook_is_found_only_when_asked(tmp_path, files, chosen, flag):
    """Gradescope's upload (a zip, a repository) may hold the notebook in a subfolder; the
    batch's folders never do (the ingest lays them flat, and a stored result is keyed by the
    top's files): there only the top counts."""
    folder = _files(tmp_path / "sub", *files)
    path, flags = submissions.pick_notebook(folder, "01_x.ipynb", nested=True)
    assert (str(path.relative_to(folder)) if path else None) == chosen
    assert flags == ([flag] if flag else [])
    if not any("/" not in name and name.endswith(".ipynb") for name in files):
        flat, flags = submissions.pick_notebook(folder, "01_x.ipynb")
        assert flat is None and flags[0].startswith("missing notebook: no 01_x.ipynb")


def test_a_linked_notebook_is_not_graded(tmp_path):
    folder = _files(tmp_path / "sub", "real/01_x.ipynb")
    (folder / "link").mkdir()
    (folder / "link" / "01_x.ipynb").symlink_to(folder / "real" / "01_x.ipynb")
    (folder / "linked").symlink_to(folder / "real")  # a folder link is not followed either
    assert submissions.pick_notebook(folder, "01_x.ipynb", nested=True) == (
        folder / "real" / "01_x.ipynb", [])


@pytest.mark.parametrize("content, status, flag", [
    (None, "missing", "missing notebook: no 99_demo.ipynb"),
    (b'{"cells": [ not json', "corrupt", "corrupt notebook 99_demo.ipynb: NotJSONError"),
    (bytes(range(256)), "corrupt", "corrupt notebook 99_demo.ipynb: "),
])  # fmt: skip
def test_a_bad_submission_is_a_zero_that_says_why(demo, tmp_path, content, status, flag):
    """grade_submission never raises for the student's file, and runs no student code."""
    if content is not None:
        (tmp_path / "99_demo.ipynb").write_bytes(content)
    result = grader.grade_submission(tmp_path, demo["assignment"], Limits(), Isolation.BWRAP,
                                     "ada", key="k")  # fmt: skip
    assert (result.student, result.key, result.score) == ("ada", "k", 0.0)
    assert result.flags[0].startswith(flag), result.flags
    assert {q.status for q in result.questions if q.score is not None} == {status}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file: run as an ordinary user "
                    "(test_grading_unprivileged.py)")  # fmt: skip
def test_an_unreadable_notebook_is_graded_as_a_corrupt_one(demo, tmp_path):
    path = tmp_path / "99_demo.ipynb"
    path.write_bytes(b"{}")
    path.chmod(0)
    result = grader.grade_submission(tmp_path, demo["assignment"], Limits(), Isolation.BWRAP)
    assert result.flags[0].startswith("corrupt notebook 99_demo.ipynb: [Errno 13]")
    assert {q.status for q in result.questions if q.score is not None} == {"corrupt"}
