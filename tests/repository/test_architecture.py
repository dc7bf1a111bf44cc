"""The import rules of ``docs/architecture.md``, checked against the code.

The doc is the one statement of the rules: its tables of floors (a header
``| floor | rooms | what | may import |``) name each floor, its rooms (each a path in
backticks: a module, ``helpers/flops.py``, or a package, ``helpers/decoder/``; other words
there are prose), and the floors its rooms may import, comma-separated (``nothing`` for
none; a room may always import itself). This file reads those tables
and every ``import`` and ``from … import`` in ``helpers/`` and ``grading/``, including the
ones inside functions, and fails where they disagree:

- a module of ``helpers/`` or ``grading/`` in no room, or a room the code does not have;
- an import of a room on a floor its own floor may not import;
- a floor allowed to import a floor none of its rooms imports (the doc claims a dependency
  that is not there);
- an import of a module that does not exist;
- an import cycle, between rooms or between modules;
- a private name (``_x``) of one module imported or read by another.

Three rules hold whatever the doc says, because the code depends on them:

- ``helpers/`` never imports ``grading/``: the grader imports helpers' files to sandbox them;
- ``grading/sandbox_runner.py`` imports nothing of ``helpers/`` or ``grading/``: it is
  mounted into the sandbox alone;
- ``helpers/widgets/`` imports only the counting, measuring, parallel, serving and widgets
  floors: a widget calls the library and draws.

And the doc's drawing convention (its ``helpers/widgets/`` paragraph), checked on the code
(``widget_violations``): every explorer module defines ``show_x`` callbacks that take the
knobs as ``**controls`` and build the module's ``*Controls`` dataclass from them (each knob's
default declared once, every field with a default), a ``draw_x(ax, view)`` beside each, and
calls no experiment (``EXPERIMENT``: timing, running or simulating, the planner's search)
but through the library's experiment functions.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = "docs/architecture.md"
PACKAGES = ("helpers", "grading")
HEADER = ["floor", "rooms", "what", "may import"]
NOTHING = "nothing"
SANDBOX_RUNNER = "grading/sandbox_runner.py"
WIDGETS = "helpers/widgets/"
WIDGET_FLOORS = ("counting", "measuring", "parallel", "serving", "widgets")


@dataclass(frozen=True)
class Floor:
    name: str
    rooms: tuple[str, ...]  # root-relative: "helpers/flops.py" (a module), "helpers/decoder/"
    may_import: tuple[str, ...]  # floor names
    line: int  # the floor's row in the doc


@dataclass(frozen=True)
class Import:
    source: str  # the importing file, root-relative
    line: int
    module: str  # the dotted module imported
    private: str = ""  # a private name of ``module`` that the importer imports or reads


def read_floors(doc: str) -> dict[str, Floor]:
    """The floors of every table in ``doc`` whose header is ``HEADER``; ValueError naming the
    row when a row is malformed, a room is listed twice or a floor is not defined."""
    floors: dict[str, Floor] = {}
    lines = doc.splitlines()
    rows: list[tuple[int, list[str]]] = []
    in_table = False
    for number, text in enumerate(lines, start=1):
        cells = [cell.strip() for cell in text.strip().strip("|").split("|")]
        if not text.lstrip().startswith("|"):
            in_table = False
        elif [cell.lower() for cell in cells] == HEADER:
            in_table = True
        elif in_table and not set("".join(cells)) <= set("-: "):
            rows.append((number, cells))
    if not rows:
        raise ValueError(f"{DOC} has no table headed | {' | '.join(HEADER)} |")
    owner: dict[str, str] = {}
    for number, cells in rows:
        if len(cells) != len(HEADER):
            raise ValueError(f"{DOC}:{number}: a floor's row has {len(HEADER)} cells")
        name, rooms_cell, _, allowed = cells
        rooms = tuple(word for word in re.findall(r"`([^`]+)`", rooms_cell)  # the rest is prose
                      if word.split("/")[0] in PACKAGES)  # fmt: skip
        for room in rooms:
            if not re.fullmatch(rf"({'|'.join(PACKAGES)})/\w+(\.py|/)", room):
                raise ValueError(f"{DOC}:{number}: room `{room}` is not a module or package "
                                 f"directly under {' or '.join(PACKAGES)}/")  # fmt: skip
            if room in owner:
                raise ValueError(f"{DOC}:{number}: `{room}` is on floors {owner[room]} "
                                 f"and {name}")  # fmt: skip
            owner[room] = name
        if name in floors or not rooms:
            raise ValueError(f"{DOC}:{number}: floor {name!r} is defined twice or has no room")
        may = () if allowed == NOTHING else tuple(part.strip() for part in allowed.split(","))
        floors[name] = Floor(name, rooms, may, number)
    for floor in floors.values():
        for other in floor.may_import:
            if other not in floors:
                raise ValueError(f"{DOC}:{floor.line}: floor {floor.name} may import "
                                 f"{other!r}, which is no floor")  # fmt: skip
    return floors


def modules(root: Path) -> dict[str, str]:
    """Every module of the packages, dotted name -> root-relative file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path.relative_to(root).as_posix()
    return found


