"""Chapter 4's cache sweep (`04_timing`): how much data a memory-bound timing touches decides
whether it measures memory or cache.

A memory-bound op (``x.sum()`` over one buffer) is timed while rotating among ``copies``
distinct buffers, so the *working set* is ``copies × buffer``. While it fits in the last-level
cache (LLC), every call finds its buffer still cached and the apparent bandwidth (bytes read /
time) is the cache's, not the memory's. ``run_cache_sweep`` runs the whole experiment and
returns a ``CacheSweep`` record: it doubles the copies past four times the LLC and on until the
curve has settled (a larger working set read within ``tolerance`` of the one before), so that
where streaming starts is measured, not the sweep's last point by construction. The pieces: the
plan (``sweep_plan``), the points (``cache_points``) and what is read from them: the streaming
bandwidth (``streaming_bandwidth``), where the cache stopped helping (``streaming_from``),
where another working set falls on the curve (``at_working_set``), and what the copies rule
says of one working set (``cache_verdict``). The explorer (``helpers.widgets.timing``) draws
what these return.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers.measuring import machine, timing

__all__ = ["MiB", "CachePoint", "CacheSweep", "run_cache_sweep", "sweep_plan",
           "cache_points", "streaming_bandwidth", "cache_verdict", "streaming_from",
           "at_working_set"]  # fmt: skip

MiB = 2**20
SETTLE_TOLERANCE = 0.1  # a larger working set within 10% of the one before: the curve settled
MAX_LLC_MULTIPLE = 16  # the sweep gives up settling past 16 × the LLC (and says so)


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


def streaming_bandwidth(points: Sequence[CachePoint]) -> float:
    """The apparent bandwidth of the largest working set measured, the point furthest past
    the cache: a rate read off the curve, not off the rule's factor, so that
    ``streaming_from`` measures where the cache stopped helping."""
    if not points:
        raise ValueError("need at least one point")
    return max(points, key=lambda p: p.working_set_bytes).apparent_bandwidth


def cache_verdict(working_set_bytes: int, llc_bytes: int,
                  factor: float = timing.COPIES_FACTOR,
                  streaming_edge_bytes: int | None = None) -> str:  # fmt: skip
    """What a rotation over ``working_set_bytes`` times, by the copies rule's ``factor``;
    where the run measured its streaming edge (``streaming_from``), a working set the rule
    passes but the edge does not is called partly cached: the measurement outranks the rule."""
    if working_set_bytes <= llc_bytes:
        return "fits in the LLC: this times the cache, not memory"
    if working_set_bytes < factor * llc_bytes:
        return f"past the LLC but under {factor:g} × it: partly cached"
    if streaming_edge_bytes is not None and working_set_bytes < streaming_edge_bytes:
        return (f"at least {factor:g} × the LLC, yet under this run's streaming edge "
                f"({streaming_edge_bytes / 2**20:,.0f} MiB): still partly cached")
    return f"at least {factor:g} × the LLC: this times memory"


def streaming_from(points: Sequence[CachePoint], tolerance: float = 0.1) -> CachePoint:
    """The smallest measured working set from which no larger one read more than
    ``tolerance`` above the streaming bandwidth: where this machine's cache stopped helping,
    as measured, whatever size the cache reports (a process can see less of a shared L3
    than its size, or more cache than the last level's). A point slower than the stream is
    not served by a cache and does not move the edge."""
    stream = streaming_bandwidth(points)
    ordered = sorted(points, key=lambda p: p.working_set_bytes)
    edge = ordered[-1]
    for point in reversed(ordered):
        if point.apparent_bandwidth > (1 + tolerance) * stream:
            break
        edge = point
    return edge


def at_working_set(points: Sequence[CachePoint], nbytes: float) -> tuple[CachePoint, CachePoint]:
    """The two measured points whose working sets bracket ``nbytes`` (the nearest one
    twice at either end of the curve): where another measurement's working set falls on it."""
    ordered = sorted(points, key=lambda p: p.working_set_bytes)
    below = [p for p in ordered if p.working_set_bytes <= nbytes] or ordered[:1]
    above = [p for p in ordered if p.working_set_bytes >= nbytes] or ordered[-1:]
    return below[-1], above[0]


@dataclass(frozen=True)
class CacheSweep:
    """What ``run_cache_sweep`` measured, and what chapter 4 reads from it."""

    device: str
    llc_bytes: int
    buffer_bytes: int
    threads: int
    points: tuple[CachePoint, ...]
    tolerance: float = SETTLE_TOLERANCE

    @property
    def copies(self) -> list[int]:
        return [p.copies for p in self.points]

    @property
    def streaming_bandwidth(self) -> float:
        return streaming_bandwidth(self.points)

    @property
    def edge(self) -> CachePoint:
        """Where the cache stopped helping (``streaming_from``)."""
        return streaming_from(self.points, self.tolerance)

    @property
    def settled(self) -> bool:
        """True when a larger working set than the edge was measured: the edge is a
        measurement, not the sweep's last point by construction."""
        return self.edge.working_set_bytes < self.points[-1].working_set_bytes

    @property
    def streaming(self) -> list[CachePoint]:
        """The points from the edge on: past the cache, as measured."""
        return [p for p in self.points if p.working_set_bytes >= self.edge.working_set_bytes]

    def summary(self) -> list[str]:
        """The sentences chapter 4 prints under the sweep, each from the points."""
        edge, stream, mib = self.edge, self.streaming_bandwidth, MiB
        lines = [f"streaming speed (no larger working set faster than {1 + self.tolerance:g} × "
                 f"{stream / 1e9:.1f} GB/s) from {edge.working_set_bytes / mib:g} MiB on: "
                 f"{edge.working_set_bytes / self.llc_bytes:.2f} × the "
                 f"{self.llc_bytes / mib:g} MiB the last-level cache reports"]
        before = [p for p in self.points if p.working_set_bytes < edge.working_set_bytes]
        if before:
            lines.append(f"at {before[-1].working_set_bytes / mib:g} MiB, the point before, it "
                         f"read {before[-1].apparent_bandwidth / stream:.2f}× that")
        if self.settled:
            largest = self.points[-1]
            lines.append(f"settled: {len(self.streaming) - 1} larger working set"
                         f"{'s' * (len(self.streaming) > 2)}, up to "
                         f"{largest.working_set_bytes / mib:g} MiB, read within "
                         f"{self.tolerance:.0%} of it")
        else:
            lines.append(f"not settled by {self.points[-1].working_set_bytes / mib:g} MiB (the "
                         "sweep's limit): the curve was still falling, so the streaming rate "
                         "is no bound either way (the cache still serves part of it; each "
                         "call's fixed cost is in it too) and the edge may lie further out")
        return lines


def run_cache_sweep(
    device: str,
    llc_bytes: int,
    *,
    min_run_time: float = 0.1,
    tolerance: float = SETTLE_TOLERANCE,
    max_llc_multiple: int = MAX_LLC_MULTIPLE,
    progress: bool = False,
) -> CacheSweep:
    """Chapter 4's cache sweep, start to end: ``x.sum()`` rotating among 1, 2, 4, … buffers
    (``sweep_plan``'s size) until the working set is at least four times the LLC and the curve
    has settled, or ``max_llc_multiple`` × the LLC is reached.

    On a CPU it times on the cores other programs leave free (``machine.free_core_threads``): a
    sum over one 1 MiB buffer takes tens of µs, and a thread whose core another program holds
    would stall each call for a scheduler slice. torch's thread count is restored after."""
    import torch
    from tqdm.auto import tqdm

    if llc_bytes <= 0:
        raise ValueError(f"llc_bytes must be positive, got {llc_bytes}")
    buffer_bytes, planned = sweep_plan(device, llc_bytes)
    with machine.free_core_threads(device) as used:
        buffers: list[tuple[torch.Tensor]] = []
        points: list[CachePoint] = []
        bar = tqdm(total=len(planned), desc="cache sweep", unit="size", disable=not progress)
        try:
            count = 1
            while True:
                while len(buffers) < count:  # reuse the buffers made for smaller counts
                    buffers.append((timing.random_tensor((buffer_bytes // 4,), torch.float32,
                                                         device),))
                seconds = timing.time_rotating(torch.sum, buffers[:count], device, min_run_time)
                points.append(CachePoint(count, buffer_bytes, seconds))
                if bar.n >= bar.total:  # past the plan: one size more than planned, still counted
                    bar.total = bar.n + 1
                bar.update()
                record = CacheSweep(str(device), int(llc_bytes), buffer_bytes, used, tuple(points),
                                    tolerance)
                past_plan = count >= planned[-1]
                if (past_plan and record.settled) or count * buffer_bytes >= (
                        max_llc_multiple * llc_bytes):
                    return record
                count *= 2
        finally:
            bar.total = bar.n  # a sweep that settled early ends its bar full
            bar.refresh()
            bar.close()
