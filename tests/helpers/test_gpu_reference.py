"""The GPU edition: ``helpers.programs.gpu_reference`` (``make gpu-reference``) end to end on the
CPU at
tiny sizes, and ``helpers.measuring.gpu_edition.show_edition`` with and without files.

What the end-to-end run covers: every measuring step (chapters 4-7, in the script's own
process: ``--no-isolation``, since a torch import per step would cost the test most of its
time), the fidelity hook, one chapter executed by a real kernel (chapter 4, its first two code
cells), the manifest and the pack. What it does not: the subprocess per step, which
``test_a_step_in_its_own_process_*`` covers without torch; a GPU; the real sizes.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import nbformat
import pytest
import torch
from filelock import FileLock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from PIL import Image

from helpers.measuring import gpu_edition, machine
from helpers.programs import gpu_reference

EXECUTED = "04_timing"
@pytest.fixture(scope="session")
def edition(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny CPU run of the whole script, into a temporary folder (never helpers/data),
    made once per pytest run: under xdist the workers share the folder above their own, and
    the first to take the lock makes the run for all. It defeats an 8 MiB cache whatever the
    host's: the measuring code it calls (ceilings, the sweep, chapter 4) runs at each of
    ``make test``'s cache sizes in their own tests, so this run checks the script once."""
    root = tmp_path_factory.getbasetemp().parent / "gpu_editions"
    out, pack = root / "cpu_run", root / "edition.tar.gz"
    with FileLock(f"{root}.lock"):
        if not (root / "done").exists():
            root.mkdir(exist_ok=True)
            done = subprocess.run(
                [sys.executable, "-m", "helpers.programs.gpu_reference", "--device", "cpu",
                 "--tiny", "--no-isolation", "--notebooks", EXECUTED, "--out", str(out), "--pack",
                 str(pack)],
                capture_output=True, text=True, timeout=600,  # a hang guard, not a speed test
                env={**os.environ, machine.LLC_ENV: "8MiB"},
            )  # fmt: skip
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            (root / "done").touch()
    return out


def _stamp_is_this_run(found: dict[str, str]) -> None:
    assert found["device"] == "cpu" and found["torch_version"] == torch.__version__
    assert found["device_name"] == machine.device_name("cpu") and found["date"][:2] == "20"


@pytest.mark.slow
def test_every_chapter_file_is_written_and_stamped(edition: Path):
    for chapter in gpu_edition.CHAPTERS:
        data = json.loads((edition / f"{chapter}.json").read_text())
        _stamp_is_this_run(data["stamp"])
        assert data["tiny"] is True
        with Image.open(edition / f"{chapter}.png") as image:
            assert image.format == "PNG"
            assert json.loads(image.text["Description"]) == data["stamp"]


@pytest.mark.slow
def test_each_step_measured_what_its_chapter_shows(edition: Path):
    timing_data = json.loads((edition / "04_timing.json").read_text())
    assert set(timing_data["ceilings"]["matmul_flops"]) == {"fp32", "bf16"}  # no fp16 on a CPU
    sweep = json.loads((edition / "05_matmuls.json").read_text())
    assert {p["dtype"] for p in sweep["points"]} == {"fp32", "bf16"}
    assert len(sweep["points"]) == 2 * 4 * 2  # dtypes × shapes × token counts (1, 2)
    latency = json.loads((edition / "06_ttft_tpot.json").read_text())
    assert [m["layers"] for m in latency["models"]] == [1, 2]
    for model in latency["models"]:
        assert [r["prompt"] for r in model["prefill"]] == [8, 32]
        assert [r["context"] for r in model["decode"]] == [8, 64]
        assert all(0 < r["mfu"] and r["predicted_s"] > 0 for r in model["prefill"])
        assert all(0 < r["mbu"] and r["bytes"] > 0 for r in model["decode"])
    batching = json.loads((edition / "07_batching.json").read_text())
    assert [r["batch"] for r in batching["rows"]] == [1, 4] and batching["cap"] == 4
    assert batching["stopped"] == ""


