"""Chapter 6's latency arithmetic: metrics from a trace, predictions from measured curves."""

import math

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


def test_diagnose_first_token_splits_prefill_and_waiting():
    idle = {128: 0.1, 1024: 0.8}
    slow = latency.diagnose_first_token(2.0, 1024, idle)
    assert slow == {"prefill_s": 0.8, "queue_s": pytest.approx(1.2), "cause": "queueing"}
    long_prompt = latency.diagnose_first_token(0.85, 1024, idle)
    assert long_prompt["cause"] == "prefill" and long_prompt["queue_s"] == pytest.approx(0.05)
    # Faster than the idle curve (noise): no negative waiting.
    assert latency.diagnose_first_token(0.05, 128, idle)["queue_s"] == 0.0
    with pytest.raises(ValueError, match="ttft_s must be >= 0"):
        latency.diagnose_first_token(math.nan, 128, idle)


def test_utilizations():
    assert latency.bandwidth_utilization(1.397e9, 1e-3, 2.039e12) == pytest.approx(0.685, 1e-3)
    assert latency.flops_utilization(5e12, 10.0, 1e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        latency.bandwidth_utilization(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="peak must be > 0"):
        latency.flops_utilization(1.0, 1.0, -1.0)
