"""Formgrader in JupyterLab's server, for a course with one graded submission: the gradebook
lists it as needing a manual grade, and its written answer waits there with an empty score
box."""

from __future__ import annotations

import re
import subprocess
import sys

import nbformat
import pytest
from answers import filled, solutions
from playwright.sync_api import expect

from grading.release import RELEASE, ROOT, SOURCE, tool_environment

pytestmark = pytest.mark.browser

CHAPTER = "01_flops"
STUDENT = "alice"


def written_answers() -> dict[str, tuple[str, float]]:
    """grade_id -> (the answer our student writes, its points), for each written answer."""
    nb = nbformat.read(SOURCE / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    return {
        meta["grade_id"]: (
            f"Alice on {meta['grade_id']}: 2N counts one multiply-add per weight per token; "
            "it is too high for the embedding lookup, too low for long-context attention.",
            meta["points"],
        )
        for cell in nb.cells
        if cell.cell_type == "markdown"
        and (meta := cell.metadata.get("nbgrader", {})).get("grade")
        and meta.get("solution")
    }


def student_notebook() -> nbformat.NotebookNode:
    """The chapter as released, worked by a student: each code answer is the model solution
    (``answers``), each written answer a paragraph of the student's own."""
    mine = {grade_id: text for grade_id, (text, _) in written_answers().items()}
    release = nbformat.read(RELEASE / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    return filled(release, solutions(CHAPTER) | mine)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, lab_server):
    """JupyterLab with formgrader over a course folder in which ``python -m grading grade``
    has graded one submission; its nbgrader_config.py is the course config of grading/,
    pointed at that folder. The grading runs while JupyterLab starts: formgrader opens the
    gradebook at its first request."""
    tmp = tmp_path_factory.mktemp("formgrader")
    submission = tmp / "inbox" / STUDENT / CHAPTER
    submission.mkdir(parents=True)
    nbformat.write(student_notebook(), submission / f"{CHAPTER}.ipynb")
    course = tmp / "course"
    course.mkdir()
    # --unsafe: the answers are the repository's own solutions, and the sandbox has tests of
    # its own; this test is about what formgrader shows.
    grading = subprocess.Popen(
        [sys.executable, "-m", "grading", "grade", CHAPTER, "--from-folder", str(tmp / "inbox"),
         "--course", str(course), "--unsafe", "--jobs", "1"],
        cwd=ROOT, env=tool_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    config = tmp / "config"
    config.mkdir()
    (config / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig('nbgrader_config.py', path={str(ROOT / 'grading')!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(course / 'gradebook.db')!r}\n"
        f"c.Exchange.root = {str(tmp / 'exchange')!r}\n",
        encoding="utf-8",
    )
    try:
        served = lab_server(course, [], {**tool_environment(), "JUPYTER_CONFIG_PATH": str(config)})
        output, _ = grading.communicate(timeout=600)
    finally:
        grading.kill()
    assert grading.returncode == 0, output
    assert (course / "gradebook.db").is_file(), output
    return served


def log_in(page, base: str, token: str, path: str) -> None:
    """Open ``path`` as a user does: Jupyter's login page asks for the token, then goes on.
    (Not ``path?token=``: formgrader's handlers drop the server's base url "/", so the login
    cookie a token URL sets there has no Path, the browser keeps it for that page's folder
    only, and formgrader's own API calls from the page are sent to the login page.)"""
    page.goto(f"{base}{path}", timeout=60_000)
    page.locator("#password_input").fill(token)
    page.locator("#login_submit").click()
    page.wait_for_url(f"{base}{path}", timeout=60_000)


def test_formgrader_shows_the_written_answer_for_manual_grading(page, lab, screenshot):
    base, token = lab
    written = written_answers()
    assert written, f"{CHAPTER} has no written answer"
    log_in(page, base, token, f"/formgrader/gradebook/{CHAPTER}/{CHAPTER}")

    # The gradebook of the notebook: one submission, flagged as needing a manual grade.
    rows = page.locator("#main-table tr")
    expect(rows.filter(has_text="Submission #1")).to_have_count(1, timeout=60_000)
    assert rows.count() == 1
    row = rows.first
    expect(row.locator("td.needs-manual-grade .glyphicon-ok")).to_have_count(1)
    expect(row.locator("td.needs-manual-grade")).to_have_attribute(
        "data-search", "needs manual grade")  # fmt: skip
    expect(row.locator("td.written-score")).to_have_text(
        f"0 / {sum(points for _, points in written.values()):g}")  # fmt: skip
    screenshot(page, "formgrader-gradebook")

    # The submission: each written answer's text, with an empty manual score box.
    row.locator("td.name a.name-hidden").click()
    page.wait_for_url(f"{base}/formgrader/submissions/*/", timeout=60_000)
    page.wait_for_function("() => window.formgrader?.grades?.loaded === true", timeout=60_000)
    for grade_id, (answer, _) in written.items():
        cell = page.locator(".nbgrader_cell", has=page.locator(f"input.score#{grade_id}"))
        expect(cell.locator(".panel-body")).to_contain_text(answer)
        box = cell.locator(f"input.score#{grade_id}")
        expect(box).to_have_value("")
        assert box.get_attribute("placeholder") is None, f"{grade_id} has an autograded score"
        expect(box).to_have_class(re.compile(r"\bneeds_manual_grade\b"))
    cell = page.locator(".nbgrader_cell", has=page.locator(f"input.score#{next(iter(written))}"))
    cell.scroll_into_view_if_needed()
    screenshot(page, "formgrader-submission")
    assert not page.console.errors, page.console.errors
