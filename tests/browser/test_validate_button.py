"""JupyterLab in a real browser: a release notebook opens, and nbgrader's Validate button
reports the stubs as failing while the solved notebook passes.

Chromium comes from Debian (`make test` installs it); Playwright drives it. The shared
fixtures (the browser, the JupyterLab server, console capture) are in conftest.py.
"""

import shutil
from pathlib import Path

import pytest

from grading.build import RELEASE, SOURCE

CHAPTERS = sorted(p.parent.name for p in RELEASE.glob("*/*.ipynb"))

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lab(tmp_path_factory, lab_server):
    """A JupyterLab server over a scratch folder holding one chapter's release and solution."""
    assert CHAPTERS, "no release notebooks: run make release"
    # One chapter shows the button works; every chapter is validated by the CLI tests.
    chapter, folder = CHAPTERS[0], tmp_path_factory.mktemp("lab")
    shutil.copy(RELEASE / chapter / f"{chapter}.ipynb", folder / "release.ipynb")
    shutil.copy(SOURCE / chapter / f"{chapter}.ipynb", folder / "solved.ipynb")
    return lab_server(folder)


def validate(page, lab, screenshot, notebook: str) -> str:
    """Open ``notebook`` in JupyterLab, press Validate, return the dialog's text."""
    base, token = lab
    # A workspace of its own, reset, so no tab from an earlier page is restored.
    workspace = Path(notebook).stem
    url = f"{base}/lab/workspaces/{workspace}/tree/{notebook}?reset&token={token}"
    page.goto(url, timeout=60_000)
    button = page.get_by_role("button", name="Validate")
    button.first.wait_for(timeout=60_000)
    button.first.click()
    dialog = page.locator(".jp-Dialog-content")
    dialog.wait_for(timeout=120_000)
    page.wait_for_function(
        "() => !document.querySelector('.jp-Dialog-content')?.innerText.includes('Validating')",
        timeout=120_000,
    )
    screenshot(page, f"lab-validate-{workspace}")
    assert not page.console.errors, page.console.errors
    return dialog.inner_text()


def test_validate_button_fails_the_release(page, lab, screenshot):
    text = validate(page, lab, screenshot, "release.ipynb")
    assert "failed" in text.lower() or "error" in text.lower(), text
    assert "NotImplementedError" in text, text


def test_validate_button_passes_the_solution(page, lab, screenshot):
    text = validate(page, lab, screenshot, "solved.ipynb")
    assert "Success! Your notebook passes all the tests." in text, text
