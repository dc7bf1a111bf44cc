"""Every real chapter in solutions/, as it lands: the solutions pass every question, the
release none, and the feedback shows no hidden test."""

from __future__ import annotations

import pytest
from grading_support import SANDBOX, fill, hidden_lines, page_text, solutions_of, submit

from grading import course, grader, report
from grading.release import SOURCE, chapters

CHAPTERS = chapters()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_round_trip(chapter, tmp_path):
    """Every real chapter: the solutions pass every question and the release none (what
    ``nbgrader validate`` and ``validate --invert`` check, exercise by exercise), and the
    feedback shows no hidden test."""
    assignment = course.load(chapter, SOURCE)
    release = assignment.release  # made from the source the way nbgrader does, in memory
    submit(tmp_path, "perfect", chapter, fill(release, solutions_of(SOURCE, chapter)))
    submit(tmp_path, "blank", chapter, release)
    results = {r.student: r for r in grader.grade_batch(
        assignment, tmp_path, isolation=SANDBOX, progress=False)}  # fmt: skip
    assert results["perfect"].score == assignment.max_auto, results["perfect"].questions
    assert not [q for q in results["blank"].questions if q.status == "passed"]
    assert results["blank"].score == 0
    report.write_reports(list(results.values()), assignment, tmp_path)
    page = page_text(tmp_path / "feedback" / "perfect" / chapter / f"{chapter}.html")
    assert "HIDDEN TESTS" not in page
    answered = "\n".join(solutions_of(SOURCE, chapter).values())
    for line in hidden_lines(SOURCE, chapter):
        if line not in answered:  # a line the student wrote too is theirs, not a leak
            assert line not in page, line
