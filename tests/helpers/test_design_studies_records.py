"""Chapter 9 §6's readings of the design problem (``helpers.serving.design_studies``) on a
short scenario: each record holds the planner's own search and simulations, and each verdict
(a queue that grows, shares that move, a goodput that moves, a prefill chip past its peak)
flips where it should on records built by hand."""

import dataclasses

import numpy as np
import pytest

from helpers import serving
from helpers.counting import flops, hardware, models
from helpers.serving import Scenario, ServingConfig, design_studies
from helpers.serving.design_studies import CandidateAt, CandidateRow, SloShares

SMALL = Scenario(requests=40)  # Qwen2.5-7B, 2 x H100 SXM, 40 requests/s, TTFT 0.5 s, TPOT 10 ms
CANDIDATES = (ServingConfig(16), ServingConfig(256, 512))
LOADS = (1.0, 2.0, 3.0)


def test_a_candidates_verdict_reads_the_doubled_trace():
    once = SloShares(1.0, 0.95, 0.95, 0.05, 0.006)
    assert CandidateAt(once, once).verdict == "steady"
    assert CandidateAt(once, once._replace(median_ttft=0.08)).verdict == "queue grows"
    # a decode queue (a split pair's decode chip at its cap) shows in TPOT, not TTFT
    assert CandidateAt(once, once._replace(median_tpot=0.0091)).verdict == "queue grows"
    assert CandidateAt(once, once._replace(median_tpot=0.0089)).verdict == "steady"
    assert CandidateAt(once, once._replace(tpot=0.9)).verdict == "unstable"  # 5 points
    assert CandidateAt(once, once._replace(tpot=0.94)).verdict == "steady"  # within 2
    assert CandidateAt(once, once).cells(("both", "ttft")) == "   95%  100%"
    assert CandidateAt(once, once._replace(tpot=0.5)).cells(("ttft", "tpot")) == "    unstable"
    at = CandidateAt(once, once)
    assert CandidateRow(CANDIDATES[0], at, at, 60.0, 40.0).goodput_moves  # a rung of 60 lost
    assert not CandidateRow(CANDIDATES[0], at, at, 60.0, 60.0).goodput_moves
    assert not CandidateRow(CANDIDATES[0], at, at, None, None).goodput_moves


def test_the_design_search_holds_the_planners_search_and_runs():
    search = design_studies.design_search(SMALL, CANDIDATES, LOADS)
    plan = serving.plan_serving(SMALL, CANDIDATES, LOADS)
    assert search.plan == plan and [r.config for r in search.rows] == list(CANDIDATES)
    assert search.top == 80.0  # 120 requests/s is more than the pair can compute
    with pytest.raises(ValueError) as refused:
        serving.planner.check_servable(SMALL, 120.0)
    assert search.refused == (str(refused.value),)
    doubled = dataclasses.replace(SMALL, requests=80)
    for row in search.rows:
        for at, rate in ((row.at_load, 40.0), (row.at_top, 80.0)):
            for shares, scenario in ((at.once, SMALL), (at.again, doubled)):
                result = serving.serve_config(scenario, row.config, rate)
                assert shares.both == result.attainment(0.5, 0.010)
                assert shares.ttft == float(np.mean(result.ttft <= 0.5))
                assert shares.median_ttft == float(np.median(result.ttft))
                assert shares.median_tpot == float(np.nanmedian(result.tpot))
        assert row.goodput == plan.goodputs.get(row.config)
        if row.goodput is not None:
            assert row.goodput_doubled == serving.config_goodput(doubled, row.config, LOADS)
    assert search.report == serving.config_report(SMALL, plan.best)
    assert search.steady == serving.planner.steady_check(SMALL, plan.best, LOADS)
    cfg = models.get(SMALL.model)
    need = 80.0 * np.mean([flops.forward_flops(cfg, r.prompt, attention="causal",
                                               logits="last").total
                           for r in SMALL.trace(80.0)])  # fmt: skip
    assert search.prefill_flops == pytest.approx(need, rel=1e-12)
    assert search.prefill_peak == hardware.get("H100 SXM").peak("bf16")
    assert search.prefill_over_peak == (need > search.prefill_peak)
    table = search.table().splitlines()
    assert table[0].startswith(" " * 50) and "at the load (40/s)" in table[0]
    assert "at 2x the load" in table[0] and table[-1].startswith("not tried: 120 requests/s")
    assert f"\nbest: {plan.best.label()}, goodput" in search.table()


def test_a_ladder_the_chips_cannot_serve_at_all_is_refused():
    with pytest.raises(ValueError, match="no rate of the ladder"):
        design_studies.design_search(dataclasses.replace(SMALL, rate=200.0), CANDIDATES, LOADS)


def test_the_short_trace_study_sets_the_short_search_beside_the_steady_one():
    study = design_studies.short_trace_study(SMALL, requests=20, lengths=(20, 40), loads=LOADS)
    short = dataclasses.replace(SMALL, requests=20)
    on_short, plan = serving.plan_serving(short, loads=LOADS), serving.plan_serving(SMALL,
                                                                                 loads=LOADS)
    assert (study.short_best, study.short_goodput) == (on_short.best, on_short.goodput)
    assert study.best == plan.best and study.misleads == (on_short.best != plan.best)
    assert study.tied == sum(g == on_short.goodput for g in on_short.goodputs.values())
    assert study.steady_goodput == plan.goodputs.get(on_short.best, 0.0)
    assert study.last_arrival == SMALL.trace(80.0)[19].arrival  # the same seed's first 20
    assert study.mean_lifetime == float(np.mean(serving.serve_config(short, on_short.best,
                                                                     80.0).e2e))  # fmt: skip
    (first, second) = study.rows
    run = serving.serve_config(SMALL, on_short.best, 80.0)
    assert second == (40, run.attainment(0.5, 0.010), run.max_running,
                      serving.serve_config(SMALL, plan.best, 80.0).attainment(0.5, 0.010))
    assert first.requests == 20 and len(study.report().splitlines()) == 2 + 2


def test_knob_plans_time_a_decode_step_and_plan_each_deployment():
    tight = dataclasses.replace(SMALL, tpot_slo=0.004)
    plans = design_studies.knob_plans({"chips per engine": [tight, dataclasses.replace(
        tight, tp=2)]}, loads=(1.0,))  # fmt: skip
    ((knob, rows),) = plans.knobs
    assert knob == "chips per engine" and [r.scenario.tp for r in rows] == [1, 2]
    for row in rows:
        steps, kv = row.scenario.engine()
        assert row.step_s == steps(serving.Step((), 32, 32 * 1152, 32))  # 1,024 + 256 / 2
        assert (row.need, row.capacity, row.fits) == (32 * 1152, kv.capacity_tokens, True)
        assert row.plan == serving.plan_serving(row.scenario, loads=(1.0,))
    assert rows[1].step_s < rows[0].step_s  # two chips an engine: a shorter step
    report = plans.report().splitlines()
    assert report[0] == "chips per engine:" and report[2].startswith("  4 x H100 SXM, TP=2")
    over = plans.knobs[0][1][0]._replace(capacity=1000)
    assert not over.fits
    with pytest.raises(ValueError, match="no deployment"):
        design_studies.knob_plans({"empty": []})
