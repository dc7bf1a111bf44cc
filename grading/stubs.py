"""The library as an answer process sees it: the references turned into stubs in the source.

An exercise's tests compare the student's function with a function of ``helpers`` (the
reference). Returning the reference's own result is not an answer, so the answer process
must never hold the reference's code. This module builds, in the grader's own process, the
source of every ``helpers`` module as each role of one question gets it:

* the **tester** gets the library's real source;
* the **answer** gets the same source with the body of each function the exercise's
  reference reaches (:func:`plan`: the reference, what it calls, what those call, and any
  library function of the exercise's own name, but not the model solution's tools) replaced
  by a ``raise`` that says "calling helpers.counting.memory.weight_bytes is not an answer: write it
  yourself".

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
from dataclasses import dataclass
from pathlib import Path

import helpers
from grading.names import AST_LOCK, dotted_name, parse, used

PACKAGE = "helpers"
# Checkers and the notebook's setup build the tests' inputs and report: never references.
NEVER_STUBBED = ("helpers.book.checks", "helpers.book.notebook")
NOT_AN_ANSWER = "is not an answer: write it yourself"


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


def stubbed(wanted: dict[str, tuple[str, ...]]) -> dict[str, Module]:
    """The modules of ``wanted`` with those functions' bodies replaced by the refusal."""
    return {module: _stub_module(module, names) for module, names in wanted.items()}


@functools.cache
def _stub_module(module: str, names: tuple[str, ...]) -> Module:
    with AST_LOCK:
        return _rewrite(module, names)


def _rewrite(module: str, names: tuple[str, ...]) -> Module:
    real = library()[module]
    tree = parse(real.source, real.origin)
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
        tree = parse(setup)
    except SyntaxError:
        return {}
    return _imports_in(PACKAGE, [n for n in ast.walk(tree)
                                 if isinstance(n, (ast.Import, ast.ImportFrom))])  # fmt: skip


def _imports_in(module: str, statements: list) -> dict[str, tuple]:
    """What ``import`` statements read in ``module`` bind: ``import helpers.counting.memory`` binds
    ``helpers``, ``... as m`` the module; ``from`` imports what :func:`_member` finds."""
    bound: dict[str, tuple] = {}
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in library():
                    name = alias.name if alias.asname else PACKAGE
                    bound[alias.asname or PACKAGE] = ("module", name)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if source in library():
                for alias in node.names:
                    member = _member(("module", source), alias.name)
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
    return parse(real.source, real.origin)


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


# --- what an exercise may use -------------------------------------------------------------
#
# A stub of the reference alone is not enough: its body is often a line that calls other
# library functions (``return _params(cfg, cfg.n_experts)``), and the library holds other
# copies of some answers. So the answer process refuses by default: every library function
# is a stub but what the exercise may use, which is what the model solution names (its
# tools), what the setup cell calls and what the library runs when it is imported, with
# everything those reach. Reaching is read from the sources: names bound in a function's
# module or imported inside it, ``module.function`` chains, ``self.method``, a class's
# constructor, module-level tables, default values, and ``obj.method(...)`` on an object
# whose class the source does not say (every library method of that name: reading types
# would need running the code). Dunders other than constructors, properties and lookups
# are never stubbed: the tests' arguments are pickled, compared and printed with them.

Function = tuple[str, str]  # (module, qualname)
CONSTRUCTORS = ("__init__", "__post_init__", "__new__", "__call__")


@dataclass(frozen=True)
class Plan:
    """One exercise's stubs, and why: what the reference reaches, what stays real."""

    roots: frozenset[Function]  # what the tests call, and functions of the exercise's name
    reached: frozenset[Function]  # everything the roots reach, roots included
    tools: frozenset[Function]  # what the model solution and the setup cell name
    kept: frozenset[Function]  # real for the answer: the tools' closure, setup and import time
    stubbed: dict[str, tuple[str, ...]]  # module -> qualnames, what the answer process gets

    @property
    def conflicts(self) -> frozenset[Function]:
        """Roots that a tool needs: these stay real (the exercise must be reworded)."""
        return self.roots & self.kept