@pytest.mark.slow
def test_the_manifest_records_every_step(edition: Path):
    manifest = json.loads((edition / "manifest.json").read_text())
    _stamp_is_this_run(manifest["stamp"])
    status = {step["name"]: step["status"] for step in manifest["steps"]}
    assert list(status) == [step.name for step in gpu_reference.STEPS]
    assert [status[name] for name in gpu_reference.MEASURING] == ["ok"] * 4
    assert status[f"notebook {EXECUTED}"] == "ok"
    others = [f"notebook {c}" for c in gpu_edition.CHAPTERS if c != EXECUTED]
    assert [status[name] for name in others] == ["not asked for"] * 3
    expected = ("skipped: the fidelity run has no tiny size" if gpu_reference.fidelity_available()
                else "skipped: helpers.serving has no --fidelity yet")  # fmt: skip
    assert status["fidelity"] == expected


@pytest.mark.slow
def test_the_executed_notebook_ran_on_this_device(edition: Path):
    nb = nbformat.read(edition / gpu_edition.NOTEBOOKS / f"{EXECUTED}.ipynb", as_version=4)
    _stamp_is_this_run(nb.metadata["gpu_edition"])
    assert nb.metadata["gpu_edition"]["outcome"] == "ok"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert len(code) == 2  # --tiny: the first two code cells
    printed = "".join(out.get("text", "") for out in code[1].outputs)
    assert printed.startswith(f"device: cpu ({machine.device_name('cpu')}), torch ")


@pytest.mark.slow
def test_the_pack_holds_the_edition(edition: Path):
    with tarfile.open(edition.parent / "edition.tar.gz") as tar:
        names = set(tar.getnames())
    assert {f"cpu_run/{c}.json" for c in gpu_edition.CHAPTERS} <= names
    assert f"cpu_run/notebooks/{EXECUTED}.ipynb" in names and "cpu_run/manifest.json" in names


