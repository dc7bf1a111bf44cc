"""One streamed request's metrics from its token times (chapter 6): TTFT, TPOT (vLLM's
convention, NaN for one token), ITL and the stalls that requests sharing an engine cause."""

import math

import numpy as np
import pytest

from helpers.counting import latency
from helpers.serving import metrics


def test_token_time_metrics_follow_vllms_definitions():
    # Arrives at 10 s; tokens at 10.5, 10.6, 10.8, 11.2.
    m = metrics.token_time_metrics(10.0, [10.5, 10.6, 10.8, 11.2])
    assert m.keys() == {"ttft", "tpot", "e2e", "max_itl"}
    assert m["ttft"] == pytest.approx(0.5) and m["e2e"] == pytest.approx(1.2)
    assert m["tpot"] == pytest.approx(0.7 / 3)  # (e2e − TTFT) / (n − 1), not e2e / n
    assert m["max_itl"] == pytest.approx(0.4)
    # The identity the chapter relies on, exactly.
    assert m["e2e"] == pytest.approx(latency.e2e_fixed_tpot(m["ttft"], m["tpot"], 4))
    gaps = metrics.inter_token_latencies([10.5, 10.6, 10.8, 11.2])
    assert gaps == pytest.approx([0.1, 0.2, 0.4])
    assert sum(gaps) / len(gaps) == pytest.approx(m["tpot"])


def test_one_token_has_no_decode_and_no_tpot():
    m = metrics.token_time_metrics(0.0, [0.25])
    assert (m["ttft"], m["e2e"], m["max_itl"]) == (0.25, 0.25, 0.0)
    assert math.isnan(m["tpot"])  # vLLM's benchmark: no decode step, no TPOT
    # The identity still holds: n − 1 = 0 decode steps, the TPOT is not read.
    assert latency.e2e_fixed_tpot(m["ttft"], m["tpot"], 1) == m["e2e"]
    with pytest.raises(ValueError, match="tpot_seconds must be >= 0"):
        latency.e2e_fixed_tpot(0.25, math.nan, 2)


def test_tpot_from_is_one_convention_for_a_request_and_a_run():
    tpot = metrics.tpot_from(np.array([0.0, 0.3, 0.9]), np.array([1, 4, 10]))
    assert math.isnan(tpot[0]) and tpot[1:] == pytest.approx([0.1, 0.1])
    # Statistics over requests leave the one-token output out.
    assert np.nanmean(tpot) == pytest.approx(0.1) and np.nanmedian(tpot) == pytest.approx(0.1)
    ends = [[0.5, 0.6, 0.7, 0.8], [0.2]]
    per_request = [metrics.token_time_metrics(0.0, times)["tpot"] for times in ends]
    assert per_request[0] == pytest.approx(0.1) and math.isnan(per_request[1])


@pytest.mark.parametrize(
    "start, times, message",
    [(0.0, [], "token_times is empty"), (0.0, [0.3, 0.2], "non-decreasing"),
     (1.0, [0.5], "no earlier than start_s")],
)
def test_bad_token_times_raise(start, times, message):
    with pytest.raises(ValueError, match=message):
        metrics.token_time_metrics(start, times)


def engine_token_times(arrivals, prompts, outputs, prefill_per_token, step_s):
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
    times = engine_token_times(arrivals, [10, 400, 20], [12, 4, 4], 1e-3, 0.02)
    report = metrics.stall_report(0, arrivals, times)
    assert report["stalled_by"] == [1, 2]  # both prefills ran in one gap of request 0
    gaps = metrics.inter_token_latencies(times[0])
    assert report["worst_itl"] == max(gaps) == pytest.approx(0.02 + 0.4 + 0.02)
    assert report["gap_start"] == times[0][gaps.index(max(gaps))]
    # Request 1's own stream: 2's prefill ran right after 1's, inside 1's first gap.
    assert metrics.stall_report(1, arrivals, times)["stalled_by"] == [2]
    # Request 2 was never stalled: its worst gap held only decode steps.
    quiet = metrics.stall_report(2, arrivals, times)
    assert quiet["stalled_by"] == [] and quiet["worst_itl"] == pytest.approx(3 * 0.02)


def test_stall_report_interval_is_open_at_the_start_and_closed_at_the_end():
    # Request 0's gaps: 1.0 → 2.0, then 2.0 → 4.0 (the worst); first tokens at 2.0 and 4.0.
    times = [[1.0, 2.0, 4.0], [2.0], [4.0], [3.0, 3.5]]
    report = metrics.stall_report(0, [0.0, 1.5, 1.9, 3.0], times)
    assert report == {"worst_itl": 2.0, "gap_start": 2.0, "stalled_by": [2, 3]}
    # Equal gaps: the earliest is the worst.
    assert metrics.stall_report(0, [0.0, 0.0], [[0.0, 1.0, 2.0], [1.0]])["gap_start"] == 0.0
    with pytest.raises(ValueError, match="one token"):
        metrics.stall_report(1, [0.0, 1.5, 1.9, 3.0], times)
    with pytest.raises(ValueError, match="no earlier than start_s"):
        metrics.stall_report(0, [0.0, 2.5], [[1.0, 2.0], [2.0]])
