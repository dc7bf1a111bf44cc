"""The explorers in JupyterLab: for every chapter with an ``interact`` explorer, run its first
explorer's cell with the cells it needs, move a slider (or, where the explorer has none,
change a dropdown), and see its output change.

Running all of a chapter's cells in a browser takes minutes for the chapters that measure
the device (4–7), over the CI budget for this suite. So each chapter is trimmed to its
setup cell, the explorer's cell, and the cells that define what the explorer reads, found
by reading the cells' code (``needed_cells``). Those cells run for real, measurements
included: chapter 5 measures its ceilings and both sweeps, chapter 6 its ceilings, prefill
and decode curves, chapter 7 runs two cells. Two knobs keep them short. The matmul ceiling
is measured on one 1024³ GEMM (``ceilings.GEMMS_ENV``), not on the larger GEMMs a reader's
run uses, which take seconds per call in bf16 on a CPU without bf16 arithmetic (on a 2-core
AMD EPYC, chapter 5's ceilings cell took 40 s, 2 s with the one GEMM). And chapter 5's sweeps
time two token counts, not five (``SHORTER``): the explorer needs a measured record to draw,
and nbval runs the chapter's whole sweep already. The callbacks
themselves are tested without a browser in tests/helpers/test_widgets_*.py."""

from __future__ import annotations

import ast
import builtins
import os
import re

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from grading.release import SOURCE, chapters
from helpers.measuring import ceilings, machine

pytestmark = pytest.mark.browser

INTERACT = re.compile(r"\binteract\(")
BUILTINS = frozenset(dir(builtins))


class _Flow(ast.NodeVisitor):
    """In execution order: the names a cell binds at top level, and the names it reads before
    binding them itself (free names of a function body or lambda count at the cell's end)."""

    def __init__(self):
        self.bound: set[str] = set()
        self.reads: set[str] = set()
        self.deferred: set[str] = set()
        self.scopes: list[set[str]] = []  # locals of the enclosing functions, comprehensions

    def _read(self, name: str) -> None:
        if any(name in scope for scope in self.scopes):
            return
        if self.scopes:
            self.deferred.add(name)
        elif name not in self.bound:
            self.reads.add(name)

    def _bind(self, name: str) -> None:
        (self.scopes[-1] if self.scopes else self.bound).add(name)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:
            self._bind(node.id)

    def visit_Assign(self, node):
        self.visit(node.value)
        for target in node.targets:  # x[k] = … and x.a = … read x (visit_Name, Load)
            self.visit(target)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_AugAssign(self, node):
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self._read(node.target.id)
        self.visit(node.target)

    def visit_NamedExpr(self, node):
        self.visit(node.value)
        self._bind(node.target.id)

    def visit_For(self, node):
        self.visit(node.iter)
        self.visit(node.target)
        for child in node.body + node.orelse:
            self.visit(child)

    visit_AsyncFor = visit_For

    def visit_With(self, node):
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
        for child in node.body:
            self.visit(child)

    visit_AsyncWith = visit_With

    def visit_Import(self, node):
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def _function(self, args: ast.arguments, body: list[ast.AST]) -> None:
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default)
        local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        local |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        local |= {n.id for stmt in body for n in ast.walk(stmt)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}  # fmt: skip
        self.scopes.append(local)
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()

    def visit_FunctionDef(self, node):
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._function(node.args, node.body)
        self._bind(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._function(node.args, [node.body])

    def visit_ClassDef(self, node):
        for child in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(child)
        self.scopes.append(set())
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        self._bind(node.name)

    def _comprehension(self, node, parts: list[ast.AST]) -> None:
        self.visit(node.generators[0].iter)  # evaluated in the enclosing scope
        self.scopes.append(set())
        for i, generator in enumerate(node.generators):
            if i:
                self.visit(generator.iter)
            self.visit(generator.target)
            for condition in generator.ifs:
                self.visit(condition)
        for part in parts:
            self.visit(part)
        self.scopes.pop()

    def visit_ListComp(self, node):
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node):
        self._comprehension(node, [node.key, node.value])


