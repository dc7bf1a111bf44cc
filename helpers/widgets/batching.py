"""The batching explorer of chapter 7 (`07_batching`): throughput against latency as the
decode batch grows, and where the critical batch and the memory cap stop it.

``BatchControls`` holds the sliders' knobs and defaults; ``batch_curve`` reads every number
off the helpers (``latency.decode_step_time``,
``roofline.critical_batch_weight_only``, ``memory.max_concurrent_sequences``: no formula
lives here); ``draw_batch_curve`` draws aggregate tokens/s against TPOT, one point per batch, as
"How to Scale Your Model" draws it, on a matplotlib Axes; ``plot_batch_curve`` shows one
curve in a new figure (the chapter's default view); ``show_batch_curve`` is the ``interact``
callback. Neither returns anything, so ``interact`` shows the figure and no repr under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers.counting import hardware, latency, memory, models, roofline
from helpers.counting._validate import positive_int
from helpers.widgets.figures import new_figure, show_figure

__all__ = ["BatchControls", "BatchCurve", "batch_curve", "draw_batch_curve", "plot_batch_curve",
           "show_batch_curve", "BATCHES"]  # fmt: skip

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class BatchControls:
    """The explorer's knobs and their defaults: a model on a chip, the decode's context, the
    weights' dtype (``dtype``; activations and KV cache stay bf16)."""

    model: str = "Llama-3.1-8B"
    chip: str = "H100 SXM"
    context: int = 4096
    dtype: str = "bf16"


@dataclass(frozen=True)
class BatchCurve:
    """Roofline TPOT and throughput per batch for one model, chip, context and weights' dtype
    (``dtype``)."""

    model: str
    chip: str
    context: int
    dtype: str
    batches: tuple[int, ...]
    tpot_s: tuple[float, ...]
    critical_batch: int | None
    max_batch: int

    @property
    def throughput(self) -> tuple[float, ...]:
        """Aggregate tokens/s: B tokens per step."""
        return tuple(b / t for b, t in zip(self.batches, self.tpot_s, strict=True))

    def rows(self) -> list[tuple[int, float, float, bool]]:
        """(batch, TPOT ms, tokens/s, fits in memory) per batch: the figure's data."""
        return [(b, t * 1e3, b / t, b <= self.max_batch)
                for b, t in zip(self.batches, self.tpot_s, strict=True)]  # fmt: skip

    def summary(self) -> str:
        crit = "never" if self.critical_batch is None else f"B = {self.critical_batch}"
        return (f"{self.model} on {self.chip}, {self.dtype} weights, context "
                f"{self.context:,}: weights compute-bound from {crit}; memory holds "
                f"{self.max_batch:,} sequences")  # fmt: skip


def batch_curve(
    controls: BatchControls = BatchControls(), batches: Sequence[int] = BATCHES
) -> BatchCurve:
    """The curve's numbers: bf16 activations and KV cache, weights in ``dtype``."""
    model, chip = controls.model, controls.chip
    context, dtype = controls.context, controls.dtype
    positive_int(context, "context")
    for b in batches:
        positive_int(b, "a batch size")
    cfg, hw = models.get(model), hardware.get(chip)
    tpot = tuple(latency.decode_step_time(cfg, hw, b, context, dtype,
                                          activation_dtype="bf16") for b in batches)  # fmt: skip
    return BatchCurve(model, chip, context, dtype, tuple(batches), tpot,
                      roofline.critical_batch_weight_only(cfg, hw, dtype),
                      memory.max_concurrent_sequences(cfg, hw.memory_bytes, context, dtype,
                                                      kv_dtype="bf16"))  # fmt: skip


def draw_batch_curve(ax, curve: BatchCurve) -> None:
    """Tokens/s against TPOT (ms), log-log, each point labelled with its batch; batches
    that do not fit in memory drawn hollow."""
    rows = curve.rows()
    ax.plot([r[1] for r in rows], [r[2] for r in rows], color="#4c72b0", lw=1)
    for batch, tpot_ms, rate, fits in rows:
        ax.plot([tpot_ms], [rate], "o", color="#4c72b0",
                markerfacecolor="#4c72b0" if fits else "white")  # fmt: skip
        ax.annotate(str(batch), (tpot_ms, rate), textcoords="offset points", xytext=(4, -10),
                    fontsize=8)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("TPOT per request (ms)")
    ax.set_ylabel("aggregate tokens/s")
    ax.set_title(curve.summary(), fontsize=9)


def plot_batch_curve(curve: BatchCurve) -> None:
    """Draw ``curve`` in a new figure and show it (``helpers.widgets.figures``)."""
    fig, ax = new_figure((7, 4))
    draw_batch_curve(ax, curve)
    show_figure(fig)


def show_batch_curve(**controls) -> None:
    """The ``interact`` callback (``BatchControls``' knobs): the curve of ``batch_curve`` in a
    new figure. It returns nothing: ``interact`` would print a returned value's repr under
    the figure."""
    plot_batch_curve(batch_curve(BatchControls(**controls)))