def room_of(file: str) -> str:
    """``helpers/flops.py`` for a module directly in a package, ``helpers/decoder/`` for any
    file inside a subpackage."""
    parts = file.split("/")
    return file if len(parts) == 2 else f"{parts[0]}/{parts[1]}/"


def imports(root: Path, known: dict[str, str]) -> list[Import]:
    """Every import of a module of the packages, wherever it stands in its file. An import
    that names no module of the packages comes back with ``module`` as written."""
    found = []
    for name, file in known.items():
        tree = ast.parse((root / file).read_text(), filename=file)
        package = name if file.endswith("__init__.py") else name.rpartition(".")[0]
        bound: dict[str, str] = {}  # a local name bound to a module of the packages
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PACKAGES:
                        found.append(Import(file, node.lineno, alias.name))
                        if alias.asname:
                            bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(kept + ([base] if base else []))
                if base.split(".")[0] not in PACKAGES:
                    continue
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    if submodule in known:
                        found.append(Import(file, node.lineno, submodule))
                        bound[alias.asname or alias.name] = submodule
                    elif known.get(base, "").endswith("__init__.py") and alias.name not in (
                            top_level_names(root / known[base])):  # fmt: skip
                        found.append(Import(file, node.lineno, submodule))  # neither: no module
                    else:
                        private = alias.name if is_private(alias.name) else ""
                        found.append(Import(file, node.lineno, base, private))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and is_private(node.attr)):  # fmt: skip
                found.append(Import(file, node.lineno, bound[node.value.id], node.attr))
    return found


