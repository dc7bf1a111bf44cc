"""Chapter 4's demonstrations of how a timing goes wrong, each an experiment that returns a
record of what it measured, with ``report()``, the lines the chapter prints:

- ``naive_calls``: the obvious loop (read the clock, call, wait for the device, read the
  clock) run a few dozen times, every sample kept in order (section 1);
- ``first_calls``: the first call of operations this process has not run, against later
  calls of the same (section 2);
- ``launch_and_finish``: a matmul clocked once its launch returns and once its work is done;
  on a CPU, which has no queue, handed to a worker thread as the analogue (section 3);
- ``cached_and_rotated``: a GEMV on one weight matrix re-read, against rotating among copies
  larger than the last-level cache together (section 4).

Each runs inside a ``machine.OthersLoad``, kept in the record as ``load``, so the load other
processes put on the machine is the load the figure was timed under.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from helpers.counting import flops, memory
from helpers.counting._validate import positive_int
from helpers.measuring import machine, timing

__all__ = [
    "clock_each_call",
    "NaiveCalls",
    "naive_calls",
    "FirstCall",
    "FirstCalls",
    "first_calls",
    "LaunchAndFinish",
    "launch_and_finish",
    "CachedAndRotated",
    "cached_and_rotated",
]

MiB = 2**20


def clock_each_call(fn: Callable[[], Any], device: str, calls: int) -> list[float]:
    """Seconds of each of ``calls`` calls of ``fn()``, in order, each clocked on its own: read
    the clock, call, wait for the device (``timing.synchronize``), read the clock. No warm-up,
    no blocks: the first call is the first sample."""
    positive_int(calls, "calls")
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        timing.synchronize(device)
        samples.append(time.perf_counter() - start)
    return samples


@dataclass(frozen=True)
class NaiveCalls:
    """``naive_calls``'s samples (seconds, in call order) of one ``label``led call."""

    label: str
    seconds: tuple[float, ...]
    load: machine.OthersLoad

    @property
    def first(self) -> float:
        return self.seconds[0]

    @property
    def median(self) -> float:
        return timing.median_and_iqr(self.seconds)[0]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.seconds)

    def report(self) -> str:
        ms = sorted(s * 1e3 for s in self.seconds)
        return "\n".join([
            f"{self.label}, {len(ms)} calls, sorted (ms):",
            " ".join(f"{t:.3f}" for t in ms),
            f"min {ms[0]:.3f}   median {self.median * 1e3:.3f}   mean {self.mean * 1e3:.3f}   "
            f"max {ms[-1]:.3f} ms",
            f"the very first call took {self.first * 1e3:.3f} ms",
        ])


def naive_calls(fn: Callable[[], Any], device: str, label: str, calls: int = 25) -> NaiveCalls:
    """``fn()`` clocked call by call (``clock_each_call``), as the obvious loop does."""
    with machine.OthersLoad() as load:
        seconds = clock_each_call(fn, device, calls)
    return NaiveCalls(label, tuple(seconds), load)


@dataclass(frozen=True)
class FirstCall:
    """One operation's first call and the median (IQR) of the calls after it, in seconds;
    ``slowest``: whether the first was slower than every later call."""

    name: str
    first: float
    warm: float
    warm_iqr: float
    slowest: bool


@dataclass(frozen=True)
class FirstCalls:
    """``first_calls``'s rows, timed on ``threads`` of torch's ``all_threads``."""

    rows: tuple[FirstCall, ...]
    calls: int
    threads: int
    all_threads: int
    load: machine.OthersLoad

    @property
    def chance_one_slowest(self) -> float:
        """The chance that, with no one-off cost at all, at least one row's first call is
        the slowest of its ``calls`` like calls: 1 in ``calls`` for each row."""
        return 1 - (1 - 1 / self.calls) ** len(self.rows)

    def report(self) -> str:
        lines = [
            f"timed on {self.threads} of {self.all_threads} threads (the cores other programs "
            "left free)",
            f"{'operation':<32}{'first (ms)':>11}{'warm median (IQR)':>19}{'first / warm':>14}",
        ]
        for row in self.rows:
            verdict = (f"slower than all {self.calls - 1} warm calls" if row.slowest
                       else "not the slowest call")  # fmt: skip
            lines.append(f"{row.name:<32}{row.first * 1e3:>11.3f}{row.warm * 1e3:>10.3f} "
                         f"({row.warm_iqr * 1e3:.3f}){row.first / row.warm:>10.1f}×  {verdict}")
        return "\n".join(lines)

    def chance_line(self) -> str:
        return (f"with no one-off cost, a first call is the slowest of {self.calls} by chance "
                f"1 in {self.calls} ({1 / self.calls:.0%}), and at least one of these "
                f"{len(self.rows)} by chance {self.chance_one_slowest:.0%}: each label rests on "
                "one first call; to be sure, repeat it in fresh processes")


