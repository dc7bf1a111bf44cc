"""Timing a torch callable correctly (chapter 4, `04_timing`).

One way to time device work on CPU, CUDA and MPS, with every pitfall of chapter 4 handled:

- warm-up first, so the first call's one-off costs (allocation, kernel selection, JIT) are
  not timed;
- the device is synchronized before the clock is read (CUDA and MPS run asynchronously);
- the CPU gets all its threads (``torch.utils.benchmark.Timer`` defaults to ONE);
- inputs are random, never zeros (zeros can run faster);
- a memory-bound kernel is timed reading memory, not cache (``plan_cache_defeat``): inputs
  rotate among a bounded number of copies whose total exceeds the last-level cache, or, where
  that many copies would be too many, the cache is flushed by streaming a buffer twice its
  size (``flush_buffer``) before each round of a few distinct copies (every call of a round
  reads inputs nothing has touched since the flush); on CUDA the L2 is flushed the same way;
- the result is the median with its spread (IQR, min, max), never a single run.

The arithmetic (median and spread, achieved FLOP/s and B/s, how many copies defeat a cache)
is kept in small pure functions that the chapter's exercises mirror.
"""

from __future__ import annotations

import itertools
import math
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from helpers.counting._validate import positive_int
from helpers.measuring import machine

if TYPE_CHECKING:
    import torch

__all__ = [
    "Timing",
    "median_and_iqr",
    "NOTCH",
    "compare",
    "faster",
    "achieved_flops",
    "achieved_bandwidth",
    "COPIES_FACTOR",
    "FLUSH_FACTOR",
    "ROUND_FACTOR",
    "MAX_COPIES",
    "CacheDefeat",
    "copies_to_exceed_cache",
    "plan_cache_defeat",
    "flush_buffer",
    "flush_cache",
    "MIN_BLOCK_S",
    "MIN_SAMPLES",
    "call_seconds",
    "random_tensor",
    "rotating_inputs",
    "cache_defeat_inputs",
    "shifted_copies",
    "synchronize",
    "time_blocks",
    "time_callable",
    "time_rotating",
]

MIN_SAMPLES = 4
"""Fewest timed blocks ``time_callable`` returns: enough for a median and a spread."""

NOTCH = 1.57
"""A median of n samples is uncertain by about ± NOTCH · IQR / √n: the notch of a box plot
(McGill, Tukey and Larsen, "Variations of Box Plots", 1978; matplotlib's ``notch=True``)."""

MIN_BLOCK_S = 1e-3
"""Shortest block of calls ``time_callable`` times on a CPU or MPS: reading the synchronizing
clock costs about a microsecond, 0.1% of it."""

COPIES_FACTOR = 2.0
"""Rotate among copies totalling at least this many times the cache: with an LRU-like cache,
a copy is then evicted before it comes round again."""

MAX_COPIES = 32
"""Most input copies a rotation holds. A small weight on a CPU with a large cache (66 KB
against 300 MiB) would need thousands, each made and packed before anything is timed; past
this count the cache is flushed instead (``plan_cache_defeat``)."""

FLUSH_FACTOR = 2.0
"""A flush streams a buffer at least this many times the last-level cache."""

ROUND_FACTOR = 0.5
"""Where the cache is flushed, the copies of a round (timed one after another after each
flush) total at most this share of the cache, and at most ``MAX_COPIES``: each call of the
round still reads inputs that no call has touched since the flush, so every call is cold,
and one flush serves the whole round. A flush reads twice the cache (tens of milliseconds
against a 1 GiB cache), which would otherwise cost more than the calls it precedes; half
the cache bounds the extra memory and set-up by what the flush itself streams."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and its spread over ``n`` samples (chapter 4).

    Each sample is the mean time of ``calls_per_sample`` back-to-back calls (a block), so
    that the clock's own cost and the device synchronization are negligible.
    """

    median_s: float
    iqr_s: float
    min_s: float
    max_s: float
    n: int
    calls_per_sample: int
    device: str
    threads: int

    @classmethod
    def from_samples(
        cls, samples: Sequence[float], *, device: str, threads: int, calls_per_sample: int = 1
    ) -> Timing:
        """Summarize per-call times (seconds) into median, IQR, min and max."""
        median, iqr = median_and_iqr(samples)
        return cls(median, iqr, float(min(samples)), float(max(samples)), len(samples),
                   calls_per_sample, device, threads)  # fmt: skip

    @property
    def relative_iqr(self) -> float:
        """IQR / median: a unitless measure of how noisy the measurement was."""
        return self.iqr_s / self.median_s

    @property
    def notch_s(self) -> float:
        """Half-width of the median's notch, ``NOTCH`` · IQR / √n (``compare``)."""
        return NOTCH * self.iqr_s / math.sqrt(self.n)