def cell_flow(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it needs from earlier cells), IPython syntax allowed."""
    flow = _Flow()
    flow.visit(ast.parse(TransformerManager().transform_cell(source)))
    return flow.bound, (flow.reads | (flow.deferred - flow.bound)) - BUILTINS


def needed_cells(nb, target: int) -> list[int]:
    """Indices of the code cells that cell ``target`` needs, itself and the setup cell (the
    first code cell) included: for each name a needed cell reads, the last code cell before
    it that binds that name."""
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    flows = {i: cell_flow(nb.cells[i].source) for i in code}
    needed, todo = {code[0], target}, [code[0], target]
    while todo:
        index = todo.pop()
        for name in flows[index][1]:
            binders = [i for i in code if i < index and name in flows[i][0]]
            if binders and binders[-1] not in needed:
                needed.add(binders[-1])
                todo.append(binders[-1])
    return sorted(needed)


def explorer_cell(nb) -> int | None:
    """The first code cell after the setup cell that calls ``interact(``."""
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    return next((i for i in code[1:] if INTERACT.search(nb.cells[i].source)), None)


# Lines of a chapter replaced in its trimmed copy, each found exactly once (or the test says
# the chapter changed): chapter 5's sweep at two token counts instead of five.
SHORTER = {"05_matmuls": [("TOKENS = [1, 8, 64, 512, 4096] if ON_CPU",
                           "TOKENS = [1, 4096] if ON_CPU")]}


def trimmed(name: str):
    """The chapter's solutions notebook cut to what its first explorer needs, no outputs,
    with the ``SHORTER`` lines replaced."""
    nb = nbformat.read(SOURCE / name / f"{name}.ipynb", as_version=4)
    keep = needed_cells(nb, explorer_cell(nb))
    nb.cells = [nb.cells[i] for i in keep]
    for old, new in SHORTER.get(name, []):
        where = [cell for cell in nb.cells if old in cell.source]
        assert len(where) == 1 and where[0].source.count(old) == 1, (
            f"{name}: {old!r} is not in exactly one kept cell: update SHORTER")
        where[0].source = where[0].source.replace(old, new)
    for cell in nb.cells:
        cell.outputs, cell.execution_count = [], None
    return nb


# Every chapter with an explorer: chapters 5 and 6 feed theirs a live measurement, which
# runs here too (about 30–45 s each in a browser on a 2-core machine, under load).
WIDGET_CHAPTERS = [
    name for name in chapters()
    if explorer_cell(nbformat.read(SOURCE / name / f"{name}.ipynb", as_version=4)) is not None
]  # fmt: skip

# What the trimmed chapters run under: the CPU, as in CI, one GEMM for the ceilings, and an
# 8 MiB last-level cache. The explorer needs a measured record to draw, not a cache-cold one:
# against this host's real cache (hundreds of MiB on a server), defeating it would make and
# pack gigabytes of weight copies for chapters 4-6, which nbval runs at the host's size and
# the cache-size matrix at 8 MiB, 260 MiB and 1 GiB already.
LAB_ENV = {"TEXTBOOK_DEVICE": "cpu", ceilings.GEMMS_ENV: "1024x1024x1024",
           machine.LLC_ENV: "8MiB"}

# All code cells have run (or one failed), and the kernel is idle again.
FINISHED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel?.sessionContext?.session?.kernel;
  if (!panel?.content || !kernel || kernel.status !== 'idle') return false;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const failed = panel.node.querySelector('[data-mime-type="application/vnd.jupyter.error"]');
  return !!failed || cells.every(c => c.model.executionCount !== null);
}"""

# What the first explorer shows: its figures' data and its text.
OUTPUT = """() => {
  const out = document.querySelector('.widget-interact .widget-output');
  if (!out) return null;
  const images = [...out.querySelectorAll('img')].map(i => i.src);
  return {images, text: out.innerText, html: out.innerHTML.length};
}"""


def test_needed_cells_follows_names_through_the_cells():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in (
        "import math\nfrom helpers.book.notebook import setup\nDEVICE = setup()",
        "slow = sum(range(10**8))  # unrelated, and expensive",
        "data = [math.sqrt(i) for i in range(4)]\nscale = 2",
        "scale = 3  # rebinds scale, reads nothing",
        "for i in range(2):\n    data.append(i)\nlimit = len(data)",
        "%matplotlib inline\ndef show(k):\n    return data[k] * scale\nunused = slow",
        "interact(lambda k: show(k) + limit, k=(0, 3))",
    )]  # fmt: skip
    assert cell_flow(nb.cells[4].source) == ({"i", "limit"}, {"data"})
    assert explorer_cell(nb) == 6
    # show needs data and the last scale (cell 3, not cell 2's); cell 5 reads slow, so 1 too.
    assert needed_cells(nb, 6) == [0, 1, 2, 3, 4, 5, 6]
    nb.cells[5].source = "def show(k):\n    return data[k] * scale"
    assert needed_cells(nb, 6) == [0, 2, 3, 4, 5, 6]


