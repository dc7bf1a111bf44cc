"""The student release: nbgrader's own ``generate_assignment`` turns each
``solutions/NN_name`` into ``notebooks/NN_name`` (solutions stubbed, hidden tests and
outputs removed, checksums recorded). It runs in a throwaway course folder so the
repository never collects a gradebook or nbgrader's intermediate folders. Also where the
chapters live: ``solutions/`` (the source) and ``notebooks/`` (the release).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

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


def generate_release(
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
        for name in names:  # only the chapters asked for, so that "*" below means them
            shutil.copytree(source / name, course / "source" / name,
                            ignore=shutil.ignore_patterns(".*"))  # fmt: skip
            drop_widget_state(course / "source" / name)
        (course / "nbgrader_config.py").write_text("# settings come from the command line\n")
        # One nbgrader process for every chapter (its assignment id is a glob): each process
        # costs about 2 s to start, which was most of a chapter's release.
        with tqdm(total=len(names), desc="release", unit="chapter", disable=not progress) as bar:
            subprocess.run(
                [sys.executable, "-m", "nbgrader", "generate_assignment", "*", "--force",
                 "--log-level=WARN",
                 f"--CourseDirectory.root={course}",
                 f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}"],
                check=True,
                cwd=course,
                env=tool_environment(),
            )  # fmt: skip
            bar.update(len(names))
        missing = [name for name in names if not (course / "release" / name).is_dir()]
        if missing:  # nbgrader logs a chapter it could not convert and goes on
            raise RuntimeError(f"nbgrader made no release of {', '.join(missing)}: see its log")
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