def top_level_names(path: Path) -> set[str]:
    """The names a module binds at its top level (what ``from package import name`` can
    take from a package besides its submodules)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def fixed_rule(source: str, target: str, target_floor: str) -> str:
    """Which of the rules that hold whatever the doc says an import of the room ``target``
    (on ``target_floor``) from the file ``source`` breaks, or "" for none."""
    if source.startswith("helpers/") and target.startswith("grading/"):
        return "helpers never imports grading (the grader imports helpers' files to sandbox them)"
    if source == SANDBOX_RUNNER:
        return (f"{SANDBOX_RUNNER} imports nothing of helpers or grading (it is mounted into "
                "the sandbox alone)")  # fmt: skip
    if source.startswith(WIDGETS) and target_floor and target_floor not in WIDGET_FLOORS:
        return f"floor {target_floor}: widgets import only the floors {', '.join(WIDGET_FLOORS)}"
    return ""


def violations(root: Path) -> list[str]:
    """What the code at ``root`` does that ``root/docs/architecture.md`` does not allow, one
    line each, naming the file, the line and the rule."""
    floors = read_floors((root / DOC).read_text())
    floor_of = {room: floor.name for floor in floors.values() for room in floor.rooms}
    known = modules(root)
    found = []
    code_rooms = {room_of(file) for file in known.values()}
    for room in sorted(code_rooms - floor_of.keys()):
        found.append(f"{room}: a room on no floor of {DOC}: add it to a floor's rooms")
    for room in sorted(floor_of.keys() - code_rooms):
        line = floors[floor_of[room]].line
        found.append(f"{DOC}:{line}: room `{room}` is not in the code: remove it")
    used: dict[str, set[str]] = defaultdict(set)
    room_edges: dict[str, set[str]] = defaultdict(set)
    module_edges: dict[str, set[str]] = defaultdict(set)
    module_of = {file: name for name, file in known.items()}
    for imp in imports(root, known):
        where = f"{imp.source}:{imp.line}"
        if imp.module not in known:
            found.append(f"{where}: imports {imp.module}, which is no module")
            continue
        if imp.private and known[imp.module] != imp.source:
            found.append(f"{where}: uses {imp.module}.{imp.private}, a private name of "
                         f"another module: make it public or keep it in its module")  # fmt: skip
        source, target = room_of(imp.source), room_of(known[imp.module])
        module_edges[module_of[imp.source]].add(imp.module)
        if source == target:
            continue
        room_edges[source].add(target)
        broken = fixed_rule(imp.source, target, floor_of.get(target, ""))
        if broken:
            found.append(f"{where}: imports {target}: {broken}")
        if source not in floor_of or target not in floor_of:
            continue  # reported above as a room on no floor
        mine, theirs = floors[floor_of[source]], floor_of[target]
        if theirs in mine.may_import:
            used[mine.name].add(theirs)
        elif not broken:
            allowed = ", ".join(mine.may_import) or NOTHING
            found.append(f"{where}: imports {target} (floor {theirs}), but floor {mine.name} "
                         f"may import only {allowed} ({DOC}:{mine.line})")  # fmt: skip
    for floor in floors.values():
        for other in floor.may_import:
            if other not in used[floor.name]:
                found.append(f"{DOC}:{floor.line}: floor {floor.name} may import {other}, but "
                             f"none of its rooms imports a room of {other}: remove it")  # fmt: skip
    for component in cycles(room_edges):
        found.append(f"an import cycle between rooms: {' <-> '.join(component)}")
    for component in cycles(module_edges):
        found.append(f"an import cycle between modules: {' <-> '.join(component)}")
    return list(dict.fromkeys(found))  # once each, though one line imports several names


def test_the_code_imports_as_the_architecture_doc_says():
    found = violations(ROOT)
    assert not found, f"{len(found)} import rule(s) broken:\n" + "\n".join(found)


# The checker itself, on a small tree of its own.

TINY_DOC = """\
# Architecture

| floor | rooms | what | may import |
|---|---|---|---|
| package | `helpers/__init__.py`, `grading/__init__.py` | docstrings | nothing |
| counting | `helpers/flops.py`, `helpers/memory.py` | pure | counting |
| measuring | `helpers/timing.py` | clocks | counting |
| widgets | `helpers/widgets/` | explorers | counting, measuring |
| programs | `helpers/bench.py` | the CLI | counting, widgets |
| grader | `grading/grader.py` | grades | package, sandbox |
| sandbox | `grading/sandbox_runner.py`, `grading/stubs.py` | runs a question | nothing |
"""

TINY_TREE = {
    "helpers/__init__.py": '"""The library."""\n',
    "grading/__init__.py": "",
    "helpers/flops.py": "def count():\n    return 1\n",
    "helpers/memory.py": "from helpers.flops import count\n",
    "helpers/timing.py": "from helpers import flops\n",
    "helpers/widgets/__init__.py": "",
    "helpers/widgets/figures.py": "from . import view\n",
    "helpers/widgets/view.py": "from helpers import memory, timing\n",
    "helpers/bench.py": "def main():\n    from helpers.widgets import view\n"
                        "    from helpers import flops\n",
    "grading/grader.py": "import helpers\nfrom grading import stubs\n",
    "grading/stubs.py": "",
    "grading/sandbox_runner.py": "import json\n",
}
FORMULAS_ROW = "| counting | `helpers/flops.py`, `helpers/memory.py` | pure | counting |"


def tiny(tmp_path: Path, changed: dict[str, str | None] | None = None, doc: str = TINY_DOC,
         ) -> list[str]:  # fmt: skip
    """The checker's verdict on the tiny tree with some files changed (None removes one)."""
    tree = {**TINY_TREE, **(changed or {})}
    for path, text in tree.items():
        if text is not None:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(text)
    (tmp_path / "docs").mkdir()
    (tmp_path / DOC).write_text(doc)
    return violations(tmp_path)


