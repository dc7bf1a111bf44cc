"""helpers.measuring.timing: real timings of known-duration callables, real cache rotation."""

from __future__ import annotations

import itertools
import math
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers.measuring import machine, timing, verdicts

MiB = 2**20


def test_median_and_iqr_odd_and_even_counts():
    assert timing.median_and_iqr([5.0, 1.0, 3.0, 2.0, 4.0]) == (3.0, 2.0)
    median, iqr = timing.median_and_iqr([1.0, 2.0, 3.0, 4.0])
    assert median == 2.5
    assert iqr == pytest.approx(1.5)  # 3.25 - 1.75 (linear interpolation)


def test_median_resists_an_outlier_and_iqr_is_zero_for_constant_samples():
    median, iqr = timing.median_and_iqr([1.0] * 9 + [1000.0])
    assert (median, iqr) == (1.0, 0.0)


def test_median_and_iqr_rejects_no_samples():
    with pytest.raises(ValueError, match="at least one"):
        timing.median_and_iqr([])


def test_timing_from_samples_summarizes():
    t = timing.Timing.from_samples([0.4, 0.1, 0.3, 0.2, 0.5], device="cpu", threads=2)
    assert (t.median_s, t.min_s, t.max_s, t.n) == (0.3, 0.1, 0.5, 5)
    assert t.iqr_s == pytest.approx(0.2)
    assert t.relative_iqr == pytest.approx(0.2 / 0.3)
    assert (t.device, t.threads, t.calls_per_sample) == ("cpu", 2, 1)


def test_compare_needs_the_notches_apart():
    """Medians 1.00 and 1.03 with an IQR of 0.1: apart with 400 samples (notches ±0.0079),
    not with 25 (±0.031); the lower median wins, either way round; fewer than
    ``MIN_SAMPLES`` samples say nothing."""
    def timed(median, n, iqr=0.1):
        return timing.Timing(median, iqr, median - iqr, median + iqr, n, 1, "cpu", 1)

    assert timed(1.0, 400).notch_s == pytest.approx(1.57 * 0.1 / 20)
    assert timing.compare(timed(1.0, 400), timed(1.03, 400)) == "a"
    assert timing.compare(timed(1.03, 400), timed(1.0, 400)) == "b"
    assert timing.compare(timed(1.0, 25), timed(1.03, 25)) == "neither"
    assert timing.compare(timed(1.0, 3, iqr=0.0), timed(2.0, 3, iqr=0.0)) == "neither"
    assert timing.compare(timed(1.0, 4, iqr=0.0), timed(2.0, 4, iqr=0.0)) == "a"
    # faster() is compare() on two lists of samples
    tight = [0.50, 0.52, 0.49, 0.51, 0.50, 0.53, 0.48, 0.50]
    assert timing.faster(tight, [t * 1.2 for t in tight]) == "a"
    assert timing.faster([t * 1.2 for t in tight], tight) == "b"
    assert timing.faster([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0],
                         [4.0, 2.0, 5.0, 2.0, 6.0, 10.0, 3.0, 7.0]) == "neither"