def median_and_iqr(samples: Sequence[float]) -> tuple[float, float]:
    """Median and interquartile range (75th − 25th percentile) of ``samples`` (chapter 4).

    Percentiles interpolate linearly between order statistics (numpy's default). The median
    resists the outliers that timing produces (a context switch, a frequency change); the
    IQR says how much to trust it.
    """
    import numpy as np

    if len(samples) == 0:
        raise ValueError("need at least one sample")
    q25, q50, q75 = np.percentile(np.asarray(samples, dtype=float), [25, 50, 75])
    return float(q50), float(q75 - q25)


def compare(a: Timing, b: Timing) -> str:
    """Which of two timings of the same work is faster, if the difference is real (chapter
    4): ``"a"`` or ``"b"``, the one with the lower median when the two medians' notches
    (median ± ``Timing.notch_s``) do not overlap, else ``"neither"``. Fewer than
    ``MIN_SAMPLES`` samples on either side give no spread to judge by: ``"neither"``."""
    if min(a.n, b.n) < MIN_SAMPLES:
        return "neither"
    if a.median_s + a.notch_s < b.median_s - b.notch_s:
        return "a"
    if b.median_s + b.notch_s < a.median_s - a.notch_s:
        return "b"
    return "neither"


def faster(samples_a: Sequence[float], samples_b: Sequence[float]) -> str:
    """``compare`` on two lists of per-call seconds."""
    return compare(Timing.from_samples(samples_a, device="", threads=0),
                   Timing.from_samples(samples_b, device="", threads=0))  # fmt: skip


def achieved_flops(flops: float, seconds: float) -> float:
    """Achieved FLOP/s: work done divided by the time it took (chapter 4)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return flops / seconds


def achieved_bandwidth(nbytes: float, seconds: float) -> float:
    """Achieved bandwidth in B/s: bytes moved divided by the time it took (chapter 4)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds


def copies_to_exceed_cache(
    bytes_per_copy: int, cache_bytes: int, factor: float = COPIES_FACTOR
) -> int:
    """How many distinct input copies make a working set of at least ``factor`` × the cache
    (chapter 4). Rotating among them means no call finds its inputs still cached."""
    if bytes_per_copy <= 0 or cache_bytes <= 0:
        raise ValueError("bytes_per_copy and cache_bytes must be positive")
    return max(1, math.ceil(factor * cache_bytes / bytes_per_copy))


@dataclass(frozen=True)
class CacheDefeat:
    """How a timing keeps the last-level cache from serving its inputs (chapter 4).

    ``method`` is ``"rotate"`` (cycle through ``copies`` distinct input sets totalling at
    least ``COPIES_FACTOR`` × the cache) or ``"flush"`` (``copies`` distinct input sets,
    at least one, totalling at most ``ROUND_FACTOR`` × the cache; a buffer of
    ``flush_bytes`` is streamed before each round of ``copies`` calls, one per set)."""

    method: str
    copies: int
    flush_bytes: int = 0


