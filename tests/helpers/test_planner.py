"""The serving planner of chapter 9 (helpers.serving's last section): scenarios, the search
space, evaluation by the simulators, goodput, the reference search and the scenario draws."""

import dataclasses
import math

import numpy as np
import pytest

from helpers import serving
from helpers.counting import hardware, memory, models
from helpers.serving import Scenario, ServingConfig

SMALL = Scenario(requests=40)  # Qwen2.5-7B, 2 x H100 SXM, 40 requests/s, TTFT 0.5 s, TPOT 10 ms


def test_scenario_validates_and_its_trace_is_the_seeded_poisson_trace():
    assert SMALL.trace() == serving.poisson_trace(40, 40.0, 1024, 256, seed=0, max_prompt=4096,
                                                  max_output=1024)
    faster = SMALL.trace(80.0)
    assert [r.prompt for r in faster] == [r.prompt for r in SMALL.trace()]
    assert faster[-1].arrival == pytest.approx(SMALL.trace()[-1].arrival / 2)
    for bad in (dict(chips=1), dict(rate=0.0), dict(share=1.5), dict(tpot_slo=-1.0)):
        with pytest.raises(ValueError):
            dataclasses.replace(SMALL, **bad)
    with pytest.raises(ValueError, match="fp8"):
        Scenario(chip="A100 80GB SXM", dtype="fp8")


def test_a_budget_counts_every_call_of_serve_config_and_refuses_the_one_past_it():
    """Chapter 9's design problem: the scenario carries the budget, so a derived scenario
    spends the same one, a cached result costs a call too, and the budget is no part of the
    deployment (equal scenarios, one cache entry)."""
    budget = serving.SimulationBudget(2)
    limited = dataclasses.replace(SMALL, budget=budget)
    assert limited == SMALL and hash(limited) == hash(SMALL) and repr(limited) == repr(SMALL)
    config = ServingConfig(64, 512)
    first = serving.serve_config(limited, config)
    assert serving.serve_config(limited, config) is first and budget.used == 2  # cached
    with pytest.raises(serving.BudgetSpent, match="budget of 2 calls"):
        serving.serve_config(dataclasses.replace(limited, rate=50.0), config)
    assert budget.used == 3 and not issubclass(serving.BudgetSpent, Exception)
    assert serving.serve_config(SMALL, config) is first  # no budget, no limit


def test_candidates_cover_the_three_knobs_and_skip_what_the_engine_refuses():
    candidates = serving.plan_candidates()
    assert len(candidates) == len(set(candidates)) == 12
    assert {c.disaggregate for c in candidates} == {False, True}
    assert all(c.token_budget is None or c.token_budget > c.max_batch for c in candidates)
    assert serving.plan_candidates((300,), (None, 256)) == [ServingConfig(300),
                                                            ServingConfig(300, None, True)]
    assert "chunks of 512" in ServingConfig(64, 512).label()
    assert "split" in ServingConfig(64, None, True).label()


def test_serve_config_runs_the_simulator_it_names():
    cfg, hw = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
    steps = serving.RooflineSteps(cfg, hw)
    kv = serving.KVMemory(serving.kv_capacity_tokens(cfg, hw.memory_bytes))
    chunked = serving.serve_config(SMALL, ServingConfig(64, 512))
    direct = serving.simulate(SMALL.trace(), steps, kv, "chunked", max_batch=64, token_budget=512,
                              engines=2)
    np.testing.assert_array_equal(chunked.finish, direct.steady().finish)  # at steady state
    assert chunked.window == direct.steady().window
    split = serving.serve_config(SMALL, ServingConfig(64, None, True))
    assert len(split.extra["prefill"]) == 1 and len(split.extra["decode"]) == 1
    assert (split.extra["transfer_seconds"] > 0).all()
    with pytest.raises(ValueError, match="token_budget"):
        serving.serve_config(SMALL, ServingConfig(512, 256))


def test_goodput_is_the_highest_rung_that_attains_the_share():
    config = ServingConfig(64, 512)
    goodput = serving.config_goodput(SMALL, config, (1.0, 1.5, 2.0))
    assert goodput in (0.0, 40.0, 60.0, 80.0)
    for load in (1.0, 1.5, 2.0):
        rate = 40.0 * load
        meets = serving.serve_config(SMALL, config, rate).attainment(0.5, 0.010) >= 0.9
        assert meets == (goodput >= rate)
    hopeless = dataclasses.replace(SMALL, tpot_slo=1e-4)
    assert serving.config_goodput(hopeless, config, (1.0, 2.0)) == 0.0


