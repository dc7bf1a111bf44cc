"""A GPU reference run in one call (chapter 5, §11): ``make gpu-reference``.

``make gpu-reference`` makes its own virtual environment (``.venv-gpu``), installs a CUDA build
of torch from PyPI into it (PyPI's Linux wheel is the CUDA one; ``make env`` installs the CPU
build instead) and runs ``python -m helpers.gpu_reference --device cuda``, which:

- runs ``helpers.bench`` at full sizes (no ``--quick``, scale 1 unless memory is short) in
  fp32 and bf16, with its interleaved ceilings;
- measures chapter 4's ceilings as chapter 4 does on a GPU (fp32, bf16 and fp16), in full mode;
- writes ``helpers/data/bench_<kind>_<device>.json`` (e.g. ``bench_cuda_nvidia_h200.json``),
  with both, and ``roofline_<kind>_<device>.png``, titled with the device, torch version and
  date. Chapter 5 §11 shows every such file whose device is not a CPU.

``--device cpu`` with ``--quick``, ``--scale`` and ``--max-tokens`` runs the same steps at tiny
sizes, which is how the test suite checks this script on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers import bench, ceilings

__all__ = ["DTYPES", "CHAPTER4_DTYPES", "file_stem", "run", "main"]

DTYPES = ("fp32", "bf16")
CHAPTER4_DTYPES = {"cpu": ("fp32", "bf16"), "gpu": ("fp32", "bf16", "fp16")}
DATA_DIR = Path(__file__).resolve().parent / "data"


def file_stem(device: str, device_name: str) -> str:
    """``cuda``, "NVIDIA H200" → ``cuda_nvidia_h200``: the device kind and its name, lower
    case, anything but letters and digits turned into single underscores."""
    kind = re.sub(r":\d+$", "", device)
    name = re.sub(r"[^a-z0-9]+", "_", device_name.lower()).strip("_")
    if not name:
        raise ValueError(f"device name {device_name!r} has no letters or digits")
    return f"{kind}_{name}"


def run(
    device: str,
    out_dir: str | os.PathLike[str] = DATA_DIR,
    quick: bool = False,
    scale: int | None = None,
    max_tokens: int = bench.MAX_TOKENS,
    progress: bool = True,
) -> tuple[Path, Path]:
    """The bench and chapter 4's ceilings on ``device``; returns the JSON and PNG paths."""
    import torch

    ceilings.check_device(device)
    with tempfile.TemporaryDirectory() as scratch:  # bench.run's own files are not kept
        results: dict[str, Any] = bench.run(device, DTYPES, quick=quick, out_dir=scratch,
                                            scale=scale, max_tokens=max_tokens,
                                            progress=progress)  # fmt: skip
    kind = "cpu" if torch.device(device).type == "cpu" else "gpu"
    chapter4 = ceilings.measure_ceilings(device, CHAPTER4_DTYPES[kind], quick=quick)
    results["chapter4_ceilings"] = chapter4.to_dict()
    stem = file_stem(device, results["device_name"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / f"bench_{stem}.json", out / f"roofline_{stem}.png"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    points = [bench.SweepPoint(**p) for p in results["points"]]
    measured = ceilings.Ceilings(**results["ceilings"])
    bench.plot_roofline(points, measured, str(png_path),
                        subtitle=f"torch {results['torch_version']}, {results['date']}")
    print(f"wrote {json_path} and {png_path}")
    return json_path, png_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.gpu_reference",
        description="The bench at full sizes (fp32, bf16) and chapter 4's ceilings, written "
        "to helpers/data/ as a reference for chapter 5.",
    )
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, mps or cpu")
    parser.add_argument("--out", default=str(DATA_DIR), help="folder for the JSON and PNG")
    parser.add_argument("--quick", action="store_true", help="short timings (for a test)")
    parser.add_argument("--scale", type=int, default=None, help="as in helpers.bench")
    parser.add_argument("--max-tokens", type=int, default=bench.MAX_TOKENS,
                        help="as in helpers.bench")  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    try:
        run(args.device, args.out, args.quick, args.scale, args.max_tokens,
            not args.no_progress)  # fmt: skip
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
