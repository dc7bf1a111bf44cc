"""Prefill and decode matmuls, measured (chapter 5, `05_matmuls`): ``python -m
helpers.programs.bench``.

The command line of the matmul sweep and its reports. Runs the sweep
(``helpers.measuring.sweep_run.run_sweep``: this device's ceilings, the linear layers of one
decoder layer of a preset over m = 1, 2, 4, …, 4096 tokens, the ceilings reconciled with every
rate seen), then prints a table and the headline figures (``report``) and writes the run's
results record (``SweepRun.record``) as JSON and a roofline PNG. ``--pairs N`` runs the
paired decode check (``sweep.paired_decode``) instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from helpers.counting.models import ModelConfig
from helpers.measuring import kernels, machine, sweep, sweep_record, sweep_run
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.pairs import pairs_reading
from helpers.measuring.sweep import SweepPoint
from helpers.measuring.sweep_run import SweepRun
from helpers.widgets import plots

__all__ = [
    "format_table",
    "format_summary",
    "shortfalls",
    "format_pairs",
    "save_roofline_png",
    "report",
    "run",
    "run_pairs",
    "main",
]

DEFAULT_MODEL = sweep_run.DEFAULT_MODEL
DEFAULT_DTYPES = ("fp32", "bf16")
SHORT_SHARE = sweep_record.SHORT_SHARE


def format_table(points: Sequence[SweepPoint]) -> str:
    """The sweep as a fixed-width text table."""
    header = (f"{'dtype':5} {'shape':8} {'m':>5} {'k':>6} {'n':>6} {'median ms':>10} "
              f"{'IQR ms':>8} {'GFLOP/s':>8} {'GB/s':>7} {'FLOP/B':>7} {'pred ms':>9} "
              f"{'err':>6} {'bound':7} {'kernel':7} cache")  # fmt: skip
    rows = [header, "-" * len(header)]
    for p in points:
        rows.append(
            f"{p.dtype:5} {p.shape:8} {p.m:5d} {p.k:6d} {p.n:6d} {p.median_s * 1e3:10.4f} "
            f"{p.iqr_s * 1e3:8.4f} {p.achieved_flops / 1e9:8.1f} "
            f"{p.achieved_bandwidth / 1e9:7.2f} {p.intensity:7.1f} "
            f"{p.predicted_s * 1e3:9.4f} {p.prediction_error:+6.0%} {p.bound:7} {p.kernel:7} "
            f"{p.cache_defeat} x{p.copies}"  # rotated among, or flushed in rounds of, copies
        )
    return "\n".join(rows)


def format_summary(
    summary: dict[str, dict[str, Any]], ceilings: Ceilings, points: Sequence[SweepPoint] = ()
) -> str:
    """Ceilings and headline figures as text; with the sweep's ``points``, also which point
    or GEMM set each dtype's matmul ceiling and which shapes miss a ceiling
    (``shortfalls``)."""
    lines = [f"Measured on {ceilings.device_name} ({ceilings.device}), torch "
             f"{ceilings.torch_version}, {ceilings.threads} threads, {ceilings.date}",
             f"  bandwidth ceiling: {ceilings.bandwidth / 1e9:.1f} GB/s "
             f"({ceilings.bandwidth_method})"]  # fmt: skip
    for dtype, peak in ceilings.matmul_flops.items():
        m, k, n = ceilings.matmul_shape[dtype]
        kernel = ceilings.matmul_kernel.get(dtype, kernels.EAGER.name)
        lines.append(f"  {dtype} matmul ceiling: {peak / 1e9:.1f} GFLOP/s (best GEMM "
                     f"{m}x{k}x{n} (MxKxN), {kernel} kernel); ridge {ceilings.ridge(dtype):.1f} "
                     "FLOP/B")  # fmt: skip
    if ceilings.datasheet_chip:
        lines.append(f"  datasheet ({ceilings.datasheet_chip}): "
                     f"{ceilings.datasheet_bandwidth or 0:.3g} B/s, "
                     f"peaks {ceilings.datasheet_flops}")  # fmt: skip
    for dtype, entry in summary.items():
        parts = []
        if "decode_bandwidth_fraction" in entry:
            # each share against the roof its points sit under (a record without the bound:
            # memory)
            bound = entry.get("decode_bound", "memory")
            shares = {"memory": f"{entry['decode_bandwidth_fraction']:.0%} of bandwidth",
                      "compute": f"compute-bound, {entry.get('decode_flops_fraction', 0):.0%} "
                                 "of matmul ceiling",
                      "mixed": f"{entry['decode_bandwidth_fraction']:.0%} of bandwidth, "
                               f"{entry.get('decode_flops_fraction', 0):.0%} of matmul "
                               "ceiling (bounds mixed)"}[bound]
            parts.append(f"decode m=1 {shares} "
                         f"(prediction {entry['decode_prediction_error']:+.0%}, kernel "
                         f"{'/'.join(entry.get('decode_kernels', []))})")  # fmt: skip
        if "prefill_flops_fraction" in entry:
            parts.append(f"prefill m>={sweep.PREFILL_MIN_TOKENS} "
                         f"{entry['prefill_flops_fraction']:.0%}"
                         f" of matmul ceiling (prediction "
                         f"{entry['prefill_prediction_error']:+.0%}, kernel "
                         f"{'/'.join(entry.get('prefill_kernels', []))})")  # fmt: skip
        lines.append(f"  {dtype}: " + "; ".join(parts))
    return "\n".join(lines + shortfalls(points, ceilings))


def _under(share: float) -> str:
    """A share listed as under a threshold (``SHORT_SHARE``), to one decimal place, so that
    89.7% of a ceiling reads as itself, not as the 90% it is under, and as the same share
    printed to a tenth elsewhere (rounded to nearest); only where that would reach the
    threshold, rounded down, so that 89.97% never reads as 90.0%."""
    shown = round(share * 1000) / 10
    if shown >= SHORT_SHARE * 100 and share < SHORT_SHARE:
        shown = math.floor(share * 1000) / 10
    return f"{shown:.1f}%"


def shortfalls(points: Sequence[SweepPoint], ceilings: Ceilings) -> list[str]:
    """Per dtype, what set its matmul ceiling (a sweep point, or a GEMM of the ceiling
    measurement that is no layer's shape) and the shapes under ``SHORT_SHARE`` of a ceiling:
    prefill points (m ≥ ``sweep.PREFILL_MIN_TOKENS``, at the sizes timed) of the matmul
    ceiling, decode points of the roof they sit under (memory-bound ones of the bandwidth,
    compute-bound ones of the matmul ceiling; ``sweep_record.shortfalls``), one line each, each
    share to one decimal place."""
    lines = []
    for dtype, found in sweep_record.shortfalls(points, ceilings).items():
        setter, peak = found["setter"], ceilings.peak(dtype)
        source = (
            f"the sweep's {setter.shape} at m={setter.m}"
            if setter
            else f"the GEMM {'x'.join(map(str, found['shape']))}, no layer's shape"
        )
        prefill = [
            f"{p.shape} m={p.m}{f' (scale {p.scale})' if p.scale > 1 else ''} "
            f"{_under(p.achieved_flops / peak)}"
            for p in found["prefill"]
        ]
        decode = [
            f"{p.shape} {_under(p.achieved_bandwidth / ceilings.bandwidth)}"
            for p in found["decode"]
        ]
        compute = [f"{p.shape} {_under(p.achieved_flops / peak)}" for p in found["decode_compute"]]
        bounds = found["decode_bounds"]
        parts = []
        if "memory" in bounds or not bounds:
            parts.append(f"under {SHORT_SHARE:.0%} of the bandwidth, decode: "
                         f"{', '.join(decode) or 'none'}")  # fmt: skip
        if "compute" in bounds:
            parts.append(f"compute-bound decode (m=1), under {SHORT_SHARE:.0%} of the matmul "
                         f"ceiling: {', '.join(compute) or 'none'}")  # fmt: skip
        # Only the points from PREFILL_MIN_TOKENS, at the sizes timed (scaled where the sweep
        # scaled them): the label says so, since shorter compute-bound points can miss too.
        lines.append(f"  {dtype} matmul ceiling set by {source}; under {SHORT_SHARE:.0%} of "
                     f"it, prefill (m>={sweep.PREFILL_MIN_TOKENS}, as timed): "
                     f"{', '.join(prefill) or ('none' if found['swept'] else 'not swept')}; "
                     + "; ".join(parts))  # fmt: skip
    return lines


def format_pairs(
    title: str, rates: Sequence[tuple[float, float]], groups: int = sweep.PAIR_GROUPS
) -> str:
    """``paired_decode``'s pairs in ``groups`` groups from the slowest stream to the fastest:
    each group's median stream rate, median matmul rate and their ratio."""
    lines = [title, f"  {'pairs':>5} {'stream GB/s':>12} {'matmul GB/s':>12} {'matmul/stream':>14}"]
    for count, stream, matmul in sweep.pair_groups(rates, groups):
        lines.append(f"  {count:>5} {stream / 1e9:>12.1f} {matmul / 1e9:>12.1f} "
                     f"{matmul / stream:>14.0%}")  # fmt: skip
    return "\n".join(lines)


def save_roofline_png(
    points: Sequence[SweepPoint], ceilings: Ceilings, path: str, subtitle: str | None = None
) -> None:
    """Measured points on the measured roofline, one colour per dtype (log-log PNG), titled
    with the device's name and ``subtitle`` (default: the torch version and date)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    intensities = [p.intensity for p in points]
    span = (min(intensities) / 2, max(intensities) * 2)
    markers = dict(zip(dict.fromkeys(p.shape for p in points), plots.MARKERS, strict=False))
    for i, dtype in enumerate(dict.fromkeys(p.dtype for p in points)):
        colour = f"C{i}"
        plots.plot_roofline(ax, ceilings.peak(dtype), ceilings.bandwidth,
                            label=f"{dtype} measured roofline", color=colour,
                            intensity_range=span, annotate=False)  # fmt: skip
        for shape, marker in markers.items():
            ours = [p for p in points if p.dtype == dtype and p.shape == shape]
            ax.scatter([p.intensity for p in ours], [p.achieved_flops for p in ours],
                       color=colour, marker=marker, s=22, label=f"{dtype} {shape}")  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/B)",
           ylabel="achieved FLOP/s",
           title=f"Linear layers, measured on {ceilings.device_name}\n"
                 f"{subtitle or f'torch {ceilings.torch_version}, {ceilings.date}'}")  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _checked_model(model: str, dtypes: Sequence[str], device: str) -> ModelConfig:
    """The preset, after checking the model, every dtype and the device: a bad argument fails
    before anything is measured."""
    from helpers.counting import models

    cfg = models.get(model)
    for dtype in dtypes:
        machine.torch_dtype(dtype)
    machine.check_device(device)
    return cfg


def report(run: SweepRun) -> None:
    """Print a sweep run (``sweep_run.SweepRun``): its table, its summary, and its verdicts on
    the machine (busy, bandwidth drift; warnings on stderr)."""
    print(format_table(run.points))
    print()
    print(format_summary(run.summary, run.ceilings, run.points))
    if run.busy:
        print(f"warning: other processes used {run.others_share:.0%} of the CPU during this "
              "run; they compete with the benchmark's threads, so its timings are slow and "
              "noisy", file=sys.stderr)  # fmt: skip
    print(f"  bandwidth before the sweep {run.bandwidth_before / 1e9:.1f} GB/s, after it "
          f"{run.bandwidth_after / 1e9:.1f} GB/s ({run.bandwidth_drift:+.0%}); each ceiling is "
          "the best rate of the run")  # fmt: skip
    if run.drifted:
        print(f"warning: the memory bandwidth changed by {run.bandwidth_drift:+.0%} during this "
              "run (other processes or tenants using memory): memory-bound timings vary with "
              "it", file=sys.stderr)  # fmt: skip


def run(
    device: str,
    dtypes: Sequence[str],
    model: str = DEFAULT_MODEL,
    quick: bool = False,
    out_dir: str = "bench-results",
    scale: int | None = None,
    max_tokens: int = sweep.MAX_TOKENS,
    progress: bool = True,
) -> dict[str, Any]:
    """``sweep_run.run_sweep``, printed (``report``) and written as JSON (its results record)
    and a roofline PNG in ``out_dir``; returns the results record."""
    swept = sweep_run.run_sweep(device, dtypes, model, quick, scale, max_tokens, progress)
    report(swept)
    results = swept.record()
    os.makedirs(out_dir, exist_ok=True)
    stem = f"bench_{device.replace(':', '')}"
    json_path = os.path.join(out_dir, f"{stem}.json")
    png_path = os.path.join(out_dir, f"roofline_{device.replace(':', '')}.png")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    save_roofline_png(swept.points, swept.ceilings, png_path)
    print(f"\nwrote {json_path} and {png_path}")
    return results


def run_pairs(device: str, dtypes: Sequence[str], model: str = DEFAULT_MODEL,
              pairs: int = sweep.PAIRS) -> None:  # fmt: skip
    """``paired_decode`` for the preset's largest linear layer, full size, in each dtype."""
    cfg = _checked_model(model, dtypes, device)
    shape = max(sweep.layer_shapes(cfg), key=lambda s: s.k * s.n)
    for dtype in dtypes:
        kernel, timed, rates = sweep.paired_decode(shape, dtype, device, pairs)
        title = (f"{model} {timed.label} ({timed.k}x{timed.n}), m=1, {dtype}, {kernel} kernel, "
                 f"on {machine.device_name(device)}:")  # fmt: skip
        print(format_pairs(title, rates))
        print(f"  {pairs_reading(rates)}")


def _dtype_list(values: Sequence[str] | None) -> list[str]:
    """--dtype given several times and/or as comma lists → unique names, in order."""
    names = [name.strip() for v in values or [] for name in v.split(",") if name.strip()]
    return list(dict.fromkeys(names)) or list(DEFAULT_DTYPES)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.programs.bench",
        description="Measure this device's ceilings and sweep a preset's linear layers "
        "over m = 1 … 4096 tokens (chapter 5).",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:N or mps (default: cuda, then mps, then cpu)",
    )
    parser.add_argument(
        "--dtype",
        action="append",
        help="fp32, bf16 or fp16; repeat or comma-separate (default fp32,bf16)",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"preset (default {DEFAULT_MODEL})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short timings and ceiling GEMMs; on a CPU, prefill-sized GEMMs scaled down",
    )
    parser.add_argument("--out", default="bench-results", help="folder for the JSON and PNG")
    parser.add_argument(
        "--scale",
        type=int,
        default=None,
        help="divide every layer dimension by this at every m (default: automatic)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=sweep.MAX_TOKENS,
        help=f"largest m of the sweep (default {sweep.MAX_TOKENS})",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--pairs",
        type=int,
        default=None,
        metavar="N",
        help="instead of the sweep, alternate the bandwidth stream and the largest layer's "
        "one-token matmul N times: is a decode gap the kernel's or a busy machine's?",
    )
    args = parser.parse_args(argv)  # fmt: skip
    try:
        from helpers.book.notebook import pick_device

        device = args.device or pick_device()
        if args.pairs is not None:
            run_pairs(device, _dtype_list(args.dtype), args.model, args.pairs)
            return 0
        run(device=device, dtypes=_dtype_list(args.dtype), model=args.model, quick=args.quick,
            out_dir=args.out, scale=args.scale, max_tokens=args.max_tokens,
            progress=not args.no_progress)  # fmt: skip
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