def test_samples_needed_is_the_cheapest_pair_that_compare_separates():
    worked = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    slower = [t + 1.0 for t in worked]  # medians 3.5 and 4.5, IQRs 3.5: 121 a side if equal
    assert verdicts.samples_needed(worked, slower) == (132, 111)  # a cheaper: more of them
    tight = [0.50, 0.52, 0.49, 0.51, 0.50, 0.53, 0.48, 0.50]
    assert verdicts.samples_needed(tight, [t * 1.2 for t in tight]) == (4, 4)  # MIN_SAMPLES
    assert verdicts.samples_needed([0.8, 1.2, 1.0, 0.6, 1.4], [1.1, 1.08, 1.12, 1.06, 1.14]) == (
        59, 12)  # the wide side takes the samples
    assert verdicts.samples_needed([1.0, 2.0, 3.0, 4.0], [2.5, 2.5, 2.5, 2.5]) is None
    with pytest.raises(ValueError, match="positive"):
        verdicts.samples_needed([0.0, 0.0], [1.0, 1.0])

    for a, b in [(worked, slower), ([2.0, 1.1, 2.3, 2.6, 2.3], [2.2, 1.9, 2.9, 1.8, 2.6, 3.0]),
                 ([0.8, 1.2, 1.0, 0.6, 1.4], [1.1, 1.08, 1.12, 1.06, 1.14])]:
        r_a, r_b = verdicts.samples_needed(a, b)
        assert verdicts.shows_difference(a, b, r_a, r_b)
        (ma, ia), (mb, ib) = timing.median_and_iqr(a), timing.median_and_iqr(b)
        cost = r_a * ma + r_b * mb
        # No cheaper pair separates them: for each r_a up to the cost, the most r_b it affords.
        for other_a in range(timing.MIN_SAMPLES, int(cost / ma) + 1):
            other_b = math.ceil((cost - other_a * ma) / mb) - 1
            if other_b >= timing.MIN_SAMPLES and (other_a, other_b) != (r_a, r_b):
                at_a = timing.Timing(ma, ia, ma, ma, other_a, 1, "", 0)
                at_b = timing.Timing(mb, ib, mb, mb, other_b, 1, "", 0)
                assert timing.compare(at_a, at_b) == "neither", (other_a, other_b)


def test_shows_difference_is_compare_on_the_pilots_summaries():
    a, b = [1.0, 1.2, 0.8, 1.1, 0.9], [1.3, 1.3, 1.3, 1.3]  # gap 0.3, IQRs 0.2 and 0
    assert verdicts.shows_difference(a, b, 4, 4)  # 1.57 · 0.2 / 2 = 0.157 < 0.3
    assert not verdicts.shows_difference(a, b, 3, 4)  # under MIN_SAMPLES: no spread to judge by
    assert not verdicts.shows_difference([1.0] * 4, [1.0] * 4, 100, 100)


def _timing(median_us, iqr_us, n=6):
    return timing.Timing(median_us * 1e-6, iqr_us * 1e-6, median_us * 1e-6, median_us * 1e-6, n,
                         1, "cpu", 1)  # fmt: skip


def test_slower_beyond_spread_needs_the_notches_apart_and_the_gap_past_either_iqr():
    assert verdicts.slower_beyond_spread(_timing(100, 2), _timing(150, 3))
    assert not verdicts.slower_beyond_spread(_timing(150, 3), _timing(100, 2))  # faster
    # Notches apart (1.57 · 4 / √6 ≈ 2.6 µs a side) but the 10 µs gap inside a 12 µs IQR.
    assert not verdicts.slower_beyond_spread(_timing(642, 1), _timing(652, 12, n=400))
    assert not verdicts.slower_beyond_spread(_timing(100, 20), _timing(110, 20))  # notches overlap


def test_subnormal_verdict_wants_a_slowdown_on_every_thread_count():
    same, slow = (_timing(100, 2), _timing(101, 2)), (_timing(100, 2), _timing(300, 5))

    def verdict(off2, on2, off1, on1):
        return verdicts.subnormal_verdict({(2, False): off2, (2, True): on2,
                                         (1, False): off1, (1, True): on1})  # fmt: skip

    assert verdict(same, same, same, same).startswith("no subnormal slowdown")
    # The reviewed run: slower on one thread only, with flush-to-zero off: no consistent penalty.
    assert verdict(same, same, slow, same) == (
        "no consistent subnormal slowdown on this run: with flush-to-zero off, slower beyond "
        "the spread on 1 thread but not on 2 threads")
    assert verdict(same, slow, same, same).startswith("no consistent subnormal slowdown on this "
                                                      "run: slower beyond the spread only with")
    assert verdict(slow, same, slow, same).endswith("which flush-to-zero removed")
    assert verdict(slow, slow, slow, slow).endswith("which stayed with flush-to-zero on")
    assert verdict(slow, slow, slow, same).endswith(  # libgomp: workers keep the flag off
        "flush-to-zero removed it on 1 thread, not on 2 threads")
    one = {(1, False): slow, (1, True): same}
    assert verdicts.subnormal_verdict(one).endswith("which flush-to-zero removed")
    # The round-6 run: gone with flush-to-zero on, yet on 2 threads half the results were not
    # flushed (a worker without the flag): the flag cannot be what removed it there.
    rows = {(2, False): slow, (2, True): same, (1, False): slow, (1, True): same}
    half = {(2, True): 0.5, (1, True): 1.0, (2, False): 0.0, (1, False): 0.0}
    assert verdicts.subnormal_verdict(rows, half) == (
        "a subnormal slowdown on every thread count, gone with flush-to-zero on; but on 2 threads "
        "part of the results stayed unflushed, so there the flag cannot have removed it, and "
        "this run does not show what did")
    every = {**half, (2, True): 1.0}
    assert verdicts.subnormal_verdict(rows, every).endswith("which flush-to-zero removed")


