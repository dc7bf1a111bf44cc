"""The GPU edition of chapters 4-7 in one command: ``make gpu-reference``.

``python -m helpers.programs.gpu_reference --device cuda`` (what the Makefile runs, with
``PYTHONPATH=.``
and the system ``python3``: no virtual environment, nothing installed from a registry) measures
on one GPU, at the real sizes, and writes ``helpers/data/gpu/<device>/``
(``helpers.measuring.gpu_edition``
describes the files; every one carries the device, torch's version and the date):

========== ============ ======================================================================
step       chapter      what it measures
========== ============ ======================================================================
ceilings   04_timing    the matmul ceilings in fp32, bf16 and fp16 and the read bandwidth, in
                        full mode (``ceilings.measure_ceilings``)
sweep      05_matmuls   ``helpers.programs.bench`` at full size: Qwen2.5-7B's layer shapes, fp32 and
                        bf16, m = 1 … 4096, with its interleaved ceilings
latency    06_ttft_tpot TTFT against prompt length and TPOT against context, with MFU and MBU,
                        for Qwen2.5-0.5B (all 24 layers) and Qwen2.5-7B, random bf16 weights,
                        timed as chapter 6 §4-5 times them
batching   07_batching  the decode batch sweep of chapter 7 §2 (Qwen2.5-0.5B, 24 layers, bf16,
                        context 512), batch ×4 from 1 up to the memory cap
fidelity   (serving)    ``python -m helpers.serving --fidelity`` where ``helpers.serving`` has it
                        (the real engine against the simulator); recorded as skipped otherwise
notebooks  04-07        each chapter executed top to bottom on the GPU (nbclient,
                        ``TEXTBOOK_DEVICE=cuda``), saved under ``notebooks/``
========== ============ ======================================================================

Each measuring step runs in its own process, killed at its time limit, so one that fails or
overruns is recorded in ``manifest.json`` and the run goes on. The notebooks need the Jupyter
stack (nbclient, ipykernel, ipywidgets and their dependencies); where it is missing,
``--wheels DIR`` installs the wheels ``make gpu-wheels`` downloaded (``WHEELS``) into a
temporary folder with ``pip install --no-index --no-deps --target`` and puts it on
``PYTHONPATH``. Where the stack is present nothing is installed. ``--pack FILE.tar.gz`` packs
the device's folder into one file (to carry it off a machine).

Time budget: 8 minutes on an NVIDIA H200 (``BUDGET_S``). Each step gets its limit or what is
left of the budget, whichever is less; a step with nothing left is recorded as not run.
Expected seconds (``Step.expected_s``), worked out from the H200's datasheet (989 TFLOP/s bf16
dense, 67 fp32, 4.8 TB/s; ``helpers.counting.hardware``) and assumed achievable rates, not measured
here (about 80% of the bf16 peak, 790 TFLOP/s, for an 8192³ GEMM, and 90% of the bandwidth,
4.3 TB/s, for a copy; the manifest of a real run replaces them): on CUDA every timed call of
``timing.time_callable`` follows an L2 flush (a 120 MiB ``zero_``, ~38 µs at 3.3 TB/s) and
costs ~25 µs of host time for its events, and a point takes at least 10 calls and
``min_run_time`` seconds *of timed calls*, so a point of kernel time t costs about
max(10 t, min_run_time) · (1 + 63 µs / t) of wall time:

- ceilings ≈ 20 s: fp32 5 GEMMs, the 16384³ one at 50 TFLOP/s (75% of the datasheet) 176 ms a
  call × 13 calls, the others ~0.6 s each (min_run_time 0.5 s): ~5 s; bf16 and fp16 ~2.6 s each
  (11 ms for 16384³ at 790 TFLOP/s); the 1 GiB stream 0.25 ms a call for 1 s of calls: 1.3 s;
  plus ~8 s of torch import, CUDA context and random fills;
- sweep ≈ 185 s: 104 points (2 dtypes × 4 shapes × 13 m), each t = max(FLOPs / peak, bytes /
  4.3 TB/s) + 3 µs launch, min_run_time 0.3 s: 57 s in fp32 and 98 s in bf16 (the small
  decode GEMVs cost the most: k,v at m = 1 is ~4 µs a call, so 75,000 calls for 0.3 s of
  them), plus the bench's own full ceilings before and after (~2 × 9 s) and start-up;
- latency ≈ 35 s: per model 4 prefills (0.1-0.6 s each; Qwen2.5-7B at 8192 tokens is 120
  TFLOP, ~0.2 s a call at 600 TFLOP/s) and 4 decode steps (0.2-0.8 s each, plus a quick
  stream beside each), Qwen2.5-7B's 15 GB of weights filled at ~1 TB/s; start-up ~8 s;
- batching ≈ 25 s: 9 batch sizes up to the cap (~17,800 sequences of 513 tokens in 90% of
  ~137 GB free, 6.9 MB each: 12 KiB of KV a token and two rows of logits; at the cap 112 GB of
  KV read per step, ~26 ms at 4.3 TB/s, plus 2N·B = 18 TFLOP, ~23 ms), each timed for
  0.05-0.2 s (at least 11 calls) after its cache is filled;
- fidelity ≈ 35 s: ``helpers.serving.fidelity`` profiles ~50 step shapes of Qwen2.5-0.5B,
  serves a burst, then at each of three loads a 50-request calibration trace and a
  300-request Poisson trace in real time (~7,200 output tokens a trace; at ~1,600 tokens/s of
  capacity, 16 sequences of ~10 ms eager steps, the 30% trace lasts ~15 s, the 60% ~7.5 s,
  the 90% ~5 s, the calibrations ~4.5 s in all);
- notebooks ≈ 130 s: chapter 5 ~45 s (its quick sweep is the one above at a tenth of the
  min_run_time, ~15 s, and its pairs), chapters 4, 6, 7 ~25-30 s each, a kernel start each.

Total ≈ 430 s of the 480, with the wheels' install (~5 s). The limits below leave each step
about a third more than expected; the manifest records what each one took, to correct the
table after a run.

``--device cpu --tiny`` runs every step at toy sizes (tiny models, a few shapes, the first code
cells of each chapter): how the test suite checks this script end to end. A run that is not
a full one on a GPU may not write under ``helpers/data/gpu/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.measuring import gpu_edition, machine
from helpers.programs.gpu_checks import Size, measure_step, size_for

__all__ = ["Step", "STEPS", "BUDGET_S", "JUPYTER_MODULES", "GPU_WHEELS",
           "ASSUMED_PRESENT", "OPTIONAL",
           "missing_modules", "install_wheels", "fidelity_available", "execute_notebook",
           "run", "main"]  # fmt: skip

REPO = Path(__file__).resolve().parents[2]
BUDGET_S = 480
PACK_LIMIT_BYTES = 16 * 2**20
"""A packed edition larger than this may not travel back as one file (a warning, not an
error)."""


@dataclass(frozen=True)
class Step:
    """One step of the run: its name, the chapter whose files it writes, and the seconds it
    is expected to take on an H200 and may take at most (module docstring)."""

    name: str
    chapter: str | None
    expected_s: int
    limit_s: int


STEPS = (
    Step("ceilings", "04_timing", 20, 45),
    Step("sweep", "05_matmuls", 185, 240),
    Step("latency", "06_ttft_tpot", 35, 60),
    Step("batching", "07_batching", 25, 45),
    Step("fidelity", None, 35, 60),
    Step("notebook 04_timing", "04_timing", 25, 45),
    Step("notebook 05_matmuls", "05_matmuls", 45, 75),
    Step("notebook 06_ttft_tpot", "06_ttft_tpot", 30, 50),
    Step("notebook 07_batching", "07_batching", 30, 50),
)
MEASURING = ("ceilings", "sweep", "latency", "batching")

JUPYTER_MODULES = ("nbformat", "nbclient", "jupyter_client", "ipykernel", "IPython", "ipywidgets",
                   "zmq", "tornado", "traitlets")  # fmt: skip
"""What executing the notebooks imports beyond torch, numpy, matplotlib and tqdm."""

GPU_WHEELS = (
    # nbformat, nbclient and the kernel they start
    "nbformat==5.11.1", "fastjsonschema==2.22.3", "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1",
    "nbclient==0.11.0", "jupyter-client==8.10.0", "jupyter-core==5.9.1", "platformdirs==4.14.9",
    "traitlets==5.16.1", "pyzmq==27.3.0", "tornado==6.6.1", "ipykernel==7.4.0", "comm==0.2.3",
    "nest-asyncio2==1.7.4", "matplotlib-inline==0.2.2",
    # IPython, which the kernel runs
    "ipython==9.18.1", "ipython-pygments-lexers==1.1.1", "jedi==0.20.1", "parso==0.8.7",
    "pexpect==4.9.0", "ptyprocess==0.7.0", "prompt-toolkit==3.0.53", "wcwidth==0.9.4",
    "stack-data==0.6.3", "executing==2.3.0", "asttokens==3.0.2", "pure-eval==0.2.4",
    # the chapters' explorers
    "ipywidgets==8.1.9", "widgetsnbextension==4.0.16", "jupyterlab-widgets==3.0.17",
)  # fmt: skip
"""The wheels ``make gpu-wheels`` downloads: the Jupyter stack for CPython 3.12 on x86-64 Linux,
for a machine that has a CUDA torch, numpy, matplotlib and tqdm and ``ASSUMED_PRESENT`` (as an
ML image does) but no Jupyter; the versions are those this repository's tests ran with. The
test suite checks that these are exactly the dependencies of nbclient, nbformat, ipykernel
and ipywidgets that ``ASSUMED_PRESENT`` leaves out."""
ASSUMED_PRESENT = ("attrs", "packaging", "psutil", "pygments", "python-dateutil",
                   "typing-extensions")  # fmt: skip
"""Dependencies of the Jupyter stack that a CUDA machine's Python already has (with torch,
matplotlib or pip); the run names any module still missing."""
JUPYTER_ROOTS = ("nbclient", "nbformat", "ipykernel", "ipywidgets")
OPTIONAL = ("debugpy",)
"""Dependencies left out: ipykernel runs without debugpy (no debugger), whose wheel is 4 MiB
and needs glibc 2.34."""
WHEEL_PLATFORMS = (*(f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)),
                   "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip
"""pip matches a manylinux tag exactly, so every glibc from 2.17 to 2.39 is offered."""


# ----- the serving engineer's fidelity run ----------------------------------------------------

def fidelity_available(env: dict[str, str] | None = None) -> bool:
    """Whether ``python -m helpers.serving`` offers ``--fidelity`` (its help lists it)."""
    shown = subprocess.run([sys.executable, "-m", "helpers.serving", "--help"], env=env,
                           capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    return shown.returncode == 0 and "--fidelity" in shown.stdout


# ----- the Jupyter stack ----------------------------------------------------------------------

def missing_modules(names: Sequence[str] = JUPYTER_MODULES) -> list[str]:
    """Those of ``names`` that cannot be imported here."""
    importlib.invalidate_caches()
    return [name for name in names if importlib.util.find_spec(name) is None]


def install_wheels(folder: Path | str, target: Path | str) -> list[Path]:
    """``pip install --no-index --no-deps --target target`` every wheel in ``folder``, then
    put ``target`` first on this process's path and on ``PYTHONPATH`` (for the kernels)."""
    wheels = sorted(Path(folder).glob("*.whl"))
    if not wheels:
        raise ValueError(f"no wheels (*.whl) in {folder}: `make gpu-wheels` downloads them")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                           "--no-deps", "--no-compile", "--no-cache-dir", "--target",
                           str(target), *map(str, wheels)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        raise ValueError(f"pip could not install the wheels in {folder}: "
                         f"{done.stderr.strip()[-800:]}")  # fmt: skip
    sys.path.insert(0, str(target))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target),
                                                             os.environ.get("PYTHONPATH")]))
    return wheels


