"""Chapter 4's sections 5 and 6 as experiments, each returning a record of what it measured,
with ``report()``, the lines the chapter prints, every verdict read from the record's figures:

- ``zeros_and_random``: one matmul on random and on all-zero inputs, per dtype (section 5);
- ``subnormals``: an elementwise multiply on normal and on subnormal fp32 values, flush-to-zero
  off and on, on several thread counts (section 5);
- ``timer_threads``: one matmul timed by ``torch.utils.benchmark.Timer`` with its default of
  one thread and with all of torch's threads (section 6);
- ``against_timer``: the same matmul timed by ``timing.time_callable``, against that Timer.

The paired timings run in alternating rounds (``interleaved``), so that a drift in the
machine's load falls on both sides alike. Each experiment runs inside ``machine.OthersLoad``,
kept in the record, so the load printed beside a figure is the load it was timed under.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers.counting._validate import positive_int
from helpers.measuring import machine, timing, verdicts

__all__ = [
    "interleaved",
    "ValuesRow",
    "ZerosAndRandom",
    "zeros_and_random",
    "Subnormals",
    "subnormals",
    "TimerThreads",
    "timer_threads",
    "AgainstTimer",
    "against_timer",
]

Call = tuple[Callable[..., Any], tuple[Any, ...]]
"""A function and the arguments it is timed on."""


def _plural(threads: int) -> str:
    return f"{threads} thread{'s' * (threads > 1)}"


def interleaved(calls: Mapping[str, Call], device: str, rounds: int = 6, *,
                min_run_time: float = 0.02, max_run_time: float = 0.05) -> dict[str, timing.Timing]:
    """Each label's ``Timing`` over ``rounds`` medians of ``timing.time_callable``, one per round,
    the labels' order reversed every other round so that a drift in the machine's load falls on
    every label alike. ValueError for no calls or a bad ``rounds``."""
    import torch

    positive_int(rounds, "rounds")
    if not calls:
        raise ValueError("calls must hold at least one label: (fn, args) to time")
    medians: dict[str, list[float]] = {label: [] for label in calls}
    for r in range(rounds):
        for label in (list(calls) if r % 2 == 0 else list(reversed(calls))):
            fn, args = calls[label]
            medians[label].append(timing.time_callable(
                fn, [args], device, min_run_time=min_run_time, max_run_time=max_run_time).median_s)
    return {label: timing.Timing.from_samples(s, device=device, threads=torch.get_num_threads())
            for label, s in medians.items()}


@dataclass(frozen=True)
class ValuesRow:
    """One dtype's n×n matmul on random and on all-zero inputs, and the load it ran under."""

    dtype: str
    random: timing.Timing
    zeros: timing.Timing
    load: machine.OthersLoad

    @property
    def verdict(self) -> str:
        """"random faster", "zeros faster" or "no difference shown" (``timing.compare``)."""
        return {"a": "random faster", "b": "zeros faster",
                "neither": "no difference shown"}[timing.compare(self.random, self.zeros)]


@dataclass(frozen=True)
class ZerosAndRandom:
    """``zeros_and_random``'s rows, one per dtype, of an n×n×n ``torch.mm``."""

    n: int
    rows: tuple[ValuesRow, ...]

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.n, self.n, self.n)

    def report(self) -> str:
        lines = [f"{self.n}×{self.n} matmul, median ms (IQR)   "
                 f"{'random':>16}{'zeros':>16}{'zeros / random':>16}"]
        for row in self.rows:
            r, z = row.random, row.zeros
            lines.append(f"{row.dtype:<34}{r.median_s * 1e3:>8.3f} ({r.iqr_s * 1e3:.3f})"
                         f"{z.median_s * 1e3:>8.3f} ({z.iqr_s * 1e3:.3f})"
                         f"{z.median_s / r.median_s:>11.2f}  {row.verdict}")
        return "\n".join(lines)


def zeros_and_random(n: int, device: str, dtypes: Sequence[str] = ("fp32", "bf16"),
                     rounds: int = 6) -> ZerosAndRandom:
    """An n×n ``torch.mm`` of a matrix with itself, per dtype: on ``timing.random_tensor``
    values and on ``torch.zeros``, in ``rounds`` alternating rounds (``interleaved``)."""
    import torch

    positive_int(n, "n")
    rows = []
    for dtype_name in dtypes:
        dtype = machine.torch_dtype(dtype_name)
        random_a = timing.random_tensor((n, n), dtype, device)
        zeros_a = torch.zeros((n, n), dtype=dtype, device=device)
        with machine.OthersLoad() as load:
            times = interleaved({"random": (torch.mm, (random_a, random_a)),
                                 "zeros": (torch.mm, (zeros_a, zeros_a))}, device, rounds)
        rows.append(ValuesRow(dtype_name, times["random"], times["zeros"], load))
    return ZerosAndRandom(n, tuple(rows))


