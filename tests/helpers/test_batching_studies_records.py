"""Chapter 7's scheduling experiments as records (``helpers.serving.batching_studies``) and
the vLLM paper set beside the KV study (``studies.kv_usage_vs_paper``): each record against
the same simulations run by hand, on short traces."""

import numpy as np
import pytest

from helpers import serving
from helpers.serving import KVMemory, Step, poisson_trace, roofline_engine, simulate


def trace(n: int, rate: float, seed: int = 0):
    return poisson_trace(n, rate, 512, 256, seed=seed, max_prompt=4096, max_output=2048)


@pytest.fixture(scope="module")
def small():
    """100 and 200 requests at 20/s; capacities on 300 and 600 requests."""
    return serving.static_vs_continuous(requests=100, rate=20.0, capacity_requests=300)


def test_each_run_is_the_simulation_by_hand_at_steady_state(small):
    steps, memory = roofline_engine("Llama-3.1-8B", "H100 SXM")
    assert list(small.runs) == [("static", 100), ("static", 200), ("continuous", 100),
                                ("continuous", 200)]  # fmt: skip
    for (policy, n), run in small.runs.items():
        by_hand = simulate(trace(n, 20.0), steps, memory, policy, max_batch=64).steady()
        assert (run.policy, run.requests, run.rate) == (policy, n, 20.0)
        assert run.throughput == by_hand.throughput
        start, end = by_hand.window
        assert run.arrived == by_hand.output.sum() / (end - start)
        assert run.served_share == run.throughput / run.arrived
        assert run.ttft_p50 == np.median(by_hand.ttft)
        assert run.ttft_p99 == np.percentile(by_hand.ttft, 99)
        assert run.tpot_p50 == np.nanmedian(by_hand.tpot)
        assert run.e2e_p50 == np.median(by_hand.e2e)
        assert run.max_running == by_hand.max_running <= 64
    fed = small.capacity[600]["continuous"]
    by_hand = simulate(trace(600, 40.0), steps, memory, "continuous", max_batch=64).steady()
    assert fed.throughput == by_hand.throughput and fed.rate == 40.0


def test_capacity_verdicts_follow_the_runs(small):
    assert sorted(small.capacity) == [300, 600]
    assert small.overloaded == all(run.arrived >= 1.05 * run.throughput for runs in
                                   small.capacity.values() for run in runs.values())  # fmt: skip
    moved = max(abs(small.capacity[600][p].throughput / small.capacity[300][p].throughput - 1)
                for p in ("static", "continuous"))  # fmt: skip
    assert small.capacity_moved == moved
    assert small.capacity_settled == (moved <= 0.02)
    ratio = small.capacity[300]["continuous"].throughput / small.capacity[300]["static"].throughput
    assert small.capacity_ratio(300) == ratio > 1  # continuous batching serves more
    lines = small.report().splitlines()
    assert len(lines) == 1 + 4 + 2 + 2 + 1
    assert lines[-1].startswith(f"each fed more than it serves: {small.overloaded}; ")
    assert f"moves either capacity by at most {small.capacity_moved:.1%}, " in lines[-1]
    assert lines[-1].endswith("within 2%" if small.capacity_settled else "outside 2%")


def test_the_verdicts_flip_with_the_feed_and_the_tolerance():
    # fed 2 requests a second, both policies keep up: on this trace a run serves at least
    # what arrives in its window, so the study is not overloaded and reads no capacity
    slow = serving.static_vs_continuous(requests=50, capacity_requests=100,
                                        feed={"static": 2.0, "continuous": 2.0})  # fmt: skip
    assert not slow.overloaded
    assert any(run.throughput >= run.arrived for run in slow.capacity[200].values())
    strict = serving.static_vs_continuous(requests=50, capacity_requests=100, tolerance=1e-9)
    assert strict.capacity_moved > 1e-9 and not strict.capacity_settled
    assert strict.report().endswith("outside 0%")


