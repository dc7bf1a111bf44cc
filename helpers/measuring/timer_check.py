"""Chapter 5's check of the sweep's harness: one sweep point re-timed with
``torch.utils.benchmark.Timer``, a harness the book did not write.

``timer_check`` times the point's matmul (its kernel, its shape, fresh random inputs) with
``Timer.blocked_autorange`` and returns a ``TimerCheck``: both medians and spreads, whether the
two differ beyond their spreads (``timing.compare``), each one's share of the matmul ceiling,
the loads both ran under, and ``report()``, the lines the chapter prints, every verdict read
from those figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers.measuring import kernels, machine, timing
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.sweep import SweepPoint, input_bytes

__all__ = ["TimerCheck", "timer_check"]

Load = tuple[float | None, int]
"""Cores' worth of CPU other processes used while a figure was timed, and its threads."""

VERDICTS = {"a": "the sweep faster", "b": "Timer faster", "neither": "no difference shown"}


@dataclass(frozen=True)
class TimerCheck:
    """The sweep's ``point`` and the same matmul timed by ``Timer`` (median, IQR, seconds,
    on ``threads``), with the loads each ran under (``timer_load``, ``sweep_load``) and those
    of the ceilings (``ceiling_loads``): under load, a ceiling is a lower bound."""

    point: SweepPoint
    ceilings: Ceilings
    timer: timing.Timing
    timer_load: Load
    sweep_load: Load
    ceiling_loads: tuple[Load, ...]

    @property
    def sweep(self) -> timing.Timing:
        p = self.point
        return timing.Timing(p.median_s, p.iqr_s, p.min_s, p.max_s, p.samples, 1,
                             self.timer.device, self.timer.threads)

    @property
    def verdict(self) -> str:
        """"the sweep faster", "Timer faster" or "no difference shown" (``timing.compare``)."""
        return VERDICTS[timing.compare(self.sweep, self.timer)]

    def share(self, seconds: float) -> float:
        """The point's FLOPs in ``seconds`` over its dtype's matmul ceiling."""
        p = self.point
        return p.achieved_flops * p.median_s / seconds / self.ceilings.peak(p.dtype)

    @property
    def loaded(self) -> list[str]:
        """Which of the two ran under a load that made its figure unreliable."""
        return [who for who, load in (("Timer", self.timer_load), ("the sweep", self.sweep_load))
                if machine.load_unreliable(*load)]

    @property
    def reuse_bound(self) -> float:
        """The most that reusing one x and weight can save a call: one read of them at the
        bandwidth ceiling (the sweep rotates copies; ``Timer`` re-reads one set)."""
        p = self.point
        return input_bytes(p.m, p.k, p.n, p.dtype) / self.ceilings.bandwidth

    def report(self) -> str:
        p, timer = self.point, self.timer
        lines = [
            f"q projection, [{p.m}×{p.k}]·[{p.k}×{p.n}], {p.dtype}, {p.kernel} kernel",
            f"sweep.measure_sweep:          {p.median_s * 1e3:8.3f} ms (IQR {p.iqr_s * 1e3:.3f})",
            f"torch.utils.benchmark.Timer:  {timer.median_s * 1e3:8.3f} ms "
            f"(IQR {timer.iqr_s * 1e3:.3f})",
            f"ratio sweep / Timer: {p.median_s / timer.median_s:.2f}: {self.verdict}",
            f"  Timer: {machine.load_note(*self.timer_load)}",
            f"  the {p.dtype} sweep: {machine.load_note(*self.sweep_load)}",
        ]
        shares = {"the sweep": self.share(p.median_s), "Timer": self.share(timer.median_s)}
        lines.append(f"share of the {p.dtype} matmul ceiling: "
                     + ", ".join(f"{who} {share:.0%}" for who, share in shares.items()))
        if self.loaded:
            lines.append(f"{' and '.join(self.loaded)} ran under load: the comparison is "
                         "unreliable, whichever way it came out")
        elif self.verdict == "Timer faster":  # no CPU load on either (memory traffic unseen)
            gap, inputs = p.median_s - timer.median_s, input_bytes(p.m, p.k, p.n, p.dtype)
            lines.append(
                f"no CPU load measured on either; Timer reuses one x and weight "
                f"({inputs / 1e6:.1f} MB against {self.ceilings.cache_bytes / 2**20:.0f} MiB of "
                f"cache) where the sweep rotates copies (section 4): that can save a call at "
                f"most one read of them, {self.reuse_bound * 1e3:.2f} ms, against a gap of "
                f"{gap * 1e3:.2f} ms, their notches apart (chapter 4)" + (
                    "" if gap <= self.reuse_bound else f": the other "
                    f"{(gap - self.reuse_bound) * 1e3:.2f} ms is the moment (memory traffic the "
                    "load count does not see) or another difference between the two harnesses"))
        elif self.verdict == "the sweep faster":
            lines.append("the sweep ran faster: its point stands")
        if 1 < shares["Timer"] <= 1 + timer.iqr_s / timer.median_s:
            lines.append("Timer reached the matmul ceiling, within its own spread")
        elif shares["Timer"] > 1:  # beyond Timer's spread: the ceiling is not this run's best
            shape = "x".join(map(str, self.ceilings.matmul_shape[p.dtype]))
            lines.append("Timer beat the matmul ceiling: " + (
                "the ceilings were measured under load, so every compute-bound share above is "
                "understated" if any(machine.load_unreliable(*c) for c in self.ceiling_loads)
                else f"the ceiling is one shape's best ({shape}), not a limit for every shape "
                "and cache state"))
        return "\n".join(lines)


def timer_check(point: SweepPoint, ceilings: Ceilings, device: str, sweep_load: Load,
                ceiling_loads: Sequence[Load] = (), min_run_time: float = 0.2) -> TimerCheck:
    """``point``'s matmul on its own kernel, re-timed by ``Timer.blocked_autorange`` on
    torch's current threads, with fresh random inputs: one x and one weight, reused call after
    call (``Timer`` has no rotation), so a gap in Timer's favour is bounded by
    ``TimerCheck.reuse_bound`` where no load explains it."""
    import torch
    from torch.utils.benchmark import Timer

    matches = [k for k in kernels.linear_kernels(device, point.dtype) if k.name == point.kernel]
    if not matches:
        raise ValueError(f"the point's kernel {point.kernel!r} is not among {device}'s "
                         f"{point.dtype} kernels")
    kernel, dtype = matches[0], machine.torch_dtype(point.dtype)
    x = timing.random_tensor((point.m, point.k), dtype, device)
    weight = kernel.prepare(timing.random_tensor((point.n, point.k), dtype, device))
    threads = torch.get_num_threads()
    with machine.OthersLoad() as load:
        measured = Timer("run(x, weight)", globals={"run": kernel.run, "x": x, "weight": weight},
                         num_threads=threads).blocked_autorange(min_run_time=min_run_time)
    timer = timing.Timing.from_samples(measured.times, device=device, threads=threads)
    return TimerCheck(point, ceilings, timer, (load.cores, threads), sweep_load,
                      tuple(ceiling_loads))