@dataclass(frozen=True)
class Subnormals:
    """``subnormals``'s figures: the share of subnormal values in the scaled tensor; per
    (threads, flush-to-zero on): the (normal, subnormal) timings, the share of the subnormal
    products flushed to zero, and the load each pair ran under."""

    elements: int
    subnormal_share: float
    rows: Mapping[tuple[int, bool], tuple[timing.Timing, timing.Timing]]
    flushed: Mapping[tuple[int, bool], float]
    loads: Mapping[tuple[int, bool], machine.OthersLoad]

    @property
    def thread_counts(self) -> list[int]:
        return sorted({threads for threads, _ in self.rows}, reverse=True)

    @property
    def verdict(self) -> str:
        """``verdicts.subnormal_verdict``: a penalty only if slower beyond the spread with
        flush-to-zero off on every thread count."""
        return verdicts.subnormal_verdict(self.rows, self.flushed)

    def report(self) -> str:
        lines = [f"share of subnormal values in the second tensor: {self.subnormal_share:.1%}"]
        for (threads, flush), (normal, sub) in self.rows.items():
            slower = verdicts.slower_beyond_spread(normal, sub)
            lines.append(
                f"{threads} thread{'s' if threads > 1 else ' '}, flush-to-zero "
                f"{'on ' if flush else 'off'}: normal {normal.median_s * 1e6:7.1f} µs "
                f"(IQR {normal.iqr_s * 1e6:.1f}), subnormal {sub.median_s * 1e6:7.1f} µs "
                f"(IQR {sub.iqr_s * 1e6:.1f}); ratio {sub.median_s / normal.median_s:5.2f}: "
                f"{'slower beyond the spread' if slower else 'no slowdown beyond the spread'}; "
                f"results flushed to zero: {self.flushed[threads, flush]:.0%}")
        lines.append(f"verdict: {self.verdict}")
        lines.append("flush-to-zero reached " + ", ".join(
            f"{self.flushed[threads, True]:.0%} of the results on {_plural(threads)}"
            for threads in self.thread_counts if (threads, True) in self.flushed))
        return "\n".join(lines)


def subnormals(thread_counts: Sequence[int], elements: int = 2**20,
               rounds: int = 6) -> Subnormals:
    """``torch.mul(x, 0.5)`` on the CPU over ``elements`` random fp32 values and over the same
    scaled by 1e-39 into the subnormal range, in alternating rounds (``interleaved``), for
    each of ``thread_counts`` (most first) with flush-to-zero (``torch.set_flush_denormal``)
    off, then on; and the share of the subnormal products that came out zero. Torch's thread
    count and flush-to-zero (off) are restored however the run ends."""
    import torch

    positive_int(elements, "elements")
    counts = sorted(set(thread_counts), reverse=True)
    if not counts:
        raise ValueError("thread_counts must name at least one thread count")
    for threads in counts:
        positive_int(threads, "each thread count")
    normal = timing.random_tensor((elements,), torch.float32, "cpu")
    subnormal = normal * 1e-39
    share = (subnormal.abs() < torch.finfo(torch.float32).tiny).float().mean().item()
    rows, flushed, loads = {}, {}, {}
    before = torch.get_num_threads()
    try:
        for threads in counts:
            torch.set_num_threads(threads)
            for flush in (False, True):
                torch.set_flush_denormal(flush)  # returns whether this CPU supports it
                with machine.OthersLoad() as load:
                    t = interleaved({"normal": (torch.mul, (normal, 0.5)),
                                     "subnormal": (torch.mul, (subnormal, 0.5))}, "cpu", rounds)
                flushed[threads, flush] = (torch.mul(subnormal, 0.5) == 0).float().mean().item()
                rows[threads, flush] = t["normal"], t["subnormal"]
                loads[threads, flush] = load
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(before)
    return Subnormals(elements, share, rows, flushed, loads)


