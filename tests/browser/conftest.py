"""Shared browser fixtures: Debian's Chromium through Playwright, a JupyterLab server on
loopback with a token, console-error capture, and screenshots kept as artifacts."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "test-artifacts" / "browser"

# Console errors that say nothing about this project, each with why it is harmless.
HARMLESS = [
    # Chromium asks every page for /favicon.ico; neither the book nor JupyterLab's
    # API pages serve one at that path.
    re.compile(r"favicon\.ico"),
    # nbgrader 0.9's formgrader submission page (its formgrade/index.html.j2 calls nbconvert's
    # mathjax() macro with no url) always loads MathJax 2.7.7 from cdnjs, which a machine
    # without internet cannot reach; formgrade.js then raises "MathJax is not defined" in
    # configureScrolling, after it has loaded the scores and comments (only its keyboard
    # shortcuts are lost). Neither says anything about this project, and neither happens
    # online. The book's own MathJax is local, and test_book checks that it typesets.
    re.compile(
        r"^Failed to load resource: net::ERR_\w+ "
        r"https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/2\.7\.7/latest\.js"
    ),
    re.compile(r"^uncaught: MathJax is not defined $"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_lab(folder: Path, extra: list[str] = (), env: dict | None = None):
    """Start JupyterLab on loopback over ``folder``; return (process, base url, token).
    Its user settings live in a fresh folder that turns off the "Jupyter news" prompt,
    which would otherwise cover the lower right of every screenshot."""
    port, token = free_port(), "browser-test"
    settings = Path(tempfile.mkdtemp(prefix="lab-settings-"))
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
         "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
         f"--notebook-dir={folder}", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**(os.environ if env is None else env), "JUPYTERLAB_SETTINGS_DIR": str(settings)},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
            return server, base, token
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                os.killpg(server.pid, signal.SIGTERM)
                raise AssertionError("JupyterLab did not start") from None
            time.sleep(0.5)


def stop_lab(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


@pytest.fixture(scope="session")
def lab_server():
    """``lab_server(folder, extra_args, env)`` starts JupyterLab, returns (base, token);
    every server it started stops when the session ends."""
    servers = []

    def start(folder: Path, extra: list[str] = (), env: dict | None = None):
        server, base, token = start_lab(folder, extra, env)
        servers.append(server)
        return base, token

    yield start
    for server in servers:
        stop_lab(server)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "Chromium is not installed (make test installs Debian's chromium)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield chromium
        chromium.close()


class Console:
    """Every console error and uncaught exception a page reports, less the harmless."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda msg: msg.type == "error" and self._add(msg.text, msg.location))
        page.on("pageerror", lambda error: self._add(f"uncaught: {error}", {}))

    def _add(self, text: str, location: dict) -> None:
        where = location.get("url", "") if location else ""
        if not any(rule.search(f"{text} {where}") for rule in HARMLESS):
            self.errors.append(f"{text} ({where})" if where else text)


def new_page(browser):
    """A page whose console errors are collected in ``page.console.errors``."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.console = Console(page)
    return page


@pytest.fixture
def page(browser):
    """A fresh page whose console errors are collected; ``page.console.errors``."""
    page = new_page(browser)
    yield page
    page.close()


# JupyterLab's app is up; the current notebook's kernel is idle.
APP_READY = "() => !!window.jupyterapp?.commands.hasCommand('docmanager:open')"
KERNEL_IDLE = """() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel
  ?.status === 'idle'"""


class Lab:
    """One JupyterLab page, reused for many notebooks: opening JupyterLab costs seconds of
    CPU, opening a notebook in it much less. The server must expose the app
    (``--LabApp.expose_app_in_browser=True``)."""

    def __init__(self, page, base: str, token: str):
        self.page = page
        page.goto(f"{base}/lab?reset&token={token}", timeout=120_000)
        page.wait_for_function(APP_READY, timeout=120_000)
        page.evaluate("() => window.jupyterapp.restored.then(() => true)")

    def open(self, path: str) -> None:
        """Open ``path`` as the only tab, with a fresh console log, and wait for its kernel."""
        self.close_all()
        self.page.console.errors.clear()
        # .then(() => 1): the command resolves to the notebook widget, which Playwright
        # would serialize, seconds of CPU for a graph of thousands of objects.
        self.page.evaluate(
            "p => window.jupyterapp.commands.execute('docmanager:open', {path: p}).then(() => 1)",
            path,
        )
        self.page.wait_for_function(
            "p => window.jupyterapp.shell.currentWidget?.context?.path === p", arg=path,
            timeout=60_000)  # fmt: skip
        self.wait_idle()

    def wait_idle(self, timeout: float = 120_000) -> None:
        """Wait until the current notebook's kernel is idle."""
        self.page.wait_for_function(KERNEL_IDLE, timeout=timeout)

    def close_all(self) -> None:
        """Close every tab without saving and shut every kernel down."""
        self.page.evaluate("""async () => {
          const app = window.jupyterapp;
          for (const widget of [...app.shell.widgets('main')]) {
            if (widget.context) widget.context.model.dirty = false;
            widget.dispose();
          }
          await app.serviceManager.sessions.shutdownAll();
        }""")


@pytest.fixture(scope="session")
def lab_page(browser):
    """``lab_page(base, token)``: a ``Lab`` on a page of its own; pages close at the end."""
    pages = []

    def open_lab(base: str, token: str) -> Lab:
        pages.append(new_page(browser))
        return Lab(pages[-1], base, token)

    yield open_lab
    for page in pages:
        page.close()


def save_screenshot(page, name: str, full_page: bool = False) -> Path:
    """Save a screenshot under test-artifacts/browser/ (CI keeps the folder)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@pytest.fixture
def screenshot():
    """``screenshot(page, name)`` saves test-artifacts/browser/<name>.png."""
    return save_screenshot
