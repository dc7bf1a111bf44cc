"""Build steps for the notebooks: the student release and the stored outputs.

``release``: nbgrader's own ``generate_assignment`` turns each ``solutions/NN_name``
into ``notebooks/NN_name`` (solutions stubbed, hidden tests and outputs removed,
checksums recorded). It runs in a throwaway course folder so the repository never
collects a gradebook or nbgrader's intermediate folders.

``outputs``: re-execute each solutions notebook in place and strip volatile noise
(execution counts, timing metadata) so that reruns diff cleanly and nbval compares
only what matters.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "solutions"
RELEASE = ROOT / "notebooks"


def chapters(source: Path = SOURCE) -> list[str]:
    """Assignment names: every ``NN_name`` folder holding ``NN_name.ipynb``."""
    return sorted(p.parent.name for p in source.glob("*/*.ipynb") if p.stem == p.parent.name)


def tool_environment() -> dict[str, str]:
    """This environment with the interpreter's bin folder first on PATH: nbgrader runs
    ``alembic`` by name, which is not found when the venv is not activated."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}


def release(
    names: list[str] | None = None,
    source: Path = SOURCE,
    target: Path = RELEASE,
    self_check: bool | None = None,
    progress: bool = False,
) -> list[Path]:
    """Regenerate the student release of every chapter (or of ``names``); returns the
    notebooks written. A whole release also removes chapters no longer in the source;
    ``progress`` shows a bar over the chapters.
    ``self_check`` (default: the course setting ``c.SelfCheck.rubrics``, off) also puts
    the written answers' model answers and rubrics in the release."""
    known = chapters(source)
    if not known:
        raise FileNotFoundError(f"no chapters under {source} (expected NN_name/NN_name.ipynb)")
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise FileNotFoundError(f"no chapter {', '.join(unknown)} under {source}")
    names = names or known
    written = []
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        course = Path(tmp)
        shutil.copytree(source, course / "source", ignore=shutil.ignore_patterns(".*"))
        (course / "nbgrader_config.py").write_text("# settings come from the command line\n")
        for name in tqdm(names, desc="release", unit="chapter", disable=not progress):
            drop_widget_state(course / "source" / name)
            subprocess.run(
                [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force",
                 "--log-level=WARN",
                 f"--CourseDirectory.root={course}",
                 f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}"],
                check=True,
                cwd=course,
                env=tool_environment(),
            )  # fmt: skip
        if names == known and target.exists():
            shutil.rmtree(target)
        for name in names:
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(course / "release" / name, target / name)
    if self_check is None:
        from grading.course import self_check as setting

        self_check = setting()
    if self_check:  # off by default: the release is then nbgrader's, byte for byte
        from grading.course import with_model_answers

        for name in names:
            path = target / name / f"{name}.ipynb"
            nb = nbformat.read(path, as_version=4)
            if with_model_answers(nb, nbformat.read(source / name / f"{name}.ipynb", 4)):
                nbformat.write(nb, path)
    for name in names:
        written.extend(sorted((target / name).glob("*.ipynb")))
    return written


def drop_widget_state(folder: Path) -> None:
    """Remove the stored widget state from the notebooks in ``folder``: nbgrader clears the
    outputs that show it, and a release must not carry views of the solutions' runs."""
    for path in folder.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        if nb.metadata.pop("widgets", None) is not None:
            nbformat.write(nb, path)


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


def execute(path: Path, timeout: int = 120, progress: bool = False) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in its own folder with a fresh kernel; ``progress``
    shows a bar over its code cells."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    cells = sum(cell.cell_type == "code" for cell in nb.cells)
    with tqdm(total=cells, desc=path.stem, unit="cell", disable=not progress) as bar:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
            record_timing=False,
            store_widget_state=True,  # the widgets' last views, kept by clean()
            on_cell_executed=lambda **_: bar.update(),
        )
        client.execute()
    return clean(nb)


def outputs(
    names: list[str] | None = None, source: Path = SOURCE, progress: bool = False
) -> list[Path]:
    """Re-execute solutions notebooks in place (all chapters, or ``names``)."""
    done = []
    for name in names or chapters(source):
        path = source / name / f"{name}.ipynb"
        if not path.is_file():
            raise FileNotFoundError(f"no notebook {path}")
        nbformat.write(execute(path, progress=progress), path)
        done.append(path)
    return done
