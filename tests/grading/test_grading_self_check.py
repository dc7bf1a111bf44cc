"""Self-check of written answers: ``python -m grading check NOTEBOOK --rubrics`` shows each
written answer beside its model answer and rubric, from ``solutions/`` when the checkout
has it, else from a release made with the course setting ``c.SelfCheck.rubrics`` on. The
setting is off: a classroom release carries no model answer, byte for byte nbgrader's."""

from __future__ import annotations

import re

import nbformat
import pytest
from grading_fixture import NAME, WRITTEN_ID
from grading_support import demo_answers, fill, release_of

from grading import __main__ as grading_main
from grading import course
from grading.release import RELEASE, chapters, generate_release

MODEL = "Because decode reads every weight per token."
RUBRIC = "**Rubric**: 2 points for naming weight reads."
MINE = "Decode has to stream all the weights for each new token."


def written_cells(nb: nbformat.NotebookNode) -> list:
    return [c for c in nb.cells if c.cell_type == "markdown" and course.meta(c).get("grade")]


def test_the_setting_is_read_from_the_course_config_and_is_off(tmp_path):
    assert course.self_check() is False
    config = tmp_path / "nbgrader_config.py"
    config.write_text("c = get_config()\nc.SelfCheck.rubrics = True\n")
    assert course.self_check(config) is True


@pytest.mark.parametrize("chapter", chapters(RELEASE))
def test_the_default_release_holds_no_model_answer(chapter):
    nb = nbformat.read(course.source_notebook(chapter, RELEASE), as_version=4)
    assert written_cells(nb), chapter
    assert course.model_answers(nb) == {}
    assert not [c for c in nb.cells if "self_check" in c.metadata]


@pytest.fixture(scope="module")
def self_check_release(demo, tmp_path_factory):
    target = tmp_path_factory.mktemp("self-check") / "release"
    generate_release(None, demo["source"], target, self_check=True)
    return target


def test_a_self_check_release_adds_the_model_answers_and_nothing_else(demo, self_check_release):
    plain, with_models = release_of(demo["release"], NAME), release_of(self_check_release, NAME)
    (cell,) = written_cells(with_models)
    assert cell.metadata["self_check"] == {"model_answer": f"{MODEL}\n{RUBRIC}"}
    del cell.metadata["self_check"]
    assert with_models == plain  # solutions, hidden tests and outputs still gone


def learner(tmp_path, release) -> str:
    """A learner's notebook: one right answer, and a written answer of their own."""
    answers = demo_answers({"ch99_square": "right"}) | {WRITTEN_ID: MINE}
    path = tmp_path / f"{NAME}.ipynb"
    nbformat.write(fill(release_of(release, NAME), answers), path)
    return str(path)


def check(capsys, *args: str) -> str:
    assert grading_main.main(["check", *args]) == 1  # not every question is answered
    return capsys.readouterr().out


def test_check_shows_the_model_answer_beside_the_learners(demo, self_check_release, tmp_path,
                                                           capsys):  # fmt: skip
    notebook = learner(tmp_path, demo["release"])
    missing = str(tmp_path / "no-solutions")
    shown = {
        "from solutions/": check(capsys, notebook, "--rubrics", "--source", str(demo["source"])),
        "from a self-check release": check(capsys, notebook, "--rubrics", "--source", missing,
                                           "--release", str(self_check_release)),  # fmt: skip
    }
    for where, out in shown.items():
        assert re.search(r"ch99_square_test +1/1 +passed", out), (where, out)
        mine, model = out.split(f"{WRITTEN_ID} (2 points, graded by hand)")[1].split("model answer")
        assert f"| {MINE}" in mine, (where, out)
        assert f"| {MODEL}\n    | {RUBRIC}" in model, (where, out)
    classroom = check(capsys, notebook, "--rubrics", "--source", missing,
                      "--release", str(demo["release"]))  # fmt: skip
    assert f"| {MINE}" in classroom and MODEL not in classroom
    assert "no model answer here" in classroom
    plain = check(capsys, notebook, "--source", str(demo["source"]))
    assert MODEL not in plain and MINE not in plain and "add --rubrics" in plain
