"""Delegation earns nothing: an answer that returns the helpers function its tests compare
against scores 0, with a reason that says so, through the whole path of ``grade`` and
``check``. Every exercise of every chapter is checked in test_grading_closure.py."""

from __future__ import annotations

import dataclasses
import types

import pytest
from grading_support import SANDBOX, release_of

from grading import course, grader, sandbox
from grading.release import RELEASE, SOURCE

LIMITS = sandbox.Limits()  # the grader's own


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
        if isinstance(value, types.MethodType) and isinstance(value.__self__, type):
            value = value.__func__  # a classmethod (``timing.Timing.from_samples``): its function
        module = getattr(value, "__module__", "") or ""
        if (isinstance(value, types.FunctionType) and module.startswith("helpers.")
                and module not in ("helpers.book.checks", "helpers.book.notebook")
                and value.__name__ != "get"):  # fmt: skip
            found.append(f"{module}.{value.__qualname__}")
    return found


DIRECT = {  # the two delegations the issue names, written the way a student would
    ("03_roofline", "ch03_free_batch"): (
        "def free_batch(cfg, hw, context, slack, dtype='bf16'):\n"
        "    return roofline.free_batch(cfg, hw, context, slack, dtype)",
        "helpers.counting.roofline.free_batch"),
    ("02_bytes", "ch02_int4_checkpoint_bytes"): (
        "def int4_checkpoint_bytes(cfg, group_size):\n"
        "    return memory.int4_checkpoint_bytes(cfg, group_size)",
        "helpers.counting.memory.int4_checkpoint_bytes"),
    # Chapter 9's design problem: the reference search rebuilt from the planner's parts, its
    # goodput over two candidates typed out here (the largest cap, chunked or split: all twelve
    # would spend more than the deployment's budget of simulations).
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
        "    candidates = [ServingConfig(256, 512), ServingConfig(256, None, True)]\n"
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
    # the same answer as it was graded before this defence: the reference left real
    as_before = dataclasses.replace(exercise, tools=(*exercise.tools, reference))
    (before,) = sandbox.run([sandbox.Question.of(assignment.setup, as_before, answer)],
                            LIMITS, isolation=SANDBOX)  # fmt: skip
    assert before.passed, before
