"""Every exercise of every chapter: the solution passes, the stub fails, hidden tests exist."""

import pytest
from exercises import chapters, exercises, run

ALL = [ex for chapter in chapters() for ex in exercises(chapter).values()]


def test_every_chapter_has_at_least_four_exercises():
    for chapter in chapters():
        assert len(exercises(chapter)) >= 4, chapter


@pytest.mark.parametrize("exercise", ALL, ids=lambda ex: ex.name)
def test_solution_passes_visible_and_hidden(exercise):
    # Each part on its own: the hidden block must stand alone (the grader runs it so), and
    # the slowest hidden tests (chapter 9's design problem) run once, not twice.
    run(exercise, part="visible")
    run(exercise, part="hidden")


@pytest.mark.parametrize("exercise", ALL, ids=lambda ex: ex.name)
def test_release_stub_fails(exercise):
    with pytest.raises(NotImplementedError):
        run(exercise, exercise.stub)


@pytest.mark.parametrize("exercise", ALL, ids=lambda ex: ex.name)
def test_hidden_tests_exist_and_differ_from_visible(exercise):
    assert exercise.hidden.strip(), "no hidden tests"
    assert "check_" in exercise.hidden and "check_" in exercise.visible
    hidden_lines = {line.strip() for line in exercise.hidden.splitlines() if "check_" in line}
    visible_lines = {line.strip() for line in exercise.visible.splitlines() if "check_" in line}
    assert not hidden_lines & visible_lines, "hidden tests repeat visible ones"