def test_achieved_rates():
    assert timing.achieved_flops(2e9, 0.5) == 4e9
    assert timing.achieved_bandwidth(3e9, 1.5) == 2e9
    for fn in (timing.achieved_flops, timing.achieved_bandwidth):
        with pytest.raises(ValueError, match="positive"):
            fn(1.0, 0.0)


def test_copies_to_exceed_cache_known_values():
    assert timing.copies_to_exceed_cache(10 * MiB, 32 * MiB) == 7  # 70 MiB >= 64 MiB
    assert timing.copies_to_exceed_cache(64 * MiB, 32 * MiB) == 1
    assert timing.copies_to_exceed_cache(65 * MiB, 32 * MiB) == 1
    assert timing.copies_to_exceed_cache(1 * MiB, 32 * MiB, factor=1.0) == 32
    with pytest.raises(ValueError):
        timing.copies_to_exceed_cache(0, 32 * MiB)


@given(st.integers(1, 2**32), st.integers(1, 2**32), st.floats(0.5, 8.0))
def test_copies_are_the_fewest_that_exceed_the_cache(per_copy, cache, factor):
    copies = timing.copies_to_exceed_cache(per_copy, cache, factor)
    assert copies * per_copy >= factor * cache * (1 - 1e-12)
    if copies > 1:
        assert (copies - 1) * per_copy < factor * cache


def test_random_tensor_is_random_and_never_zero():
    a = timing.random_tensor((64, 32), torch.bfloat16, "cpu")
    b = timing.random_tensor((64, 32), torch.bfloat16, "cpu")
    assert a.shape == (64, 32) and a.dtype == torch.bfloat16 and a.device.type == "cpu"
    assert (a != 0).all()
    assert not torch.equal(a, b)