def first_calls(ops: Mapping[str, Callable[[], Any]], device: str, calls: int = 11) -> FirstCalls:
    """Each operation's first ``calls`` calls clocked one by one (``clock_each_call``), on the
    cores other programs leave free (``machine.free_core_threads``). Meaningful only for
    operations this process has not run before: the first call is the first sample."""
    if calls < 2:
        raise ValueError(f"calls must be at least 2 (a first call and a warm one), got {calls}")
    import torch

    all_threads = torch.get_num_threads()
    rows = []
    with machine.free_core_threads(device) as threads, machine.OthersLoad() as load:
        for name, fn in ops.items():
            samples = clock_each_call(fn, device, calls)
            warm, iqr = timing.median_and_iqr(samples[1:])
            rows.append(FirstCall(name, samples[0], warm, iqr, samples[0] > max(samples[1:])))
    return FirstCalls(tuple(rows), calls, threads, all_threads, load)


@dataclass(frozen=True)
class LaunchAndFinish:
    """``launch_and_finish``'s medians (seconds) of an n×n×n fp32 matmul: until the call
    returned (``launched``) and until its work was done (``finished``); on a CPU, also the
    same matmul called on the calling thread (``direct``; None on a GPU)."""

    experiment: str
    n: int
    launched: float
    finished: float
    load: machine.OthersLoad
    direct: float | None = None

    @property
    def matmul_seconds(self) -> float:
        """The matmul's own time, as the chapter's other matmuls are timed: on a CPU the
        calling thread's (a worker thread runs torch's intra-op work on a pool of its own)."""
        return self.finished if self.direct is None else self.direct

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.n, self.n, self.n)

    @property
    def flop(self) -> int:
        return flops.matmul_flops(*self.shape)

    def report(self) -> str:
        return "\n".join([
            self.experiment,
            f"{self.n}×{self.n} fp32 matmul, {self.flop:.3g} FLOPs",
            f"clock read after the launch: {self.launched * 1e6:10.1f} µs  → 'achieved' "
            f"{timing.achieved_flops(self.flop, self.launched) / 1e12:10.2f} TFLOP/s",
            f"clock read after the work:   {self.finished * 1e6:10.1f} µs  → achieved   "
            f"{timing.achieved_flops(self.flop, self.finished) / 1e12:10.2f} TFLOP/s",
            f"the unsynchronized timing is {self.finished / self.launched:.0f}× too short",
            *([] if self.direct is None else [
                f"the same matmul called on this thread: {self.direct * 1e6:10.1f} µs; in the "
                f"worker it took {self.finished / self.direct:.2f}× as long (there torch's "
                "intra-op work runs on a thread pool of the worker's own)"]),
        ])


def _launch_then_wait(launch: Callable[[], Any], wait: Callable[[Any], Any],
                      repeats: int) -> tuple[float, float]:
    # Median seconds until `launch()` returns and until `wait(handle)` does; one warm-up round.
    launched, finished = [], []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        handle = launch()
        launched.append(time.perf_counter() - start)
        wait(handle)
        finished.append(time.perf_counter() - start)
    return timing.median_and_iqr(launched[1:])[0], timing.median_and_iqr(finished[1:])[0]


