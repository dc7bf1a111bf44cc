"""JupyterLab in a real browser: a release notebook opens, and nbgrader's Validate button
reports the stubs as failing while the solved notebook passes.

Chromium comes from Debian (`make test` installs it); Playwright drives it.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHAPTERS = sorted(p.parent.name for p in (ROOT / "notebooks").glob("*/*.ipynb"))

pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a scratch folder holding each chapter's release and solution."""
    assert CHROMIUM, "Chromium is not installed (make test installs Debian's chromium)"
    assert CHAPTERS, "no release notebooks: run make release"
    # One chapter shows the button works; every chapter is validated by the CLI tests.
    chapter, folder = CHAPTERS[0], tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "notebooks" / chapter / f"{chapter}.ipynb", folder / "release.ipynb")
    shutil.copy(ROOT / "solutions" / chapter / f"{chapter}.ipynb", folder / "solved.ipynb")
    port, token = free_port(), "browser-test"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
         "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
         f"--notebook-dir={folder}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
            time.sleep(0.5)
    yield base, token
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield chromium
        chromium.close()


def validate(browser, lab, notebook: str) -> str:
    """Open ``notebook`` in JupyterLab, press Validate, return the dialog's text."""
    base, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
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
        return dialog.inner_text()
    finally:
        page.close()


def test_validate_button_fails_the_release(browser, lab):
    text = validate(browser, lab, "release.ipynb")
    assert "failed" in text.lower() or "error" in text.lower(), text
    assert "NotImplementedError" in text, text


def test_validate_button_passes_the_solution(browser, lab):
    text = validate(browser, lab, "solved.ipynb")
    assert "Success! Your notebook passes all the tests." in text, text