# ----- the notebooks --------------------------------------------------------------------------

def _first_code_cells(cells: list[Any], count: int) -> list[Any]:
    """The cells up to and including the ``count``-th code cell."""
    kept, code = [], 0
    for cell in cells:
        if code == count:
            break
        kept.append(cell)
        code += cell.cell_type == "code"
    return kept


def execute_notebook(chapter: str, target: Path, seconds: float, found: dict[str, str],
                     cells: int | None = None) -> str:  # fmt: skip
    """Execute ``solutions/<chapter>`` top to bottom (or its first ``cells`` code cells) with
    a fresh kernel in its own folder, within ``seconds`` in all; write it to ``target`` with
    the stamp and the outcome in its metadata ("ok", "timed out …", "failed …"), and return
    the outcome. The stored outputs are cleaned as the solutions' are
    (``helpers.book.stored_outputs.clean``)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    from helpers.book.stored_outputs import clean

    source = REPO / "solutions" / chapter / f"{chapter}.ipynb"
    nb = nbformat.read(source, as_version=4)
    if cells is not None:
        nb.cells = _first_code_cells(nb.cells, cells)
    deadline = time.monotonic() + seconds
    client = NotebookClient(nb, kernel_name="python3", record_timing=False,
                            timeout_func=lambda cell: max(1, int(deadline - time.monotonic())),
                            resources={"metadata": {"path": str(source.parent)}},
                            store_widget_state=True)  # fmt: skip
    outcome = "ok"
    try:
        client.execute()
    except CellTimeoutError:
        outcome = f"timed out after {seconds:.0f} s"
    except CellExecutionError as error:
        outcome = f"failed: {str(error).strip().splitlines()[-1][:300]}"
    except Exception as error:  # the kernel died or would not start: record it, go on
        outcome = f"failed: {type(error).__name__}: {error}"
    nb = clean(nb)
    nb.metadata["gpu_edition"] = {**found, "outcome": outcome,
                                  "cells": "all" if cells is None else f"first {cells} code"}
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return outcome


# ----- the run --------------------------------------------------------------------------------

def _run_logged(command: list[str], log: Path, seconds: float, env: dict[str, str],
                header: str) -> str:  # fmt: skip
    """Run ``command`` in its own process group, its output shown and kept in ``log``; killed
    after ``seconds``. Returns "ok", "failed (exit N)" or "timed out after N s"."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as kept:
        kept.write(f"# {header}\n# {' '.join(command)}\n")
        kept.flush()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, cwd=REPO, start_new_session=True)

        def copy() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                sys.stdout.write(line)
                kept.write(line)

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            code = process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            code = None
        reader.join(timeout=10)
    if code is None:
        return f"timed out after {seconds:.0f} s"
    return "ok" if code == 0 else f"failed (exit {code}); see {log.name}"