@functools.cache
def plan(setup: str, references: tuple[str, ...], names: tuple[str, ...] = (),
         tools: tuple[str, ...] = ()) -> Plan:  # fmt: skip
    """The stubs of one exercise: ``references`` are the dotted names its tests call,
    ``names`` what the answer defines, ``tools`` the dotted names its model solution uses.

    Every library function that is not kept is stubbed, not only what the roots reach: the
    library holds other copies of an answer (chapter 10's TP search at one chip is chapter
    9's batch search), and no reading of the reference finds them."""
    with AST_LOCK:
        bound = _imports(setup)
        roots = {f for dotted in references for f in _resolve_bound(bound, dotted, by_name=False)}
        roots |= {f for name in names for f in _methods_by_name(top_level=True).get(name, ())}
        # what the tests build their inputs with (a config's constructor) is not a reference
        roots = {f for f in roots if stubbable(f) and not f[1].rsplit(".", 1)[-1].startswith("__")}
        allowed = {f for dotted in (*tools, *used(setup))
                   for f in _resolve_bound(bound, dotted, by_name=True)}  # fmt: skip
        kept = _closure(frozenset(allowed | _import_time()))
        reached = _closure(frozenset(roots))
        refused = [f for f in functions() if f not in kept and stubbable(f)]
    stubbed: dict[str, set[str]] = {}
    for module, qualname in sorted(refused):
        stubbed.setdefault(module, set()).add(qualname)
    return Plan(frozenset(roots), reached, frozenset(allowed), kept,
                {m: tuple(sorted(q)) for m, q in sorted(stubbed.items())})  # fmt: skip


def stubbable(function: Function) -> bool:
    """A function whose body the answer process may get as a refusal: any, constructors
    included (an answer that builds a library object it was not given uses its code), but
    for other dunders (pickling, comparing and printing the tests' arguments need them),
    properties (a config's derived fields are data), lookups and the checkers."""
    module, qualname = function
    node = functions().get(function)
    name = qualname.rsplit(".", 1)[-1]
    return (module not in NEVER_STUBBED and node is not None
            and (not name.startswith("__") or name in CONSTRUCTORS)
            and not any(_decorator_name(d) in ("property", "setter", "cached_property")
                        for d in node.decorator_list)
            and not _lookup(node))  # fmt: skip


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


@functools.cache
def functions() -> dict[Function, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method of the library (a function nested in another is part of
    its body), by module and qualname."""
    found = {}

    def visit(module: str, body: list, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[(module, prefix + node.name)] = node
            elif isinstance(node, ast.ClassDef):
                visit(module, node.body, f"{prefix}{node.name}.")

    for module in library():
        visit(module, _tree(module).body, "")
    return found


@functools.cache
def _methods_by_name(top_level: bool = False) -> dict[str, frozenset[Function]]:
    """name -> the library's methods of that name (or, with ``top_level``, its functions and
    methods of that name: what an exercise's own name may already be in the library)."""
    found: dict[str, set[Function]] = {}
    for module, qualname in functions():
        if top_level or "." in qualname:
            found.setdefault(qualname.rsplit(".", 1)[-1], set()).add((module, qualname))
    return {name: frozenset(f) for name, f in found.items()}


def _resolve_bound(bound: dict[str, tuple], dotted: str, by_name: bool) -> set[Function]:
    """The library functions a dotted name of a cell means, through the setup's imports or
    in full (``helpers.counting.memory.weight_bytes``); with ``by_name``, ``obj.method`` on anything
    else means every method of that name."""
    head, *rest = str(dotted).split(".")
    where = bound.get(head) or (("module", PACKAGE) if head == PACKAGE else None)
    if where is None:
        return set(_methods_by_name().get(rest[-1], ())) if by_name and rest else set()
    for part in rest:
        where = _member(where, part) if where else None
    return _as_functions(where)


def _as_functions(where: tuple | None) -> set[Function]:
    if where is None:
        return set()
    if where[0] == "function":
        return {(where[1], where[2])}
    if where[0] == "class":  # calling a class runs its constructor (its own or inherited)
        return {f for name in CONSTRUCTORS for f in _as_functions(_class_member(where, name))
                if f[1].endswith(name)}  # fmt: skip
    return set()


def _class_member(where: tuple, name: str, depth: int = 0) -> tuple | None:
    """``name`` in a library class or, failing that, in its library bases."""
    found = _member(where, name)
    if found is not None or depth > 8:
        return found
    definition = _definition(_tree(where[1]), where[2])
    for base in getattr(definition, "bases", []):
        parent = _resolve_name(where[1], base, None) if dotted_name(base) else None
        if parent is not None and parent[0] == "class":
            found = _class_member(parent, name, depth + 1)
            if found is not None:
                return found
    return None


def _closure(roots: frozenset[Function]) -> frozenset[Function]:
    seen, todo = set(roots), list(roots)
    while todo:
        for callee in reaches(todo.pop()):
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return frozenset(seen)


@functools.cache
def reaches(function: Function) -> frozenset[Function]:
    """What one function's body and default values name, resolved in its module (its
    decorators run at import time: see :func:`_import_time`)."""
    module, qualname = function
    node = functions().get(function)
    if node is None:
        return frozenset()
    owner = qualname.rsplit(".", 1)[0] if "." in qualname else ""
    local = _local_imports(module, node)
    found: set[Function] = set()
    for part in node.body:
        found |= _named(module, part, local, owner, _local_names(node))
    for part in (*node.args.defaults, *filter(None, node.args.kw_defaults)):
        found |= _named(module, part, local, owner)  # runs when the caller passes none
    return frozenset(found)


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Names a function binds itself (parameters, assignments, loop and comprehension
    variables, nested definitions): its ``tpot`` variable is not the module's ``tpot``."""
    found: set[str] = set()
    declared_global: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.arguments):
            found |= {a.arg for a in (*node.posonlyargs, *node.args, *node.kwonlyargs,
                                      *filter(None, (node.vararg, node.kwarg)))}  # fmt: skip
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node is not function:  # fmt: skip
            found.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared_global |= set(node.names)
    return frozenset(found - declared_global)