def test_plan_chooses_the_best_goodput_and_reports_it():
    plan = serving.plan_serving(SMALL, loads=(1.0, 2.0))
    assert plan.best is not None and plan.goodputs[plan.best] == plan.goodput
    assert plan.goodput == max(plan.goodputs.values())
    assert set(plan.goodputs) <= set(plan.attainment) == set(serving.plan_candidates())
    assert all(plan.attainment[c] >= 0.9 for c in plan.goodputs)
    # At steady state a batch cap of 16 queues 20 requests a second per engine, and the
    # queue breaks the TTFT SLO; a cap of 64 does not.
    steady = dataclasses.replace(SMALL, requests=400)
    capped = serving.serve_config(steady, ServingConfig(16))
    assert np.mean(capped.ttft <= 0.5) < 0.9
    assert serving.serve_config(steady, ServingConfig(64)).attainment(0.5, 0.010) >= 0.9
    report = serving.config_report(SMALL, plan.best)
    assert report["attainment"] == plan.attainment[plan.best]
    assert 0 <= report["attainment_se"] < 0.5
    assert 0 < report["ttft_p90"] <= 0.5 and 0 < report["tpot_p90"] <= 0.010
    cfg = models.get("Qwen2.5-7B")
    assert report["weight_bytes"] == memory.weight_bytes(cfg)
    assert report["weight_bytes"] + report["kv_bytes"] <= report["memory_bytes"]
    assert report["memory_bytes"] <= hardware.get("H100 SXM").memory_bytes
    assert serving.plan_serving(SMALL, loads=(1.0, 2.0)) is plan  # cached
    assert plan.per_chip == plan.goodput / 2  # DistServe reports goodput per GPU


def test_request_work_is_what_torch_would_count():
    # A request's FLOPs, scheduled any way: its prefill and each decode at its own context.
    from helpers.counting.flops import forward_flops

    cfg = models.get("Qwen2.5-7B")
    steps = serving.RooflineSteps(cfg, hardware.get("H100 SXM"))
    prompt, output = 300, 20
    counted = forward_flops(cfg, prompt, attention="causal", logits="last").total + sum(
        forward_flops(cfg, 1, context=c, logits="last").total
        for c in range(prompt, prompt + output - 1))
    flops, moved = steps.request_work(prompt, output)
    assert flops == counted
    kv_read = sum(memory.forward_bytes(cfg, 1, context=c)["attention"]
                  for c in range(prompt, prompt + output - 1))  # fmt: skip
    assert moved >= kv_read - (output - 1) * memory.forward_bytes(cfg, 1)["attention"]
    assert moved > memory.kv_cache_bytes(cfg, prompt) * (output - 1)  # every decode reads it


def test_a_rate_beyond_the_chips_peaks_is_refused():
    # 120 requests/s of Qwen2.5-7B (prompts ~1k, outputs ~256) need more FLOP/s than two
    # H100s have: the 100-request trace once "served" it, only because it ended first.
    scenario = Scenario(requests=200)
    load = serving.planner.offered_load(scenario, 120.0)
    assert load["flops"] > 1 > load["bytes"]
    assert serving.planner.offered_load(scenario, 60.0)["flops"] == pytest.approx(
        load["flops"] / 2)
    with pytest.raises(ValueError, match=r"120 requests/s offers 1\d\d% of the 2 chips' peak "
                                         r"FLOP/s.*no schedule can serve it"):
        serving.serve_config(scenario, ServingConfig(64, 512), 120.0)
    # The goodput ladder stops below it: 3x the load is never tried.
    assert serving.planner._rungs(scenario, (1.0, 2.0, 3.0)) == [40.0, 80.0]


def test_plan_with_no_feasible_candidate():
    plan = serving.plan_serving(dataclasses.replace(SMALL, ttft_slo=1e-4), loads=(1.0,))
    assert plan.best is None and plan.goodput == 0.0 and not plan.goodputs


def test_the_engine_refusing_a_model_that_does_not_fit():
    tiny_chip = Scenario(model="Llama-3.1-70B", chip="L4", requests=10)
    with pytest.raises(ValueError, match="does not fit"):
        serving.serve_config(tiny_chip, ServingConfig(16))
    assert serving.plan_serving(tiny_chip, loads=(1.0,)).best is None


@pytest.mark.parametrize("family", ["busy", "tight TPOT"])
def test_draws_are_seeded_feasible_and_each_family_needs_its_own_knob(family):
    scenario = serving.draw_scenario(7, family)
    assert scenario == serving.draw_scenario(7, family)
    assert scenario != serving.draw_scenario(8, family)
    plan = serving.plan_serving(scenario)
    assert plan.best is not None and plan.goodput >= scenario.rate
    if family == "busy":  # whole prompts leave less headroom than the best
        assert plan.goodputs.get(ServingConfig(256), 0.0) < plan.goodput
    with pytest.raises(ValueError):
        serving.draw_scenario(7, "no such family")
    assert math.isfinite(scenario.tpot_slo) and scenario.tpot_slo > 0