def _check_out(out: Path, device: str, size: Size) -> None:
    """Only a full run on a GPU may write under ``gpu_edition.ROOT``."""
    inside = out.resolve() == gpu_edition.ROOT.resolve() or gpu_edition.ROOT.resolve() in \
        out.resolve().parents
    if inside and (device == "cpu" or size.quick):
        raise ValueError(f"{out} is under {gpu_edition.ROOT}, which holds only full GPU runs: "
                         "give --out elsewhere for a CPU, --quick or --tiny run")  # fmt: skip


def _clear(out: Path) -> None:
    """Remove a previous edition's files from ``out`` (the repository's history keeps them),
    so that files of two runs never mix."""
    for chapter in gpu_edition.CHAPTERS:
        for suffix in (".json", ".png"):
            (out / f"{chapter}{suffix}").unlink(missing_ok=True)
    for name in ("manifest.json", "fidelity.log"):
        (out / name).unlink(missing_ok=True)
    for folder in (gpu_edition.NOTEBOOKS, "logs"):
        shutil.rmtree(out / folder, ignore_errors=True)


def run(
    device: str,
    out: Path | str | None = None,
    quick: bool = False,
    tiny: bool = False,
    wheels: Path | str | None = None,
    pack: Path | str | None = None,
    budget_s: float = BUDGET_S,
    notebooks: Sequence[str] = gpu_edition.CHAPTERS,
    isolate: bool = True,
) -> dict[str, Any]:
    """Every step in order within ``budget_s``; writes the edition (and ``pack``) and
    returns the manifest. Only the chapters in ``notebooks`` are executed. ``isolate``: each
    measuring step in its own process, killed at its limit; without it they run in this one,
    unlimited (the CPU test, which cannot afford a torch import per step)."""
    started = time.monotonic()
    size = size_for(quick, tiny)
    machine.check_device(device)
    found = gpu_edition.stamp(device)
    folder = Path(out) if out else gpu_edition.ROOT / gpu_edition.device_slug(found["device_name"])
    _check_out(folder, device, size)
    unknown = sorted(set(notebooks) - set(gpu_edition.CHAPTERS))
    if unknown:
        raise ValueError(f"no chapter {', '.join(unknown)} in the GPU edition: "
                         f"{', '.join(gpu_edition.CHAPTERS)}")  # fmt: skip
    if folder.exists():
        print(f"replacing the edition in {folder}")
        _clear(folder)
    folder.mkdir(parents=True, exist_ok=True)

    steps: list[dict[str, Any]] = []
    missing, why = missing_modules(), "give --wheels, from `make gpu-wheels`"
    if missing and wheels:
        try:  # the measurements need no Jupyter: a failed install skips only the notebooks
            with_wheels = install_wheels(wheels, tempfile.mkdtemp(prefix="gpu-wheels-"))
            print(f"installed {len(with_wheels)} wheels from {wheels} for {', '.join(missing)}")
            why = f"the wheels in {wheels} do not provide them"
        except ValueError as error:
            print(f"warning: {error}", file=sys.stderr)
            why = str(error)
        missing = missing_modules()
    elif wheels:
        print(f"the Jupyter stack is installed here: the wheels in {wheels} are not used")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                      os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", "TEXTBOOK_DEVICE": device}  # fmt: skip
    os.environ.update(env)  # the notebooks' kernels inherit it
    flags = (["--quick"] if quick else []) + (["--tiny"] if tiny else [])

    for step in STEPS:
        left = budget_s - (time.monotonic() - started)
        seconds = min(step.limit_s, left)
        record = {"name": step.name, "chapter": step.chapter, "expected_s": step.expected_s,
                  "limit_s": step.limit_s}  # fmt: skip
        begun = time.monotonic()
        if seconds < 1:
            record["status"] = f"not run: the {budget_s:.0f} s budget was spent"
        elif step.name in MEASURING and not isolate:
            try:
                measure_step(step.name, device, folder, size)
                record["status"] = "ok"
            except Exception as error:  # recorded, and the run goes on
                record["status"] = f"failed: {type(error).__name__}: {error}"
        elif step.name in MEASURING:
            command = [sys.executable, "-m", "helpers.programs.gpu_reference", "--step", step.name,
                       "--device", device, "--out", str(folder), *flags]  # fmt: skip
            record["status"] = _run_logged(command, folder / "logs" / f"{step.name}.log",
                                           seconds, env, gpu_edition.stamp_line(found))
        elif step.name == "fidelity":
            if not fidelity_available(env):
                record["status"] = "skipped: helpers.serving has no --fidelity yet"
            elif tiny:
                record["status"] = "skipped: the fidelity run has no tiny size"
            else:
                command = [sys.executable, "-m", "helpers.serving", "--fidelity"]
                record["status"] = _run_logged(command, folder / "fidelity.log", seconds, env,
                                               gpu_edition.stamp_line(found))  # fmt: skip
        elif step.chapter not in notebooks:
            record["status"] = "not asked for"
        elif missing:
            record["status"] = f"skipped: {', '.join(missing)} missing ({why})"
        else:
            chapter = step.chapter or ""
            print(f"executing {chapter} on {device} (at most {seconds:.0f} s)", flush=True)
            record["status"] = execute_notebook(chapter, folder / gpu_edition.NOTEBOOKS /
                                                f"{chapter}.ipynb", seconds, found,
                                                size.notebook_cells)  # fmt: skip
        record["seconds"] = round(time.monotonic() - begun, 1)
        print(f"{step.name}: {record['status']} ({record['seconds']} s; expected on an H200 "
              f"{step.expected_s} s, limit {step.limit_s} s)", flush=True)
        steps.append(record)

    manifest = {"stamp": found, "quick": size.quick, "tiny": tiny, "budget_s": budget_s,
                "seconds": round(time.monotonic() - started, 1), "steps": steps}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if pack:
        with tarfile.open(pack, "w:gz") as tar:
            tar.add(folder, arcname=folder.name)
        packed = Path(pack).stat().st_size
        print(f"packed {folder} into {pack} ({packed / 2**20:.1f} MiB)")
        if packed > PACK_LIMIT_BYTES:
            print(f"warning: {pack} is over {PACK_LIMIT_BYTES / 2**20:.0f} MiB", file=sys.stderr)
    print(f"done in {manifest['seconds']} s; the edition is in {folder}")
    return manifest


