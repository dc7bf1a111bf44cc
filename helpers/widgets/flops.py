"""Chapter 1 explorer (`01_flops`): how much of one generated token's FLOPs attention takes
as the context grows.

The explorer counts ``keys``: a decode step with c tokens cached attends to c + 1 keys
(itself included), and runs every weight matmul once (the same FLOPs at any context).
``flops.decode_flops_split`` counts the two, ``flops.attention_balance_keys`` where they are
equal.
``AttentionControls`` holds the sliders' knobs and defaults; ``attention_share`` returns the
curve and the chosen point as data; ``draw_attention_share`` draws it on a matplotlib Axes;
``show_attention_share`` is the callback the notebook's sliders call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from matplotlib.ticker import FuncFormatter

from helpers.counting import flops, models
from helpers.counting._validate import positive_int
from helpers.widgets.figures import new_figure, show_figure

__all__ = [
    "KEY_COUNTS",
    "AttentionControls",
    "AttentionShare",
    "attention_share",
    "draw_attention_share",
    "show_attention_share",
]

KEY_COUNTS = tuple(2**power for power in range(7, 18))
"""Keys attended (c + 1) the slider offers and the curve is drawn at: 128 … 131,072."""


@dataclass(frozen=True)
class AttentionControls:
    """The explorer's knobs and their defaults: a preset and the keys its new token attends
    to (``keys``, c + 1 for c tokens cached)."""

    preset: str = "Qwen2.5-7B"
    keys: int = 4096


@dataclass(frozen=True)
class AttentionShare:
    """The explorer's data for one preset: the curve over ``key_counts`` and the chosen point.

    ``share``: attention's fraction of all FLOPs of the decode step. ``of_two_n``: attention
    FLOPs divided by 2N (N = ``param_count``), the yardstick "2N per token" leaves out.
    ``attention`` and ``matmuls`` are the FLOPs at the chosen ``keys``; ``matmuls`` (the
    weight matmuls and the LM head) does not depend on the context. ``crossover``: the keys
    at which attention's FLOPs equal the matmuls'. ``sliding_window``: the preset's window,
    past which the real model attends to fewer keys than this count assumes (or None).
    """

    preset: str
    keys: int
    key_counts: tuple[int, ...]
    share: tuple[float, ...]
    of_two_n: tuple[float, ...]
    attention: int
    matmuls: int
    two_n: int
    crossover: float  # keys, where the curve crosses 50% (the figure's line)
    crossover_tokens: int  # the cached tokens a step has there: chapter 1's table's figure
    sliding_window: int | None

    @property
    def point_share(self) -> float:
        """Attention's fraction of the step's FLOPs at the chosen keys."""
        return self.attention / (self.attention + self.matmuls)

    def summary(self) -> str:
        text = (
            f"{self.preset}, {self.keys:,} keys: attention {self.attention / 1e9:.3g} GFLOP "
            f"+ matmuls {self.matmuls / 1e9:.3g} GFLOP; attention is "
            f"{self.point_share:.1%} of the step ({self.attention / self.two_n:.1%} of 2N). "
            f"Attention reaches the matmuls at {self.crossover_tokens + 1:,} keys "
            f"(c = {self.crossover_tokens:,} tokens cached)."
        )
        if self.sliding_window is not None and self.keys > self.sliding_window:
            text += (
                f" Beyond its {self.sliding_window:,}-token sliding window this model attends "
                "to fewer keys: the count is an upper bound."
            )
        return text


def attention_share(
    controls: AttentionControls = AttentionControls(), key_counts: tuple[int, ...] = KEY_COUNTS
) -> AttentionShare:
    """Attention's share of one decode step's FLOPs for the preset, at ``controls.keys`` and
    over ``key_counts`` (the chosen keys are added to the curve if they are not on it); the
    crossover is ``flops.attention_balance_keys``."""
    preset, keys = controls.preset, controls.keys
    cfg = models.get(preset)
    cfg.require_dense("attention_share")
    positive_int(keys, "keys")
    for value in key_counts:
        positive_int(value, "each of key_counts")
    curve = tuple(sorted(set(key_counts) | {keys}))
    steps = [flops.decode_flops_split(cfg, c) for c in curve]
    attention, matmuls = flops.decode_flops_split(cfg, keys)
    two_n = 2 * flops.param_count(cfg)
    return AttentionShare(
        preset=preset,
        keys=keys,
        key_counts=curve,
        share=tuple(a / (a + m) for a, m in steps),
        of_two_n=tuple(a / two_n for a, _ in steps),
        attention=attention,
        matmuls=matmuls,
        two_n=two_n,
        crossover=float(flops.attention_balance_keys(cfg)),
        crossover_tokens=flops.attention_crossover(dataclasses.replace(cfg, sliding_window=None)),
        sliding_window=cfg.sliding_window,
    )


def _tokens(x: float, _position: int = 0) -> str:
    """Tick label for a token count: 512, 2k, 128k."""
    return f"{x / 1024:g}k" if x >= 1024 else f"{x:g}"


def draw_attention_share(ax, data: AttentionShare):
    """Draw ``data`` on the matplotlib Axes ``ax`` and return ``ax``."""
    ax.plot(data.key_counts, [100 * s for s in data.share], marker=".", label="attention")
    # Where the curve crosses 50%, attention costs as much as every weight matmul together.
    ax.axhline(50, color="grey", linewidth=0.8)
    ax.axvline(
        data.crossover,
        color="grey",
        linestyle="--",
        linewidth=0.8,
        label=f"attention = matmuls (from {data.crossover_tokens + 1:,} keys)",
    )
    if data.sliding_window is not None:
        ax.axvline(
            data.sliding_window,
            color="C2",
            linestyle=":",
            label=f"sliding window ({data.sliding_window:,})",
        )
    ax.plot([data.keys], [100 * data.point_share], "o", color="C3", markersize=9)
    ax.annotate(
        f"{data.point_share:.1%} at {data.keys:,}",
        (data.keys, 100 * data.point_share),
        textcoords="offset points",
        xytext=(8, -14),
        color="C3",
    )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.set_ylim(0, 100)
    ax.set_xlabel("keys the new token attends to (c + 1)")
    ax.set_ylabel("attention's share of the step's FLOPs (%)")
    ax.set_title(f"{data.preset}: one decode step")
    ax.legend(loc="upper left", fontsize="small")
    return ax


def show_attention_share(**controls) -> None:
    """The sliders' callback (``controls``: ``AttentionControls``' knobs): draw the figure and
    print the summary (returns nothing, so ``interact`` shows no extra output). The figure
    is made outside pyplot (``helpers.widgets.figures``)."""
    data = attention_share(AttentionControls(**controls))
    fig, ax = new_figure((7, 4))
    draw_attention_share(ax, data)
    show_figure(fig)
    print(data.summary())
