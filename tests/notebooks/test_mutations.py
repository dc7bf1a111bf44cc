"""Mutation tests: the hidden tests reject every plausible wrong answer (tests/notebooks/mutants).

Each mutant is a whole answer cell as a learner might write it. It must run (the checkers,
not a NameError, must reject it) and fail the *hidden* tests on their own. The mutant that
hard-codes the visible answers must pass the visible tests: that proves the hidden tests are
what stop it. That the solution itself passes them (the control) is test_exercises.py's
``test_solution_passes_visible_and_hidden``, run once, not again here.
"""

import importlib
import pkgutil

import mutants
import pytest
from exercises import chapters, exercises, rejected, run

TABLES = {
    module.CHAPTER: module.MUTANTS
    for module in (
        importlib.import_module(f"mutants.{info.name}")
        for info in pkgutil.iter_modules(mutants.__path__)
    )
}
CASES = [
    (chapter, name, label)
    for chapter, table in TABLES.items()
    for name, answers in table.items()
    for label in answers
]


def hard_coded(answers: dict[str, str]) -> str:
    return next(source for label, source in answers.items() if "visible answer" in label)


@pytest.mark.parametrize("chapter", chapters())
def test_every_exercise_has_three_mutants_and_a_hard_coded_one(chapter):
    assert chapter in TABLES, f"no tests/notebooks/mutants module for {chapter}"
    assert set(TABLES[chapter]) == set(exercises(chapter))
    for name, answers in TABLES[chapter].items():
        assert len(answers) >= 3, name
        hard_coded(answers)


@pytest.mark.parametrize("chapter, name, label", CASES, ids=[f"{n}:{lb}" for _, n, lb in CASES])
def test_hidden_tests_reject_the_mutant(chapter, name, label):
    # rejected() lets anything but an AssertionError through, so a crashing mutant fails here.
    assert rejected(exercises(chapter)[name], TABLES[chapter][name][label], part="hidden")


@pytest.mark.parametrize(
    "chapter, name", [(c, n) for c, table in TABLES.items() for n in table], ids=str
)
def test_hard_coded_mutant_passes_the_visible_tests(chapter, name):
    run(exercises(chapter)[name], hard_coded(TABLES[chapter][name]), part="visible")