def plan_cache_defeat(
    bytes_per_copy: int,
    cache_bytes: int,
    max_copies: int = MAX_COPIES,
    max_bytes: int | None = None,
    factor: float = COPIES_FACTOR,
) -> CacheDefeat:
    """Rotate when ``copies_to_exceed_cache`` copies number at most ``max_copies`` and (if
    given) total at most ``max_bytes``; otherwise flush with a buffer of ``FLUSH_FACTOR`` ×
    the cache, before each round of as many copies as fit in ``ROUND_FACTOR`` × the cache
    (and ``max_copies``, ``max_bytes``), at least one. A rotation keeps calls back to back
    (cheap to time, nothing extra runs); a flush costs a stream of twice the cache per round
    but bounds the memory and the set-up time whatever the cache's size."""
    if max_copies < 1:
        raise ValueError(f"max_copies must be at least 1, got {max_copies}")
    copies = copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor)
    if copies <= max_copies and (max_bytes is None or copies * bytes_per_copy <= max_bytes):
        return CacheDefeat("rotate", copies)
    budget = ROUND_FACTOR * cache_bytes if max_bytes is None else min(
        max_bytes, ROUND_FACTOR * cache_bytes)
    round_copies = max(1, min(max_copies, int(budget // bytes_per_copy)))
    return CacheDefeat("flush", round_copies, math.ceil(FLUSH_FACTOR * cache_bytes))


_FLUSH_BUFFERS: dict[str, torch.Tensor] = {}


def flush_buffer(device: str, nbytes: int) -> torch.Tensor:
    """A random fp32 buffer of at least ``nbytes`` on ``device``, made once per process and
    reused (a larger request replaces it): the flush before each timed call, and the
    bandwidth stream of ``helpers.measuring.ceilings``, read the same buffer."""
    import torch

    if nbytes <= 0:
        raise ValueError(f"nbytes must be positive, got {nbytes}")
    key = str(torch.device(device))
    buffer = _FLUSH_BUFFERS.get(key)
    if buffer is None or buffer.numel() * 4 < nbytes:
        _FLUSH_BUFFERS.pop(key, None)  # free the old one before making the new one
        # uniform_ writes every page (an untouched zeroed page would be the one shared zero
        # page, never in the cache) and is many times faster than randn for a large buffer
        buffer = torch.empty(math.ceil(nbytes / 4), dtype=torch.float32, device=device)
        buffer.uniform_(0.5, 1.5)
        _FLUSH_BUFFERS[key] = buffer
    return buffer


def flush_cache(buffer: torch.Tensor) -> None:
    """Evict the last-level cache by streaming ``buffer`` (``flush_buffer``, ≥ 2 × the cache).

    triton's ``do_bench`` and mamf-finder flush a GPU's L2 by zeroing a fixed 256 MB buffer
    before each call. That size is more than any GPU's L2 but less than some CPUs' last-level
    caches (hundreds of MiB on server chips), so here the size follows the cache. On a CPU the
    buffer is *read* (``sum``), not written: written lines would sit dirty in the cache, and
    the timed call would pay for writing them back. On CUDA it is zeroed, as triton does.
    """
    import torch

    if buffer.device.type == "cuda":
        buffer.zero_()
    else:
        torch.sum(buffer)


def synchronize(device: str) -> None:
    """Wait for the device's queued work: a host clock read before this measures only the
    launch on CUDA and MPS (chapter 4). A no-op on CPU."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize(torch.device(device))
    elif kind == "mps":
        torch.mps.synchronize()


def call_seconds(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    device: str = "cpu",
    flush: torch.Tensor | None = None,
) -> float:
    """Seconds of one synchronized call ``fn(*args)``: for a single long call (milliseconds
    and more), where a block of calls is neither needed nor wanted, or for a call after a
    cache flush (``flush``: a ``flush_buffer``, streamed before the clock starts)."""
    if flush is not None:
        flush_cache(flush)
    synchronize(device)
    start = time.perf_counter()
    fn(*args)
    synchronize(device)
    return time.perf_counter() - start


def random_tensor(
    shape: Sequence[int], dtype: torch.dtype, device: str, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Standard-normal random values: never zeros, which some kernels run faster on."""
    import torch

    values = torch.randn(tuple(shape), generator=generator, dtype=torch.float32)
    return values.to(device=device, dtype=dtype)


def rotating_inputs(
    make_inputs: Callable[[], tuple[torch.Tensor, ...]],
    cache_bytes: int,
    factor: float = COPIES_FACTOR,
    max_copies: int = MAX_COPIES,
) -> list[tuple[torch.Tensor, ...]]:
    """Distinct input sets from ``make_inputs`` whose total size is at least ``factor`` ×
    ``cache_bytes`` (chapter 4); ``time_callable`` cycles through them. Refuses to make more
    than ``max_copies``: inputs that small against the cache are flushed instead
    (``cache_defeat_inputs``)."""
    first = make_inputs()
    bytes_per_set = sum(t.numel() * t.element_size() for t in first)
    copies = copies_to_exceed_cache(bytes_per_set, cache_bytes, factor)
    if copies > max_copies:
        raise ValueError(
            f"{copies} copies of a {bytes_per_set} B input set are needed to exceed {factor}x "
            f"a {cache_bytes} B cache, more than max_copies={max_copies}: use "
            "timing.cache_defeat_inputs, which flushes the cache instead")
    return [first] + [make_inputs() for _ in range(copies - 1)]


def cache_defeat_inputs(
    make_inputs: Callable[[], tuple[torch.Tensor, ...]],
    cache_bytes: int,
    device: str = "cpu",
    max_copies: int = MAX_COPIES,
) -> tuple[list[tuple[torch.Tensor, ...]], torch.Tensor | None, CacheDefeat]:
    """Input sets and flush buffer for ``time_callable(fn, sets, device, flush=flush)``, by
    ``plan_cache_defeat``: rotating among copies from ``make_inputs`` when at most
    ``max_copies`` exceed the cache, else a round of a few sets with the cache flushed before
    each round. Returns (sets, flush buffer or None, the plan), so memory and set-up time stay
    bounded whatever the cache's size (chapters 4, 6)."""
    first = make_inputs()
    bytes_per_set = sum(t.numel() * t.element_size() for t in first)
    plan = plan_cache_defeat(bytes_per_set, cache_bytes, max_copies)
    sets = [first] + [make_inputs() for _ in range(plan.copies - 1)]
    flush = flush_buffer(device, plan.flush_bytes) if plan.method == "flush" else None
    return sets, flush, plan


def shifted_copies(tensor: torch.Tensor, count: int) -> list[torch.Tensor]:
    """``tensor`` and ``count - 1`` copies with its elements rolled by 1, 2, … places:
    distinct memory and distinct contents (no page of one repeats a page of another, so not
    even a host that merges identical pages can share them), at the speed of a copy rather
    than of drawing random numbers, which is many times slower."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    flat = tensor.reshape(-1)
    return [tensor] + [flat.roll(shift).view_as(tensor) for shift in range(1, count)]


def time_blocks(
    fn: Callable[..., Any],
    input_sets: Sequence[tuple[Any, ...]],
    device: str = "cpu",
    warmup: int = 1,
    blocks: int = 5,
    number: int = 10,
    clock: Callable[[], float] = time.perf_counter,
    synchronize: Callable[[str], None] = synchronize,
) -> tuple[float, float, list[float]]:
    """The timing loop in its plainest form: ``(median, iqr, samples)`` of the seconds per
    call of ``fn(*inputs)``, ``inputs`` cycling through ``input_sets``.

    ``warmup`` untimed rounds over every input set (each set is read once before any timed
    call, so none pays a first touch), then ``blocks`` blocks of ``number`` back-to-back calls
    that continue the cycle; the device is synchronized before each clock read, so a block's
    time holds all of its work and none of the work before it. A sample is a block's time
    over ``number``; median and IQR are ``median_and_iqr``'s. ``clock`` and ``synchronize``
    are parameters so that a test can pass a fake device's (``helpers.book.checks.FakeDevice``);
    ``time_callable`` is the same loop with adaptive block sizes and run times."""
    if not input_sets or blocks < 1 or number < 1 or warmup < 0:
        raise ValueError("need input sets, blocks >= 1, number >= 1 and warmup >= 0")
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup * len(input_sets)):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = clock()
        for _ in range(number):
            fn(*next(inputs))
        synchronize(device)
        samples.append((clock() - start) / number)
    median, iqr = median_and_iqr(samples)
    return median, iqr, samples


def time_callable(
    fn: Callable[..., Any],
    input_sets: Sequence[tuple[Any, ...]],
    device: str = "cpu",
    *,
    warmup: int = 3,
    min_run_time: float = 0.2,
    max_run_time: float = 1.0,
    threshold: float = 0.1,
    flush_l2: bool = True,
    flush: torch.Tensor | None = None,
) -> Timing:
    """Time ``fn(*inputs)``, cycling ``inputs`` through ``input_sets`` (chapter 4).

    CPU and MPS: calls are timed in blocks of back-to-back calls lasting at least
    ``MIN_BLOCK_S``, so the clock's cost is negligible, with the standard library's
    ``timeit.Timer`` (the loop ``torch.utils.benchmark.Timer`` runs inside), torch's current
    thread count (all cores in this book; Timer's default is one) and a clock that
    synchronizes the device before each reading. Blocks grow until one lasts ``MIN_BLOCK_S``;
    once ``MIN_SAMPLES`` are in, a median block under half of ``MIN_BLOCK_S`` means the blocks
    that passed were stalls of a busy host, so the size grows again and the samples restart:
    no few stalled blocks, however they fall, can settle blocks that are too short. Blocks
    are added with ``adaptive_autorange``'s rule: at least
    ``MIN_SAMPLES`` blocks and ``min_run_time`` seconds, then more until IQR/median <
    ``threshold`` or ``max_run_time`` seconds have passed. Unlike torch's ``Timer``, blocks are
    not grown until the clock costs at most 0.01% of one (``blocked_autorange`` and
    ``adaptive_autorange`` do: for a millisecond-long call, blocks of a hundred calls, which
    makes a sweep of a hundred points take minutes). As in ``blocked_autorange``, no untimed
    call separates the blocks (``Timer.timeit(number)`` is what runs ``max(number // 100, 2)``
    untimed calls, before its one timed block).
    ``flush`` (a ``flush_buffer``, for inputs too small to rotate past the cache,
    ``plan_cache_defeat``): every call is timed on its own, and the buffer is streamed
    (untimed) before each round of ``len(input_sets)`` calls, so each call of a round finds
    its inputs untouched since the flush (the sets must be distinct memory); at least
    ``MIN_SAMPLES`` calls, then more until IQR/median < ``threshold`` with ``min_run_time``
    of timed calls, or until ``max_run_time`` has passed counting the flushes.
    CUDA: per-call CUDA events, with the L2 flushed by a buffer twice its size (or ``flush``)
    before each round of ``len(input_sets)`` calls (events bracket the call only, so the
    flush is not timed) unless ``flush_l2`` is False: chapter 4 turns it off to show what a
    cache does to a timing.
    """
    import torch

    if not input_sets:
        raise ValueError("need at least one input set")
    threads = torch.get_num_threads()
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup):
        fn(*next(inputs))
        synchronize(device)

    if torch.device(device).type == "cuda":
        if flush is None and flush_l2:
            cache = machine.last_level_cache_bytes(device)
            flush = flush_buffer(device, math.ceil(FLUSH_FACTOR * cache))
        samples = _cuda_event_samples(fn, inputs, len(input_sets), min_run_time, max_run_time,
                                      flush)  # fmt: skip
        return Timing.from_samples(samples, device=device, threads=threads)
    if flush is not None:
        samples = _flushed_samples(fn, inputs, len(input_sets), device, flush, min_run_time,
                                   max_run_time, threshold)  # fmt: skip
        return Timing.from_samples(samples, device=device, threads=threads)

    def synchronized_clock() -> float:
        synchronize(device)  # so a block's time includes all of its queued work
        return timeit.default_timer()

    clock = timeit.Timer("fn(*next(inputs))", timer=synchronized_clock,
                         globals={"fn": fn, "inputs": inputs})  # fmt: skip

    def block(number: int) -> float:
        """Mean seconds per call over one block of ``number`` calls."""
        return clock.timeit(number) / number

    number, samples = 1, []
    while True:
        if len(samples) >= MIN_SAMPLES:
            median, iqr = median_and_iqr(samples)
            if median * number < MIN_BLOCK_S / 2:
                # Most blocks were short: the ones that passed the size check were stalls.
                number = max(2 * number, math.ceil(MIN_BLOCK_S / max(median, 1e-9)))
                samples = []
                continue
            spent = sum(samples) * number
            if spent >= min_run_time and (iqr < threshold * median or spent >= max_run_time):
                break
        per_call = block(number)
        if not samples and per_call * number < MIN_BLOCK_S:  # still sizing the blocks
            number = max(2 * number, math.ceil(MIN_BLOCK_S / max(per_call, 1e-9)))
            continue
        samples.append(per_call)  # the block that passed the size check is a sample too
    return Timing.from_samples(samples, device=device, threads=threads, calls_per_sample=number)


def time_in_turn(
    variants: Sequence[tuple[Callable[..., Any], Sequence[tuple[Any, ...]]]],
    device: str = "cpu",
    *,
    rounds: int = 3,
    min_run_time: float = 0.1,
    max_run_time: float = 0.5,
    flush: torch.Tensor | None = None,
) -> list[Timing]:
    """Time ``(fn, input_sets)`` variants in turn, ``rounds`` rounds of one ``time_callable``
    each (two warm-up calls, ``flush`` and run times as there), and return each one's middle
    round by median: a machine whose speed drifts between two separate timings would put the
    drift into the differences compared. ValueError for no variants or a bad ``rounds``."""
    positive_int(rounds, "rounds")
    if not variants:
        raise ValueError("variants must hold at least one (fn, input_sets) pair to time")
    kept: list[list[Timing]] = [[] for _ in variants]
    for _ in range(rounds):
        for (fn, input_sets), timings in zip(variants, kept, strict=True):
            timings.append(time_callable(fn, input_sets, device, warmup=2, flush=flush,
                                         min_run_time=min_run_time, max_run_time=max_run_time))
    return [sorted(timings, key=lambda t: t.median_s)[rounds // 2] for timings in kept]

def _flushed_samples(
    fn: Callable[..., Any],
    inputs: itertools.cycle,
    round_size: int,
    device: str,
    flush: torch.Tensor,
    min_run_time: float,
    max_run_time: float,
    threshold: float,
) -> list[float]:
    """Per-call seconds on a CPU or MPS, the cache flushed (untimed) before every round of
    ``round_size`` calls, one per input set."""
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        first_of_round = len(samples) % round_size == 0
        samples.append(call_seconds(fn, next(inputs), device, flush if first_of_round else None))
        if len(samples) < MIN_SAMPLES:
            continue
        if time.perf_counter() - start >= max_run_time:
            return samples
        if sum(samples) >= min_run_time:
            median, iqr = median_and_iqr(samples)
            if iqr < threshold * median:
                return samples


def _cuda_event_samples(
    fn: Callable[..., Any],
    inputs: itertools.cycle,
    round_size: int,
    min_run_time: float,
    max_run_time: float,
    flush: torch.Tensor | None,
    min_samples: int = 10,
) -> list[float]:
    """Per-call seconds from CUDA events, L2 flushed (not timed) before every round of
    ``round_size`` calls, one per input set."""
    import torch

    samples: list[float] = []
    while len(samples) < min_samples or sum(samples) < min_run_time:
        if flush is not None and len(samples) % round_size == 0:
            flush_cache(flush)  # writes every line of a buffer twice the L2: evicts the inputs
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*next(inputs))
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
        if sum(samples) > max_run_time and len(samples) >= MIN_SAMPLES:
            break
    return samples


def time_rotating(
    fn: Callable[..., Any],
    input_sets: Sequence[tuple[Any, ...]],
    device: str = "cpu",
    min_run_time: float = 0.2,
) -> float:
    """Median seconds per call of ``fn(*inputs)``, cycling through ``input_sets``, timed by
    ``time_callable`` (every set warmed up once) with *no* cache flush, so the cache's effect
    shows (chapter 4's cache explorer)."""
    result = time_callable(fn, input_sets, device, warmup=len(input_sets) + 2,
                           min_run_time=min_run_time, max_run_time=5 * min_run_time,
                           flush_l2=False)  # fmt: skip
    return result.median_s

