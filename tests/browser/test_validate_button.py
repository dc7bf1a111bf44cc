"""JupyterLab in a real browser: nbgrader's Validate button reports the blank release as
failing and the release filled with the solutions as passing.

The button's path (lab extension, server handler, the course config) is the same for every
chapter, so it is pressed on two: chapter 1, and chapter 9, whose design problem's visible
test is the slowest of the book, so its press shows the button waits long enough. What each
chapter's verdict is, whole and hidden tests included, is checked for all of them by plain
``nbgrader validate`` in tests/grading, and the cut and the filling below for all of them here.

Validating runs the notebook. A test cell depends only on the setup cell and its own answer
cell (CONTRIBUTING.md), so each notebook is cut to its nbgrader cells (setup, answers, tests,
written answers): what the grader scores, without the chapter's measurements. One press then
costs a kernel start and the setup cell's imports (about 5 s on a quiet 2-core machine). The
filled copy is the release with each answer cell's source taken from solutions/: what a
student who solved everything submits, visible tests only. Every chapter's whole release and
solution (hidden tests included) are validated by the CLI tests in tests/grading.

Chromium comes from Debian (`make test` installs it); Playwright drives it. The shared
fixtures (the browser, the JupyterLab server, the reused page) are in conftest.py.
"""

import nbformat
import pytest
from answers import filled, solutions

from grading.course import meta
from grading.release import RELEASE

CHAPTERS = sorted(p.parent.name for p in RELEASE.glob("*/*.ipynb"))
PRESSED = ["01_flops", "09_capstone"]

pytestmark = pytest.mark.browser


def graded_cells(path):
    """The notebook at ``path`` with only its nbgrader cells, outputs cleared."""
    nb = nbformat.read(path, as_version=4)
    nb.cells = [cell for cell in nb.cells if "nbgrader" in cell.metadata]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def filled_with_solutions(chapter: str):
    """The chapter's cut release, every answer cell solved (``answers``)."""
    return filled(graded_cells(RELEASE / chapter / f"{chapter}.ipynb"), solutions(chapter))


@pytest.fixture(scope="module")
def lab(tmp_path_factory, lab_server, lab_page):
    """One JupyterLab page over a scratch folder holding every chapter's release, blank and
    filled, cut to their graded cells."""
    assert CHAPTERS, "no release notebooks: run make release"
    folder = tmp_path_factory.mktemp("lab")
    for chapter in PRESSED:
        nbformat.write(graded_cells(RELEASE / chapter / f"{chapter}.ipynb"),
                       folder / f"{chapter}-release.ipynb")  # fmt: skip
        nbformat.write(filled_with_solutions(chapter), folder / f"{chapter}-solved.ipynb")
    return lab_page(*lab_server(folder, ["--LabApp.expose_app_in_browser=True"]))


def test_the_cut_keeps_every_graded_cell():
    for chapter in CHAPTERS:
        nb = graded_cells(RELEASE / chapter / f"{chapter}.ipynb")
        ids = [cell.metadata.nbgrader["grade_id"] for cell in nb.cells]
        assert ids[0] == f"ch{chapter[:2]}_setup", ids[:1]
        assert any(i.endswith("_test") for i in ids), chapter
        assert all(cell.metadata.nbgrader.get("grade_id") for cell in nb.cells)


def test_the_filled_copy_changes_only_answer_cells():
    for chapter in CHAPTERS:
        blank = graded_cells(RELEASE / chapter / f"{chapter}.ipynb")
        filled = filled_with_solutions(chapter)
        changed = [meta(a)["grade_id"] for a, b in zip(blank.cells, filled.cells, strict=True)
                   if a.source != b.source]  # fmt: skip
        answers = [meta(c)["grade_id"] for c in blank.cells if meta(c).get("solution")]
        assert changed == answers, chapter  # every answer filled, nothing else touched


def validate(lab, screenshot, notebook: str) -> str:
    """Open ``notebook`` in JupyterLab, press Validate, return the dialog's text."""
    page = lab.page
    lab.open(notebook)
    button = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").get_by_role(
        "button", name="Validate")  # fmt: skip
    button.first.wait_for(timeout=60_000)
    button.first.click()
    dialog = page.locator(".jp-Dialog-content")
    dialog.wait_for(timeout=120_000)
    page.wait_for_function(
        "() => !document.querySelector('.jp-Dialog-content')?.innerText.includes('Validating')",
        timeout=180_000,
    )
    text = dialog.inner_text()
    screenshot(page, f"lab-validate-{notebook.removesuffix('.ipynb')}")
    page.keyboard.press("Escape")  # close the dialog
    dialog.wait_for(state="detached", timeout=30_000)
    assert not page.console.errors, page.console.errors
    return text


def test_the_pressed_chapters_exist():
    assert set(PRESSED) <= set(CHAPTERS), (PRESSED, CHAPTERS)


@pytest.mark.parametrize("chapter", PRESSED)
def test_validate_button_fails_the_release_and_passes_the_solution(lab, screenshot, chapter):
    text = validate(lab, screenshot, f"{chapter}-release.ipynb")
    assert "failed" in text.lower() or "error" in text.lower(), text
    assert "NotImplementedError" in text, text
    text = validate(lab, screenshot, f"{chapter}-solved.ipynb")
    assert "Success! Your notebook passes all the tests." in text, text
