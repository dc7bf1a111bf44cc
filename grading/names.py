"""What a cell's source names: the names it defines, calls and loads, read with ``ast``.

Kept apart from :mod:`grading.course` so that the stubs' planner and the copy check, which
need only these, do not import nbformat and nbgrader (two seconds of a process's start).
"""

from __future__ import annotations

import ast
import re
import threading

# CPython 3.11's ast.parse keeps its recursion depth in one state shared by all threads:
# two grading threads parsing at once can fail with "SystemError: AST constructor recursion
# depth mismatch" (CPython gh-106905; it failed a CI run's grading of chapter 6). Every
# parse in the grader goes through ``parse``, which holds this lock; it is re-entrant
# because the stubs' planner and the copy check parse while holding it.
AST_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` under :data:`AST_LOCK`."""
    with AST_LOCK:
        return ast.parse(source, filename)


def defined_names(source: str) -> tuple[str, ...]:
    """Top-level names a solution cell defines (functions, classes, assignments)."""
    try:
        tree = parse(source)
    except SyntaxError:  # IPython syntax: fall back to the obvious definitions
        return tuple(re.findall(r"^(?:async\s+)?(?:def|class)\s+(\w+)", source, re.M))
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [t.id for t in targets if isinstance(t, ast.Name)]
    return tuple(found)


def called(source: str) -> set[str]:
    """The names and dotted names a cell calls (``check_int``, ``roofline.gemm_knee``).
    Those a test calls and its solution does not are the candidates for references: the
    answer process replaces the ones that are helpers' functions by stubs."""
    try:
        tree = parse(source)
    except SyntaxError:
        return set()
    return {dotted for node in ast.walk(tree)
            if isinstance(node, ast.Call) and (dotted := dotted_name(node.func))}


def used(source: str) -> set[str]:
    """Every name and dotted name a cell loads, called or not (``key=memory.dtype_bytes``,
    ``cfg.linear_shapes``): the library functions among them are a solution's tools."""
    try:
        tree = parse(source)
    except SyntaxError:
        return set()
    return {dotted for node in ast.walk(tree) if (dotted := dotted_name(node))}


def dotted_name(node: ast.AST) -> str:
    """``a.b.c`` for a chain of attributes on a loaded name, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return ".".join([node.id, *reversed(parts)])
    return ""
