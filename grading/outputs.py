"""The stored outputs: re-execute each solutions notebook in place and strip volatile noise
(execution counts, timing metadata, random widget ids: ``helpers.book.stored_outputs.clean``)
so that reruns diff cleanly and nbval compares only what matters.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from grading.release import SOURCE, chapters
from helpers.book.stored_outputs import clean


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


def refresh_outputs(
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
