"""Chapter 4's cache sweep (`04_timing`): how much data a memory-bound timing touches decides
whether it measures memory or cache.

A memory-bound op (``x.sum()`` over one buffer) is timed while rotating among ``copies``
distinct buffers (``sweep_seconds``), so the *working set* is
``copies × buffer``. While it fits in the last-level cache (LLC), every call finds its buffer
still cached and the apparent bandwidth (bytes read / time) is the cache's, not the
memory's. This module plans the sweep (``sweep_plan``), turns its times into points
(``cache_points``) and reads them: the streaming bandwidth (``streaming_bandwidth``), where
the cache stopped helping (``streaming_from``), where another working set falls on the curve
(``at_working_set``), and what the copies rule says of one working set (``cache_verdict``).
The explorer (``helpers.widgets.timing``) draws what these return.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers.measuring import timing

__all__ = ["MiB", "CachePoint", "sweep_seconds", "sweep_plan", "cache_points",
           "streaming_bandwidth", "cache_verdict", "streaming_from", "at_working_set"]  # fmt: skip

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
                  factor: float = timing.COPIES_FACTOR) -> str:  # fmt: skip
    """What a rotation over ``working_set_bytes`` times, by the copies rule's ``factor``."""
    if working_set_bytes <= llc_bytes:
        return "fits in the LLC: this times the cache, not memory"
    if working_set_bytes < factor * llc_bytes:
        return f"past the LLC but under {factor:g} × it: partly cached"
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


def sweep_seconds(
    device: str,
    buffer_bytes: int,
    copies: Sequence[int],
    min_run_time: float = 0.1,
    progress: bool = False,
) -> list[float]:
    """Median seconds of ``x.sum()`` over fp32 buffers of ``buffer_bytes``, rotating among
    each number of ``copies`` (in the order given), with ``timing.time_rotating``: no flush, since
    the cache's effect is what chapter 4's explorer shows. ``progress`` shows a bar."""
    import torch
    from tqdm.auto import tqdm

    if buffer_bytes < 4 or not copies or min(copies) < 1:
        raise ValueError("need buffer_bytes >= 4 and at least one count of copies, each >= 1")
    buffers: list[tuple[torch.Tensor]] = []
    seconds = []
    for count in tqdm(copies, desc="cache sweep", unit="size", disable=not progress):
        while len(buffers) < count:  # reuse the buffers made for smaller counts
            buffers.append((timing.random_tensor((buffer_bytes // 4,), torch.float32, device),))
        seconds.append(timing.time_rotating(torch.sum, buffers[:count], device, min_run_time))
    return seconds
