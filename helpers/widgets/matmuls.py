"""The sweep explorer (chapter 5, `05_matmuls`): a layer (q, k, v, o, gate, up, down) and a
dtype in; that layer's measured sweep points and its place on the measured roofline out.

A *sweep result* is a dict in the format ``python -m helpers.bench`` writes to its JSON file
(``"ceilings"``: the measured ceilings as ``Ceilings.to_dict()``; ``"points"``: one dict per
``SweepPoint``), so the same callback draws the reader's own sweep or a results file from
another device. ``sweep_results`` builds one from a live sweep.

``layer_points`` is the data (testable without a browser), ``table`` prints it, ``draw``
puts it on a figure with ``helpers.plots.plot_roofline``, and ``show`` is what the
notebook's dropdowns call.

The formulas it draws live elsewhere: ``roofline.predicted_time`` and ``roofline.gemm_knee``
(the knee), ``latency.layer_time`` and ``latency.prediction_error``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

from helpers.flops import matmul_flops
from helpers.latency import prediction_error
from helpers.memory import linear_bytes
from helpers.plots import plot_roofline
from helpers.roofline import gemm_knee, roofline_time
from helpers.widgets.figures import new_figure, show_figure

__all__ = [
    "LAYERS",
    "LayerPoint",
    "sweep_results",
    "roofline_results",
    "layer_points",
    "measured_ridge",
    "measured_knee",
    "table",
    "draw",
    "show",
]

LAYERS = ("q", "k", "v", "o", "gate", "up", "down")


def sweep_results(ceilings: Any, points: Sequence[Any], **extra: Any) -> dict[str, Any]:
    """A live sweep (``Ceilings`` and ``SweepPoint`` objects) in the results-file format."""
    return {
        **extra,
        "device": ceilings.device,
        "device_name": ceilings.device_name,
        "ceilings": ceilings.to_dict(),
        "points": [asdict(p) if is_dataclass(p) else dict(p) for p in points],
    }


def roofline_results(
    model: str = "Qwen2.5-7B", chip: str = "H100 SXM", dtypes: Sequence[str] = ("fp32", "bf16"),
    tokens: Sequence[int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A sweep result whose every "measurement" is the roofline's own prediction from a chip's
    datasheet (``helpers.hardware``): what a device meeting its ceilings exactly would show,
    for the model's real shapes at m = 1, 2, 4, …, 4096. A prediction, never a measurement:
    its device is "roofline" and its name says so."""
    from helpers import bench, hardware, models

    cfg, hw = models.get(model), hardware.get(chip)
    tokens = list(tokens) if tokens is not None else bench.token_counts()
    points = []
    for dtype in dtypes:
        for shape in bench.layer_shapes(cfg):
            for m in tokens:
                flops, nbytes = matmul_flops(m, shape.k, shape.n), linear_bytes(m, shape.k,
                                                                               shape.n, dtype)
                time = roofline_time(flops, nbytes, hw, dtype)
                points.append({
                    "dtype": dtype, "shape": shape.label, "count": shape.count, "scale": 1,
                    "m": m, "k": shape.k, "n": shape.n, "flops": flops, "bytes": nbytes,
                    "intensity": flops / nbytes, "median_s": time.seconds,
                    "achieved_flops": flops / time.seconds,
                    "achieved_bandwidth": nbytes / time.seconds, "predicted_s": time.seconds,
                    "prediction_error": 0.0, "bound": time.bound,
                })  # fmt: skip
    return {
        "device": "roofline",
        "device_name": f"{chip} datasheet roofline (predicted, not measured)",
        "model": model,
        "ceilings": {"matmul_flops": {d: hw.peak(d) for d in dtypes}, "bandwidth": hw.bandwidth},
        "points": points,
    }


@dataclass(frozen=True)
class LayerPoint:
    """One measured point of one layer: m tokens, the shape timed (``scale``: every dimension
    of the real model divided by it), its time, and where it sits on the roofline."""

    dtype: str
    m: int
    k: int
    n: int
    scale: int
    seconds: float
    achieved_flops: float
    achieved_bandwidth: float
    intensity: float
    predicted_s: float
    bound: str


def _ceilings(results: Mapping[str, Any], dtype: str) -> tuple[float, float]:
    ceilings = results["ceilings"]
    peaks = ceilings["matmul_flops"]
    if dtype not in peaks:
        raise ValueError(f"no {dtype!r} in this sweep; measured: {', '.join(peaks)}")
    return float(peaks[dtype]), float(ceilings["bandwidth"])


def layer_points(results: Mapping[str, Any], layer: str = "gate",
                 dtype: str = "fp32") -> list[LayerPoint]:  # fmt: skip
    """The sweep points of one layer in one dtype, by increasing m. A point's ``shape`` is
    the label of the layers sharing it ("q,o"), so "o" finds the q projection's points."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r}: one of {', '.join(LAYERS)}")
    _ceilings(results, dtype)
    rows = [
        LayerPoint(dtype, p["m"], p["k"], p["n"], p.get("scale", 1), p["median_s"],
                   p["achieved_flops"], p["bytes"] / p["median_s"], p["intensity"],
                   p["predicted_s"], p["bound"])  # fmt: skip
        for p in results["points"]
        if p["dtype"] == dtype and layer in p["shape"].split(",")
    ]
    return sorted(rows, key=lambda row: row.m)


def measured_ridge(rows: Sequence[LayerPoint]) -> float | None:
    """The ridge this layer showed: the achieved FLOP/s at the largest m (the compute roof it
    really reached) over the achieved B/s at the smallest m (the bandwidth roof it really
    reached). None with fewer than two points."""
    if len(rows) < 2:
        return None
    first, last = min(rows, key=lambda r: r.m), max(rows, key=lambda r: r.m)
    return last.achieved_flops / first.achieved_bandwidth


def measured_knee(rows: Sequence[LayerPoint]) -> int | None:
    """The knee the measurements imply: ``roofline.gemm_knee`` of the smallest-m point's shape
    at the layer's own ridge (``measured_ridge``) in place of the device's.

    Where the flat, weight-read time of decode meets the time ∝ m of prefill: on a device
    that reached its measured ceilings at both ends it is the predicted knee. None with
    fewer than two points, or if that shape never reaches the layer's ridge."""
    ridge = measured_ridge(rows)
    if ridge is None:
        return None
    first = min(rows, key=lambda r: r.m)
    return gemm_knee(first.k, first.n, ridge, first.dtype)


