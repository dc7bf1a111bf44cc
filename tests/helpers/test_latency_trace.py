"""Chapter 6's latency arithmetic: metrics from a trace, predictions from measured curves."""

import random

import pytest

from helpers import latency


def test_trace_metrics_follow_vllms_definitions():
    # Arrives at 10 s; tokens at 10.5, 10.6, 10.8, 11.2.
    m = latency.trace_metrics(10.0, [10.5, 10.6, 10.8, 11.2])
    assert m.keys() == {"ttft", "tpot", "e2e", "max_itl"}
    assert m["ttft"] == pytest.approx(0.5) and m["e2e"] == pytest.approx(1.2)
    assert m["tpot"] == pytest.approx(0.7 / 3)  # (e2e − TTFT) / (n − 1), not e2e / n
    assert m["max_itl"] == pytest.approx(0.4)
    # The identity the chapter relies on, exactly.
    assert m["e2e"] == pytest.approx(latency.e2e_fixed_tpot(m["ttft"], m["tpot"], 4))
    gaps = latency.inter_token_latencies([10.5, 10.6, 10.8, 11.2])
    assert gaps == pytest.approx([0.1, 0.2, 0.4])
    assert sum(gaps) / len(gaps) == pytest.approx(m["tpot"])


def test_one_token_has_no_decode():
    assert latency.trace_metrics(0.0, [0.25]) == {"ttft": 0.25, "tpot": 0.0, "e2e": 0.25,
                                                  "max_itl": 0.0}


@pytest.mark.parametrize(
    "start, times, message",
    [(0.0, [], "token_times is empty"), (0.0, [0.3, 0.2], "non-decreasing"),
     (1.0, [0.5], "no earlier than start_s")],
)
def test_bad_trace_raises(start, times, message):
    with pytest.raises(ValueError, match=message):
        latency.trace_metrics(start, times)


def test_interpolate_is_linear_inside_and_flat_outside():
    curve = {100: 1.0, 300: 2.0, 200: 1.2}  # unsorted on purpose
    assert latency.interpolate(curve, 150) == pytest.approx(1.1)
    assert latency.interpolate(curve, 250) == pytest.approx(1.6)
    assert latency.interpolate(curve, 10) == 1.0 and latency.interpolate(curve, 999) == 2.0
    with pytest.raises(ValueError, match="no measured points"):
        latency.interpolate({}, 1)


def test_predict_e2e_sums_each_steps_own_context():
    ttft = {10: 0.2, 20: 0.4}
    tpot = {0: 0.0, 100: 1.0}  # 0.01 s per cached token: the context of each step shows
    # prompt 10, 4 tokens: steps start with 10, 11, 12 cached tokens.
    assert latency.predict_e2e(ttft, tpot, 10, 4) == pytest.approx(0.2 + 0.10 + 0.11 + 0.12)
    assert latency.predict_e2e(ttft, tpot, 15, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="output_tokens"):
        latency.predict_e2e(ttft, tpot, 10, 0)


def test_fifo_first_tokens_queue_in_arrival_order_and_idle_between():
    # Listed out of order: request 1 arrives first, 0 and 2 together while it is prefilled,
    # 3 after the engine has gone idle.
    arrivals, prefill = [1.0, 0.0, 1.0, 10.0], [2.0, 1.5, 0.5, 1.0]
    result = latency.fifo_first_tokens(arrivals, prefill)
    # 1 runs 0 → 1.5; 0 (listed before 2) 1.5 → 3.5; 2 3.5 → 4.0; 3 idles to 10 → 11.
    assert result == [(0.5, 2.5), (0.0, 1.5), (2.5, 3.0), (0.0, 1.0)]
    for (wait, ttft), own in zip(result, prefill, strict=True):
        assert ttft == pytest.approx(wait + own)  # TTFT is the wait plus the prefill itself
    assert latency.fifo_first_tokens([], []) == []
    with pytest.raises(ValueError, match="2 arrivals but 1 prefill"):
        latency.fifo_first_tokens([0.0, 1.0], [1.0])


