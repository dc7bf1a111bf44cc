"""A notebook's stored outputs made stable: what changes on every run but carries no
meaning (execution counts, timing metadata, random widget ids) is dropped or renumbered, so
a rerun diffs only where a value changed. ``make outputs`` (``grading.outputs``) cleans the
chapters with it, and ``make gpu-reference`` the notebooks it runs; nbformat only, no torch.
"""

from __future__ import annotations

import json

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop what changes on every run but carries no meaning.

    Execution counts become 1, 2, 3, … in cell order (nbval refuses a cell with outputs but
    no count, and a top-to-bottom run numbers them so anyway); timing metadata goes. The
    widget state stays (the book and a kernel-less JupyterLab draw each widget's last view
    from it, a progress bar's final state too), with its random model ids renamed in order
    of appearance (``stable_widget_ids``) so that a rerun diffs only where a value changed.
    """
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code_cells, start=1):
        cell.execution_count = number
        cell.metadata.pop("execution", None)
        for output in cell.outputs:
            if "execution_count" in output:
                output.execution_count = number
    return stable_widget_ids(nb)


def stable_widget_ids(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Rename the widget models (random uuid4 hex, new on every run) to ids numbered in
    the order the kernel created them, in the stored state and in the views that show them;
    a view whose model is not in the state (no state stored) is dropped, keeping its text."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    renamed = {old: f"{number:032x}" for number, old in enumerate(state, start=1)}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                continue
            if view.get("model_id") in renamed:
                view["model_id"] = renamed[view["model_id"]]
            else:
                del output.data[WIDGET_VIEW]
        if cell.get("outputs"):
            cell.outputs = [o for o in cell.outputs if o.get("data", True)]
    if renamed:
        text = json.dumps(nb.metadata.widgets)
        for old, new in renamed.items():  # the state refers to models as "IPY_MODEL_<id>"
            text = text.replace(old, new)
        nb.metadata.widgets = nbformat.from_dict(json.loads(text))
    else:
        nb.metadata.pop("widgets", None)
    return nb
