"""Delegation earns nothing: an answer that returns the helpers function its tests compare
against scores 0, with a reason that says so, in every chapter (``grade`` and ``check``
share this path). The tests and the instructor's solution keep the real functions."""

from __future__ import annotations

import types

import pytest
from grading_support import SANDBOX, release_of, solutions_of

from grading import course, grader, sandbox
from grading.release import RELEASE, SOURCE, chapters

CHAPTERS = chapters()
LIMITS = sandbox.Limits(wall_s=60, cpu_s=60)


def helpers_references(assignment: course.Assignment, exercise: course.Exercise) -> list[str]:
    """The exercise's references that are helpers functions (not checkers, not lookups),
    resolved here, apart from the grader, in a namespace that ran the setup cell."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(assignment.setup, "<setup>", "exec"), namespace)  # noqa: S102
    found = []
    for dotted in exercise.references:
        head, *rest = dotted.split(".")
        value = namespace.get(head)
        for part in rest:
            value = getattr(value, part, None)
        module = getattr(value, "__module__", "") or ""
        if (isinstance(value, types.FunctionType) and module.startswith("helpers.")
                and module not in ("helpers.checks", "helpers.notebook")
                and value.__name__ != "get"):  # fmt: skip
            found.append(f"{module}.{value.__qualname__}")
    return found


def delegating(solution: str, names: tuple[str, ...], reference: str) -> str:
    """The solution, wrapped so that each call first calls ``reference`` (a delegating
    answer that would still pass if the reference were left real)."""
    module, _, function = reference.rpartition(".")
    wraps = "".join(
        f"\n_real_{n} = {n}\ndef {n}(*args, **kwargs):\n"
        f"    import {module}\n"
        f"    try:\n        {module}.{function}(*args, **kwargs)\n"
        f"    except (TypeError, ValueError, AttributeError, KeyError):\n        pass\n"
        f"    return _real_{n}(*args, **kwargs)\n"
        for n in names if n.isidentifier()
    )  # fmt: skip
    return solution + "\n" + wraps


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_delegating_answers_score_zero_in_every_chapter(chapter):
    assignment = course.load(chapter, SOURCE)
    solutions = solutions_of(SOURCE, chapter)
    cases, questions = [], []
    for exercise in assignment.exercises:
        functions = [n for n in exercise.names if not n.isupper()]
        for reference in helpers_references(assignment, exercise)[:1]:
            answer = delegating(solutions[exercise.answer_id], tuple(functions), reference)
            for refs in (exercise.references, ()):  # with the stubs, and without them
                cases.append((exercise.test_id, reference, bool(refs)))
                questions.append(sandbox.Question(assignment.setup, answer, exercise.visible,
                                                  exercise.full, exercise.names, refs))  # fmt: skip
    if not questions:  # no test compares against helpers: the solutions, stubs and all, pass
        questions = [sandbox.Question(assignment.setup, solutions[e.answer_id], e.visible,
                                      e.full, e.names, e.references)
                     for e in assignment.exercises]  # fmt: skip
        assert all(o.passed for o in sandbox.run(questions, LIMITS, sandbox=SANDBOX))
        return
    outcomes = sandbox.run(questions, LIMITS, sandbox=SANDBOX)
    for (test_id, reference, stubbed), outcome in zip(cases, outcomes, strict=True):
        if stubbed:
            assert not outcome.passed, (test_id, outcome)
            assert outcome.status in ("failed", "error"), (test_id, outcome)
            assert (f"calling {reference} is not an answer: write it yourself"
                    in outcome.detail), (test_id, outcome)  # fmt: skip
        else:  # the same answer with the real reference: it passed before this defence
            assert outcome.passed, (test_id, outcome)


DIRECT = {  # the two delegations the issue names, written the way a student would
    ("03_roofline", "ch03_critical_batch"): (
        "def critical_batch(k, n, ridge, dtype):\n"
        "    return roofline.gemm_knee(k, n, ridge, dtype)", "helpers.roofline.gemm_knee"),
    ("02_bytes", "ch02_weight_bytes"): (
        "def weight_bytes(cfg, dtype):\n    return memory.weight_bytes(cfg, dtype)",
        "helpers.memory.weight_bytes"),
    # Chapter 9's design problem: the reference search rebuilt from the planner's parts, its
    # goodput and (typed out here) its candidates.
    ("09_capstone", "ch09_choose_config"): (
        "def choose_config(scenario):\n"
        "    rungs = [scenario.rate * load for load in serving.PLAN_LOADS if max(serving.planner"
        ".offered_load(scenario, scenario.rate * load).values()) <= 1]\n"
        "    def goodput(config):\n"
        "        try:\n"
        "            return serving.max_rate_under_slo(lambda rate: serving.serve_config("
        "scenario, config, rate), rungs, scenario.ttft_slo, scenario.tpot_slo, "
        "scenario.share)\n"
        "        except ValueError:\n"
        "            return 0.0\n"
        "    candidates = [ServingConfig(b, t) for b in (16, 64, 256) for t in (None, 512, 2048)"
        " if t is None or t > b] + [ServingConfig(b, None, True) for b in (16, 64, 256)]\n"
        "    best = max(candidates, key=goodput)\n"
        "    return {'max_batch': best.max_batch, 'token_budget': best.token_budget, "
        "'disaggregate': best.disaggregate}", "helpers.serving.metrics.max_rate_under_slo"),
}  # fmt: skip


def test_the_design_problem_stubs_every_part_of_the_planner_search():
    """Chapter 9's answer can reach no part of the reference search: the search itself, its
    candidates, a candidate's goodput and DistServe's goodput rule are all stubbed."""
    assignment = course.load("09_capstone", SOURCE)
    (exercise,) = [e for e in assignment.exercises if e.answer_id == "ch09_choose_config"]
    assert {"helpers.serving.planner.plan_serving", "helpers.serving.planner.plan_candidates",
            "helpers.serving.planner.config_goodput",
            "helpers.serving.metrics.max_rate_under_slo"} <= set(
        helpers_references(assignment, exercise))  # fmt: skip


@pytest.mark.parametrize("chapter, answer_id", list(DIRECT))
def test_returning_the_reference_scores_zero_with_the_reason(chapter, answer_id, tmp_path):
    """Through the whole path of ``grade`` and ``check``: a notebook whose answer returns
    the reference, and the same answer graded as it was before (it earned full marks)."""
    answer, reference = DIRECT[(chapter, answer_id)]
    assignment = course.load(chapter, SOURCE)
    nb = release_of(RELEASE, chapter) if (RELEASE / chapter).is_dir() else None
    nb = nb or assignment.release
    for cell in nb.cells:
        if course.meta(cell).get("grade_id") == answer_id:
            cell.source = answer
    results, _ = grader.grade_notebook(nb, assignment, LIMITS, SANDBOX)
    test_id = f"{answer_id}_test"
    (result,) = [q for q in results if q.grade_id == test_id]
    assert (result.status, result.score) == ("failed", 0.0), result
    assert result.detail == f"calling {reference} is not an answer: write it yourself"
    (exercise,) = [e for e in assignment.exercises if e.test_id == test_id]
    (before,) = sandbox.run([sandbox.Question(assignment.setup, answer, exercise.visible,
                                              exercise.full, exercise.names)],
                            LIMITS, sandbox=SANDBOX)  # fmt: skip
    assert before.passed, before
