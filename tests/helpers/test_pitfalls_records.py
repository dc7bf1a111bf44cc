"""Chapter 4's timing demonstrations (helpers.measuring.pitfalls): each returns a record of
what it measured, and its report reads that record. Sleeps give calls a known least length,
so nothing here depends on the host's speed."""

from __future__ import annotations

import time

import pytest
import torch

from helpers.measuring import machine, pitfalls, timing, values_and_threads


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
    assert record.direct > 0 and record.matmul_seconds == record.direct  # the calling thread's
    hand = pitfalls.LaunchAndFinish("hand-set", 768, 32.8e-6, 9903.8e-6, _load())
    lines = hand.report().splitlines()
    assert lines[1] == "768×768 fp32 matmul, 9.06e+08 FLOPs"
    assert lines[2].endswith(f"{2 * 768**3 / 32.8e-6 / 1e12:10.2f} TFLOP/s")
    assert lines[4] == "the unsynchronized timing is 302× too short"
    assert len(lines) == 5 and hand.matmul_seconds == 9903.8e-6  # no calling-thread figure
    cpu = pitfalls.LaunchAndFinish("hand-set", 768, 32.8e-6, 7532.7e-6, _load(), 4400e-6)
    assert cpu.report().splitlines()[5] == (
        "the same matmul called on this thread:     4400.0 µs; in the worker it took 1.71× as "
        "long (there torch's intra-op work runs on a thread pool of the worker's own)")


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


def _timing(median_us: float, iqr_us: float, n: int = 6) -> timing.Timing:
    return timing.Timing(median_us * 1e-6, iqr_us * 1e-6, median_us * 1e-6, median_us * 1e-6, n,
                         1, "cpu", 2)


def test_interleaved_alternates_the_order_round_by_round():
    order = []
    record = values_and_threads.interleaved(
        {"a": (lambda: order.append("a"), ()), "b": (lambda: order.append("b"), ())}, "cpu",
        rounds=3, min_run_time=0.0, max_run_time=0.0)
    assert set(record) == {"a", "b"} and all(t.n == 3 for t in record.values())
    # Each round times one label to the end before the next: a b, b a, a b. Merging repeats
    # leaves a b a b; the same order every round would leave a b a b a b.
    runs = [label for i, label in enumerate(order) if i == 0 or order[i - 1] != label]
    assert runs == ["a", "b", "a", "b"]
    with pytest.raises(ValueError, match="calls"):
        values_and_threads.interleaved({}, "cpu")
    with pytest.raises(ValueError, match="rounds"):
        values_and_threads.interleaved({"a": (lambda: None, ())}, "cpu", rounds=0)


def test_zeros_and_random_times_both_per_dtype_and_reads_its_verdicts():
    record = values_and_threads.zeros_and_random(32, "cpu", ("fp32", "bf16"), rounds=2)
    assert [row.dtype for row in record.rows] == ["fp32", "bf16"]
    assert record.shape == (32, 32, 32)
    assert all(row.random.n == 2 == row.zeros.n for row in record.rows)
    hand = values_and_threads.ZerosAndRandom(384, (
        values_and_threads.ValuesRow("fp32", _timing(604, 2), _timing(606, 5), _load()),
        values_and_threads.ValuesRow("bf16", _timing(300, 1), _timing(200, 1), _load())))
    lines = hand.report().splitlines()
    assert lines[1].endswith("1.00  no difference shown")
    assert lines[2].endswith("0.67  zeros faster")
    assert "0.604 (0.002)" in lines[1] and "0.606 (0.005)" in lines[1]


def test_subnormals_restore_threads_and_flush_and_count_the_flushed():
    threads = torch.get_num_threads()
    record = values_and_threads.subnormals([1, 1], elements=4096, rounds=2)
    assert torch.get_num_threads() == threads
    assert torch.tensor([1e-39]).mul(1.0).item() != 0.0  # flush-to-zero left off
    assert record.thread_counts == [1] and record.subnormal_share == 1.0
    assert set(record.rows) == {(1, False), (1, True)}
    assert record.flushed[1, False] == 0.0  # flush-to-zero off: no product is zero
    with pytest.raises(ValueError, match="thread count"):
        values_and_threads.subnormals([])
    hand = values_and_threads.Subnormals(
        2**20, 1.0, {(2, False): (_timing(53.7, 0.2), _timing(64.1, 0.4)),
                     (2, True): (_timing(53.5, 0.3), _timing(53.4, 0.4)),
                     (1, False): (_timing(97.0, 0.6), _timing(140.0, 0.8)),
                     (1, True): (_timing(96.5, 0.6), _timing(96.3, 0.5))},
        {(2, False): 0.0, (2, True): 1.0, (1, False): 0.0, (1, True): 1.0}, {})
    lines = hand.report().splitlines()
    assert lines[1].endswith("ratio  1.19: slower beyond the spread; results flushed to zero: 0%")
    assert lines[2].endswith("no slowdown beyond the spread; results flushed to zero: 100%")
    assert lines[5] == ("verdict: a subnormal slowdown on every thread count, which "
                        "flush-to-zero removed")
    assert lines[6] == ("flush-to-zero reached 100% of the results on 2 threads, 100% of the "
                        "results on 1 thread")


def test_timer_threads_and_time_callable_time_the_same_matmul():
    record = values_and_threads.timer_threads(32, "cpu", min_run_time=0.01)
    assert list(record.measurements) == ["Timer default", "all CPU threads"]
    assert record.threads("Timer default") == 1  # Timer's own default
    assert record.threads("all CPU threads") == torch.get_num_threads()
    one = record.timing("Timer default")
    assert one.n == len(record.measurements["Timer default"].times)
    assert record.report().splitlines()[0].startswith("Timer default    (1 thread): median")
    against = values_and_threads.against_timer(record, min_run_time=0.01, max_run_time=0.02)
    assert against.shape == (32, 32, 32) and against.ours.threads == torch.get_num_threads()
    assert against.theirs == record.timing("all CPU threads")
    assert against.report().splitlines()[2].endswith(against.verdict)
