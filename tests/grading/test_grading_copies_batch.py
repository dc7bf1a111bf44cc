"""Copies in a graded batch: ``grade`` flags an answer that matches the library or another
submission, for the instructor only (grades.csv, the summary), and ``--copied zero`` scores
it 0 with a reason the student reads. The detector itself: test_grading_copies.py."""

from __future__ import annotations

import csv
import inspect
import io

import pytest
from grading_support import SANDBOX, fill, release_of, solutions_of, submit

from grading import course, grader, report
from grading.release import RELEASE, SOURCE
from grading.results import INSTRUCTOR_ONLY, student_flags
from helpers.counting import memory, models

CHAPTER, ANSWER = "02_bytes", "ch02_longest_context"
TEST = f"{ANSWER}_test"


def without_markers(solution: str) -> str:
    return "\n".join(line for line in solution.splitlines() if "### " not in line)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """bob hands in the model solution, ann the same renamed, cat the library's
    ``config_longest_context`` pasted as the answer, with the functions it calls and
    its module's names (and its input check written out: the library's is not among this
    exercise's tools, so it is a stub), dan the release as handed out."""
    course_dir = tmp_path_factory.mktemp("course")
    release = release_of(RELEASE, CHAPTER)
    solution = without_markers(solutions_of(SOURCE, CHAPTER)[ANSWER])
    renamed = (solution.replace("free", "spare").replace("budget", "allowance")
               .replace("layer_bits", "bits_per_layer")
               .replace("# every layer grows with each token", "# all layers still grow"))
    library = (models.layer_kinds, memory._config_layers, memory._longest_context,
               memory.config_longest_context)  # fmt: skip
    pasted = ("import math\nfrom collections.abc import Mapping, Sequence\n\n"
              "from helpers.counting.memory import *\n"
              "from helpers.counting.memory import _bits, one_of\n"
              "from helpers.counting.models import LAYER_TYPES\n\n\n"
              "def positive_int(value, name):\n    return value\n\n\n"
              + "\n\n".join(inspect.getsource(f) for f in library)
              .replace("def config_longest_context(", "def longest_context("))  # fmt: skip
    for student, answer in (("bob", solution), ("ann", renamed), ("cat", pasted)):
        submit(course_dir, student, CHAPTER, fill(release, {ANSWER: answer}))
    submit(course_dir, "dan", CHAPTER, release)
    assignment = course.load(CHAPTER, SOURCE)
    flagged = grader.grade_batch(assignment, course_dir, isolation=SANDBOX, progress=False)
    zeroed = grader.grade_batch(assignment, course_dir, isolation=SANDBOX, progress=False,
                                copied="zero")  # the stored results, scored again  # fmt: skip
    return {"assignment": assignment, "flagged": {r.student: r for r in flagged},
            "zeroed": {r.student: r for r in zeroed}}  # fmt: skip


def copy_flags(result) -> list[str]:
    return [f for f in result.flags if f.startswith(INSTRUCTOR_ONLY + "copy: ")]


def test_copies_are_flagged_with_what_they_match(batch):
    flags = {s: copy_flags(r) for s, r in batch["flagged"].items()}
    assert len(flags["ann"]) == 1 and f"{ANSWER} matches student:bob's {ANSWER}" in flags["ann"][0]
    assert len(flags["bob"]) == 1 and f"{ANSWER} matches student:ann's {ANSWER}" in flags["bob"][0]
    assert any(f"{ANSWER} matches helpers.counting.memory._longest_context" in f
               for f in flags["cat"])  # fmt: skip
    assert flags["dan"] == []  # the release as handed out matches nothing


def test_a_flag_alone_changes_no_score(batch):
    """The copies all pass: the pasted library answers the exercise, and is still flagged."""
    scored = {s: {q.grade_id: q for q in r.questions} for s, r in batch["flagged"].items()}
    for student in ("ann", "bob", "cat"):
        assert scored[student][TEST].status == "passed", student
        assert scored[student][TEST].score == scored[student][TEST].points > 0


def test_copied_zero_scores_the_matched_question_0_with_a_reason(batch):
    for student in ("ann", "bob", "cat"):
        questions = {q.grade_id: q for q in batch["zeroed"][student].questions}
        assert (questions[TEST].score, questions[TEST].status) == (0.0, "copied"), student
        assert questions[TEST].detail == grader.COPIED_DETAIL
        others = [q for q in questions.values() if q.grade_id != TEST and q.score]
        assert not others  # only the copied question (the rest were left unanswered)


def test_the_student_never_reads_a_copy_flag_and_the_instructor_does(batch):
    for result in batch["flagged"].values():
        assert not [f for f in student_flags(result.flags) if "copy: " in f]
    rows = csv.DictReader(io.StringIO(report.grades_csv(list(batch["flagged"].values()),
                                                        batch["assignment"])))  # fmt: skip
    by_student = {row["student"]: row for row in rows}
    assert "matches student:bob's" in by_student["ann"]["flags"]
    assert "matches helpers.counting.memory._longest_context" in by_student["cat"]["flags"]


def test_a_bad_copied_value_is_named():
    with pytest.raises(ValueError, match="copied must be one of flag, zero, not 'maybe'"):
        grader.flag_copies([], {}, course.load(CHAPTER, SOURCE), copied="maybe")
    with pytest.raises(ValueError, match="copied must be one of flag, zero, not 'maybe'"):
        grader.grade_batch(course.load(CHAPTER, SOURCE), SOURCE, isolation=SANDBOX,
                           copied="maybe")  # fmt: skip