def launch_and_finish(n: int, device: str, repeats: int = 5) -> LaunchAndFinish:
    """An n×n fp32 ``torch.mm`` clocked twice in each of ``repeats`` rounds (after one
    warm-up round): once the call returns, once its work is done. On CUDA or MPS the call
    queues a kernel and the wait is ``timing.synchronize``. A CPU has no queue, so there the
    matmul is submitted to a worker thread (``ThreadPoolExecutor.submit`` returns at once, as
    a launch does) and the wait is the future's result: the analogue."""
    import torch

    positive_int(n, "n")
    positive_int(repeats, "repeats")
    a = timing.random_tensor((n, n), torch.float32, device)
    with machine.OthersLoad() as load:
        if torch.device(device).type != "cpu":
            experiment = f"{device}: torch.mm launched; clock read before and after synchronize"
            launched, finished = _launch_then_wait(lambda: torch.mm(a, a),
                                                   lambda _: timing.synchronize(device), repeats)
        else:
            experiment = ("CPU analogue: torch.mm submitted to a worker thread; clock read "
                          "before and after waiting for its result")
            with ThreadPoolExecutor(max_workers=1) as pool:
                launched, finished = _launch_then_wait(lambda: pool.submit(torch.mm, a, a),
                                                       lambda future: future.result(), repeats)
            direct = timing.median_and_iqr(clock_each_call(lambda: torch.mm(a, a), device,
                                                           repeats + 1)[1:])[0]
            return LaunchAndFinish(experiment, n, launched, finished, load, direct)
    return LaunchAndFinish(experiment, n, launched, finished, load)


@dataclass(frozen=True)
class CachedAndRotated:
    """``cached_and_rotated``'s median seconds of a [1 × k]·[k × rows] fp32 GEMV: on one
    weight matrix re-read (``cached``), and rotating among ``copies`` input sets together
    larger than the ``llc_bytes`` cache (``rotated``); ``nbytes`` a call streams (weights,
    input and output)."""

    k: int
    rows: int
    copies: int
    llc_bytes: int
    cached: float
    rotated: float
    threads: int
    load: machine.OthersLoad

    @property
    def nbytes(self) -> int:
        return memory.linear_bytes(1, self.k, self.rows, "fp32")

    @property
    def rotated_bytes(self) -> int:
        return self.copies * self.nbytes

    @property
    def cached_rate(self) -> float:
        return timing.achieved_bandwidth(self.nbytes, self.cached)

    @property
    def rotated_rate(self) -> float:
        return timing.achieved_bandwidth(self.nbytes, self.rotated)

    def report(self) -> str:
        return "\n".join([
            f"GEMV [1×{self.k}]·[{self.k}×{self.rows}] fp32: {self.nbytes / MiB:.2f} MiB per "
            f"call, LLC {self.llc_bytes / MiB:.1f} MiB, {self.threads} "
            f"thread{'s' * (self.threads > 1)}",
            f"one weight matrix, re-read:       {self.cached * 1e6:8.1f} µs → "
            f"{self.cached_rate / 1e9:7.1f} GB/s",
            f"{self.copies} matrices ({self.rotated_bytes / MiB:.0f} MiB), rotated: "
            f"{self.rotated * 1e6:8.1f} µs → {self.rotated_rate / 1e9:7.1f} GB/s",
            f"re-reading one matrix reports {self.cached_rate / self.rotated_rate:.2f}× the "
            "rotated GEMV's rate",
        ])


def cached_and_rotated(k: int, rows: int, device: str, llc_bytes: int,
                       min_run_time: float = 0.2) -> CachedAndRotated:
    """A decode-like GEMV ``F.linear(x, W)`` with x [1 × k] and W [rows × k] in fp32, timed by
    ``timing.time_rotating`` (warmed up, no cache flush) twice: on one input set, and rotating
    among ``timing.rotating_inputs`` copies that together exceed ``llc_bytes``. On the cores
    other programs leave free (``machine.free_core_threads``)."""
    import torch
    import torch.nn.functional as F

    positive_int(k, "k")
    positive_int(rows, "rows")
    positive_int(llc_bytes, "llc_bytes")

    def gemv_inputs() -> tuple[torch.Tensor, torch.Tensor]:
        return (timing.random_tensor((1, k), torch.float32, device),
                timing.random_tensor((rows, k), torch.float32, device))

    one_set: Sequence[tuple[Any, ...]] = [gemv_inputs()]
    rotated_sets = timing.rotating_inputs(gemv_inputs, llc_bytes)
    with machine.free_core_threads(device) as threads, machine.OthersLoad() as load:
        cached = timing.time_rotating(F.linear, one_set, device, min_run_time)
        rotated = timing.time_rotating(F.linear, rotated_sets, device, min_run_time)
    return CachedAndRotated(k, rows, len(rotated_sets), llc_bytes, cached, rotated, threads,
                            load)
