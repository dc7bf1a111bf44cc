"""Round trips in a temporary course: grade, feedback, CSV, summary, rerun, resume.

The fixture chapter (tests/grading/grading_fixture.py) pins exact scores; every real chapter
is covered by test_grading_chapters.py."""

from __future__ import annotations

import csv
import io

import pytest
from grading_fixture import EXERCISES, MAX_AUTO, NAME
from grading_support import (
    SANDBOX,
    demo_answers,
    fill,
    hidden_lines,
    page_text,
    release_of,
    submit,
    tree_digest,
)

from grading import gradebook, grader, report


@pytest.fixture(scope="module")
def graded(demo, tmp_path_factory):
    """One batch over the fixture chapter: perfect, blank, partial and a warning answer."""
    course_dir = tmp_path_factory.mktemp("course")
    release = release_of(demo["release"], NAME)
    all_right = {a: "right" for a in EXERCISES}
    partial = {"ch99_square": "right", "ch99_mean": "wrong", "ch99_double": "right"}
    warning = ("import warnings\n\ndef square(n):\n    warnings.warn('slow path')\n"
               "    return n * n")  # fmt: skip
    submit(course_dir, "perfect", NAME, fill(release, demo_answers(all_right)))
    submit(course_dir, "blank", NAME, release)
    submit(course_dir, "partial", NAME, fill(release, demo_answers(partial)))
    submit(course_dir, "warns", NAME,
           fill(release, demo_answers(all_right) | {"ch99_square": warning}))  # fmt: skip
    source_before = tree_digest(demo["source"])
    results = grader.grade_batch(demo["assignment"], course_dir, isolation=SANDBOX,
                                 progress=False)  # fmt: skip
    paths = report.write_reports(results, demo["assignment"], course_dir)
    return {"dir": course_dir, "results": {r.student: r for r in results}, "paths": paths,
            "source_before": source_before}  # fmt: skip


def test_scores_are_exact(graded):
    scores = {s: r.score for s, r in graded["results"].items()}
    assert scores == {"perfect": MAX_AUTO, "blank": 0, "partial": 1 + 3, "warns": MAX_AUTO}
    partial = {q.grade_id: q.status for q in graded["results"]["partial"].questions}
    assert partial == {"ch99_square_test": "passed", "ch99_mean_test": "failed",
                       "ch99_double_test": "passed", "ch99_written_why": "manual"}  # fmt: skip
    assert graded["results"]["perfect"].flags == []


def test_csv_has_each_question_and_the_total(graded):
    rows = list(csv.DictReader(io.StringIO(graded["paths"]["csv"].read_text())))
    by_student = {row["student"]: row for row in rows}
    assert sorted(by_student) == ["blank", "partial", "perfect", "warns"]
    assert by_student["partial"] == {
        "student": "partial", "assignment": NAME, "ch99_square_test": "1",
        "ch99_mean_test": "0", "ch99_double_test": "3", "ch99_written_why": "",
        "auto_score": "4", "auto_max": "6", "written_score": "", "written_max": "2",
        "total": "4", "max": "8", "flags": "",
    }  # fmt: skip
    assert by_student["perfect"]["auto_score"] == "6"
    assert by_student["blank"]["auto_score"] == "0"


def test_summary_names_the_questions_and_who_needs_attention(graded):
    text = graded["paths"]["summary"].read_text()
    for exercise in EXERCISES:
        assert f"| {exercise}_test |" in text
    attention = text.split("## Needs attention")[1]
    assert "**blank**" in attention and "**perfect**" not in attention
    assert graded["paths"]["plot"].read_bytes().startswith(b"\x89PNG")


def test_feedback_holds_no_hidden_test(graded, demo):
    hidden = hidden_lines(demo["source"], NAME)
    assert hidden, "the fixture must have hidden tests"
    for student in graded["results"]:
        page = page_text(graded["dir"] / "feedback" / student / NAME / f"{NAME}.html")
        assert "HIDDEN TESTS" not in page
        for line in hidden:
            assert line not in page, (student, line)
    partial = page_text(graded["dir"] / "feedback" / "partial" / NAME / f"{NAME}.html")
    assert "return float(sum(xs)) / (len(xs) + 1)" in partial  # the student's own answer
    assert "0 / 2: failed" in partial


def test_rerun_is_idempotent_and_instructor_files_unchanged(graded, demo):
    before = tree_digest(graded["dir"])
    results = grader.grade_batch(demo["assignment"], graded["dir"], isolation=SANDBOX,
                                 progress=False)  # fmt: skip
    report.write_reports(results, demo["assignment"], graded["dir"])
    assert tree_digest(graded["dir"]) == before
    assert tree_digest(demo["source"]) == graded["source_before"]


def test_interrupted_batch_resumes(graded, demo):
    grades = graded["dir"] / "grades" / NAME
    kept = (grades / "perfect.json").stat().st_mtime_ns
    (grades / "partial.json").unlink()  # as if the batch stopped before this student
    results = grader.grade_batch(demo["assignment"], graded["dir"], isolation=SANDBOX,
                                 progress=False)  # fmt: skip
    assert {r.student: r.score for r in results}["partial"] == 4
    assert (grades / "partial.json").is_file()
    assert (grades / "perfect.json").stat().st_mtime_ns == kept


def test_gradebook_for_formgrader_keeps_manual_scores(graded, demo):
    """nbgrader's gradebook gets the autograded scores; a written answer graded by hand in
    formgrader shows in our CSV and survives a rerun."""
    from nbgrader.api import Gradebook

    assignment, course_dir = demo["assignment"], graded["dir"]
    results = list(graded["results"].values())
    gradebook.sync(results, assignment, course_dir, demo["source"])
    with Gradebook(gradebook.db_url(course_dir)) as gb:
        submission = gb.find_submission(NAME, "partial")
        assert submission.code_score == 4 and submission.needs_manual_grade
        grade = gb.find_grade("ch99_written_why", NAME, NAME, "partial")
        grade.manual_score = 1.5
        gb.db.commit()
    gradebook.sync(results, assignment, course_dir, demo["source"])  # a rerun
    manual = gradebook.manual_scores(course_dir, assignment)
    assert manual == {("partial", "ch99_written_why"): 1.5}
    rows = {r["student"]: r for r in csv.DictReader(
        io.StringIO(report.grades_csv(results, assignment, manual)))}  # fmt: skip
    assert (rows["partial"]["ch99_written_why"], rows["partial"]["total"]) == ("1.5", "5.5")
    autograded = course_dir / "autograded" / "partial" / NAME / f"{NAME}.ipynb"
    assert "### BEGIN HIDDEN TESTS" in autograded.read_text()  # the instructor's copy
