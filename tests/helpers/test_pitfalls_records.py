"""Chapter 4's timing demonstrations (helpers.measuring.pitfalls): each returns a record of
what it measured, and its report reads that record. Sleeps give calls a known least length,
so nothing here depends on the host's speed."""

from __future__ import annotations

import time

import pytest
import torch

from helpers.measuring import machine, pitfalls


def _load() -> machine.OthersLoad:
    with machine.OthersLoad() as load:
        pass
    return load


def test_each_call_is_clocked_alone_in_order():
    lengths = iter([0.3, 0.0, 0.1, 0.0])  # gaps no scheduler hiccup on a busy host spans
    samples = pitfalls.clock_each_call(lambda: time.sleep(next(lengths)), "cpu", 4)
    assert len(samples) == 4
    assert samples[0] >= 0.3 and samples[2] >= 0.1
    assert samples[0] > samples[2] > samples[1]  # the order of the calls, not sorted
    with pytest.raises(ValueError, match="calls"):
        pitfalls.clock_each_call(lambda: None, "cpu", 0)


def test_naive_report_reads_its_samples():
    seconds = (0.0193, *[0.0005 + i * 1e-5 for i in range(24)])
    record = pitfalls.NaiveCalls("384×384 fp32 matmul", seconds, _load())
    lines = record.report().splitlines()
    assert lines[0] == "384×384 fp32 matmul, 25 calls, sorted (ms):"
    assert lines[1].split()[0] == "0.500" and lines[1].split()[-1] == "19.300"
    # The 13th of 25 sorted samples is the median: 0.5 ms + 12 × 10 µs.
    assert lines[2] == (f"min 0.500   median 0.620   mean {sum(seconds) / 25 * 1e3:.3f}   "
                        "max 19.300 ms")
    assert lines[3] == "the very first call took 19.300 ms"
    run = pitfalls.naive_calls(lambda: time.sleep(0.002), "cpu", "a sleep", calls=3)
    assert len(run.seconds) == 3 and min(run.seconds) >= 0.002
    assert run.load.seconds is not None or run.load.cores is None


def test_first_calls_find_the_one_off_cost_and_restore_threads():
    calls = {"slow first": 0, "slow later": 0}

    def slow_first():
        calls["slow first"] += 1
        time.sleep(0.3 if calls["slow first"] == 1 else 0.001)

    def slow_later():
        calls["slow later"] += 1
        time.sleep(0.0 if calls["slow later"] == 1 else 0.1)

    threads = torch.get_num_threads()
    record = pitfalls.first_calls({"slow first": slow_first, "slow later": slow_later}, "cpu",
                                  calls=5)
    assert torch.get_num_threads() == threads  # restored
    assert calls == {"slow first": 5, "slow later": 5}
    first, later = record.rows
    assert first.slowest and first.first >= 0.3 and first.warm >= 0.001
    assert not later.slowest and later.warm >= 0.1
    assert 1 <= record.threads <= threads and record.all_threads == threads
    # With no one-off cost, either first call is the slowest of 5 by chance 1 in 5.
    assert record.chance_one_slowest == pytest.approx(1 - 0.8**2)
    report = record.report().splitlines()
    assert report[2].startswith("slow first") and report[2].endswith(
        "slower than all 4 warm calls")
    assert report[3].endswith("not the slowest call")
    assert "by chance 1 in 5 (20%)" in record.chance_line()
    assert "36%" in record.chance_line()
    with pytest.raises(ValueError, match="at least 2"):
        pitfalls.first_calls({"one": lambda: None}, "cpu", calls=1)


def test_launch_and_finish_on_a_cpu_is_the_worker_thread_analogue():
    record = pitfalls.launch_and_finish(64, "cpu", repeats=3)
    assert record.experiment.startswith("CPU analogue")
    assert record.shape == (64, 64, 64) and record.flop == 2 * 64**3
    assert 0 < record.launched <= record.finished  # the work ends after its launch returns
    hand = pitfalls.LaunchAndFinish("hand-set", 768, 32.8e-6, 9903.8e-6, _load())
    lines = hand.report().splitlines()
    assert lines[1] == "768×768 fp32 matmul, 9.06e+08 FLOPs"
    assert lines[2].endswith(f"{2 * 768**3 / 32.8e-6 / 1e12:10.2f} TFLOP/s")
    assert lines[4] == "the unsynchronized timing is 302× too short"


def test_cached_and_rotated_rotates_past_twice_the_cache():
    llc = 2**20
    threads = torch.get_num_threads()
    record = pitfalls.cached_and_rotated(256, 256, "cpu", llc, min_run_time=0.01)
    assert torch.get_num_threads() == threads
    assert record.nbytes == 4 * (256 * 256 + 256 + 256)  # weights, input, output in fp32
    assert record.rotated_bytes >= 2 * llc > (record.copies - 1) * record.nbytes
    assert record.cached > 0 and record.rotated > 0
    hand = pitfalls.CachedAndRotated(1024, 2048, 8, 32 * 2**20, 147.4e-6, 490.0e-6, 2, _load())
    lines = hand.report().splitlines()
    assert lines[0] == "GEMV [1×1024]·[1024×2048] fp32: 8.01 MiB per call, LLC 32.0 MiB, 2 threads"
    assert lines[3] == "re-reading one matrix reports 3.32× the rotated GEMV's rate"
    with pytest.raises(ValueError, match="llc_bytes"):
        pitfalls.cached_and_rotated(8, 8, "cpu", 0)


def test_free_core_threads_restores_torch_threads():
    threads = torch.get_num_threads()
    with machine.free_core_threads("cpu", cores=1) as used:
        assert used == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == threads
    with pytest.raises(RuntimeError), machine.free_core_threads("cpu", cores=1):
        raise RuntimeError("a failed timing")
    assert torch.get_num_threads() == threads