def test_fifo_first_tokens_match_an_event_by_event_engine():
    # The same engine run tick by tick (1 ms): a prefill starts at the first tick at which the
    # engine is free and its request is the earliest waiting one.
    rng = random.Random(6)
    arrivals = [rng.randrange(0, 4000) for _ in range(30)]
    prefill = [rng.randrange(1, 400) for _ in range(30)]
    order = sorted(range(30), key=lambda r: arrivals[r])
    free, started = 0, {}
    for tick in range(20000):
        waiting = [r for r in order if r not in started and arrivals[r] <= tick]
        if waiting and tick >= free:
            started[waiting[0]] = tick
            free = tick + prefill[waiting[0]]
    result = latency.fifo_first_tokens([a / 1000 for a in arrivals], [d / 1000 for d in prefill])
    for r, (wait, ttft) in enumerate(result):
        assert wait == pytest.approx((started[r] - arrivals[r]) / 1000, abs=1e-12)
        assert ttft == pytest.approx((started[r] + prefill[r] - arrivals[r]) / 1000, abs=1e-12)
    assert max(wait for wait, _ in result) > 0  # the draw does queue


def engine_trace(arrivals, prompts, outputs, prefill_per_token, step_s):
    """Token times of an engine that, between iterations, runs the earliest waiting prefill
    if one has arrived, else one decode round (each running request one token, in turn)."""
    times = [[] for _ in arrivals]
    waiting = sorted(range(len(arrivals)), key=lambda r: arrivals[r])
    now, running = 0.0, []
    while waiting or running:
        if waiting and arrivals[waiting[0]] <= now:
            r = waiting.pop(0)
            now += prefill_per_token * prompts[r]
            times[r].append(now)
            running.append(r)
        elif running:
            for r in list(running):
                now += step_s
                times[r].append(now)
                if len(times[r]) == outputs[r]:
                    running.remove(r)
        else:
            now = arrivals[waiting[0]]
    return times


def test_stall_report_finds_the_prefill_in_the_worst_gap():
    # 0 decodes alone; 1 arrives at 0.2 s with a long prompt and 2 at 0.25 s (after 1).
    arrivals = [0.0, 0.2, 0.25]
    times = engine_trace(arrivals, [10, 400, 20], [12, 4, 4], 1e-3, 0.02)
    report = latency.stall_report(0, arrivals, times)
    assert report["stalled_by"] == [1, 2]  # both prefills ran in one gap of request 0
    gaps = latency.inter_token_latencies(times[0])
    assert report["worst_itl"] == max(gaps) == pytest.approx(0.02 + 0.4 + 0.02)
    assert report["gap_start"] == times[0][gaps.index(max(gaps))]
    # Request 1's own stream: 2's prefill ran right after 1's, inside 1's first gap.
    assert latency.stall_report(1, arrivals, times)["stalled_by"] == [2]
    # Request 2 was never stalled: its worst gap held only decode steps.
    quiet = latency.stall_report(2, arrivals, times)
    assert quiet["stalled_by"] == [] and quiet["worst_itl"] == pytest.approx(3 * 0.02)


def test_stall_report_interval_is_open_at_the_start_and_closed_at_the_end():
    # Request 0's gaps: 1.0 → 2.0, then 2.0 → 4.0 (the worst); first tokens at 2.0 and 4.0.
    times = [[1.0, 2.0, 4.0], [2.0], [4.0], [3.0, 3.5]]
    report = latency.stall_report(0, [0.0, 1.5, 1.9, 3.0], times)
    assert report == {"worst_itl": 2.0, "gap_start": 2.0, "stalled_by": [2, 3]}
    # Equal gaps: the earliest is the worst.
    assert latency.stall_report(0, [0.0, 0.0], [[0.0, 1.0, 2.0], [1.0]])["gap_start"] == 0.0
    with pytest.raises(ValueError, match="one token"):
        latency.stall_report(1, [0.0, 1.5, 1.9, 3.0], times)
    with pytest.raises(ValueError, match="no earlier than start_s"):
        latency.stall_report(0, [0.0, 2.5], [[1.0, 2.0], [2.0]])


def test_utilizations():
    assert latency.bandwidth_utilization(1.397e9, 1e-3, 2.039e12) == pytest.approx(0.685, 1e-3)
    assert latency.flops_utilization(5e12, 10.0, 1e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        latency.bandwidth_utilization(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="peak must be > 0"):
        latency.flops_utilization(1.0, 1.0, -1.0)
