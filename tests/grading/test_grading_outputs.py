"""``python -m grading outputs``: the stored widget state survives, with ids that do not
change from run to run, and the release never carries it."""

from __future__ import annotations

import json
import math

import nbformat
import pytest

from grading.outputs import execute
from grading.release import RELEASE, SOURCE, chapters, drop_widget_state
from helpers.book.stored_outputs import WIDGET_STATE, WIDGET_VIEW, clean

WIDGETS = [
    "import ipywidgets as widgets\nfrom tqdm.auto import tqdm",
    "for _ in tqdm(range(3), desc='loop'):\n    pass",
    "widgets.interact(lambda n: print('n is', n), n=(1, 5));",
]


def state_of(nb) -> dict:
    return nb.metadata.widgets[WIDGET_STATE]["state"]


def views_of(nb) -> list[str]:
    return [out.data[WIDGET_VIEW]["model_id"] for cell in nb.cells
            for out in cell.get("outputs", []) if WIDGET_VIEW in out.get("data", {})]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same small notebook executed twice, as ``outputs`` does."""
    path = tmp_path_factory.mktemp("outputs") / "widgets.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in WIDGETS]
    nbformat.write(nb, path)
    return execute(path), execute(path)


def test_widget_ids_are_the_same_on_every_run(runs):
    first, second = runs
    assert list(state_of(first)) == list(state_of(second))
    assert list(state_of(first))[0] == f"{1:032x}"
    assert views_of(first) == views_of(second)


def test_every_view_shows_a_stored_model_with_its_last_state(runs):
    nb = runs[0]
    state, views = state_of(nb), views_of(nb)
    assert len(views) == 2 and set(views) <= set(state)  # the bar and the explorer
    text = json.dumps(nb.metadata.widgets)
    # References between models use the new ids only.
    for reference in {part[:32] for part in text.split("IPY_MODEL_")[1:]}:
        assert reference in state, reference
    bars = [m["state"] for m in state.values() if m["model_name"] == "FloatProgressModel"]
    assert [(bar["value"], bar["max"]) for bar in bars] == [(3, 3)]  # its final state
    outputs = [m["state"]["outputs"] for m in state.values() if m["model_name"] == "OutputModel"]
    assert outputs == [[{"output_type": "stream", "name": "stdout", "text": "n is 3\n"}]]


def test_a_view_without_stored_state_is_dropped_keeping_its_text():
    nb = nbformat.v4.new_notebook()
    view = {"model_id": "f" * 32, "version_major": 2, "version_minor": 0}
    nb.cells = [nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("display_data", {WIDGET_VIEW: view, "text/plain": "HBox()"}),
        nbformat.v4.new_output("display_data", {WIDGET_VIEW: view}),
    ])]  # fmt: skip
    done = clean(nb)
    assert [out.data for out in done.cells[0].outputs] == [{"text/plain": "HBox()"}]
    assert "widgets" not in done.metadata


def test_the_release_drops_the_widget_state(tmp_path, runs):
    nbformat.write(runs[0], tmp_path / "widgets.ipynb")
    drop_widget_state(tmp_path)
    assert "widgets" not in nbformat.read(tmp_path / "widgets.ipynb", as_version=4).metadata
    for chapter in chapters():
        release = nbformat.read(RELEASE / chapter / f"{chapter}.ipynb", as_version=4)
        assert "widgets" not in release.metadata, chapter


@pytest.mark.parametrize("chapter", chapters())
def test_stored_widget_views_have_their_state(chapter):
    """The book draws each widget from the state stored with the chapter."""
    nb = nbformat.read(SOURCE / chapter / f"{chapter}.ipynb", as_version=4)
    views = views_of(nb)
    assert views, f"{chapter} stores no widget view: rerun `make outputs`"
    assert set(views) <= set(state_of(nb)), chapter


SLIDERS = {"FloatSliderModel", "IntSliderModel", "FloatLogSliderModel"}


@pytest.mark.parametrize("chapter", chapters())
def test_stored_sliders_sit_on_their_steps(chapter):
    """A slider whose value is off its grid is moved to the nearest step as it is drawn,
    and its explorer reruns: the book would show one value beside a view of another."""
    nb = nbformat.read(SOURCE / chapter / f"{chapter}.ipynb", as_version=4)
    for model in state_of(nb).values():
        if model["model_name"] not in SLIDERS:
            continue
        slider = model["state"]
        position = slider["value"]
        if model["model_name"] == "FloatLogSliderModel":
            position = math.log(position, slider.get("base", 10))
        steps = (position - slider["min"]) / slider["step"]
        assert slider["min"] <= position <= slider["max"], slider
        assert abs(steps - round(steps)) < 1e-9, (
            f"{slider.get('description')}: {slider['value']} is between two steps")
