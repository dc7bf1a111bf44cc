"""The memory-budget explorer of chapter 2 (`02_bytes`): does a model, its KV cache and a
batch of sequences fit on one chip?

``MemoryControls`` holds the widget's knobs (model, dtype, context, batch, chip) and their
defaults; ``memory_budget`` turns them into numbers;
``draw_memory_budget`` draws them on a matplotlib Axes as one stacked bar (weights, KV cache,
free memory) against the chip's capacity; ``show_memory_budget`` is the ``interact`` callback.
Counts come from ``helpers.counting.memory`` and are lower bounds: activations, fragmentation and
the
framework's own reserve are left out, so a real server fits less.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.counting import hardware, memory, models
from helpers.counting._validate import positive_int
from helpers.widgets.figures import new_figure, show_figure

__all__ = ["MemoryControls", "MemoryBudget", "memory_budget", "draw_memory_budget",
           "show_memory_budget"]  # fmt: skip

GB = 1e9  # decimal; capacities are binary (hardware.py), so an "80 GB" H100 draws at 85.9
COLORS = {"weights": "#4c72b0", "KV cache": "#dd8452", "free": "#d9d9d9", "over": "#c44e52"}


@dataclass(frozen=True)
class MemoryControls:
    """The explorer's knobs and their defaults: ``batch`` sequences of ``context`` tokens of
    ``model`` in ``dtype`` on one ``chip``."""

    model: str = "Qwen2.5-7B"
    dtype: str = "bf16"
    context: int = 4096
    batch: int = 32
    chip: str = "H100 SXM"


@dataclass(frozen=True)
class MemoryBudget:
    """One chip's memory split between weights, the batch's KV cache and what is left (bytes).

    ``free`` is 0 and ``overflow`` positive when weights + KV cache exceed ``capacity``.
    ``max_sequences``: how many sequences of ``context`` tokens would fit beside the weights.
    """

    model: str
    dtype: str
    context: int
    batch: int
    chip: str
    capacity: float
    weights: int
    kv_cache: int

    @property
    def needed(self) -> int:
        return self.weights + self.kv_cache

    @property
    def free(self) -> float:
        return max(0.0, self.capacity - self.needed)

    @property
    def overflow(self) -> float:
        return max(0.0, self.needed - self.capacity)

    @property
    def fits(self) -> bool:
        return self.needed <= self.capacity

    @property
    def max_sequences(self) -> int:
        cfg = models.get(self.model)
        return memory.max_concurrent_sequences(cfg, self.capacity, self.context, self.dtype)

    def segments(self) -> dict[str, float]:
        """The bar's segments in bytes, in drawing order (the figure's data)."""
        return {"weights": float(self.weights), "KV cache": float(self.kv_cache),
                "free": float(self.free)}  # fmt: skip

    def verdict(self) -> str:
        """One line: fits or not, by how much, and the most sequences that would fit."""
        head = f"{self.batch} × {self.context:,} tokens"
        if not self.fits:
            if self.weights > self.capacity:
                return f"does not fit: the weights alone exceed {self.chip} by " \
                       f"{(self.weights - self.capacity) / GB:.1f} GB"  # fmt: skip
            return f"{head}: does not fit, over by {self.overflow / GB:.1f} GB " \
                   f"(at most {self.max_sequences:,} sequences fit)"  # fmt: skip
        return f"{head}: fits, {self.free / GB:.1f} GB free " \
               f"(at most {self.max_sequences:,} sequences)"  # fmt: skip


def memory_budget(controls: MemoryControls = MemoryControls()) -> MemoryBudget:
    """The widget's values in, the memory budget out (chapter 2).

    Weights and KV cache are stored in the same ``dtype``; a sliding-window model keeps at most
    its window of tokens per sequence.
    """
    model, dtype, context = controls.model, controls.dtype, controls.context
    batch, chip = controls.batch, controls.chip
    cfg, hw = models.get(model), hardware.get(chip)
    positive_int(context, "context")
    positive_int(batch, "batch")
    return MemoryBudget(
        model=model,
        dtype=dtype,
        context=context,
        batch=batch,
        chip=chip,
        capacity=hw.memory_bytes,
        weights=memory.weight_bytes(cfg, dtype),
        kv_cache=memory.kv_cache_bytes(cfg, context, batch, dtype),
    )


def draw_memory_budget(ax, budget: MemoryBudget) -> None:
    """Draw ``budget`` on ``ax``: one horizontal stacked bar in GB (weights, KV cache, free),
    a dashed line at the chip's capacity, and anything beyond it hatched in red."""
    left = 0.0
    for name, size in budget.segments().items():
        width = size / GB
        ax.barh(0, width, left=left, color=COLORS[name], edgecolor="white",
                label=f"{name}: {width:,.1f} GB")  # fmt: skip
        left += width
    if budget.overflow:
        # Weights and cache are drawn whole; shade the part that lies past the capacity.
        ax.barh(0, budget.overflow / GB, left=budget.capacity / GB, color="none",
                edgecolor=COLORS["over"], hatch="//", label="over capacity")  # fmt: skip
    ax.axvline(budget.capacity / GB, color="black", linestyle="--", linewidth=1)
    ax.text(budget.capacity / GB, 0.45, f" {budget.chip}: {budget.capacity / GB:,.0f} GB",
            va="bottom", ha="right", fontsize=9)  # fmt: skip
    ax.set_xlim(0, max(budget.capacity, budget.needed) / GB * 1.05)
    ax.set_ylim(-0.6, 0.8)
    ax.set_yticks([])
    ax.set_xlabel("memory (GB = 10⁹ B)")
    ax.set_title(f"{budget.model} in {budget.dtype}: {budget.verdict()}", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)


def show_memory_budget(**controls) -> None:
    """The ``interact`` callback (``MemoryControls``' knobs): draw a new figure (it returns
    nothing, so ``interact`` displays only the figure). The figure is made outside pyplot
    (``helpers.widgets.figures``)."""
    budget = memory_budget(MemoryControls(**controls))
    fig, ax = new_figure((10, 2.2))
    draw_memory_budget(ax, budget)
    fig.tight_layout()
    show_figure(fig)
