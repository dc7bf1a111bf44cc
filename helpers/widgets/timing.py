"""The cache explorer (chapter 4, `04_timing`): how much data a memory-bound timing touches
decides whether it measures memory or cache.

A memory-bound op (``x.sum()`` over one buffer) is timed while rotating among ``copies``
distinct buffers, so the *working set* is ``copies × buffer``. While the working set fits in
the last-level cache (LLC), every call finds its buffer still cached and the apparent
bandwidth (bytes read / time) is the cache's, not the memory's. The measurements are
``helpers.timing.cache_sweep_seconds``'s; this module only draws: ``cache_points`` turns
measured times into points, ``cache_view`` picks the slider's point and the rule's
recommendation (``helpers.timing.copies_to_exceed_cache``), ``table`` prints it, ``draw``
plots it, and ``show`` is what the notebook's sliders call. ``streaming_from`` reads off the
measured curve where the cache stopped helping, and ``at_working_set`` where another working
set falls on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers import timing
from helpers.widgets.figures import new_figure, show_figure

__all__ = [
    "CachePoint",
    "CacheView",
    "sweep_plan",
    "cache_points",
    "cache_view",
    "streaming_from",
    "at_working_set",
    "table",
    "draw",
    "show",
]

MiB = 2**20


@dataclass(frozen=True)
class CachePoint:
    """One measured rotation: ``copies`` buffers of ``buffer_bytes``, median seconds per call."""

    copies: int
    buffer_bytes: int
    seconds: float

    @property
    def working_set_bytes(self) -> int:
        return self.copies * self.buffer_bytes

    @property
    def apparent_bandwidth(self) -> float:
        """Bytes one call reads (one buffer) over its time, in B/s."""
        return timing.achieved_bandwidth(self.buffer_bytes, self.seconds)

    @property
    def ns_per_byte(self) -> float:
        return self.seconds / self.buffer_bytes * 1e9


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


def sweep_plan(device: str, llc_bytes: int) -> tuple[int, list[int]]:
    """Buffer size and the copies to try: doubling until the working set is ≥ 4 × the LLC.

    CPU and MPS: 1 MiB buffers (a call takes tens of µs, far above the clock's cost). CUDA:
    16 MiB, so the kernel's time is not hidden by its launch cost (a few µs).
    """
    import torch

    buffer_bytes = 16 * MiB if torch.device(device).type == "cuda" else MiB
    copies = [1]
    while copies[-1] * buffer_bytes < 4 * llc_bytes:
        copies.append(2 * copies[-1])
    return buffer_bytes, copies


def cache_points(
    copies: Sequence[int], seconds: Sequence[float], buffer_bytes: int
) -> list[CachePoint]:
    """Points from measured median seconds per call (one per number of copies)."""
    if len(copies) != len(seconds) or not copies:
        raise ValueError("need one time per number of copies, at least one")
    if buffer_bytes <= 0:
        raise ValueError("buffer_bytes must be positive")
    pairs = zip(copies, seconds, strict=True)
    return [CachePoint(int(c), int(buffer_bytes), float(s)) for c, s in pairs]


def cache_view(
    points: Sequence[CachePoint],
    llc_bytes: int,
    copies: int | None = None,
    factor: float = timing.COPIES_FACTOR,
) -> CacheView:
    """The point with ``copies`` (default: the first), next to the rule's recommendation.

    The streaming bandwidth is the apparent bandwidth of the largest working set measured,
    the point furthest past the cache: a rate read off the curve, not off the rule's
    ``factor``, so that ``streaming_from`` measures where the cache stopped helping.
    """
    if not points:
        raise ValueError("need at least one point")
    by_copies = {p.copies: p for p in points}
    if copies is None:
        copies = points[0].copies
    if copies not in by_copies:
        raise ValueError(f"no point with {copies} copies; measured: {sorted(by_copies)}")
    selected = by_copies[copies]
    streaming = max(points, key=lambda p: p.working_set_bytes).apparent_bandwidth
    recommended = timing.copies_to_exceed_cache(selected.buffer_bytes, llc_bytes, factor)
    if selected.working_set_bytes <= llc_bytes:
        verdict = "fits in the LLC: this times the cache, not memory"
    elif selected.working_set_bytes < factor * llc_bytes:
        verdict = f"past the LLC but under {factor:g} × it: partly cached"
    else:
        verdict = f"at least {factor:g} × the LLC: this times memory"
    return CacheView(tuple(points), selected, int(llc_bytes), float(factor), recommended,
                     float(streaming), verdict)  # fmt: skip


def streaming_from(view: CacheView, tolerance: float = 0.1) -> CachePoint:
    """The smallest measured working set from which no larger one read more than
    ``tolerance`` above the streaming bandwidth: where this machine's cache stopped helping,
    as measured, whatever size the cache reports (a process can see less of a shared L3
    than its size, or more cache than the last level's). A point slower than the stream is
    not served by a cache and does not move the edge."""
    points = sorted(view.points, key=lambda p: p.working_set_bytes)
    edge = points[-1]
    for point in reversed(points):
        if point.apparent_bandwidth > (1 + tolerance) * view.streaming_bandwidth:
            break
        edge = point
    return edge


def at_working_set(view: CacheView, nbytes: float) -> tuple[CachePoint, CachePoint]:
    """The two measured points whose working sets bracket ``nbytes`` (the nearest one
    twice at either end of the curve): where another measurement's working set falls on it."""
    points = sorted(view.points, key=lambda p: p.working_set_bytes)
    below = [p for p in points if p.working_set_bytes <= nbytes] or points[:1]
    above = [p for p in points if p.working_set_bytes >= nbytes] or points[-1:]
    return below[-1], above[0]


def table(view: CacheView) -> str:
    """The measured points, the selected one marked, and what the rule recommends."""
    lines = [f"{'copies':>7}{'working set':>13}{'× LLC':>8}{'ns/B':>9}{'apparent GB/s':>15}"]
    for p in view.points:
        mark = "  ◀" if p is view.selected else ""
        lines.append(f"{p.copies:>7}{p.working_set_bytes / MiB:>9.0f} MiB"
                     f"{p.working_set_bytes / view.llc_bytes:>8.2f}{p.ns_per_byte:>9.4f}"
                     f"{p.apparent_bandwidth / 1e9:>15.1f}{mark}")  # fmt: skip
    lines.append(
        f"selected: {view.selected.copies} copies, {view.verdict}; apparent bandwidth "
        f"{view.overstatement:.2f} × the streaming {view.streaming_bandwidth / 1e9:.1f} GB/s"
    )
    lines.append(
        f"rule (copies_to_exceed_cache, factor {view.factor:g}): "
        f"{view.recommended_copies} copies of {view.selected.buffer_bytes / MiB:g} MiB"
    )
    return "\n".join(lines)


def draw(ax, view: CacheView) -> None:
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


def show(points: Sequence[CachePoint], llc_bytes: int, copies: int, factor: float) -> None:
    """What the notebook's sliders call: print the table and draw the figure (made outside
    pyplot, ``helpers.widgets.figures``)."""
    view = cache_view(points, llc_bytes, copies, factor)
    print(table(view))
    fig, ax = new_figure()
    draw(ax, view)
    show_figure(fig)
