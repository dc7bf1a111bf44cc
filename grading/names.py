"""What a cell's source names: the names it defines, calls and loads, read with ``ast``.

Kept apart from :mod:`grading.course` so that the stubs' planner and the copy check, which
need only these, do not import nbformat and nbgrader (two seconds of a process's start).
"""

from __future__ import annotations

import ast
import re


def defined_names(source: str) -> tuple[str, ...]:
    """Top-level names a solution cell defines (functions, classes, assignments)."""
    try:
        tree = ast.parse(source)
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
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {dotted for node in ast.walk(tree)
            if isinstance(node, ast.Call) and (dotted := dotted_name(node.func))}


def used(source: str) -> set[str]:
    """Every name and dotted name a cell loads, called or not (``key=memory.dtype_bytes``,
    ``cfg.linear_shapes``): the library functions among them are a solution's tools."""
    try:
        tree = ast.parse(source)
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
