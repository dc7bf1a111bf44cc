"""``python -m grading book``: the chapters as a static HTML site, readable offline.

What it renders: every ``solutions/NN_name/NN_name.ipynb`` as stored (prose, code, model
answers and outputs, no kernel), through nbconvert's HTML exporter (its ``lab`` template),
into ``build/book/``: one page per chapter plus ``index.html``, a table of contents.
``solutions/`` is the one copy with outputs; the release has none.

Widgets: ``make outputs`` stores each notebook's widget state
(``helpers.book.stored_outputs.clean``), so
a page embeds it and Jupyter's own HTML widget manager (``@jupyter-widgets/html-manager``)
draws every widget as the run left it: an ``interact`` explorer with its controls at their
defaults and its figure, a ``tqdm`` bar at its final count. The controls move but nothing
recomputes without a kernel, so a note under each explorer says so. A notebook stored
without widget state falls back to text: the explorer's ``interactive(children=…`` becomes
that note alone (the plain cell before every explorer draws one of its views,
CONTRIBUTING.md), and a bar's first frame ``0%| 0/20`` its final one when the cell finished
without an error.

Offline: the page must not reach a CDN (the browser test has no network), so the template
drops require.js and mermaid (no page needs them), and MathJax 2 and the widget manager's
standalone bundle are unpacked into ``build/book/_static/`` from the npm registry
(``npm pack``, cached in ``build/cache``).
"""

from __future__ import annotations

import fnmatch
import html
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from grading.release import ROOT, SOURCE, chapters
from helpers.book.stored_outputs import WIDGET_STATE, WIDGET_VIEW

OUT = ROOT / "build" / "book"
CACHE = ROOT / "build" / "cache"
# npm package -> (folder under _static/, the files of it the pages load: prefixes).
BUNDLES = {
    # nbconvert's lab template configures MathJax 2 (MathJax.Hub); only what the
    # TeX-AMS_CHTML-full config loads (the package is 3,000 files).
    "mathjax@2.7.9": ("mathjax", ("MathJax.js", "config/", "extensions/", "jax/input/TeX/",
                                  "jax/element/", "jax/output/CommonHTML/",
                                  "fonts/HTML-CSS/TeX/woff/", "LICENSE")),
    # The widget manager for ipywidgets 8: embed.js needs no require.js; its icon fonts
    # sit beside it.
    "@jupyter-widgets/html-manager@1.0.15": ("html-manager", (
        "dist/embed.js", "dist/embed.js.LICENSE.txt", "dist/*.woff*", "dist/*.ttf",
        "dist/*.eot", "dist/*.svg", "LICENSE")),
}  # fmt: skip
WIDGET_PREFIX = "interactive(children="
PROGRESS = re.compile(r"^(?P<desc>[^\n|]*?):?\s*0%\|[^|]*\|\s*0/(?P<total>\d+)\b[^\n]*$")
WIDGET_NOTE = (
    '<div class="book-widget"><strong>Interactive explorer.</strong> Its controls need a '
    "running kernel: open this notebook in JupyterLab to move them. The plain cell above "
    "draws one of its views with the same function.</div>"
)
EMBEDDED_NOTE = (
    '<div class="book-widget"><strong>Interactive explorer</strong>, shown as the run left '
    "it. Its controls need a running kernel to redraw: open this notebook in JupyterLab to "
    "move them.</div>"
)

TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- if "widgets" in nb.metadata -%}
<script src="_static/html-manager/dist/embed.js"></script>
{%- endif -%}{%- endblock jupyter_widgets -%}
{% block extra_css %}<style>
nav.book { font: 14px sans-serif; padding: 8px 16px; border-bottom: 1px solid #ddd; }
nav.book a { margin-right: 1.5em; }
.book-widget { border: 1px dashed #888; padding: 8px 12px; background: #f6f8fa; }
/* The widget manager's CSS expects JupyterLab's font variables, which a page lacks. */
.widget-subarea .widget-label, .widget-subarea .widget-readout,
.widget-subarea .widget-html-content { font-family: sans-serif; font-size: 13px; }
</style>{% endblock extra_css %}
{%- block body_header -%}{{ super() }}{{ resources.book_nav }}{%- endblock body_header -%}
"""


class BookError(RuntimeError):
    """The book cannot be built (no npm, a broken notebook): the message says why."""


def title_of(nb: nbformat.NotebookNode, fallback: str) -> str:
    """The chapter's first markdown heading, without its ``#``s."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def static_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with a note under each explorer, and the text fallbacks (module
    docstring) where no widget state was stored."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        failed = any(out.output_type == "error" for out in cell.outputs)
        outputs = []
        for out in cell.outputs:
            outputs.append(out)
            text = out.get("data", {}).get("text/plain", "")
            if out.output_type != "display_data" or not isinstance(text, str):
                continue
            if out.data.get(WIDGET_VIEW, {}).get("model_id") in state:
                if text.startswith(WIDGET_PREFIX):
                    note = {"text/html": EMBEDDED_NOTE, "text/plain": ""}
                    outputs.append(nbformat.v4.new_output("display_data", note))
            elif text.startswith(WIDGET_PREFIX):
                out.data = {"text/html": WIDGET_NOTE, "text/plain": "(interactive explorer)"}
            elif (bar := PROGRESS.match(text)) and not failed:
                # The loop ran to its end (the cell raised nothing), so the bar was full.
                total = bar["total"]
                out.data = {"text/plain": f"{bar['desc']}: 100%|{'█' * 10}| {total}/{total}"}
        cell.outputs = outputs
    return nb


def wanted(name: str, part: str) -> bool:
    """``part`` names a file of the package, a folder (ending in ``/``) or a glob."""
    return name.startswith(part) if part.endswith("/") else fnmatch.fnmatchcase(name, part)


def bundle(static: Path) -> None:
    """Unpack each of ``BUNDLES`` into ``static/<folder>`` from the npm registry (cached)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for package, (folder, parts) in BUNDLES.items():
        stem = package.lstrip("@").replace("/", "-").replace("@", "-")
        tarball = CACHE / f"{stem}.tgz"
        if not tarball.is_file():
            npm = shutil.which("npm")
            if not npm:
                raise BookError("npm is not installed: the book bundles MathJax and the widget "
                                "manager from the npm registry (apt-get install npm)")  # fmt: skip
            done = subprocess.run([npm, "pack", package, "--silent"], cwd=CACHE,
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
            if done.returncode or not tarball.is_file():
                raise BookError(f"npm pack {package} failed: {done.stderr.strip()[-500:]}")
        with tarfile.open(tarball) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("package/")
                if member.isfile() and any(wanted(name, part) for part in parts):
                    if name.startswith("/") or ".." in Path(name).parts:
                        raise BookError(f"unsafe path in {package}: {member.name}")
                    member.name = name
                    tar.extract(member, static / folder)


def nav(pages: list[tuple[str, str]], index: int | None) -> str:
    """Links to the contents and to the previous and next chapter."""
    links = ['<a href="index.html">Contents</a>']
    if index is not None and index > 0:
        page, title = pages[index - 1]
        links.append(f'<a href="{page}">← {html.escape(title)}</a>')
    if index is not None and index + 1 < len(pages):
        page, title = pages[index + 1]
        links.append(f'<a href="{page}">{html.escape(title)} →</a>')
    return f'<nav class="book">{"".join(links)}</nav>'


def render_site(out: Path = OUT, source: Path = SOURCE, progress: bool = False) -> list[Path]:
    """Render every chapter under ``source`` into ``out``; return the pages written;
    ``progress`` shows a bar over the chapters."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    names = chapters(source)
    if not names:
        raise BookError(f"no chapters under {source} (expected NN_name/NN_name.ipynb)")
    notebooks = {}
    for name in names:
        path = source / name / f"{name}.ipynb"
        try:
            notebooks[name] = nbformat.read(path, as_version=4)
        except Exception as error:  # noqa: BLE001 - any unreadable notebook stops the book
            raise BookError(f"cannot read {path}: {error}") from error
    if out.exists():
        shutil.rmtree(out)
    (out / "_static").mkdir(parents=True)
    bundle(out / "_static")
    pages = [(f"{name}.html", title_of(notebooks[name], name)) for name in names]
    mathjax = "_static/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"book.j2": TEMPLATE})],
                            template_file="book.j2", mathjax_url=mathjax,
                            exclude_input_prompt=True, exclude_output_prompt=True)  # fmt: skip
    written, contents = [], []
    for i, name in enumerate(tqdm(names, desc="book", unit="page", disable=not progress)):
        resources = {"book_nav": nav(pages, i), "metadata": {"name": pages[i][1]}}
        body, _ = exporter.from_notebook_node(static_outputs(notebooks[name]), resources)
        page = out / pages[i][0]
        page.write_text(body, encoding="utf-8")
        written.append(page)
        # Section links from the ids nbconvert gave the headings.
        sections = re.findall(r'<h2 id="([^"]+)">(.*?)<a class="anchor-link"', body)
        items = "".join(f'<li><a href="{pages[i][0]}#{sid}">{text}</a></li>'
                        for sid, text in sections)  # fmt: skip
        contents.append(f'<li><a href="{pages[i][0]}">{html.escape(pages[i][1])}</a>'
                        f"<ul>{items}</ul></li>")  # fmt: skip
    index = out / "index.html"
    index.write_text(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<title>Prefill vs Decode</title><script src="{mathjax}"></script>'
        "<script type=\"text/x-mathjax-config\">MathJax.Hub.Config({tex2jax: {inlineMath: "
        "[['$','$']]}, messageStyle: 'none'});</script>"
        "<style>body{font:16px/1.5 sans-serif;max-width:48em;"
        "margin:2em auto;padding:0 1em} ul ul{font-size:90%}</style></head><body>"
        f"<h1>Prefill vs Decode</h1><p>The chapters, rendered from <code>solutions/</code> "
        f"with their stored outputs and model answers.</p><ol>{''.join(contents)}</ol>"
        "</body></html>\n",
        encoding="utf-8",
    )
    return [index, *written]

