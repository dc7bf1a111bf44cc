"""Chapter 6's latency arithmetic: predictions from measured curves, the queue before a
prefill, and a step's MFU and MBU."""

import random

import pytest

from helpers.counting import latency


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


def test_utilizations():
    assert latency.bandwidth_utilization(1.397e9, 1e-3, 2.039e12) == pytest.approx(0.685, 1e-3)
    assert latency.flops_utilization(5e12, 10.0, 1e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        latency.bandwidth_utilization(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="peak must be > 0"):
        latency.flops_utilization(1.0, 1.0, -1.0)
