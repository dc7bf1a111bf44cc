"""The cache explorer (chapter 4, `04_timing`): how much data a memory-bound timing touches
decides whether it measures memory or cache.

The measurement is ``helpers.measuring.cache_sweep.run_cache_sweep``'s record, and what is read
from it (the points, the streaming bandwidth, the rule's verdict and recommendation) is
``helpers.measuring.cache_sweep``'s and ``helpers.measuring.timing.copies_to_exceed_cache``'s;
this module only draws. ``CacheControls`` holds the sliders' knobs and defaults,
``cache_view`` builds the view of one setting, ``draw_cache`` plots it, and ``show_cache`` is
what the notebook's sliders call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers.measuring import cache_sweep, timing
from helpers.measuring.cache_sweep import CachePoint, MiB
from helpers.widgets.figures import new_figure, show_figure

__all__ = ["CacheControls", "CacheView", "cache_view", "draw_cache", "show_cache"]


@dataclass(frozen=True)
class CacheControls:
    """The explorer's knobs: the number of copies selected (None: the first measured) and
    the copies rule's factor."""

    copies: int | None = None
    factor: float = timing.COPIES_FACTOR


@dataclass(frozen=True)
class CacheView:
    """What the explorer shows for one slider setting."""

    points: tuple[CachePoint, ...]
    selected: CachePoint
    llc_bytes: int
    factor: float
    recommended_copies: int
    streaming_bandwidth: float
    verdict: str

    @property
    def overstatement(self) -> float:
        """Selected point's apparent bandwidth over the streaming (past-the-cache) one."""
        return self.selected.apparent_bandwidth / self.streaming_bandwidth

    def table(self) -> str:
        """The measured points, the selected one marked, and what the rule recommends."""
        lines = [f"{'copies':>7}{'working set':>13}{'× LLC':>8}{'ns/B':>9}{'apparent GB/s':>15}"]
        for p in self.points:
            mark = "  ◀" if p is self.selected else ""
            lines.append(f"{p.copies:>7}{p.working_set_bytes / MiB:>9.0f} MiB"
                         f"{p.working_set_bytes / self.llc_bytes:>8.2f}{p.ns_per_byte:>9.4f}"
                         f"{p.apparent_bandwidth / 1e9:>15.1f}{mark}")  # fmt: skip
        lines.append(
            f"selected: {self.selected.copies} copies, {self.verdict}; apparent bandwidth "
            f"{self.overstatement:.2f} × the sweep's streaming "
            f"{self.streaming_bandwidth / 1e9:.1f} GB/s"
        )
        lines.append(
            f"rule (copies_to_exceed_cache, factor {self.factor:g}): "
            f"{self.recommended_copies} copies of {self.selected.buffer_bytes / MiB:g} MiB"
        )
        return "\n".join(lines)


def cache_view(
    points: Sequence[CachePoint], llc_bytes: int, controls: CacheControls = CacheControls()
) -> CacheView:
    """The point with ``controls.copies``, next to the rule's recommendation and verdict."""
    if not points:
        raise ValueError("need at least one point")
    by_copies = {p.copies: p for p in points}
    copies = points[0].copies if controls.copies is None else controls.copies
    if copies not in by_copies:
        raise ValueError(f"no point with {copies} copies; measured: {sorted(by_copies)}")
    selected, factor = by_copies[copies], controls.factor
    return CacheView(
        tuple(points), selected, int(llc_bytes), float(factor),
        timing.copies_to_exceed_cache(selected.buffer_bytes, llc_bytes, factor),
        float(cache_sweep.streaming_bandwidth(points)),
        cache_sweep.cache_verdict(selected.working_set_bytes, llc_bytes, factor,
                                  cache_sweep.streaming_from(points).working_set_bytes),
    )  # fmt: skip


def draw_cache(ax, view: CacheView) -> None:
    """Apparent bandwidth against working set (log 2), with the LLC and factor × LLC."""
    sizes = [p.working_set_bytes / MiB for p in view.points]
    ax.plot(sizes, [p.apparent_bandwidth / 1e9 for p in view.points], marker="o",
            label="x.sum(), rotating buffers")  # fmt: skip
    ax.plot([view.selected.working_set_bytes / MiB], [view.selected.apparent_bandwidth / 1e9],
            marker="o", markersize=12, fillstyle="none", color="black", ls="none",
            label=f"selected: {view.selected.copies} copies")  # fmt: skip
    ax.axvline(view.llc_bytes / MiB, color="gray", ls=":", label="last-level cache")
    ax.axvline(view.factor * view.llc_bytes / MiB, color="gray", ls="--",
               label=f"{view.factor:g} × LLC (the rule)")  # fmt: skip
    ax.axhline(view.streaming_bandwidth / 1e9, color="tab:red", lw=1,
               label="streaming bandwidth (largest working set)")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set(xlabel="working set (MiB)", ylabel="apparent bandwidth (GB/s)",
           title="Re-read data that fits in a cache looks like fast memory")  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)


def show_cache(points: Sequence[CachePoint], llc_bytes: int, **controls) -> None:
    """What the notebook's sliders call (``controls``: ``CacheControls``' knobs): print the
    table and draw the figure (made outside pyplot, ``helpers.widgets.figures``)."""
    view = cache_view(points, llc_bytes, CacheControls(**controls))
    print(view.table())
    fig, ax = new_figure()
    draw_cache(ax, view)
    show_figure(fig)
