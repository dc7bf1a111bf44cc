"""The library as the answer process gets it (grading/stubs.py): which functions become
stubs, found through the setup cell's imports, and what a stubbed module still does."""

from __future__ import annotations

import types

import pytest
from test_grading_delegation import helpers_references

from grading import course, stubs
from grading.release import SOURCE, chapters
from helpers.counting import memory

SETUP = ("from helpers.counting import memory, models\nimport helpers.counting.roofline as rl\n"
         "from helpers.counting.flops import param_count as count\n"
         "import helpers.book.checks\n")  # fmt: skip


def test_references_are_found_through_every_kind_of_import():
    found = stubs.plan(SETUP, ("memory.weight_bytes", "rl.gemm_knee", "count",
                               "helpers.book.checks.check_int", "models.get", "print",
                               "memory.no_such_function", "helpers.counting.memory.kv_width")).roots
    assert found == {("helpers.counting.flops", "param_count"),
                     ("helpers.counting.memory", "weight_bytes"),
                     ("helpers.counting.roofline", "gemm_knee"),
                     ("helpers.counting.memory", "kv_width")}


def load(module: stubs.Module, name: str) -> types.ModuleType:
    loaded = types.ModuleType(name)
    exec(compile(module.source, module.origin, "exec"), loaded.__dict__)  # noqa: S102
    return loaded


def test_a_stub_refuses_any_call_and_the_rest_of_the_module_works():
    (stubbed,) = stubs.stubbed({"helpers.counting.memory": ("weight_bytes",)}).values()
    copy = load(stubbed, "memory_stubbed")
    cfg = __import__("helpers.counting.models", fromlist=["get"]).get("Qwen2.5-0.5B")
    for args in ((cfg, "bf16"), (), ("anything", 1, 2)):
        with pytest.raises(RuntimeError, match="^calling helpers.counting.memory.weight_bytes is "
                                               "not an answer: write it yourself$"):  # fmt: skip
            copy.weight_bytes(*args)
    assert copy.kv_bytes_per_token(cfg, "bf16") == memory.kv_bytes_per_token(cfg, "bf16")
    assert "param_count(cfg)" not in stubbed.source.split("def weight_bytes", 1)[1][:200]


def test_a_definition_that_is_not_in_the_source_is_named():
    with pytest.raises(LookupError, match="helpers.counting.memory.nowhere: no such definition"):
        stubs.stubbed({"helpers.counting.memory": ("nowhere",)})


def test_the_library_holds_every_module_of_the_package():
    names = set(stubs.library())
    assert {"helpers", "helpers.counting.memory", "helpers.serving", "helpers.serving.engine",
            "helpers.widgets"} <= names  # fmt: skip
    assert stubs.library()["helpers.serving"].package
    assert not stubs.library()["helpers.counting.memory"].package


@pytest.mark.parametrize("chapter", chapters())
def test_every_chapter_stubs_what_running_its_setup_finds(chapter):
    """The sources read statically name the same functions as the setup cell run for real
    and each reference looked up in its namespace (the delegation tests' oracle)."""
    assignment = course.load(chapter, SOURCE)
    for exercise in assignment.exercises:
        found = stubs.plan(assignment.setup, exercise.references).roots
        named = sorted(f"{m}.{q}" for m, q in found)
        assert named == sorted(helpers_references(assignment, exercise)), exercise.test_id


def test_the_grader_parses_only_under_the_ast_lock():
    """Grading threads parse at once, and CPython 3.11's ast.parse is not thread-safe (a CI
    run failed chapter 6 on "AST constructor recursion depth mismatch"): every module of
    the grader parses through ``names.parse``, which holds the lock."""
    import ast
    from pathlib import Path

    import grading
    from grading import names

    bare = [f"{path.name}:{node.lineno}" for path in Path(grading.__file__).parent.rglob("*.py")
            if path.name != "names.py" and "tools" not in path.parts
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and names.dotted_name(node.func) == "ast.parse"]
    assert not bare, bare
    with names.AST_LOCK:  # re-entrant: the planner parses while holding it
        assert isinstance(names.parse("x = 1"), ast.Module)
