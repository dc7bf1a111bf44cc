"""A batch's records read each graded submission once: SubmittedNotebooks."""

from __future__ import annotations

import nbformat

from grading import submissions
from grading.results import QuestionResult, StudentResult


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
