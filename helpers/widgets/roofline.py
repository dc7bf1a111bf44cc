"""The roofline explorer (chapter 3, `03_roofline`): model, chip, prompt length, batch and
dtype in; prefill and decode as points on the chip's roofline out.

``RooflineControls`` holds the sliders' knobs and defaults. ``roofline_points`` (the phases)
and ``prefill_gemm_points`` (prefill's weight matmuls one shape at a time) are the data,
testable without a browser; ``roofline_view`` gathers them with the chip's ceilings,
``table`` prints points, ``draw_roofline`` puts a view on an Axes with
``helpers.widgets.plots.plot_roofline``, and ``show_roofline`` is what the notebook's sliders call.
The counts and times come from ``helpers.counting.flops``, ``helpers.counting.memory``,
``helpers.counting.roofline``
and ``helpers.counting.latency``.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.counting import hardware, models
from helpers.counting.latency import prefill_time
from helpers.counting.roofline import (
    RooflineTime,
    decode_aggregate,
    decode_split,
    prefill_matmul_times,
    prefill_split,
)
from helpers.widgets.figures import new_figure, show_figure
from helpers.widgets.plots import plot_roofline

__all__ = ["RooflineControls", "PhasePoint", "PHASES", "roofline_points", "prefill_gemm_points",
           "parts_line", "RooflineView", "roofline_view", "table",
           "draw_roofline", "show_roofline"]  # fmt: skip

PHASES = ("prefill", "decode step", "decode: weights", "decode: attention")
INTENSITY_RANGE = (0.1, 1e5)  # fixed axes, so a slider moves the points, not the frame
FLOPS_RANGE = (1e10, 1e16)


@dataclass(frozen=True)
class RooflineControls:
    """The explorer's knobs and their defaults: ``batch`` prompts of ``prompt_tokens`` of
    ``model`` on ``chip`` in ``dtype``."""

    model: str = "Qwen2.5-7B"
    chip: str = "H100 SXM"
    prompt_tokens: int = 1024
    batch: int = 1
    dtype: str = "bf16"


@dataclass(frozen=True)
class PhasePoint:
    """One phase on the roofline: its FLOPs and bytes, intensity, and where the roof puts it."""

    phase: str
    flops: int
    bytes_moved: int
    intensity: float
    attainable_flops: float
    seconds: float
    bound: str


def _point(phase: str, time: RooflineTime) -> PhasePoint:
    return PhasePoint(phase, time.flops, time.bytes_moved, time.flops / time.bytes_moved,
                      time.flops / time.seconds, time.seconds, time.bound)  # fmt: skip


def roofline_points(controls: RooflineControls = RooflineControls()) -> dict[str, PhasePoint]:
    """Prefill of ``batch`` prompts of ``prompt_tokens``, and the decode step right after it.

    Prefill as a server runs it (``helpers.counting.latency.prefill_time``: causal attention, logits
    for the last token only). The decode step is shown whole
    (``helpers.counting.roofline.decode_aggregate``) and split into its two parts, which
    share only small activations (``helpers.counting.roofline.decode_split``): the weight
    matmuls, whose
    intensity grows with the batch, and attention over each sequence's own KV cache, whose
    intensity does not. Bytes include activation traffic
    (``helpers.counting.memory.forward_bytes``).
    ValueError if the chip's datasheet gives no peak for ``dtype``.
    """
    prompt_tokens, batch, dtype = controls.prompt_tokens, controls.batch, controls.dtype
    cfg, hw = models.get(controls.model), hardware.get(controls.chip)
    hw.peak(dtype)  # fail early, with the chip's own message, on a dtype it has no peak for
    split = decode_split(cfg, hw, batch, prompt_tokens, dtype)
    times = {
        "prefill": prefill_time(cfg, hw, prompt_tokens, batch, dtype),
        "decode step": decode_aggregate(cfg, hw, batch, prompt_tokens, dtype),
        "decode: weights": split["weights"],
        "decode: attention": split["attention"],
    }
    return {name: _point(name, time) for name, time in times.items()}


def prefill_gemm_points(
    controls: RooflineControls = RooflineControls(),
) -> dict[str, PhasePoint]:
    """Prefill's weight matmuls as separate points (``roofline.prefill_matmul_times``): the
    whole-pass average hides them.

    Each layer's matrices multiply all ``batch · prompt_tokens`` rows; the LM head only one
    row per prompt (logits for the last token), so it sits near ``batch`` FLOP/B, on the
    slanted roof, while the layers' matrices sit far to the right. Matrices with the same
    shape up to transposition have the same intensity and share a point ("q/o", "k/v",
    "gate/up/down"); its FLOPs, bytes and time are those of all of them over all layers.
    """
    prompt_tokens, batch, dtype = controls.prompt_tokens, controls.batch, controls.dtype
    cfg, hw = models.get(controls.model), hardware.get(controls.chip)
    hw.peak(dtype)
    times = prefill_matmul_times(cfg, hw, prompt_tokens, batch, dtype)
    return {f"prefill {names}": _point(f"prefill {names}", time) for names, time in times.items()}


def parts_line(controls: RooflineControls = RooflineControls()) -> str:
    """Prefill's parts summed (``roofline.prefill_split``) beside the whole pass as one op."""
    cfg, hw = models.get(controls.model), hardware.get(controls.chip)
    parts = prefill_split(cfg, hw, controls.prompt_tokens, controls.batch, controls.dtype)
    matmuls = sum(t.seconds for name, t in parts.items() if name not in ("attention", "embedding"))
    total = sum(t.seconds for t in parts.values())
    whole = prefill_time(cfg, hw, controls.prompt_tokens, controls.batch, controls.dtype).seconds
    return (f"prefill, each part on its own roofline: weight matmuls {matmuls * 1e3:.3f} ms\n"
            f"  + attention {parts['attention'].seconds * 1e3:.3f} + embedding rows "
            f"{parts['embedding'].seconds * 1e3:.3f} = {total * 1e3:.3f} ms "
            f"(as one op: {whole * 1e3:.3f} ms"
            f"{', less than the weight matmuls alone' if whole < matmuls else ''})")