def table(rows: Sequence[LayerPoint]) -> str:
    """The points as a fixed-width text table."""
    lines = [f"{'m':>5}{'k':>7}{'n':>7}{'time (ms)':>12}{'GFLOP/s':>10}{'FLOP/B':>9}"
             f"{'roofline (ms)':>15}{'error':>8}  bound"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.m:>5}{r.k:>7}{r.n:>7}{r.seconds * 1e3:>12.4f}"
                     f"{r.achieved_flops / 1e9:>10.2f}"
                     f"{r.intensity:>9.1f}{r.predicted_s * 1e3:>15.4f}"
                     f"{prediction_error(r.predicted_s, r.seconds):>+8.0%}  {r.bound}")  # fmt: skip
    return "\n".join(lines)


def draw(results: Mapping[str, Any], layer: str = "gate", dtype: str = "fp32", axes=None):
    """Left: the layer's measured points on the measured roofline. Right: achieved FLOP/s
    against m beside the roofline's attainable FLOP/s, with the predicted knee
    (``roofline.gemm_knee`` of the real shape, measured ceilings) and the measured one
    (``measured_knee``). Returns (figure, what plot_roofline drew, rows). Without ``axes``,
    the figure is a new one outside pyplot (``helpers.widgets.figures``)."""
    rows = layer_points(results, layer, dtype)
    if not rows:
        raise ValueError(f"no {dtype} points for layer {layer!r} in this sweep")
    peak, bandwidth = _ceilings(results, dtype)
    if axes is None:
        fig, axes = new_figure((11, 4.2), ncols=2)
    left, right = axes
    fig = left.figure
    ideal = results.get("device") == "roofline"  # roofline_results: predicted, not measured
    ceilings_kind, points_kind = ("datasheet", "ideal device") if ideal else ("measured",
                                                                              "measured")
    many = len(rows) > 7  # label every other point, so the labels stay legible
    drawn = plot_roofline(left, peak, bandwidth,
                          points={f"m={r.m}": (r.intensity, r.achieved_flops) for r in rows},
                          label=f"{ceilings_kind} roofline, {dtype}", annotate=not many)
    if many:
        ridge = peak / bandwidth
        left.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, 0.02), xytext=(4, 0),
                      xycoords=left.get_xaxis_transform(), textcoords="offset points",
                      fontsize=8)
        for i, r in enumerate(rows[::2]):  # alternately below right and above left
            dx, dy, align = (7, -12, "left") if i % 2 == 0 else (-7, 6, "right")
            left.annotate(f"m={r.m}", (r.intensity, r.achieved_flops), xytext=(dx, dy),
                          textcoords="offset points", fontsize=8, ha=align)
    left.set_ylabel("achieved FLOP/s")
    first = rows[0]
    left.set_title(f"{layer}: [m×{first.k}]·[{first.k}×{first.n}] at m={first.m}, {dtype}",
                   fontsize=10)  # fmt: skip

    ms = [r.m for r in rows]
    right.plot(ms, [r.achieved_flops for r in rows], "o", label=points_kind)
    right.plot(ms, [2 * r.m * r.k * r.n / r.predicted_s for r in rows], "-",
               label=f"roofline, {ceilings_kind} ceilings")  # fmt: skip
    right.axhline(peak, color="gray", ls="--", lw=1, label="matmul ceiling")
    predicted_knee = gemm_knee(first.k, first.n, peak / bandwidth, dtype)
    if predicted_knee is not None:
        right.axvline(predicted_knee, color="C1", ls=":",
                      label=f"predicted knee m={predicted_knee}")  # fmt: skip
    knee = measured_knee(rows)
    if knee is not None:
        right.axvline(knee, color="C0", ls="--", lw=1, label=f"{points_kind} knee m={knee}")
    right.set(xscale="log", yscale="log", xlabel="tokens m", ylabel="achieved FLOP/s")
    right.set_title("linear in m below the knee, flat above", fontsize=10)
    right.grid(True, which="major", alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig, drawn, rows


def show(results: Mapping[str, Any], layer: str = "gate", dtype: str = "fp32") -> None:
    """Print the layer's table and draw it (what the notebook's dropdowns call); a dtype
    the sweep lacks is said in words, not raised."""
    measured = results["ceilings"]["matmul_flops"]
    if dtype not in measured:
        print(f"{results.get('device_name', 'this sweep')} has no {dtype} points; "
              f"it has: {', '.join(measured)}")
        return
    print(f"{results.get('device_name', '')}: {layer}, {dtype}")
    rows = layer_points(results, layer, dtype)
    print(table(rows))
    fig, _, _ = draw(results, layer, dtype)
    show_figure(fig)