@pytest.mark.cache_size
def test_cache_defeat_holds_for_the_cache_in_force():
    """Whatever the cache (this host's, or ``TEXTBOOK_LLC_BYTES``: ``make test`` runs this
    file at 8 MiB, 260 MiB and 1 GiB): a 4 MiB input set is rotated through distinct copies
    that together exceed twice the cache while they number at most ``max_copies``, and is
    flushed by a buffer of at least twice the cache beyond that."""
    llc = machine.last_level_cache_bytes("cpu")
    per_set = 1024 * 1024 * 4

    def make():
        return (timing.random_tensor((1024, 1024), torch.float32, "cpu"),)

    sets, flush, plan = timing.cache_defeat_inputs(make, llc, "cpu")
    copies = math.ceil(2 * llc / per_set)
    if copies <= timing.MAX_COPIES:
        assert (plan.method, plan.copies, flush) == ("rotate", copies, None)
        assert len({s[0].data_ptr() for s in sets}) == len(sets) == copies  # no aliasing
        assert sum(s[0].numel() * s[0].element_size() for s in sets) >= 2 * llc
        if copies > 1:
            assert not torch.equal(sets[0][0], sets[-1][0])  # different values, not one copy
    else:  # a round of distinct copies in at most half the cache, one flush before each
        round_copies = max(1, min(timing.MAX_COPIES, llc // 2 // per_set))
        assert (plan.method, plan.copies, len(sets)) == ("flush", round_copies, round_copies)
        assert len({s[0].data_ptr() for s in sets}) == round_copies
        assert flush.numel() * flush.element_size() >= 2 * llc
        with pytest.raises(ValueError, match="max_copies=32.*cache_defeat_inputs"):
            timing.rotating_inputs(make, llc)


def test_rotation_makes_distinct_buffers_exceeding_the_cache():
    """Against a cache it can rotate past (set here, not read from the host): 6 MiB needs
    ceil(12 MiB / 4 MiB) = 3 distinct sets."""
    sets = timing.rotating_inputs(
        lambda: (timing.random_tensor((1024, 1024), torch.float32, "cpu"),), 6 * MiB
    )
    assert len(sets) == 3
    assert len({s[0].data_ptr() for s in sets}) == 3
    assert sum(s[0].numel() * s[0].element_size() for s in sets) >= 2 * 6 * MiB
    assert not torch.equal(sets[0][0], sets[-1][0])


def test_rotation_refuses_more_copies_than_the_bound():
    """A 4 KiB input against a 64 MiB cache would need 32768 copies: refused, by name."""
    with pytest.raises(ValueError, match="max_copies=32.*cache_defeat_inputs"):
        timing.rotating_inputs(
            lambda: (timing.random_tensor((1024,), torch.float32, "cpu"),), 64 * 2**20)


def test_cache_defeat_inputs_rotate_large_inputs_and_flush_small_ones():
    def make():
        return (timing.random_tensor((256, 1024), torch.float32, "cpu"),)  # 1 MiB

    sets, flush, plan = timing.cache_defeat_inputs(make, 4 * 2**20, "cpu")
    assert (plan.method, plan.copies, flush) == ("rotate", 8, None)
    assert len(sets) == 8 and len({s[0].data_ptr() for s in sets}) == 8
    assert not torch.equal(sets[0][0], sets[-1][0])
    sets, flush, plan = timing.cache_defeat_inputs(make, 64 * 2**20, "cpu")  # 128 copies
    # too many to rotate: rounds of 32 distinct copies (32 MiB, half the cache) between flushes
    assert (plan.method, plan.copies, len(sets)) == ("flush", 32, 32)
    assert len({s[0].data_ptr() for s in sets}) == 32
    assert flush.numel() * flush.element_size() >= 2 * 64 * 2**20
    t = timing.time_callable(torch.sum, sets, "cpu", warmup=1, min_run_time=0.01,
                             max_run_time=0.05, flush=flush)  # fmt: skip
    assert t.median_s > 0


def test_sleep_of_known_length_times_near_it():
    t = timing.time_callable(lambda: time.sleep(0.02), [()], min_run_time=0.1, max_run_time=0.5)
    assert 0.02 <= t.median_s < 0.035
    assert t.min_s <= t.median_s <= t.max_s
    assert t.n >= 4 and t.iqr_s >= 0


def test_a_call_slower_than_the_time_budget_still_gets_four_samples():
    t = timing.time_callable(lambda: time.sleep(0.1), [()], warmup=1, min_run_time=0.01,
                             max_run_time=0.05)  # fmt: skip
    assert t.n >= 4 and t.calls_per_sample == 1


def test_warmup_keeps_the_slow_first_calls_out():
    calls = []

    def first_calls_slow():
        calls.append(None)
        time.sleep(0.2 if len(calls) <= 3 else 0.005)

    t = timing.time_callable(first_calls_slow, [()], warmup=3, min_run_time=0.05,
                             max_run_time=0.3)  # fmt: skip
    assert t.max_s < 0.15  # no 0.2 s call was timed (margin for a busy machine)
    assert 0.005 <= t.median_s < 0.05


def test_variants_timed_in_turn_keep_their_middle_round():
    # Variant a sleeps 10, 40 then 20 ms in its three rounds (a round starts when a follows b):
    # its middle round is the 20 ms one, whatever the order in which the rounds came.
    log, sleeps, round_of_a = [], (0.01, 0.04, 0.02), [0]

    def a():
        if log and log[-1] == "b":
            round_of_a[0] += 1
        log.append("a")
        time.sleep(sleeps[round_of_a[0]])

    def b():
        log.append("b")
        time.sleep(0.002)

    timed_a, timed_b = timing.time_in_turn([(a, [()]), (b, [()])], rounds=3,
                                           min_run_time=0.02, max_run_time=0.1)
    turns = [name for i, name in enumerate(log) if i == 0 or log[i - 1] != name]
    assert turns == ["a", "b"] * 3  # one turn each per round, in order
    assert 0.02 <= timed_a.median_s < 0.035  # the middle round, not the 10 or 40 ms one
    assert 0.002 <= timed_b.median_s < 0.015
    with pytest.raises(ValueError, match="rounds"):
        timing.time_in_turn([(a, [()])], rounds=0)
    with pytest.raises(ValueError, match="at least one"):
        timing.time_in_turn([])

def test_every_input_set_is_used_and_all_threads_are_given():
    seen: set[int] = set()
    threads: set[int] = set()

    def record(x):
        seen.add(x.data_ptr())
        threads.add(torch.get_num_threads())
        time.sleep(0.001)

    sets = [(torch.randn(4),) for _ in range(5)]
    t = timing.time_callable(record, sets, warmup=0, min_run_time=0.05, max_run_time=0.2)
    assert seen == {s[0].data_ptr() for s in sets}
    assert threads == {torch.get_num_threads()}  # Timer's default would be 1
    assert t.threads == torch.get_num_threads()


def test_time_callable_needs_inputs():
    with pytest.raises(ValueError, match="input set"):
        timing.time_callable(lambda: None, [])


def test_synchronize_on_cpu_is_a_no_op():
    timing.synchronize("cpu")


def _busy(seconds):
    """Keep the CPU busy for ``seconds``: a call that really takes that long (sleeping would
    hand the core to another process)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def test_fast_calls_are_timed_in_blocks_of_about_a_millisecond():
    x = torch.randn(8)
    t = timing.time_callable(torch.neg, [(x,)], min_run_time=0.02, max_run_time=0.1)
    assert t.calls_per_sample > 1 and t.n >= timing.MIN_SAMPLES
    # the block that passed the size check can be slower than the median block
    assert t.calls_per_sample * t.median_s >= timing.MIN_BLOCK_S / 4


def test_slow_first_calls_do_not_shrink_the_blocks():
    calls = itertools.count()

    def slow_once(x):
        if next(calls) < 5:  # a stall on a shared host, lasting a few calls
            _busy(3e-4)
        return torch.neg(x)

    x = torch.randn(8)
    t = timing.time_callable(slow_once, [(x,)], warmup=0, min_run_time=0.02, max_run_time=0.1)
    assert t.calls_per_sample * t.median_s >= timing.MIN_BLOCK_S / 4


def test_one_stalled_block_does_not_settle_the_block_size():
    calls = itertools.count()
    stalls = {0: 3e-4, 1: 2e-3}  # sizes the first block at 4 calls, then stalls inside it

    def stalled(x):
        _busy(stalls.get(next(calls), 0.0))
        return torch.neg(x)

    x = torch.randn(8)
    t = timing.time_callable(stalled, [(x,)], warmup=0, min_run_time=0.02, max_run_time=0.1)
    assert t.calls_per_sample > 4
    assert t.calls_per_sample * t.median_s >= timing.MIN_BLOCK_S / 4


@pytest.mark.parametrize("stalled", [1, 2])
def test_stalled_first_calls_do_not_settle_blocks_of_one(stalled):
    """A busy host can stall the first call past MIN_BLOCK_S (seen in CI), or the first two
    (what failed CI under the old rule of two passing blocks in a row): that alone must not
    settle blocks of a single fast call."""
    calls = itertools.count()

    def stalled_first(x):
        if next(calls) < stalled:
            _busy(2 * timing.MIN_BLOCK_S)
        return torch.neg(x)

    x = torch.randn(8)
    t = timing.time_callable(stalled_first, [(x,)], warmup=0, min_run_time=0.02,
                             max_run_time=0.1)  # fmt: skip
    assert t.calls_per_sample > 1
    assert t.calls_per_sample * t.median_s >= timing.MIN_BLOCK_S / 4


def test_a_slow_call_is_timed_once_per_sample():
    calls = itertools.count()

    def slow():
        next(calls)
        time.sleep(0.01)

    t = timing.time_callable(slow, [()], warmup=2, min_run_time=0.05, max_run_time=0.1)
    assert t.calls_per_sample == 1
    assert next(calls) == 2 + t.n  # the warm-up, then one call per sample: none untimed


def test_shifted_copies_are_distinct_in_memory_and_contents():
    weight = timing.random_tensor((64, 32), torch.float32, "cpu")
    copies = timing.shifted_copies(weight, 5)
    assert copies[0] is weight and all(c.shape == weight.shape for c in copies)
    assert len({c.data_ptr() for c in copies}) == 5
    for i, c in enumerate(copies[1:], start=1):
        assert not torch.equal(c, weight)
        assert torch.equal(c.reshape(-1), weight.reshape(-1).roll(i))
    with pytest.raises(ValueError, match="at least 1"):
        timing.shifted_copies(weight, 0)


def test_call_seconds_times_one_call():
    calls = []

    def busy(seconds):
        calls.append(seconds)
        _busy(seconds)

    assert 2e-3 <= timing.call_seconds(busy, (2e-3,)) < 1.0
    assert calls == [2e-3]


def test_plan_rotates_a_bounded_number_of_copies_and_flushes_beyond_it():
    rotate = timing.plan_cache_defeat(10 * MiB, 32 * MiB)
    assert (rotate.method, rotate.copies, rotate.flush_bytes) == ("rotate", 7, 0)
    # 66 KB weights against a 300 MiB cache would need thousands of copies
    flush = timing.plan_cache_defeat(66_000, 300 * MiB)
    assert (flush.method, flush.copies) == ("flush", timing.MAX_COPIES)  # one flush per round
    assert flush.flush_bytes >= timing.FLUSH_FACTOR * 300 * MiB
    # a round holds at most half the cache: 4 MiB copies, 32 MiB cache -> 4 per flush
    assert timing.plan_cache_defeat(4 * MiB, 32 * MiB, max_copies=8).copies == 4
    # a copy bigger than half the cache: one per flush
    assert timing.plan_cache_defeat(20 * MiB, 32 * MiB, max_copies=1).copies == 1
    at_bound = timing.copies_to_exceed_cache(MiB, 8 * MiB)  # 16
    assert timing.plan_cache_defeat(MiB, 8 * MiB, max_copies=at_bound).method == "rotate"
    assert timing.plan_cache_defeat(MiB, 8 * MiB, max_copies=at_bound - 1).method == "flush"
    # a byte budget bounds the rotation too
    assert timing.plan_cache_defeat(MiB, 8 * MiB, max_bytes=15 * MiB).method == "flush"
    assert timing.plan_cache_defeat(MiB, 8 * MiB, max_bytes=3 * MiB, max_copies=8).copies == 3
    assert timing.plan_cache_defeat(MiB, 8 * MiB, max_bytes=16 * MiB).method == "rotate"
    with pytest.raises(ValueError, match="max_copies"):
        timing.plan_cache_defeat(MiB, 8 * MiB, max_copies=0)


def test_flush_buffer_is_made_once_and_grows_on_request():
    small = timing.flush_buffer("cpu", 4 * MiB)
    assert small.numel() * 4 >= 4 * MiB and small.dtype == torch.float32
    assert (small != 0).all() and small.std() > 0  # written, random pages
    assert timing.flush_buffer("cpu", 2 * MiB) is small  # reused
    bigger = timing.flush_buffer("cpu", 16 * MiB)
    assert bigger.numel() * 4 >= 16 * MiB and timing.flush_buffer("cpu", 4 * MiB) is bigger
    with pytest.raises(ValueError, match="positive"):
        timing.flush_buffer("cpu", 0)


def test_a_flushed_timing_streams_the_buffer_before_every_timed_call():
    order = []

    class Recording(torch.Tensor):
        """A real buffer that notes when it is streamed."""

    buffer = timing.random_tensor((MiB,), torch.float32, "cpu").as_subclass(Recording)
    real_sum = torch.sum

    def fn():
        order.append("call")
        _busy(1e-4)

    def recorded_sum(x, *args, **kwargs):
        if x is buffer:
            order.append("flush")
        return real_sum(x, *args, **kwargs)

    torch.sum = recorded_sum
    try:
        t = timing.time_callable(fn, [()], warmup=2, min_run_time=0.005, max_run_time=0.05,
                                 flush=buffer)  # fmt: skip
    finally:
        torch.sum = real_sum
    assert order[:2] == ["call", "call"]  # warm-up, unflushed
    assert order[2:] == ["flush", "call"] * t.n  # then one flush before each timed call
    assert t.calls_per_sample == 1 and t.n >= timing.MIN_SAMPLES


def test_a_flushed_timing_of_several_sets_flushes_once_per_round_of_distinct_sets():
    """Three sets: flush, then each set once, then flush again: every call of a round reads a
    set that nothing has read since the flush."""
    order = []

    class Recording(torch.Tensor):
        """A real buffer that notes when it is streamed."""

    buffer = timing.random_tensor((MiB,), torch.float32, "cpu").as_subclass(Recording)
    real_sum = torch.sum

    def fn(name):
        order.append(name)
        _busy(1e-4)

    def recorded_sum(x, *args, **kwargs):
        if x is buffer:
            order.append("flush")
        return real_sum(x, *args, **kwargs)

    torch.sum = recorded_sum
    try:
        t = timing.time_callable(fn, [("a",), ("b",), ("c",)], warmup=0, min_run_time=0.005,
                                 max_run_time=0.05, flush=buffer)  # fmt: skip
    finally:
        torch.sum = real_sum
    rounds = -(-t.n // 3)
    assert order == (["flush", "a", "b", "c"] * rounds)[: t.n + rounds]
    assert t.n >= timing.MIN_SAMPLES


@pytest.fixture
def one_thread():
    """One thread: on a 2-core machine shared with other programs, a 2-thread call waits for a
    scheduler slice at every barrier (milliseconds), which would swamp a cache's effect."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_flush_makes_a_cached_read_read_memory(one_thread, monkeypatch):
    """A physical effect, so against the host's real cache whatever ``TEXTBOOK_LLC_BYTES``
    says: a flush of twice it evicts a 4 MiB buffer, of any cache size."""
    monkeypatch.delenv(machine.LLC_ENV, raising=False)
    llc = machine.last_level_cache_bytes("cpu")
    x = timing.random_tensor((MiB,), torch.float32, "cpu")  # 4 MiB: fits an L2 or L3
    flush = timing.flush_buffer("cpu", math.ceil(timing.FLUSH_FACTOR * llc))
    cached = timing.time_callable(torch.sum, [(x,)], min_run_time=0.05, max_run_time=0.3)
    flushed = timing.time_callable(torch.sum, [(x,)], min_run_time=0.05, max_run_time=0.3,
                                   flush=flush)  # fmt: skip
    assert flushed.median_s > cached.median_s


def test_timing_threads_leaves_busy_cores_alone():
    assert machine.timing_threads(2, None) == 2
    assert machine.timing_threads(2, 0.2) == 2
    assert machine.timing_threads(2, 1.1) == 1
    assert machine.timing_threads(2, 3.7) == 1
    assert machine.timing_threads(16, 2.0) == 14
    with pytest.raises(ValueError):
        machine.timing_threads(0, 0.0)