def test_a_tree_that_keeps_the_rules_passes(tmp_path):
    assert tiny(tmp_path) == []


def test_an_import_inside_a_function_is_held_to_its_floor_once_a_line(tmp_path):
    memory = "from helpers.flops import count\n\ndef size():\n    from helpers.timing import a, b\n"
    found = tiny(tmp_path, {"helpers/memory.py": memory})
    assert found == [f"helpers/memory.py:4: imports helpers/timing.py (floor measuring), but floor "
                     f"counting may import only counting ({DOC}:6)"]  # fmt: skip


def test_a_cycle_between_rooms_is_named(tmp_path):
    found = tiny(tmp_path, {"helpers/flops.py": "from helpers import memory\n"})
    assert found == ["an import cycle between rooms: helpers/flops.py <-> helpers/memory.py",
                     "an import cycle between modules: helpers.flops <-> helpers.memory"]


def test_a_cycle_inside_a_room_is_named(tmp_path):
    found = tiny(tmp_path, {"helpers/widgets/view.py":
                            "from helpers import memory, timing\nfrom . import figures\n"})
    assert found == ["an import cycle between modules: helpers.widgets.figures <-> "
                     "helpers.widgets.view"]  # fmt: skip


def test_helpers_never_imports_grading_even_where_the_doc_allows_it(tmp_path):
    doc = TINY_DOC.replace("| the CLI | counting, widgets |",
                           "| the CLI | counting, widgets, grader |")
    bench = TINY_TREE["helpers/bench.py"] + "    import grading.grader\n"
    found = tiny(tmp_path, {"helpers/bench.py": bench}, doc)
    assert found == ["helpers/bench.py:4: imports grading/grader.py: helpers never imports "
                     "grading (the grader imports helpers' files to sandbox them)"]  # fmt: skip


def test_the_sandbox_runner_imports_nothing_of_the_packages(tmp_path):
    doc = TINY_DOC.replace("| runs a question | nothing |", "| runs a question | sandbox |")
    runner = "import json\n\ndef run():\n    from grading import stubs\n"
    found = tiny(tmp_path, {"grading/sandbox_runner.py": runner}, doc)
    assert found == [f"grading/sandbox_runner.py:4: imports grading/stubs.py: {SANDBOX_RUNNER} "
                     "imports nothing of helpers or grading (it is mounted into the sandbox "
                     "alone)"]  # fmt: skip


def test_a_widget_importing_a_program_is_refused_even_where_the_doc_allows_it(tmp_path):
    doc = TINY_DOC.replace("| explorers | counting, measuring |",
                           "| explorers | counting, measuring, programs |")
    widget = "from helpers import memory, timing\n\ndef draw():\n    from helpers import bench\n"
    found = tiny(tmp_path, {"helpers/widgets/view.py": widget}, doc)
    assert ("helpers/widgets/view.py:4: imports helpers/bench.py: floor programs: widgets "
            "import only the floors counting, measuring, parallel, serving, widgets") in found


def test_another_modules_private_name_is_refused(tmp_path):
    found = tiny(tmp_path, {"helpers/flops.py": "def _count():\n    return 1\ncount = _count\n",
                            "helpers/memory.py": "from helpers.flops import _count\n",
                            "helpers/timing.py": "from helpers import flops\nflops._count()\n"})
    assert found == ["helpers/memory.py:1: uses helpers.flops._count, a private name of another "
                     "module: make it public or keep it in its module",
                     "helpers/timing.py:2: uses helpers.flops._count, a private name of another "
                     "module: make it public or keep it in its module"]  # fmt: skip


def test_a_floor_that_may_import_another_it_does_not_is_named(tmp_path):
    found = tiny(tmp_path, {"helpers/widgets/view.py": "from helpers import memory\n"})
    assert found == [f"{DOC}:8: floor widgets may import measuring, but none of its rooms "
                     "imports a room of measuring: remove it"]  # fmt: skip


