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
import marshal
import threading
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
    """module -> qualified names of the functions to stub: each dotted name the tests call
    (``memory.weight_bytes``) that the setup cell's imports bind to a helpers function,
    found where it is defined (through re-exports such as ``helpers.serving``). Checkers,
    lookups of a named config (``models.get``) and anything else stay real. Read from the
    library's sources: nothing is imported here (the grader never loads torch for this)."""
    with _AST:
        bound = _imports(setup)
        found: dict[str, set[str]] = {}
        for dotted in references:
            head, *rest = str(dotted).split(".")
            where = bound.get(head)
            for part in rest:
                where = _member(where, part) if where else None
            if where and where[0] == "function" and where[1] not in NEVER_STUBBED:
                found.setdefault(where[1], set()).add(where[2])
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
        function = _definition(tree, qualname)
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
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


def _definition(tree: ast.Module, qualname: str) -> ast.AST | None:
    """The class or function ``a.b.c`` of a module: top level, then nested."""
    node: ast.AST | None = tree
    for part in qualname.split("."):
        node = next((c for c in getattr(node, "body", [])
                     if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and c.name == part), None)  # fmt: skip
        if node is None:
            return None
    return node


def _imports(setup: str) -> dict[str, tuple]:
    """The names the setup cell's ``import`` statements bind to helpers modules and their
    members: ``("module", name)``, or what :func:`_member` finds."""
    try:
        tree = ast.parse(setup)
    except SyntaxError:
        return {}
    bound: dict[str, tuple] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in library():
                    # `import helpers.memory` binds `helpers`; `... as m` binds the module
                    name = alias.name if alias.asname else PACKAGE
                    bound[alias.asname or PACKAGE] = ("module", name)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in library():
            for alias in node.names:
                member = _member(("module", node.module), alias.name)
                if member:
                    bound[alias.asname or alias.name] = member
    return bound


def _member(where: tuple, name: str) -> tuple | None:
    """What ``name`` is in ``where`` (a module, or a class of one): a submodule
    ``("module", m)``, a class ``("class", m, qualname)``, a function ``("function", m,
    qualname)``, or None (anything else, a lookup ``get(name: str) -> Config`` included).
    Follows ``from ... import`` re-exports and plain aliases (``x = y``)."""
    kind, module = where[0], where[1]
    if kind == "module" and f"{module}.{name}" in library():
        return ("module", f"{module}.{name}")
    if kind not in ("module", "class") or module not in library():
        return None
    tree = _tree(module)
    body = tree.body
    prefix = ""
    if kind == "class":
        cls = _definition(tree, where[2])
        if not isinstance(cls, ast.ClassDef):
            return None
        body, prefix = cls.body, where[2] + "."
    for node in reversed(body):  # the last binding wins, as when the module runs
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return None if _lookup(node) else ("function", module, prefix + name)
        if isinstance(node, ast.ClassDef) and node.name == name:
            return ("class", module, prefix + name)
        if kind == "module" and isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                if (alias.asname or alias.name) == name and source in library():
                    return _member(("module", source), alias.name)
        if kind == "module" and isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return _member(where, node.value.id) if node.value.id != name else None
    return None


@functools.cache
def _tree(module: str) -> ast.Module:
    real = library()[module]
    return ast.parse(real.source, real.origin)


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in ``module`` reads from."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not library()[module].package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _lookup(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``get(name: str) -> SomeConfig``: finds the tests' inputs by name, answers nothing."""
    args = function.args.posonlyargs + function.args.args
    first = args[0].annotation if args else None
    returns = function.returns
    text = ast.unparse(returns).strip("'\"") if returns is not None else ""
    return (function.name == "get" and first is not None
            and ast.unparse(first).strip("'\"") == "str" and text not in ("", "str"))