def test_every_chapter_with_an_explorer_is_tested():
    assert WIDGET_CHAPTERS == chapters() == [
        "01_flops", "02_bytes", "03_roofline", "04_timing", "05_matmuls", "06_ttft_tpot",
        "07_batching", "08_serving", "09_capstone", "10_parallel"]  # fmt: skip


@pytest.fixture(scope="module")
def lab(tmp_path_factory, lab_server, lab_page):
    """One JupyterLab page over a scratch folder of the trimmed chapters, the app exposed
    so the test can ask the notebook whether it finished."""
    folder = tmp_path_factory.mktemp("widgets")
    for name in WIDGET_CHAPTERS:
        nbformat.write(trimmed(name), folder / f"{name}.ipynb")
    env = {**os.environ, **LAB_ENV}
    return lab_page(*lab_server(folder, ["--LabApp.expose_app_in_browser=True"], env))


@pytest.mark.parametrize("name", WIDGET_CHAPTERS)
def test_explorer_responds(lab, screenshot, name):
    page = lab.page
    lab.open(f"{name}.ipynb")
    assert page.locator(".jp-OutputArea-output").count() == 0  # nothing stored satisfies it
    # Not awaited (evaluate would wait for its promise with no timeout): the FINISHED wait does.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(FINISHED, timeout=240_000, polling=500)
    errors = page.locator("[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()

    explorer = page.locator(".widget-interact").first
    explorer.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const o = document.querySelector('.widget-interact .widget-output');"
        " return o && o.querySelectorAll('img').length > 0; }",  # every explorer draws
        timeout=120_000,
    )
    before = page.evaluate(OUTPUT)
    explorer.locator(".widget-output").first.scroll_into_view_if_needed()
    screenshot(page, f"lab-{name}-default")
    slider = explorer.locator(".widget-slider .noUi-handle").first
    if slider.count():
        readout = explorer.locator(".widget-slider .widget-readout").first.inner_text()
        slider.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "r => document.querySelector('.widget-interact .widget-slider .widget-readout')"
            ".innerText !== r",
            arg=readout,
            timeout=30_000,
        )
        moved = "slider"
    else:
        select = explorer.locator("select").first
        count = select.locator("option").count()
        current = select.evaluate("s => s.selectedIndex")
        select.select_option(index=(current + 1) % count)
        moved = "dropdown"
    # The callback reran to its end: a new figure is shown, or a traceback. (The kernel's
    # status does not say: JupyterLab sends widget messages to a subshell.)
    page.wait_for_function(
        """b => { const o = document.querySelector('.widget-interact .widget-output');
                  if (o.innerText.includes('Traceback (most recent call last)')) return true;
                  const images = [...o.querySelectorAll('img')].map(i => i.src);
                  return images.length > 0 && images.join() !== b.images.join(); }""",
        arg=before,
        timeout=120_000,
    )
    lab.wait_idle()
    after = page.evaluate(OUTPUT)
    explorer.locator(".widget-output").first.scroll_into_view_if_needed()
    screenshot(page, f"lab-{name}-after-{moved}")
    assert after["images"] != before["images"] or after["text"] != before["text"]
    # A traceback is a change too; the explorer must redraw, not fail. (An error inside a
    # widget's output carries no error mime type on the page: look for its text.)
    assert "Traceback (most recent call last)" not in after["text"], after["text"][-4000:]
    # interact shows what the callback returns: it must return nothing, so no repr shows.
    assert not re.search(r"^\w+\(\w+=", after["text"], re.M), after["text"][-2000:]
    assert not page.console.errors, page.console.errors
