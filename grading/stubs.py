"""The library as an answer process sees it: the references turned into stubs in the source.

An exercise's tests compare the student's function with a function of ``helpers`` (the
reference). Returning the reference's own result is not an answer, so the answer process
must never hold the reference's code. This module builds, in the grader's own process, the
source of every ``helpers`` module as each role of one question gets it:

* the **tester** gets the library's real source;
* the **answer** gets the same source with each reference's body replaced by a ``raise``
  that says "calling helpers.memory.weight_bytes is not an answer: write it yourself".

The sandbox runner imports ``helpers`` from these sources only (:class:`Library` in
:mod:`grading.sandbox_runner`); the sandbox hides the package's files. So every route a
student can take to the reference, ``importlib.reload``, a fresh import, loading the file
by its path, ``exec`` of the file, ``inspect.getsource`` or unpickling ``helpers.x.y``,
finds the stub: the real body is in neither the answer's memory nor its filesystem.
"""

from __future__ import annotations

import ast
import base64
import functools
import importlib
import inspect
import marshal
import threading
import types
from dataclasses import dataclass
from pathlib import Path

import helpers

PACKAGE = "helpers"
# Checkers and the notebook's setup build the tests' inputs and report: never references.
NEVER_STUBBED = ("helpers.checks", "helpers.notebook")
NOT_AN_ANSWER = "is not an answer: write it yourself"
# Grading threads build stubs at once; CPython 3.11's ast is not safe across threads
# ("AST constructor recursion depth mismatch").
_AST = threading.Lock()


@dataclass(frozen=True)
class Module:
    origin: str  # the file it was read from: its ``__file__`` in the sandbox
    package: bool  # a package's ``__init__.py``
    source: str

    @functools.cached_property
    def _sent(self) -> dict:
        # Compiled here once, not in each of a question's two processes (two thirds of
        # the time a module takes to import); the sandbox runs this same interpreter.
        code = compile(self.source, self.origin, "exec", dont_inherit=True)
        return {"origin": self.origin, "package": self.package, "source": self.source,
                "code": base64.b64encode(marshal.dumps(code)).decode("ascii")}  # fmt: skip

    def as_sent(self) -> dict:
        return self._sent


@functools.cache
def library() -> dict[str, Module]:
    """Every module of ``helpers``, by dotted name, read from the installed package."""
    found = {}
    for root in map(Path, helpers.__path__):
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "__pycache__" in parts or not all(p.isidentifier() for p in parts):
                continue
            package = parts[-1] == "__init__"
            name = ".".join((PACKAGE, *(parts[:-1] if package else parts)))
            found.setdefault(name, Module(str(path), package, path.read_text("utf-8")))
    return found


def targets(setup: str, references: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    with _AST:
        return _targets(setup, references)


def _targets(setup: str, references: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """module -> qualified names of the functions to stub: each dotted name the tests call
    (``memory.weight_bytes``) that the setup cell's imports bind to a helpers function,
    found where it is defined. Checkers, lookups of a named config (``models.get``) and
    anything else stay real."""
    bound = _imports(setup)
    found: dict[str, set[str]] = {}
    for dotted in references:
        head, *rest = str(dotted).split(".")
        value = bound.get(head)
        for part in rest:
            value = getattr(value, part, None)
        if not isinstance(value, types.FunctionType) or _lookup(value):
            continue
        module, name = getattr(value, "__module__", "") or "", value.__qualname__
        if (module.startswith(PACKAGE + ".") and module not in NEVER_STUBBED
                and "<locals>" not in name and module in library()):  # fmt: skip
            found.setdefault(module, set()).add(name)
    return {module: tuple(sorted(names)) for module, names in sorted(found.items())}


def stubbed(wanted: dict[str, tuple[str, ...]]) -> dict[str, Module]:
    """The modules of ``wanted`` with those functions' bodies replaced by the refusal."""
    return {module: _stub_module(module, names) for module, names in wanted.items()}


@functools.cache
def _stub_module(module: str, names: tuple[str, ...]) -> Module:
    with _AST:
        return _rewrite(module, names)


def _rewrite(module: str, names: tuple[str, ...]) -> Module:
    real = library()[module]
    tree = ast.parse(real.source, real.origin)
    for qualname in names:
        function = _find(tree, qualname.split("."))
        if function is None:
            raise LookupError(f"{module}.{qualname}: no such definition in {real.origin}")
        message = f"calling {module}.{qualname} {NOT_AN_ANSWER}"
        # any call is refused, whatever its arguments (not a TypeError for a bad one)
        function.args = ast.arguments(posonlyargs=[], args=[], vararg=ast.arg("args"),
                                      kwonlyargs=[], kw_defaults=[], kwarg=ast.arg("kwargs"),
                                      defaults=[])  # fmt: skip
        function.body = [ast.Raise(exc=ast.Call(ast.Name("RuntimeError", ast.Load()),
                                                [ast.Constant(message)], []))]  # fmt: skip
    source = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    return Module(real.origin, real.package, source)


def _find(node: ast.AST, path: list[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The definition ``a.b.c`` among the top-level (then nested) classes and functions."""
    for child in getattr(node, "body", []):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
            child.name == path[0]
        ):
            if len(path) == 1:
                return None if isinstance(child, ast.ClassDef) else child
            return _find(child, path[1:])
    return None


def _imports(setup: str) -> dict[str, object]:
    """The names the setup cell's ``import`` statements bind to helpers modules and their
    members, imported here (the grader's own copy of the library)."""
    try:
        tree = ast.parse(setup)
    except SyntaxError:
        return {}
    bound: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name):  # `import helpers.memory` binds `helpers`
                    module = _module(alias.name)
                    top = alias.name.split(".")[0]
                    bound[alias.asname or top] = module if alias.asname else _module(top)
        elif isinstance(node, ast.ImportFrom) and not node.level and _ours(node.module or ""):
            module = _module(node.module)
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if value is None:
                    value = _module(f"{node.module}.{alias.name}")
                bound[alias.asname or alias.name] = value
    return {name: value for name, value in bound.items() if value is not None}


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _module(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _lookup(function: types.FunctionType) -> bool:
    """``get(name: str) -> SomeConfig``: finds the tests' inputs by name, answers nothing."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    params = list(signature.parameters.values())
    returns = signature.return_annotation
    return (bool(params) and params[0].annotation in (str, "str")
            and isinstance(returns, (type, str)) and returns not in (str, "str")
            and function.__name__ == "get")  # fmt: skip