@pytest.fixture
def shell():
    """A real IPython shell, so that ``display`` records rich outputs; removed afterwards."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    try:
        yield capture_output
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.slow
def test_show_edition_prints_the_figures_and_displays_the_png(edition: Path, shell):
    for chapter in gpu_edition.CHAPTERS:
        found = gpu_edition.editions(chapter, root=edition.parent)
        assert [e.folder for e in found] == [edition]
        with shell() as captured:
            gpu_edition.show_edition(chapter, root=edition.parent)
        stamp = found[0].stamp
        first = captured.stdout.splitlines()[0]
        assert first.startswith("GPU edition, measured on ")
        assert (f" {machine.device_name('cpu')}, torch {torch.__version__}, on "
                f"{stamp['date'][:10]} ") in first  # fmt: skip
        assert len(captured.stdout.splitlines()) > 2  # the stamp, then the figures
        (image,) = captured.outputs
        png = (edition / f"{chapter}.png").read_bytes()
        assert base64.b64decode(image.data["image/png"]) == png
        shown_notebook = f"notebooks/{chapter}.ipynb" in captured.stdout
        assert shown_notebook == (chapter == EXECUTED)


def test_show_edition_without_a_file_shows_nothing_but_the_note(tmp_path, shell):
    (tmp_path / "nvidia_h200").mkdir()  # a device folder without this chapter's file
    assert gpu_edition.editions("06_ttft_tpot", root=tmp_path) == []
    with shell() as captured:
        gpu_edition.show_edition("06_ttft_tpot", root=tmp_path)
    assert captured.stdout.startswith("No GPU edition of this chapter has been measured yet")
    # a reader's note: no file path, no maintainer's command
    assert "helpers/" not in captured.stdout and "make " not in captured.stdout
    assert captured.outputs == []


def test_an_edition_file_without_a_stamp_is_named(tmp_path):
    (tmp_path / "nvidia_h200").mkdir()
    (tmp_path / "nvidia_h200" / "04_timing.json").write_text('{"ceilings": {}}')
    with pytest.raises(ValueError, match=r"nvidia_h200/04_timing.json is not a GPU edition"):
        gpu_edition.editions("04_timing", root=tmp_path)
    with pytest.raises(ValueError, match="no GPU edition for chapter '08_serving'"):
        gpu_edition.editions("08_serving", root=tmp_path)


def test_device_names_become_folder_names_and_stamps_read_aloud():
    assert gpu_edition.device_slug("NVIDIA H200") == "nvidia_h200"
    assert gpu_edition.device_slug("NVIDIA A100-SXM4-80GB") == "nvidia_a100_sxm4_80gb"
    with pytest.raises(ValueError, match="no letters or digits"):
        gpu_edition.device_slug(" -- ")
    found = {"device_name": "NVIDIA H200", "torch_version": "2.11.0+cu130",
             "date": "2026-12-01T22:05:00+00:00"}
    assert gpu_edition.stamp_line(found) == ("measured on an NVIDIA H200, torch 2.11.0+cu130, "
                                             "on 2026-12-01")  # fmt: skip
    assert gpu_edition.stamp_line({**found, "device_name": "Tesla T4"}).startswith(
        "measured on a Tesla T4")


def test_a_cpu_run_may_not_write_into_the_gpu_editions(capsys):
    target = gpu_edition.ROOT / "not_a_gpu"
    code = gpu_reference.main(["--device", "cpu", "--tiny", "--out", str(target)])
    assert code == 2 and not target.exists()
    assert "holds only full GPU runs" in capsys.readouterr().err


def test_a_step_in_its_own_process_is_logged_and_killed_at_its_limit(tmp_path):
    env = {**os.environ}
    say = [sys.executable, "-c", "print('measured')"]
    assert gpu_reference._run_logged(say, tmp_path / "ok.log", 60, env, "stamp") == "ok"
    assert (tmp_path / "ok.log").read_text().splitlines()[::2] == ["# stamp", "measured"]
    fail = [sys.executable, "-c", "raise SystemExit(3)"]
    assert gpu_reference._run_logged(fail, tmp_path / "bad.log", 60, env, "s").startswith(
        "failed (exit 3)")
    hang = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    assert gpu_reference._run_logged(hang, tmp_path / "hang.log", 1, env, "s") == (
        "timed out after 1 s")
    assert "started" in (tmp_path / "hang.log").read_text()


def test_the_wheels_are_exactly_what_the_jupyter_stack_needs_beyond_the_gpu_image():
    """``GPU_WHEELS``: the dependencies (for CPython 3.12 on Linux) of nbclient, nbformat,
    ipykernel and ipywidgets, read from this environment's installed metadata, that
    ``ASSUMED_PRESENT`` and ``OPTIONAL`` leave out; one version of each."""
    marker_env = {"python_version": "3.12", "python_full_version": "3.12.3",
                  "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                  "implementation_name": "cpython", "platform_machine": "x86_64",
                  "platform_python_implementation": "CPython", "extra": ""}  # fmt: skip
    present = {canonicalize_name(n) for n in gpu_reference.ASSUMED_PRESENT}
    skipped = present | {canonicalize_name(n) for n in gpu_reference.OPTIONAL}
    needed, todo = set(), [canonicalize_name(n) for n in gpu_reference.JUPYTER_ROOTS]
    while todo:
        name = todo.pop()
        if name in needed or name in skipped:
            continue
        needed.add(name)
        for text in importlib.metadata.distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate(marker_env):
                todo.append(canonicalize_name(requirement.name))
    pinned = [canonicalize_name(Requirement(w).name) for w in gpu_reference.GPU_WHEELS]
    assert len(pinned) == len(set(pinned))
    assert set(pinned) == needed
    assert all(len(Requirement(w).specifier) == 1 for w in gpu_reference.GPU_WHEELS)
