"""The explorers in JupyterLab: run all cells of the solutions notebook, move a slider (or,
where the explorer has none, change a dropdown), and see its output change.

The chapters that measure the device (4–7) are left out here: running all their cells in a
browser takes minutes on a 2-core machine, over the CI budget for this suite. Their
callbacks are tested without a browser in tests/helpers/test_widgets_*.py."""

from __future__ import annotations

import os
import shutil

import nbformat
import pytest

from grading.build import SOURCE, chapters

pytestmark = pytest.mark.browser


def has_widget(name: str) -> bool:
    nb = nbformat.read(SOURCE / name / f"{name}.ipynb", as_version=4)
    return any("interact" in cell.source for cell in nb.cells if cell.cell_type == "code")


MEASURING = {"04_timing", "05_matmuls", "06_ttft_tpot", "07_batching"}
WIDGET_CHAPTERS = [name for name in chapters() if has_widget(name) and name not in MEASURING]

# All code cells have run (or one failed), and the kernel is idle again.
FINISHED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel?.sessionContext?.session?.kernel;
  if (!panel?.content || !kernel || kernel.status !== 'idle') return false;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const failed = panel.node.querySelector('[data-mime-type="application/vnd.jupyter.error"]');
  return !!failed || cells.every(c => c.model.executionCount !== null);
}"""

IDLE = """() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel
  ?.status === 'idle'"""

# What the first explorer shows: its figures' data and its text.
OUTPUT = """() => {
  const out = document.querySelector('.widget-interact .widget-output');
  if (!out) return null;
  const images = [...out.querySelectorAll('img')].map(i => i.src);
  return {images, text: out.innerText, html: out.innerHTML.length};
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory, lab_server):
    """JupyterLab over a scratch copy of every chapter's solutions, the app exposed so the
    test can ask the notebook whether it finished."""
    folder = tmp_path_factory.mktemp("widgets")
    for name in WIDGET_CHAPTERS:
        shutil.copy(SOURCE / name / f"{name}.ipynb", folder / f"{name}.ipynb")
    env = {**os.environ, "TEXTBOOK_DEVICE": "cpu"}
    return lab_server(folder, ["--LabApp.expose_app_in_browser=True"], env)


def test_every_chapter_that_measures_nothing_has_its_explorer_tested():
    assert {"01_flops", "02_bytes", "03_roofline", "08_serving"} <= set(WIDGET_CHAPTERS)


@pytest.mark.parametrize("name", WIDGET_CHAPTERS)
def test_explorer_responds(page, lab, screenshot, name):
    base, token = lab
    page.goto(f"{base}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={token}",
              timeout=120_000)  # fmt: skip
    page.wait_for_function(IDLE, timeout=120_000)
    # Stored outputs would satisfy every check below, so clear them first.
    page.evaluate("window.jupyterapp.commands.execute('editmenu:clear-all')")
    page.wait_for_function("() => !document.querySelector('.jp-OutputArea-output')")
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(FINISHED, timeout=240_000, polling=500)
    errors = page.locator("[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()

    explorer = page.locator(".widget-interact").first
    explorer.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const o = document.querySelector('.widget-interact .widget-output');"
        " return o && o.innerText.trim().length + o.querySelectorAll('img').length > 0; }",
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
    # The callback reran: the output holds something again and it is not what it was.
    page.wait_for_function(
        """b => { const o = document.querySelector('.widget-interact .widget-output');
                  const images = [...o.querySelectorAll('img')].map(i => i.src);
                  if (o.innerText.trim().length + images.length === 0) return false;
                  return o.innerText !== b.text || images.join() !== b.images.join(); }""",
        arg=before,
        timeout=120_000,
    )
    page.wait_for_function(IDLE, timeout=120_000)
    after = page.evaluate(OUTPUT)
    explorer.locator(".widget-output").first.scroll_into_view_if_needed()
    screenshot(page, f"lab-{name}-after-{moved}")
    assert after["images"] != before["images"] or after["text"] != before["text"]
    # A traceback is a change too; the explorer must redraw, not fail.
    failed = explorer.locator("[data-mime-type='application/vnd.jupyter.error']")
    assert failed.count() == 0, failed.first.inner_text()[-2000:]
    assert not page.console.errors, page.console.errors
