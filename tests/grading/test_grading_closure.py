"""An answer earns nothing from library code beyond its exercise's tools.

The answer process stubs every ``helpers`` function an exercise's reference reaches (and
every library function of the exercise's own name), except what the model solution uses
and what that reaches (grading/stubs.py, ``plan``). Checked here for every exercise of every
chapter: the plan (read from the sources), and in the sandbox the routes a student takes:
the solution (full marks), a call of the library function of the same name, that
function's source pasted with its module's names in scope, a call of each reference the
tests compare with, and a call one level below the reference. All but the first score 0
with a reason that names the stubbed function."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
from grading_support import SANDBOX, solutions_of
from test_grading_delegation import helpers_references

from grading import course, sandbox, stubs
from grading.release import SOURCE, chapters

CHAPTERS = chapters()
LIMITS = sandbox.Limits()  # the grader's own
REFUSED = "is not an answer: write it yourself"


def exercises(chapter: str) -> list[tuple[course.Assignment, course.Exercise]]:
    assignment = course.load(chapter, SOURCE)
    return [(assignment, e) for e in assignment.exercises]


def plan_of(assignment: course.Assignment, exercise: course.Exercise) -> stubs.Plan:
    return stubs.plan(assignment.setup, exercise.references, exercise.names, exercise.tools)


def named(functions) -> set[str]:
    return {f"{module}.{qualname}" for module, qualname in functions}


def stubbed_names(plan: stubs.Plan) -> set[str]:
    return {f"{m}.{q}" for m, names in plan.stubbed.items() for q in names}


def same_name(exercise: course.Exercise) -> list[stubs.Function]:
    """The library's module-level functions named as the exercise's answer is."""
    return sorted(f for f in stubs.functions() if "." not in f[1] and f[1] in exercise.names)


ALL = [(c, a, e) for c in CHAPTERS for a, e in exercises(c)]
IDS = [e.answer_id for _, _, e in ALL]


@pytest.mark.parametrize("chapter, assignment, exercise", ALL, ids=IDS)
def test_the_plan_stubs_the_reference_and_keeps_the_tools(chapter, assignment, exercise):
    plan = plan_of(assignment, exercise)
    stubbed = stubbed_names(plan)
    assert not plan.conflicts, f"a tool of {exercise.answer_id} needs its own reference"
    # what the tests call, run for real in a namespace that ran the setup cell
    assert set(helpers_references(assignment, exercise)) <= stubbed
    assert named(same_name(exercise)) <= stubbed
    reached = {f for f in plan.reached - plan.kept if stubs.stubbable(f)}
    assert named(reached) <= stubbed  # all the roots reach, but for the tools' closure
    assert not named(plan.tools) & stubbed  # what the model solution names stays real
    assert not named(plan.kept) & stubbed  # and all that it reaches


def test_every_library_function_that_is_not_kept_is_stubbed():
    """Deny by default: a copy of the answer elsewhere in the library is refused too; what
    stays real is kept (the tools, the setup, import time and all they reach), or a dunder
    other than a constructor, a property, a lookup or a checker."""
    for chapter in ("02_bytes", "09_capstone"):
        for assignment, exercise in exercises(chapter):
            plan = plan_of(assignment, exercise)
            stubbed = {(m, q) for m, names in plan.stubbed.items() for q in names}
            for function in set(stubs.functions()) - stubbed:
                assert function in plan.kept or not stubs.stubbable(function), function


# The routes one level below the reference that scored before the closure, one per chapter
# where a student found one: (chapter, answer_id) -> functions that must now be stubs.
BELOW = {
    ("01_flops", "ch01_intermediate_from_params"): {"helpers.counting.flops._params",
                                                    "helpers.decoder.model.Decoder.__init__"},
    ("02_bytes", "ch02_int4_checkpoint_bytes"): {"helpers.counting.memory._bytes"},
    ("02_bytes", "ch02_kv_count_mistake"): {"helpers.counting.memory.cached_tokens",
                                            "helpers.counting.memory.kv_bytes_per_token",
                                            "helpers.counting.memory.kv_width"},
    ("04_timing", "ch04_roofline_verdict"): {"helpers.counting.roofline.bound_time",
                                             "helpers.counting.latency.flops_utilization",
                                             "helpers.counting.latency.bandwidth_utilization"},
    ("04_timing", "ch04_time_blocks"): {"helpers.measuring.timing.time_blocks"},
    ("06_ttft_tpot", "ch06_longest_answer"): {"helpers.counting.latency.interpolate",
                                             "helpers.counting.latency.predict_e2e"},
    ("07_batching", "ch07_padded_prefill"): {"helpers.decoder.masks.visible_keys",
                                             "helpers.decoder.masks.rope_positions"},
    ("10_parallel", "ch10_attention_per_chip"): {"helpers.counting.memory.kv_width",
                                                 "helpers.counting.flops.attention_flops_per_key",
                                                 "helpers.parallel.sharding.shard_config"},
    # A reviewer's routes through copies elsewhere in the library, which no reading of the
    # reference finds: chapter 10's TP search at one chip and its bisection, a batch search
    # over the same step times (above: the decoder built on the meta device and its
    # parameters counted; chapter 6's utilizations)
    ("09_capstone", "ch09_batch_at_load"): {"helpers.parallel.cost.cheapest_degree",
                                            "helpers.counting.roofline.first_batch"},
    # The speedups of the same run on a faster chip: one equation away from the answer
    ("09_capstone", "ch09_flops_to_match"): {"helpers.counting.latency.upgrade_speedups",
                                             "helpers.counting.latency.phase_speedups"},
}  # fmt: skip


@pytest.mark.parametrize("chapter, answer_id", list(BELOW))
def test_the_routes_below_the_old_stubs_are_stubbed(chapter, answer_id):
    ((assignment, exercise),) = [(a, e) for a, e in exercises(chapter)
                                 if e.answer_id == answer_id]  # fmt: skip
    assert BELOW[(chapter, answer_id)] <= stubbed_names(plan_of(assignment, exercise))


def test_the_closure_follows_imports_attributes_methods_and_constructors():
    """Each way a library body names another function: a module-level name
    (``cached_tokens``), an import (``kv_width``), a chain through other modules
    (``weight_bytes`` -> ``param_count`` -> ``_params``) and a method of an object whose
    class the source does not name (``hw.peak(...)``); a constructor is followed but never
    stubbed; a lookup by name stays real."""
    setup = "from helpers import memory, models, serving\n"
    plan = stubs.plan(setup, ("memory.kv_cache_bytes", "serving.verify_costs"))
    stubbed = stubbed_names(plan)
    assert {"helpers.counting.memory.cached_tokens", "helpers.counting.memory.kv_width",
            "helpers.counting.flops._params",
            "helpers.counting.hardware.HardwareSpec.peak"} <= stubbed
    constructed = named(stubs.plan(setup, ("serving.spec_tpot",)).reached)
    assert "helpers.serving.steps.RooflineSteps.__init__" in constructed
    assert not any(q.rsplit(".", 1)[-1].startswith("__") and not q.endswith(
        stubs.CONSTRUCTORS) for q in stubbed)  # fmt: skip
    assert "helpers.counting.models.get" not in stubbed


def test_a_function_read_from_a_table_is_reached():
    """``EAGER = Kernel(..., _eager, ...)`` at module level, read by ``linear_kernels``: the
    functions the table holds are reached (and, not being a tool's, stubbed)."""
    plan = stubs.plan("from helpers.measuring import kernels\n", ("kernels.linear_kernels",))
    assert {"helpers.measuring.kernels._eager", "helpers.measuring.kernels._aten",
            "helpers.measuring.kernels._onednn"} <= stubbed_names(plan)  # fmt: skip


def test_a_function_s_own_variables_are_not_the_module_s():
    """``latency.sweep_summary`` has a variable ``tpot``: it does not reach ``latency.tpot``."""
    reached = stubs.reaches(("helpers.counting.latency", "sweep_summary"))
    assert ("helpers.counting.latency", "tpot") not in reached


def test_what_a_tool_reaches_stays_real():
    """A tool's own callees stay real even when the reference reaches them too: chapter 2's
    ``kv_cache_bytes`` may call ``memory.kv_bytes_per_token``, which needs ``kv_width``."""
    setup = "from helpers.counting import memory\n"
    plan = stubs.plan(setup, ("memory.kv_cache_bytes",), ("kv_cache_bytes",),
                      ("memory.kv_bytes_per_token",))  # fmt: skip
    stubbed = stubbed_names(plan)
    assert {"helpers.counting.memory.kv_cache_bytes",
            "helpers.counting.memory.cached_tokens"} <= stubbed
    assert not {"helpers.counting.memory.kv_bytes_per_token", "helpers.counting.memory.kv_width",
                "helpers.counting.memory._bytes"} & stubbed  # fmt: skip


def pasted(function: stubs.Function, answer_name: str) -> str:
    """The library function's source as an answer cell: its module's names (private ones
    too) in scope, the definition renamed to the answer's name, as a student pastes it."""
    module, qualname = function
    real = __import__(module, fromlist=[qualname])
    source = textwrap.dedent(inspect.getsource(getattr(real, qualname)))
    source = source.replace(f"def {qualname}(", f"def {answer_name}(", 1)
    return (f"import {module} as _library\n"
            "globals().update({k: v for k, v in vars(_library).items()\n"
            "                  if not k.startswith('__')})\n" + source)  # fmt: skip


def calling(function: stubs.Function, answer_name: str) -> str:
    module, qualname = function
    return (f"import {module}\n\ndef {answer_name}(*args, **kwargs):\n"
            f"    return {module}.{qualname}(*args, **kwargs)\n")  # fmt: skip


def delegating(solution: str, names: tuple[str, ...], function: stubs.Function) -> str:
    """The solution, wrapped so that each call first calls ``function`` (a method too): an
    answer that would still pass if that function were real."""
    module, qualname = function
    wraps = "".join(
        f"\n_real_{n} = {n}\ndef {n}(*args, **kwargs):\n    import {module}\n"
        f"    try:\n        {module}.{qualname}(*args, **kwargs)\n"
        f"    except (TypeError, ValueError, AttributeError, KeyError, IndexError):\n"
        f"        pass\n    return _real_{n}(*args, **kwargs)\n"
        for n in names
    )  # fmt: skip
    return solution + "\n" + wraps


def same_signature(function: stubs.Function, solution: str) -> bool:
    """Whether the library function takes the parameters the exercise's function does (a
    function of the same name may mean something else: chapter 3's ``roofline_time``)."""
    module, qualname = function
    real = getattr(__import__(module, fromlist=[qualname]), qualname)
    defined = [node for node in ast.parse(solution).body
               if isinstance(node, ast.FunctionDef) and node.name == qualname]  # fmt: skip
    if not defined:
        return False
    arguments = defined[0].args
    mine = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    return list(inspect.signature(real).parameters) == mine


def one_level_below(plan: stubs.Plan) -> list[stubs.Function]:
    """The stubbed functions a root's body names itself (not through another)."""
    stubbed = {(m, q) for m, names in plan.stubbed.items() for q in names}
    return sorted({f for root in plan.roots for f in stubs.reaches(root)} & stubbed
                  - plan.roots)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_route_to_library_code_scores_zero_with_its_reason(chapter):
    """One sandbox run a chapter: for each exercise, the solution, then the same-name call,
    the pasted same-name function, and a delegation to each reference and to each function
    one level below one."""
    solutions = solutions_of(SOURCE, chapter)
    cases, questions = [], []
    for assignment, exercise in exercises(chapter):
        plan = plan_of(assignment, exercise)
        solution = solutions[exercise.answer_id]
        functions = tuple(n for n in exercise.names if n.isidentifier() and not n.isupper())
        cases.append(("solution", exercise, None, plan))
        questions.append(sandbox.Question.of(assignment.setup, exercise, solution))
        for function in same_name(exercise):
            for route, answer in (("call", calling(function, function[1])),
                                  ("pasted", pasted(function, function[1]))):  # fmt: skip
                cases.append((route, exercise, function, plan))
                questions.append(sandbox.Question.of(assignment.setup, exercise, answer))
        for dotted in helpers_references(assignment, exercise):  # what the tests call
            function = tuple(dotted.rsplit(".", 1))
            if function[1] in exercise.names:
                continue  # the same-name call above
            cases.append(("reference", exercise, function, plan))
            questions.append(sandbox.Question.of(
                assignment.setup, exercise, delegating(solution, functions, function)))
        for function in one_level_below(plan):
            cases.append(("below", exercise, function, plan))
            questions.append(sandbox.Question.of(
                assignment.setup, exercise, delegating(solution, functions, function)))
    outcomes = sandbox.run(questions, LIMITS, isolation=SANDBOX)
    for (route, exercise, function, plan), outcome in zip(cases, outcomes, strict=True):
        where = (exercise.answer_id, route, function, outcome)
        if route == "solution":
            assert outcome.passed, where
            continue
        stubbed = stubbed_names(plan)
        if route == "pasted" and not (named(stubs.reaches(function)) & stubbed):
            # self-contained: it names no stubbed function, so only a copy flag can catch it
            continue
        assert not outcome.passed, where
        if route == "pasted" and not same_signature(function, solutions[exercise.answer_id]):
            continue  # another function of the same name: it fails before any call
        assert outcome.status == "failed", where
        assert outcome.detail.startswith("calling ") and REFUSED in outcome.detail, where
        refused = outcome.detail.removeprefix("calling ").split(" ", 1)[0]
        assert refused in stubbed, where
        if route in ("call", "reference", "below"):
            assert refused == f"{function[0]}.{function[1]}", where
