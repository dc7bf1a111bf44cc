"""The sweep explorer (chapter 5, `05_matmuls`): a layer (q, k, v, o, gate, up, down) and a
dtype in; that layer's measured sweep points and its place on the measured roofline out.

It draws a sweep's results record (``sweep_record.results_record``: the format ``python -m
helpers.programs.bench`` writes to its JSON file), so the same callback draws the reader's own
sweep or
a results file from another device, or the ideal device of ``sweep_record.roofline_results``.

Every number it shows is read by ``helpers.measuring.sweep_record`` (``layer_points``,
``measured_ridge``, ``token_knee``; each point's ``prediction_error``, from
``latency.prediction_error``) or computed by the roofline (``roofline.gemm_knee``):
``MatmulControls`` holds the dropdowns' knobs and defaults, ``matmul_view`` reads one layer's
view off a results record, ``table`` prints the points, ``draw_matmuls`` puts a view on two
Axes with ``helpers.widgets.plots.plot_roofline``, and ``show_matmuls`` is what the notebook's
dropdowns call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.counting.flops import matmul_flops
from helpers.counting.roofline import gemm_knee
from helpers.measuring.sweep import SweepPoint
from helpers.measuring.sweep_record import layer_points, results_ceilings, token_knee
from helpers.widgets.figures import new_figure, show_figure
from helpers.widgets.plots import plot_roofline

__all__ = ["MatmulControls", "MatmulView", "matmul_view", "table", "draw_matmuls",
           "show_matmuls"]  # fmt: skip


@dataclass(frozen=True)
class MatmulControls:
    """The explorer's knobs and their defaults: a layer of ``sweep.LAYERS`` and a dtype."""

    layer: str = "gate"
    dtype: str = "fp32"


@dataclass(frozen=True)
class MatmulView:
    """One layer's sweep points in one dtype, read off a results record: the points, the
    record's ceilings, whether they are an ideal device's (``roofline_results``), and the
    knee the roofline predicts (``roofline.gemm_knee`` of the real shape at the ceilings'
    ridge) beside the one the points show (``sweep_record.token_knee``)."""

    controls: MatmulControls
    rows: tuple[SweepPoint, ...]
    peak: float
    bandwidth: float
    ideal: bool
    predicted_knee: int | None
    knee: int | None

    def table(self) -> str:
        return table(self.rows)


def table(rows: Sequence[SweepPoint]) -> str:
    """The points as a fixed-width text table."""
    lines = [f"{'m':>5}{'k':>7}{'n':>7}{'time (ms)':>12}{'GFLOP/s':>10}{'FLOP/B':>9}"
             f"{'roofline (ms)':>15}{'error':>8}  bound"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.m:>5}{r.k:>7}{r.n:>7}{r.median_s * 1e3:>12.4f}"
                     f"{r.achieved_flops / 1e9:>10.2f}"
                     f"{r.intensity:>9.1f}{r.predicted_s * 1e3:>15.4f}"
                     f"{r.prediction_error:>+8.0%}  {r.bound}")  # fmt: skip
    return "\n".join(lines)


def matmul_view(
    results: Mapping[str, Any], controls: MatmulControls = MatmulControls()
) -> MatmulView:
    """The layer's view; ValueError when the record has no such points."""
    layer, dtype = controls.layer, controls.dtype
    rows = layer_points(results, layer, dtype)
    if not rows:
        raise ValueError(f"no {dtype} points for layer {layer!r} in this sweep")
    peak, bandwidth = results_ceilings(results, dtype)
    first = rows[0]
    return MatmulView(controls, tuple(rows), peak, bandwidth,
                      results.get("device") == "roofline",  # sweep_record.roofline_results
                      gemm_knee(first.k, first.n, peak / bandwidth, dtype),
                      token_knee(rows))  # fmt: skip


def draw_matmuls(axes, view: MatmulView):
    """On ``axes`` (two Axes). Left: the layer's points on the roofline of the record's
    ceilings. Right: achieved FLOP/s against m beside the roofline's attainable FLOP/s, with
    the predicted knee and the points' own. Returns what plot_roofline drew."""
    rows, peak, bandwidth = view.rows, view.peak, view.bandwidth
    layer, dtype = view.controls.layer, view.controls.dtype
    left, right = axes
    ceilings_kind, points_kind = (("datasheet", "ideal device") if view.ideal
                                  else ("measured", "measured"))  # fmt: skip
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
    scaled = any((r.k, r.n) != (first.k, first.n) for r in rows)
    left.set_title(f"{layer}: [m×{first.k}]·[{first.k}×{first.n}], {dtype}"
                   + (f" (at m={first.m}; larger m timed scaled down, see the table)"
                      if scaled else ""), fontsize=10)  # fmt: skip

    ms = [r.m for r in rows]
    right.plot(ms, [r.achieved_flops for r in rows], "o", label=points_kind)
    right.plot(ms, [matmul_flops(r.m, r.k, r.n) / r.predicted_s for r in rows], "-",
               label=f"roofline, {ceilings_kind} ceilings")  # fmt: skip
    right.axhline(peak, color="gray", ls="--", lw=1, label="matmul ceiling")
    if view.predicted_knee is not None:
        right.axvline(view.predicted_knee, color="C1", ls=":",
                      label=f"predicted knee m={view.predicted_knee}")  # fmt: skip
    if view.knee is not None:
        right.axvline(view.knee, color="C0", ls="--", lw=1,
                      label=f"{points_kind} knee m={view.knee}")  # fmt: skip
    right.set(xscale="log", yscale="log", xlabel="tokens m", ylabel="achieved FLOP/s")
    right.set_title("linear in m below the knee, flat above", fontsize=10)
    right.grid(True, which="major", alpha=0.3)
    right.legend(fontsize=8)
    return drawn


def show_matmuls(results: Mapping[str, Any], **controls) -> None:
    """Print the layer's table and draw it (what the notebook's dropdowns call;
    ``controls``: ``MatmulControls``' knobs); a dtype the sweep lacks is said in words, not
    raised. The figure is made outside pyplot (``helpers.widgets.figures``)."""
    knobs = MatmulControls(**controls)
    measured = results["ceilings"]["matmul_flops"]
    if knobs.dtype not in measured:
        print(f"{results.get('device_name', 'this sweep')} has no {knobs.dtype} points; "
              f"it has: {', '.join(measured)}")
        return
    print(f"{results.get('device_name', '')}: {knobs.layer}, {knobs.dtype}")
    view = matmul_view(results, knobs)
    print(view.table())
    fig, axes = new_figure((11, 4.2), ncols=2)
    draw_matmuls(axes, view)
    fig.tight_layout()
    show_figure(fig)
