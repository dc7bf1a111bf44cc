"""The static book (``python -m grading book``) in a real browser, offline: every page has
a title, its images load, MathJax typesets the math, every stored widget is drawn from its
embedded state (explorers with their figure, progress bars full), no widget placeholder or
first-frame progress bar is left, and the console stays clean."""

from __future__ import annotations

import re

import nbformat
import pytest

from grading import book
from grading.release import SOURCE, chapters
from helpers.book.stored_outputs import WIDGET_STATE, WIDGET_VIEW

pytestmark = pytest.mark.browser

PAGES = ["index", *chapters()]


def stored(name: str) -> tuple[int, int, int]:
    """(figures in the cells' own outputs, widget views, tqdm bars among them)."""
    nb = nbformat.read(SOURCE / name / f"{name}.ipynb", as_version=4)
    outputs = [out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", [])]
    views = [data for data in outputs if WIDGET_VIEW in data]
    bars = [data for data in views if "%|" in str(data.get("text/plain", ""))]  # tqdm's text
    return sum("image/png" in data for data in outputs), len(views), len(bars)


@pytest.fixture(scope="module")
def site():
    """The book as ``make book`` builds it (into build/book/, reusing its MathJax cache)."""
    book.render_site()
    return book.OUT


def test_static_outputs_rewrites_placeholders_and_first_frames():
    nb = nbformat.v4.new_notebook()
    widget = nbformat.v4.new_output("display_data", {"text/plain": "interactive(children=(Dro…"})
    bar = {"text/plain": "sweep:   0%|          | 0/20 [00:00<?, ?it/s]"}
    error = nbformat.v4.new_output("error", ename="KeyboardInterrupt", evalue="", traceback=[])
    view = {"model_id": "1" * 32, "version_major": 2, "version_minor": 0}
    embedded = nbformat.v4.new_output(
        "display_data", {"text/plain": "interactive(children=(Dro…", WIDGET_VIEW: view})
    embedded_bar = nbformat.v4.new_output("display_data", {**bar, WIDGET_VIEW: view})
    nb.cells = [
        nbformat.v4.new_code_cell(outputs=[widget]),
        nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("display_data", bar)]),
        nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("display_data", bar), error]),
        nbformat.v4.new_code_cell(outputs=[embedded]),
        nbformat.v4.new_code_cell(outputs=[embedded_bar]),
    ]
    nb.metadata.widgets = {WIDGET_STATE: {"state": {"1" * 32: {"model_name": "VBoxModel"}}}}
    done = book.static_outputs(nb)
    # No state for these views: the text fallbacks.
    assert "Interactive explorer" in done.cells[0].outputs[0].data["text/html"]
    assert done.cells[1].outputs[0].data["text/plain"] == "sweep: 100%|██████████| 20/20"
    # An interrupted loop's bar stays as stored: its final state is unknown.
    assert done.cells[2].outputs[0].data["text/plain"] == bar["text/plain"]
    # Embedded state: the views stay for the widget manager; an explorer gets a note.
    assert [out.data for out in done.cells[3].outputs[:1]] == [embedded.data]
    assert "need a running kernel" in done.cells[3].outputs[1].data["text/html"]
    assert [out.data for out in done.cells[4].outputs] == [embedded_bar.data]


def test_a_folder_without_chapters_is_a_clear_error(tmp_path):
    with pytest.raises(book.BookError, match="no chapters under"):
        book.render_site(tmp_path / "book", source=tmp_path)
    (tmp_path / "01_x").mkdir()
    (tmp_path / "01_x" / "01_x.ipynb").write_text("not json", encoding="utf-8")
    with pytest.raises(book.BookError, match="cannot read"):
        book.render_site(tmp_path / "book", source=tmp_path)


def test_every_chapter_has_a_page_and_a_contents_entry(site):
    contents = (site / "index.html").read_text(encoding="utf-8")
    for name in chapters():
        assert (site / f"{name}.html").is_file(), name
        assert f'href="{name}.html"' in contents, name


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_offline(page, site, screenshot, name):
    offsite = []

    # Nothing may leave the machine: a CDN script would fail at a reader's desk offline.
    def only_local(route):
        if route.request.url.startswith(("file://", "data:")):
            route.continue_()
        else:
            offsite.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    failed = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.goto((site / f"{name}.html").as_uri(), wait_until="load", timeout=120_000)
    assert page.title().strip(), "the page has no title"
    assert page.locator("h1").count() >= 1
    # MathJax has typeset the page (the contents too: headings hold math): rendered math
    # exists and its queue is empty.
    page.wait_for_function(
        "() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0"
        " && document.querySelectorAll('.MathJax_CHTML').length > 0",
        timeout=120_000,
    )
    if name == "index":
        assert page.locator("ol > li > a").count() == len(chapters())
    else:
        figures, views, bars = stored(name)
        # Every stored figure is on the page (the widget notes replaced text, not images).
        assert page.locator("img:not(.jupyter-widgets img)").count() == figures
        # The widget manager drew every stored widget view from the embedded state.
        drawn = ".jupyter-widgets.jp-OutputArea-output > .widget-subarea > *"
        page.wait_for_function(f"n => document.querySelectorAll('{drawn}').length === n",
                               arg=views, timeout=60_000)  # fmt: skip
        # Each explorer shows its figure; each tqdm bar its last frame, full.
        explorers = page.locator(".widget-interact")
        for i in range(explorers.count()):
            assert explorers.nth(i).locator(".widget-output img").count() >= 1, f"explorer {i}"
        progress = page.locator(".jupyter-widgets .widget-hprogress")
        assert progress.count() == bars
        for i in range(bars):
            assert "100%" in progress.nth(i).locator("xpath=..").inner_text(), f"bar {i}"
    broken = page.evaluate(
        "() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0)"
        ".map(i => i.src.slice(0, 80))"
    )
    assert not broken, f"images that did not load: {broken}"
    text = page.locator("body").inner_text()
    assert "interactive(children=" not in text, "a widget shows its placeholder text"
    assert not re.search(r"(?<!\d)0%\|", text), "a progress bar is stuck at its first frame"
    screenshot(page, f"book-{name}")
    notes = page.locator(".book-widget")
    if notes.count():  # the first explorer: its note, with the default view above it
        notes.first.scroll_into_view_if_needed()
        page.mouse.wheel(0, -450)
        screenshot(page, f"book-{name}-explorer")
    assert not offsite, f"the page reached off the machine: {offsite}"
    assert not failed, f"requests that failed: {failed}"
    assert not page.console.errors, page.console.errors