def test_rooms_and_modules_the_doc_does_not_know_are_named(tmp_path):
    found = tiny(tmp_path, {"helpers/timing.py": None,
                            "helpers/kernels.py": "import helpers.gone\n"})
    assert found == [
        f"helpers/kernels.py: a room on no floor of {DOC}: add it to a floor's rooms",
        f"{DOC}:7: room `helpers/timing.py` is not in the code: remove it",
        "helpers/kernels.py:1: imports helpers.gone, which is no module",
        "helpers/widgets/view.py:1: imports helpers.timing, which is no module",
        f"{DOC}:7: floor measuring may import counting, but none of its rooms imports a room "
        "of counting: remove it",
        f"{DOC}:8: floor widgets may import measuring, but none of its rooms imports a room of "
        "measuring: remove it",
    ]  # fmt: skip


@pytest.mark.parametrize(("row", "problem"), [
    (FORMULAS_ROW.replace("counting |", "again |", 1), "`helpers/flops.py` is on floors"),
    ("| extra | `helpers/a/b.py` | deep | nothing |", "is not a module or package"),
    ("| extra | `helpers/x.py` | typo | formula |", "'formula', which is no floor"),
    ("| extra | `helpers/x.py` | short |", "a floor's row has 4 cells"),
])  # fmt: skip
def test_a_malformed_table_names_its_row(row, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        read_floors(TINY_DOC.rstrip("\n") + "\n" + row + "\n")


# ---------------------------------------------------------------- the drawing convention

WIDGET_HELPERS = ("__init__.py", "figures.py", "plots.py")  # the package and its figures
EXPERIMENT = re.compile(r"(time|run)_\w+|simulate\w*|\w+_sweep_seconds|plan_serving|serve_config"
                        r"|config_goodput|config_report|steady_check|roofline_engine|Step")
"""Calls that run an experiment (time, run or simulate something, search the planner's
candidates, build or step the serving engine): a widget reaches them only through the
library's experiment functions (``serving.prefill_stall_study``, ``serving.plan_report``...)."""


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def widget_violations(root: Path) -> list[str]:
    """Where a module of ``helpers/widgets/`` breaks the drawing convention, one line each."""
    found = []
    for path in sorted((root / WIDGETS).glob("*.py")):
        if path.name in WIDGET_HELPERS:
            continue
        where = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), where)
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        controls = {n.name: n for n in tree.body
                    if isinstance(n, ast.ClassDef) and n.name.endswith("Controls")}
        shows = [name for name in functions if name.startswith("show_")]
        if not shows:
            found.append(f"{where}: no show_x callback")
        if not controls:
            found.append(f"{where}: no *Controls dataclass declaring the knobs")
        for name, cls in controls.items():
            for field in cls.body:
                if isinstance(field, ast.AnnAssign) and field.value is None:
                    found.append(f"{where}:{field.lineno}: {name}.{ast.unparse(field.target)} "
                                 "has no default")  # fmt: skip
        for name in shows:
            show = functions[name]
            built = [n for n in ast.walk(show) if isinstance(n, ast.Call)
                     and _called(n) in controls
                     and any(k.arg is None for k in n.keywords)]  # fmt: skip
            if show.args.kwarg is None or show.args.kwarg.arg != "controls" or not built:
                found.append(f"{where}:{show.lineno}: {name} must take **controls and build "
                             "the module's *Controls from them")  # fmt: skip
            draw = functions.get("draw_" + name.removeprefix("show_"))
            params = [] if draw is None else [a.arg for a in draw.args.args]
            if len(params) != 2 or params[0] not in ("ax", "axes"):
                found.append(f"{where}:{show.lineno}: {name} has no draw_"
                             f"{name.removeprefix('show_')}(ax, view) beside it")  # fmt: skip
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and EXPERIMENT.fullmatch(_called(node)):
                found.append(f"{where}:{node.lineno}: calls {_called(node)}, an experiment: "
                             "call the library's experiment function instead")  # fmt: skip
    return found


def test_every_explorer_follows_the_drawing_convention():
    assert widget_violations(ROOT) == []


GOOD_WIDGET = """\
from dataclasses import dataclass

from helpers import serving


@dataclass(frozen=True)
class StallControls:
    decodes: int = 32


def stall_view(controls=StallControls()):
    return serving.prefill_stall_study(controls.decodes)


def draw_stall(ax, view):
    ax.plot(view)


def show_stall(**controls):
    draw_stall(None, stall_view(StallControls(**controls)))
"""


