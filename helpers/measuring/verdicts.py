"""What timings show beyond which is faster (chapter 4): the cheapest run that would tell two
apart, and whether a slowdown stands past the samples' spread, consistently enough to be a
property of the machine (subnormal floats)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from helpers.measuring.timing import MIN_SAMPLES, NOTCH, Timing, compare, median_and_iqr

__all__ = ["samples_needed", "shows_difference", "slower_beyond_spread", "subnormal_verdict"]


def samples_needed(
    samples_a: Sequence[float], samples_b: Sequence[float]
) -> tuple[int, int] | None:
    """The cheapest run that would show a difference (chapter 4's exercise): ``(r_a, r_b)``
    samples, each at least ``MIN_SAMPLES``, whose notches are apart by ``compare``'s rule if
    the run's medians and IQRs come out as the pilot's ``samples_a`` and ``samples_b``, with
    the least time spent timing, r_a · median_a + r_b · median_b (the fewest r_a where several
    tie). None where the medians are equal: no number of samples separates them.

    The notches are apart when NOTCH · (IQR_a / √r_a + IQR_b / √r_b) < gap. For each r_a, the
    fewest r_b follows; r_a rises from the fewest that leaves room for b's notch until
    r_a · median_a + MIN_SAMPLES · median_b reaches the best time found: no larger r_a beats it."""
    (a, a_iqr), (b, b_iqr) = median_and_iqr(samples_a), median_and_iqr(samples_b)
    if min(a, b) <= 0:
        raise ValueError(f"medians must be positive, got {a} and {b}")
    gap = abs(a - b)
    if gap == 0:
        return None

    def apart(r_a: int, r_b: int) -> bool:
        return NOTCH * (a_iqr / math.sqrt(r_a) + b_iqr / math.sqrt(r_b)) < gap

    def fewest_b(r_a: int) -> int | None:
        room = gap - NOTCH * a_iqr / math.sqrt(r_a)
        if room <= 0:
            return None
        r_b = max(MIN_SAMPLES, math.floor((NOTCH * b_iqr / room) ** 2) + 1)
        while not apart(r_a, r_b):  # rounding at the boundary: settle it by the rule itself
            r_b += 1
        while r_b > MIN_SAMPLES and apart(r_a, r_b - 1):
            r_b -= 1
        return r_b

    best: tuple[float, int, int] | None = None
    r_a = max(MIN_SAMPLES, math.floor((NOTCH * a_iqr / gap) ** 2) + 1)
    while best is None or r_a * a + MIN_SAMPLES * b < best[0]:
        r_b = fewest_b(r_a)
        if r_b is not None and (best is None or r_a * a + r_b * b < best[0]):
            best = (r_a * a + r_b * b, r_a, r_b)
        r_a += 1
    return best[1], best[2]


def shows_difference(
    samples_a: Sequence[float], samples_b: Sequence[float], r_a: int, r_b: int
) -> bool:
    """Whether ``compare`` would tell apart a run of ``r_a`` and ``r_b`` samples whose medians
    and IQRs came out as ``samples_a``'s and ``samples_b``'s (``samples_needed``'s rule)."""
    (a, a_iqr), (b, b_iqr) = median_and_iqr(samples_a), median_and_iqr(samples_b)
    return compare(Timing(a, a_iqr, a, a, r_a, 1, "", 0),
                   Timing(b, b_iqr, b, b, r_b, 1, "", 0)) != "neither"  # fmt: skip


def slower_beyond_spread(fast: Timing, slow: Timing) -> bool:
    """Whether ``slow`` took longer than ``fast`` by ``compare``'s rule and by more than either
    timing's IQR: a slowdown past the spread of the samples, not one inside it."""
    return compare(fast, slow) == "a" and (
        slow.median_s - fast.median_s > max(fast.iqr_s, slow.iqr_s))


def subnormal_verdict(rows: Mapping[tuple[int, bool], tuple[Timing, Timing]],
                      flushed: Mapping[tuple[int, bool], float] | None = None) -> str:
    """Chapter 4's verdict on subnormal floats from ``rows``: (threads, flush-to-zero on) →
    (normal, subnormal) timings of the same operation. A subnormal penalty belongs to a core,
    so it must show, beyond the spread (``slower_beyond_spread``), with flush-to-zero off on
    every thread count; a slowdown on some only, or only with flush-to-zero on, is not one.
    ``flushed``: the same keys → the share of results flushed to zero. Where flush-to-zero
    left part of them unflushed (a worker thread without the flag) yet the slowdown went, the
    flag cannot have removed it there, and the verdict says so."""
    slow = {key: slower_beyond_spread(*pair) for key, pair in rows.items()}
    counts = sorted({threads for threads, _ in rows}, reverse=True)

    def names(threads: Sequence[int]) -> str:
        return " and ".join(f"{t} thread{'s' * (t > 1)}" for t in threads)

    off = [t for t in counts if slow.get((t, False))]
    on = [t for t in counts if slow.get((t, True))]
    if not off and not on:
        return "no subnormal slowdown beyond the spread on this run, with flush-to-zero off or on"
    if not off:
        return (f"no consistent subnormal slowdown on this run: slower beyond the spread only "
                f"with flush-to-zero on ({names(on)}), which the subnormal path cannot explain")
    if len(off) < len(counts):
        rest = [t for t in counts if t not in off]
        return (f"no consistent subnormal slowdown on this run: with flush-to-zero off, slower "
                f"beyond the spread on {names(off)} but not on {names(rest)}")
    if not on:
        partly = [t for t in counts if (flushed or {}).get((t, True), 1.0) < 0.99]
        if not partly:
            return "a subnormal slowdown on every thread count, which flush-to-zero removed"
        return (f"a subnormal slowdown on every thread count, gone with flush-to-zero on; but on "
                f"{names(partly)} part of the results stayed unflushed, so there the flag cannot "
                "have removed it, and this run does not show what did")
    if len(on) == len(counts):
        return "a subnormal slowdown on every thread count, which stayed with flush-to-zero on"
    removed = [t for t in counts if t not in on]
    return (f"a subnormal slowdown on every thread count; flush-to-zero removed it on "
            f"{names(removed)}, not on {names(on)}")