def table(points: dict[str, PhasePoint]) -> str:
    """The points as a fixed-width text table."""
    lines = [f"{'phase':<22}{'FLOP/B':>10}{'attainable TFLOP/s':>20}{'time (ms)':>12}  bound"]
    for p in points.values():
        lines.append(f"{p.phase:<22}{p.intensity:>10.1f}{p.attainable_flops / 1e12:>20.1f}"
                     f"{p.seconds * 1e3:>12.3f}  {p.bound}")  # fmt: skip
    return "\n".join(lines)


@dataclass(frozen=True)
class RooflineView:
    """The explorer's data for one setting: the controls, the points (the phases of
    ``roofline_points``, then prefill's matmuls of ``prefill_gemm_points``), and the chip's
    datasheet peak in ``dtype``, its bandwidth and its measured ceilings (its best measured
    bf16 matmul, where known)."""

    controls: RooflineControls
    points: dict[str, PhasePoint]
    peak: float
    bandwidth: float
    ceilings: dict[str, float]

    def table(self) -> str:
        return table(self.points)


def roofline_view(controls: RooflineControls = RooflineControls()) -> RooflineView:
    """The points and the chip's ceilings; ValueError for a dtype the chip has no peak for."""
    hw = hardware.get(controls.chip)
    measured = {}
    if hw.best_matmul_bf16 and controls.dtype == "bf16":
        measured["best measured bf16 matmul"] = hw.best_matmul_bf16
    points = roofline_points(controls) | prefill_gemm_points(controls)
    return RooflineView(controls, points, hw.peak(controls.dtype), hw.bandwidth, measured)


def draw_roofline(ax, view: RooflineView) -> None:
    """The chip's datasheet roofline (and its measured ceilings) with the view's points."""
    c = view.controls
    plot_roofline(ax, view.peak, view.bandwidth,
                  points={p.phase: (p.intensity, p.attainable_flops)
                          for p in view.points.values()},
                  label=f"{c.chip} datasheet, {c.dtype}", ceilings=view.ceilings,
                  intensity_range=INTENSITY_RANGE, flops_range=FLOPS_RANGE)  # fmt: skip
    ax.set_title(f"{c.model}: prompt {c.prompt_tokens} tokens, batch {c.batch}", fontsize=10)


def show_roofline(**controls) -> None:
    """The sliders' callback (``RooflineControls``' knobs): print the table, show the figure
    (made outside pyplot, ``helpers.widgets.figures``), or say why there is none."""
    try:
        view = roofline_view(RooflineControls(**controls))
    except ValueError as error:  # e.g. fp8 on an A100: the datasheet has no such peak
        print(error)
        return
    print(view.table())
    print(parts_line(view.controls))
    fig, ax = new_figure((7.5, 4.5))
    draw_roofline(ax, view)
    show_figure(fig)