def _widget(tmp_path: Path, source: str) -> list[str]:
    (tmp_path / WIDGETS).mkdir(parents=True)
    (tmp_path / WIDGETS / "stall.py").write_text(source)
    return widget_violations(tmp_path)


def test_a_widget_that_keeps_the_convention_passes(tmp_path):
    assert _widget(tmp_path, GOOD_WIDGET) == []


@pytest.mark.parametrize(("change", "problem"), [
    (("serving.prefill_stall_study(controls.decodes)", "serving.simulate(controls.decodes)"),
     "helpers/widgets/stall.py:12: calls simulate, an experiment"),
    (("def show_stall(**controls):", "def show_stall(decodes=32):"),
     "show_stall must take **controls"),
    (("StallControls(**controls)", "StallControls(decodes=controls['decodes'])"),
     "show_stall must take **controls and build the module's *Controls"),
    (("decodes: int = 32", "decodes: int"), "StallControls.decodes has no default"),
    (("def draw_stall(ax, view):", "def draw(ax, view):"), "no draw_stall(ax, view)"),
    (("class StallControls:", "class StallKnobs:"), "no *Controls dataclass"),
])  # fmt: skip
def test_a_widget_that_breaks_the_convention_is_named(tmp_path, change, problem):
    found = _widget(tmp_path, GOOD_WIDGET.replace(*change))
    assert any(problem in line for line in found), found


# The layout: the folder shows the floors (issue "a layout that shows the floors").

TOP_LEVEL_LIMIT = 10  # entries of helpers/ besides __init__.py, data included
LINE_LIMIT = 600  # lines a file may hold; the sandbox runner, mounted alone, is the exception


def layout_problems(root: Path) -> list[str]:
    """Where ``helpers/``'s folder does not show its floors: a module standing at its top
    level instead of in a floor's package, a package that is no floor's room, more than
    ``TOP_LEVEL_LIMIT`` entries, or a file of ``helpers/`` or ``grading/`` over ``LINE_LIMIT``
    lines."""
    floors = read_floors((root / DOC).read_text())
    rooms = {room for floor in floors.values() for room in floor.rooms}
    found = []
    entries = sorted(p.name for p in (root / "helpers").iterdir()
                     if p.name not in ("__init__.py", "__pycache__"))  # fmt: skip
    if len(entries) > TOP_LEVEL_LIMIT:
        found.append(f"helpers/ holds {len(entries)} entries, more than {TOP_LEVEL_LIMIT}: "
                     f"{', '.join(entries)}")  # fmt: skip
    for name in entries:
        path = root / "helpers" / name
        if path.suffix == ".py":
            found.append(f"helpers/{name}: a module at the top level: move it into its floor's "
                         "package")  # fmt: skip
        elif path.is_dir() and (path / "__init__.py").exists() and f"helpers/{name}/" not in rooms:
            found.append(f"helpers/{name}/: a package that is no floor's room in {DOC}")
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            lines = len(path.read_text().splitlines())
            if lines > LINE_LIMIT and rel != SANDBOX_RUNNER:
                found.append(f"{rel}: {lines} lines, over {LINE_LIMIT}: split it")
    return found


def test_the_folder_shows_the_floors():
    found = layout_problems(ROOT)
    assert not found, "\n".join(found)


def test_the_layout_check_finds_a_top_level_module_and_a_long_file(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / DOC).write_text(
        "| floor | rooms | what | may import |\n|---|---|---|---|\n"
        "| package | `helpers/__init__.py` | docstring | nothing |\n"
        "| counting | `helpers/counting/` | formulas | nothing |\n")
    (tmp_path / "helpers" / "counting").mkdir(parents=True)
    (tmp_path / "grading").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "counting" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "counting" / "flops.py").write_text("x = 1\n" * (LINE_LIMIT + 1))
    (tmp_path / "helpers" / "timing.py").write_text("")
    found = layout_problems(tmp_path)
    assert found == ["helpers/timing.py: a module at the top level: move it into its floor's "
                     "package",
                     f"helpers/counting/flops.py: {LINE_LIMIT + 1} lines, over {LINE_LIMIT}: "
                     "split it"]  # fmt: skip
