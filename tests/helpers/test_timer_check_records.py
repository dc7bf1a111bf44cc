"""helpers.measuring.timer_check: chapter 5's sweep point re-timed by torch's Timer, as one
call and its record; the verdicts read from hand-set timings, so none depends on the host."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from helpers.counting import flops, memory
from helpers.measuring import timing
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.sweep import SweepPoint
from helpers.measuring.timer_check import TimerCheck, timer_check

M, K, N = 64, 128, 96
QUIET, BUSY = (0.0, 2), (1.5, 2)  # (other processes' cores, the figure's threads) on 2 cores


def _ceilings(peak: float = 1e12, bandwidth: float = 10e9) -> Ceilings:
    return Ceilings("cpu", "test CPU", "t", "today", 2, {"fp32": peak}, {"fp32": (8, 8, 8)},
                    bandwidth, "test", 2**20, 2**30)


def _point(median_s: float, iqr_s: float, kernel: str = "eager") -> SweepPoint:
    count = flops.matmul_flops(M, K, N)
    nbytes = memory.linear_bytes(M, K, N, "fp32")
    return SweepPoint("fp32", "q,o", 2, 1, M, K, N, count, nbytes, count / nbytes, median_s,
                      iqr_s, median_s * 0.9, median_s * 1.2, 9, count / median_s,
                      nbytes / median_s, median_s, 0.0, "compute", kernel)


def _check(sweep_s, sweep_iqr, timer_s, timer_iqr, timer_load=QUIET, sweep_load=QUIET,
           ceiling_loads=(QUIET,), peak=1e12) -> TimerCheck:
    timer = timing.Timing(timer_s, timer_iqr, timer_s * 0.9, timer_s * 1.1, 50, 1, "cpu", 2)
    return TimerCheck(_point(sweep_s, sweep_iqr), _ceilings(peak), timer, timer_load,
                      sweep_load, tuple(ceiling_loads))


def test_a_gap_within_the_spreads_is_no_difference():
    check = _check(16.3e-3, 2.5e-3, 15.0e-3, 0.3e-3)
    assert check.verdict == "no difference shown"
    lines = check.report().splitlines()
    assert lines[0] == f"q projection, [{M}×{K}]·[{K}×{N}], fp32, eager kernel"
    assert lines[3] == "ratio sweep / Timer: 1.09: no difference shown"
    assert lines[4].startswith("  Timer: other processes used 0.0 of")
    assert len(lines) == 7  # no reading of a gap that is not shown


def test_timer_faster_is_read_against_what_reusing_one_input_set_can_save():
    peak = 1e6  # a low ceiling so the shares are printed from it
    check = _check(2e-3, 1e-5, 1e-3, 1e-5, peak=peak)
    assert check.verdict == "Timer faster"
    inputs = 4 * (M * K + N * K)  # x and the weight, fp32: what the sweep rotates
    assert check.reuse_bound == pytest.approx(inputs / 10e9)
    report = check.report()
    assert f"({inputs / 1e6:.1f} MB against 1 MiB of cache)" in report
    rest = (1e-3 - inputs / 10e9) * 1e3
    assert (f"{inputs / 10e9 * 1e3:.2f} ms, against a gap of 1.00 ms, their notches apart "
            f"(chapter 4): the other {rest:.2f} ms is the moment") in report
    count = flops.matmul_flops(M, K, N)
    assert f"the sweep {count / 2e-3 / peak:.0%}, Timer {count / 1e-3 / peak:.0%}" in report
    # Timer's share is far past 1 and past its spread; the ceilings were quiet.
    assert report.endswith("the ceiling is one shape's best (8x8x8), not a limit for every "
                           "shape and cache state")
    loaded_ceilings = _check(2e-3, 1e-5, 1e-3, 1e-5, peak=peak, ceiling_loads=(QUIET, BUSY))
    assert loaded_ceilings.report().endswith("every compute-bound share above is understated")


def test_a_loaded_timing_makes_the_comparison_unreliable_whichever_way():
    for timer_load, sweep_load, who in ((BUSY, QUIET, "Timer"), (QUIET, BUSY, "the sweep"),
                                        (BUSY, BUSY, "Timer and the sweep")):
        check = _check(2e-3, 1e-5, 1e-3, 1e-5, timer_load, sweep_load)
        assert f"{who} ran under load: the comparison is unreliable" in check.report()
        assert "Timer reuses" not in check.report()
    faster = _check(1e-3, 1e-5, 2e-3, 1e-5)
    assert faster.verdict == "the sweep faster"
    assert "the sweep ran faster: its point stands" in faster.report()


def test_timer_at_the_ceiling_within_its_spread():
    count = flops.matmul_flops(M, K, N)
    timer_s = count / 1e12 / 1.01  # 101% of the ceiling, inside a 5% IQR
    check = _check(timer_s, timer_s * 0.05, timer_s, timer_s * 0.05)
    assert check.report().endswith("Timer reached the matmul ceiling, within its own spread")


def test_the_real_timer_times_the_points_kernel_on_torchs_threads():
    point = _point(1e-3, 1e-5)
    check = timer_check(point, _ceilings(), "cpu", QUIET, [QUIET], min_run_time=0.01)
    assert check.timer.n >= 1 and check.timer.median_s > 0
    assert check.timer.threads == torch.get_num_threads() == check.timer_load[1]
    assert check.point is point and check.sweep.median_s == 1e-3
    with pytest.raises(ValueError, match="'cuBLAS' is not among cpu's fp32 kernels"):
        timer_check(dataclasses.replace(point, kernel="cuBLAS"), _ceilings(), "cpu", QUIET)