def download_wheels(folder: Path | str, python_version: str = "3.12") -> None:
    """``pip download`` ``GPU_WHEELS`` for CPython ``python_version`` on x86-64 Linux."""
    platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--python-version", python_version,
                    "--implementation", "cp", *platforms, "-d", str(folder), *GPU_WHEELS],
                   check=True)  # fmt: skip
    total = sum(p.stat().st_size for p in Path(folder).glob("*.whl"))
    print(f"{len(list(Path(folder).glob('*.whl')))} wheels in {folder}, {total / 2**20:.1f} MiB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.programs.gpu_reference",
        description="The GPU edition of chapters 4-7: measure on a GPU and execute the "
        "chapters there, into helpers/data/gpu/<device>/ (see the module's docstring).",
    )
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, mps or cpu")
    parser.add_argument("--out", default=None, help="folder (default helpers/data/gpu/<device>)")
    parser.add_argument("--quick", action="store_true", help="short timings")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (the CPU test)")
    parser.add_argument("--wheels", default=None, help="folder of wheels for the Jupyter stack")
    parser.add_argument("--pack", default=None, help="also pack the edition into this .tar.gz")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the run")
    parser.add_argument("--notebooks", default=",".join(gpu_edition.CHAPTERS),
                        help="comma-separated chapters to execute (default: all four)")
    parser.add_argument("--no-isolation", action="store_true",
                        help="measure in this process, without per-step limits (the CPU test)")
    parser.add_argument("--step", choices=MEASURING, help=argparse.SUPPRESS)
    parser.add_argument("--download-wheels", metavar="DIR", default=None,
                        help="only download GPU_WHEELS into DIR (make gpu-wheels)")
    args = parser.parse_args(argv)
    try:
        if args.download_wheels:
            download_wheels(args.download_wheels)
        elif args.step:
            measure_step(args.step, args.device, Path(args.out), size_for(args.quick, args.tiny))
        else:
            run(args.device, args.out, args.quick, args.tiny, args.wheels, args.pack, args.budget,
                [c.strip() for c in args.notebooks.split(",") if c.strip()],
                not args.no_isolation)  # fmt: skip
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
