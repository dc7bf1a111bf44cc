"""What a student sees of a result is decided in one place (``results.shown_to_student``,
``results.student_flags``): a hidden test's failure never shows its detail, and an
instructor-only flag is in the instructor's records (grades.csv, the summary) but never on
the student's feedback page (nor in Gradescope's results: test_grading_gradescope.py)."""

from __future__ import annotations

import csv
import io

import nbformat
import pytest
from grading_fixture import NAME

from grading import report
from grading.results import (
    NO_DETAIL,
    VERDICT,
    QuestionResult,
    StudentResult,
    instructor_only,
    shown_to_student,
    student_flags,
)

SECRET = "assert hidden_case() == 'kept-from-the-student'"  # a hidden test's detail

# status, detail, what the student reads: every status the grader gives, and one it may
# give some day (its name is its verdict)
SHOWN = [
    ("passed", "", "passed"),
    ("failed", "expected 7, got 8", "failed: expected 7, got 8"),
    ("hidden", SECRET, VERDICT["hidden"]),
    ("hidden", "", VERDICT["hidden"]),
    ("error", "your answer cell raised NameError: x",
     f"{VERDICT['error']}: your answer cell raised NameError: x"),
    ("timeout", "wall-clock time limit", f"{VERDICT['timeout']}: wall-clock time limit"),
    ("limit", "memory limit", f"{VERDICT['limit']}: memory limit"),
    ("crash", "segmentation fault", f"{VERDICT['crash']}: segmentation fault"),
    ("missing", "answer cell ch99_mean not found",
     f"{VERDICT['missing']}: answer cell ch99_mean not found"),
    ("corrupt", VERDICT["corrupt"], VERDICT["corrupt"]),  # a detail that repeats the verdict
    ("setup", "the setup cell failed: ImportError", f"{VERDICT['setup']}: the setup cell "
     "failed: ImportError"),
    ("manual", "", VERDICT["manual"]),
    ("copied", "your answer matches code found elsewhere",
     f"{VERDICT['copied']}: your answer matches code found elsewhere"),
    ("judged", "by a rubric", "judged: by a rubric"),
]  # fmt: skip


def test_every_status_is_covered():
    assert {status for status, _, _ in SHOWN} == set(VERDICT) | {"judged"}
    assert NO_DETAIL <= set(VERDICT)


@pytest.mark.parametrize("status, detail, shown", SHOWN)
def test_what_the_student_reads_of_a_question(status, detail, shown):
    question = QuestionResult("q_test", 1.0, 0.0, status, detail)
    assert shown_to_student(question) == shown
    verdict = VERDICT.get(status, status)  # the feedback notebook's form: on two lines
    on_two_lines = shown.replace(f"{verdict}: ", f"{verdict}\n", 1)
    assert shown_to_student(question, between="\n") == on_two_lines


def test_instructor_only_flags_are_kept_from_the_student():
    mine = "wrong file name: mine.ipynb (expected 99_demo.ipynb)"
    theirs = instructor_only("ch99_square matches helpers.counting.memory.weight_bytes")
    assert student_flags([mine, theirs]) == [mine]
    assert theirs.startswith("instructor only: ") and student_flags([theirs]) == []


@pytest.fixture(scope="module")
def records(demo):
    """A result with a hidden failure, a visible one, a student's flag and an
    instructor-only one: its feedback page and the instructor's records."""
    assignment = demo["assignment"]
    questions = [QuestionResult("ch99_square_test", 1.0, 0.0, "hidden", SECRET),
                 QuestionResult("ch99_mean_test", 2.0, 0.0, "failed", "mean([1, 2, 3]) is 3"),
                 QuestionResult("ch99_double_test", 3.0, 3.0, "passed"),
                 QuestionResult("ch99_written_why", 2.0, None, "manual")]  # fmt: skip
    flags = ["duplicate submission: graded 99_demo.ipynb, ignored copy.ipynb",
             instructor_only("ch99_mean matches student bob's answer")]  # fmt: skip
    result = StudentResult("ada", NAME, questions, flags, f"{NAME}.ipynb")
    page = report.feedback_notebook(result, assignment, None)
    grades = next(csv.DictReader(io.StringIO(report.grades_csv([result], assignment))))
    return {"flags": flags, "page": page, "grades": grades,
            "attention": report.needs_attention(result, assignment),
            "summary": report.summary([result], assignment, None)}  # fmt: skip


def test_the_feedback_page_shows_what_the_student_may_see(records):
    page = nbformat.writes(records["page"])
    assert records["flags"][0] in page
    assert "matches" not in page and "instructor only" not in page
    assert "hidden_case" not in page and "kept-from-the-student" not in page
    outputs = {c.metadata.nbgrader["grade_id"]: c.outputs[0].text for c in records["page"].cells
               if c.get("outputs")}  # fmt: skip
    assert outputs == {"ch99_square_test": f"0 / 1: {VERDICT['hidden']}\n",
                       "ch99_mean_test": "0 / 2: failed\nmean([1, 2, 3]) is 3\n",
                       "ch99_double_test": "3 / 3: passed\n"}  # fmt: skip


def test_the_instructors_records_keep_every_flag(records):
    assert records["grades"]["flags"] == "; ".join(records["flags"])
    assert records["flags"][1] in records["attention"]
    assert f"**ada**: {records['flags'][0]}; {records['flags'][1]}" in records["summary"]