def _named(module: str, tree: ast.AST, local: dict[str, tuple] | None = None,
           owner: str = "", bound: frozenset[str] = frozenset()) -> set[Function]:  # fmt: skip
    """The library functions the expressions under ``tree`` name, in ``module``; names in
    ``bound`` are the function's own variables, not the module's."""
    found: set[Function] = set()
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if _dynamic_attribute(node):  # getattr(model, "decode_run", None): a method by name
            found |= _methods_by_name().get(node.args[1].value, frozenset())
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            head = node.value
            if isinstance(head, ast.Name) and head.id in ("self", "cls") and owner:
                found |= _as_functions(_class_member(("class", module, owner), node.attr))
                continue
            mine = isinstance(head, ast.Name) and head.id in bound and head.id not in (local or {})
            where = _resolve_name(module, head, local) if dotted_name(head) and not mine else None
            if where is not None and where[0] in ("module", "class"):
                found |= _as_functions(_member(where, node.attr))
            elif id(node) in calls and not node.attr.startswith("__"):
                found |= _methods_by_name().get(node.attr, frozenset())
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in bound and node.id not in (local or {}):
                continue
            where = _resolve_name(module, node, local)
            found |= _as_functions(where) if where else _value_functions(module, node.id)
    return found


_VALUES_IN_PROGRESS: set[tuple[str, str]] = set()


@functools.cache
def _value_functions(module: str, name: str) -> frozenset[Function]:
    """The library functions a module-level value names (``RULES = {"a": rule_a}``): a body
    that reads ``RULES[kind](x)`` reaches them."""
    if (module, name) in _VALUES_IN_PROGRESS:  # a value that names itself
        return frozenset()
    _VALUES_IN_PROGRESS.add((module, name))
    try:
        found: set[Function] = set()
        for node in _tree(module).body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found |= _named(module, node.value)
        return frozenset(found)
    finally:
        _VALUES_IN_PROGRESS.discard((module, name))


def _dynamic_attribute(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))


def _resolve_name(module: str, node: ast.expr, local: dict[str, tuple] | None) -> tuple | None:
    """What a name or dotted chain of names means in ``module`` (or None)."""
    parts = dotted_name(node).split(".")
    where = (local or {}).get(parts[0]) or _member(("module", module), parts[0]) \
        or _module_imports(module).get(parts[0])  # fmt: skip
    for part in parts[1:]:
        where = _member(where, part) if where and where[0] in ("module", "class") else None
    return where


@functools.cache
def _module_imports(module: str) -> dict[str, tuple]:
    """``import helpers.x`` and ``import helpers.x as y`` at a module's top level."""
    return _imports_in(module, _tree(module).body)


def _local_imports(module: str, node: ast.AST) -> dict[str, tuple]:
    """Imports inside a function's body (a library module imported late, against a cycle)."""
    return _imports_in(module, [n for n in ast.walk(node)
                                if isinstance(n, (ast.Import, ast.ImportFrom))])  # fmt: skip


@functools.cache
def _import_time() -> frozenset[Function]:
    """What the library calls while it is imported: calls in module-level statements and
    class bodies, decorators, default values (a stub there would break the import itself).
    A function only named there (a table of commands) runs later, if ever."""
    found: set[Function] = set()

    def called(module: str, tree: ast.AST, owner: str) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                found.update(_named(module, _callee(node), None, owner))

    def visit(module: str, body: list, owner: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for part in node.decorator_list:
                    found.update(_named(module, _callee(part), None, owner))
                    called(module, part, owner)
                for part in (*node.args.defaults, *filter(None, node.args.kw_defaults)):
                    called(module, part, owner)
            elif isinstance(node, ast.ClassDef):
                for part in (*node.decorator_list, *node.bases, *node.keywords):
                    called(module, part, owner)
                visit(module, node.body, f"{owner}.{node.name}" if owner else node.name)
            elif _is_main_guard(node):  # runs as a script, never on import
                continue
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                called(module, node, owner)

    for module in library():
        visit(module, _tree(module).body, "")
    return frozenset(found)


def _callee(node: ast.expr) -> ast.expr:
    """What a call calls (a decorator without arguments is itself called)."""
    return node.func if isinstance(node, ast.Call) else node


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) \
        and "__main__" in ast.unparse(node.test)  # fmt: skip