@pytest.mark.parametrize("kwargs, match", [
    ({"requests": 0}, "requests"),
    ({"rate": 0.0}, "rate"),
    ({"feed": {"static": 15.0}}, "feed"),
    ({"feed": {"static": 15.0, "continuous": -1.0}}, "feed"),
    ({"tolerance": 0.0}, "tolerance"),
])  # fmt: skip
def test_bad_input_is_refused_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        serving.static_vs_continuous(**kwargs)


def test_padding_costs_the_prefill_and_the_first_decode_step(small):
    prompts = [100, 20, 300, 5]
    cost = serving.static_padding_cost(prompts, small)
    steps, _ = roofline_engine("Llama-3.1-8B", "H100 SXM")
    assert cost.prompts == 4
    assert cost.prefill_s["as simulated"] == steps(Step(tuple((p, 0) for p in prompts), 0, 0, 4))
    assert cost.prefill_s["left-padded"] == steps(Step(((300, 0),) * 4, 0, 0, 4))
    assert cost.decode_s["left-padded"] == steps(Step((), 4, 1200, 4))
    assert cost.added_s > 0 and cost.decode_ratio > 1
    static = small.capacity[600]["static"]
    assert cost.batch_s == 4 * static.result.output.mean() / static.throughput
    assert cost.capacity_cut == cost.added_s / (cost.batch_s + cost.added_s)
    # prompts of one length: padding adds nothing
    even = serving.static_padding_cost([64] * 4, small)
    assert even.added_s == 0 and even.capacity_cut == 0 and even.decode_ratio == 1
    with pytest.raises(ValueError, match="empty"):
        serving.static_padding_cost([], small)
    with pytest.raises(ValueError, match="prompt length"):
        serving.static_padding_cost([3, 0], small)


def test_a_small_kv_room_preempts_and_a_large_one_does_not():
    study = serving.preemption_study(rooms=(8192, 65536), requests=60)
    steps, _ = roofline_engine("Llama-3.1-8B", "H100 SXM")
    for room, run in study.runs.items():
        by_hand = simulate(trace(60, 20.0), steps, KVMemory(room, "paged"), "continuous",
                           max_batch=64)  # fmt: skip
        assert run.preemptions == by_hand.preemptions
        assert run.throughput == by_hand.throughput and run.ttft_p99 == np.percentile(
            by_hand.ttft, 99)  # fmt: skip
    tight, roomy = study.runs[8192], study.runs[65536]
    assert tight.preemptions > 0 == roomy.preemptions
    assert tight.max_running < roomy.max_running
    with pytest.raises(ValueError, match="steady-state"):
        tight.arrived  # noqa: B018 (a whole-trace run has no window)
    with pytest.raises(ValueError, match="room"):
        serving.preemption_study(rooms=(0,))


def test_the_kv_study_beside_the_paper():
    comparison = serving.kv_usage_vs_paper(n=200)
    table = serving.kv_usage_study(n=200)
    assert comparison.table == table
    assert comparison.gap == {name: table[name]["token_share"] - comparison.paper[name]
                              for name in table}  # fmt: skip
    ranked = sorted(table, key=lambda name: table[name]["token_share"])
    assert comparison.same_order == (ranked == sorted(comparison.paper,
                                                      key=comparison.paper.get))  # fmt: skip
    # the paper lost 41.6% of Orca (Pow2)'s memory to external fragmentation and others
    assert comparison.inside["Orca (Pow2)"] == pytest.approx(0.268 / (1 - 0.416))
    assert comparison.gain("throughput") == (table["vLLM (paged)"]["throughput"]
                                             / table["Orca (Max)"]["throughput"])  # fmt: skip
    # the order flips when the paper's figures are reversed
    reversed_paper = dict(zip(comparison.paper, reversed(comparison.paper.values()),
                              strict=True))  # fmt: skip
    flipped = type(comparison)(table, reversed_paper, comparison.external)
    assert comparison.same_order and not flipped.same_order
    assert len(comparison.report().splitlines()) == 1 + 4 + 4