@dataclass(frozen=True)
class TimerThreads:
    """``timer_threads``'s two ``torch.utils.benchmark`` measurements of an n×n fp32 matmul,
    by label ("Timer default", "all CPU threads"), with the load each ran under."""

    n: int
    device: str
    measurements: Mapping[str, Any] = field(repr=False)
    loads: Mapping[str, machine.OthersLoad]

    def threads(self, label: str) -> int:
        return self.measurements[label].task_spec.num_threads

    def timing(self, label: str) -> timing.Timing:
        """One measurement's per-call block times as a ``timing.Timing``."""
        m = self.measurements[label]
        return timing.Timing.from_samples(m.times, device=self.device, threads=self.threads(label))

    @property
    def verdict(self) -> str:
        """"one thread faster", "N threads faster" or "no difference shown"."""
        one, every = self.timing("Timer default"), self.timing("all CPU threads")
        return {"a": "one thread faster",
                "b": f"{_plural(self.threads('all CPU threads'))} faster",
                "neither": "no difference shown"}[timing.compare(one, every)]

    def report(self) -> str:
        lines = []
        for label, m in self.measurements.items():
            threads = self.threads(label)
            lines.append(f"{label:<16} ({_plural(threads)}): median {m.median * 1e3:7.3f} ms, "
                         f"IQR {m.iqr * 1e3:6.3f} ms, {len(m.times)} blocks of "
                         f"{m.number_per_run} call(s)")
        one, every = self.timing("Timer default"), self.timing("all CPU threads")
        lines.append(f"Timer's default ({_plural(one.threads)}) took "
                     f"{one.median_s / every.median_s:.2f}× as long as "
                     f"{_plural(every.threads)}: {self.verdict}")
        return "\n".join(lines)


def timer_threads(n: int, device: str, min_run_time: float = 0.2) -> TimerThreads:
    """An n×n fp32 ``torch.mm`` of a random matrix with itself, timed by
    ``Timer.blocked_autorange`` twice: with Timer's default thread count (one) and with
    ``num_threads`` set to torch's current count."""
    import torch
    from torch.utils.benchmark import Timer

    positive_int(n, "n")
    a = timing.random_tensor((n, n), torch.float32, device)
    measurements, loads = {}, {}
    for label, kwargs in (("Timer default", {}),
                          ("all CPU threads", {"num_threads": torch.get_num_threads()})):
        timer = Timer("torch.mm(a, a)", globals={"torch": torch, "a": a}, **kwargs)
        with machine.OthersLoad() as load:
            measurements[label] = timer.blocked_autorange(min_run_time=min_run_time)
        loads[label] = load
    return TimerThreads(n, device, measurements, loads)


@dataclass(frozen=True)
class AgainstTimer:
    """``against_timer``'s ``time_callable`` timing (``ours``) of the matmul that ``timer``
    timed on all threads, with the load it ran under."""

    timer: TimerThreads
    ours: timing.Timing
    load: machine.OthersLoad

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.timer.n, self.timer.n, self.timer.n)

    @property
    def theirs(self) -> timing.Timing:
        return self.timer.timing("all CPU threads")

    @property
    def verdict(self) -> str:
        """"time_callable faster", "Timer faster" or "no difference shown"."""
        return {"a": "time_callable faster", "b": "Timer faster",
                "neither": "no difference shown"}[timing.compare(self.ours, self.theirs)]

    def report(self) -> str:
        ours, m = self.ours, self.timer.measurements["all CPU threads"]
        return "\n".join([
            f"time_callable: median {ours.median_s * 1e3:.3f} ms (IQR {ours.iqr_s * 1e3:.3f}, "
            f"{ours.n} samples of {ours.calls_per_sample} call(s), {_plural(ours.threads)})",
            f"Timer:         median {m.median * 1e3:.3f} ms (IQR {m.iqr * 1e3:.3f})",
            f"ratio {ours.median_s / self.theirs.median_s:.3f}: {self.verdict}",
        ])


def against_timer(timer: TimerThreads, min_run_time: float = 0.2,
                  max_run_time: float = 0.5) -> AgainstTimer:
    """``timer``'s matmul (its shape, fresh random values) timed by ``timing.time_callable``
    on torch's current threads."""
    import torch

    a = timing.random_tensor((timer.n, timer.n), torch.float32, timer.device)
    with machine.OthersLoad() as load:
        ours = timing.time_callable(torch.mm, [(a, a)], timer.device,
                                    min_run_time=min_run_time, max_run_time=max_run_time)
    return AgainstTimer(timer, ours, load)
