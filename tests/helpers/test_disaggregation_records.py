"""Chapter 8's pairs of chips at rising load as records (``helpers.serving.disaggregation``):
the runs, the doubling checks, the goodputs and the queueing figures agree with the steps
run by hand; verdicts flip where they should; bad input is refused naming the problem."""

import numpy as np
import pytest

from helpers import serving
from helpers.serving import Step, disaggregation

SLO = (0.5, 0.010)


def test_pd_run_simulates_each_pair_once_and_refuses_an_unknown_kind():
    steps, kv = serving.roofline_engine("Qwen2.5-7B", "H100 SXM")
    trace = disaggregation.pd_trace(20, 200)
    assert trace == serving.poisson_trace(200, 20, 1024, 256, seed=4, max_prompt=16384,
                                          max_output=2048)  # fmt: skip
    whole = disaggregation.pd_run("colocated", 20, 200)
    by_hand = serving.simulate(trace, steps, kv, engines=2).steady()
    assert np.array_equal(whole.ttft, by_hand.ttft) and whole.steps == by_hand.steps
    assert disaggregation.pd_run("colocated", 20, 200) is whole  # cached
    split = disaggregation.pd_run("split", 20, 200)
    assert len(split.extra["prefill"]) == len(split.extra["decode"]) == 1
    with pytest.raises(ValueError, match="kind"):
        disaggregation.pd_run("tensor-parallel", 20, 200)


def test_little_s_law_and_the_doubling_check_read_the_runs():
    inside = disaggregation.pd_inside("colocated", 20, 200)
    assert inside == 20 * float(np.mean(disaggregation.pd_run("colocated", 20, 200).e2e))
    assert not disaggregation.queue_grows("colocated", 20, 200)
    assert disaggregation.queue_grows("colocated", 200, 200)  # far past two chips' capacity
    assert disaggregation.pd_cell("colocated", 200, SLO, 200) == "queue grows"
    share = disaggregation.pd_run("colocated", 20, 200).attainment(*SLO)
    assert disaggregation.pd_cell("colocated", 20, SLO, 200) == f"{share:.0%}"


def test_disaggregation_goodputs_are_max_rate_under_slo_on_each_trace():
    pairs = disaggregation.disaggregation_study(rates=(10, 20, 200), requests=200, short=100)
    assert set(pairs.goodputs) == {200, 100, 400}
    for n in (200, 100, 400):
        for kind in disaggregation.PD_KINDS:
            expected = serving.max_rate_under_slo(
                lambda rate, k=kind, m=n: disaggregation.pd_run(k, rate, m), (10, 20, 200),
                0.5, 0.0075)  # fmt: skip
            assert pairs.goodput(kind, "tight", n) == expected
    assert pairs.goodput("split", "loose") == pairs.goodputs[200][("split", "loose")]
    assert pairs.cells[(200, "colocated", "loose")] == "queue grows"
    assert pairs.cells[(10, "split", "tight")] == disaggregation.pd_cell("split", 10,
                                                                         (0.5, 0.0075), 200)
    rates = {kind: pairs.goodput(kind, "loose") for kind in disaggregation.PD_KINDS}
    assert pairs.best("loose") == [k for k, r in rates.items() if r == max(rates.values())]
    lines = pairs.report().split("\n")
    assert len(lines) == 1 + 3 + 1 + 2 + 2
    assert lines[0].split() == ["rate/s", "whole,", "loose", "whole,", "tight", "chunked,",
                                "loose", "chunked,", "tight", "split,", "loose", "split,",
                                "tight"]  # fmt: skip
    assert lines[-2].startswith("on 100 requests a trace") and "on 400 requests" in lines[-1]


def test_disaggregation_refuses_bad_trace_lengths():
    with pytest.raises(ValueError, match="requests"):
        disaggregation.disaggregation_study(rates=(10,), requests=0)
    with pytest.raises(ValueError, match="short"):
        disaggregation.disaggregation_study(rates=(10,), requests=200, short=-5)


def test_pd_engines_read_little_s_law_on_the_decode_phase():
    engines = disaggregation.pd_engines_study(20, requests=200)
    handoff = serving.kv_handoff_study("Qwen2.5-7B", "H100 SXM", 1024, 50e9, 32)
    assert (engines.prefill_s, engines.decode_step_s, engines.transfer_s) == (
        handoff["prefill_s"], handoff["decode_step_s"], handoff["transfer_s"])
    assert [load.n for load in engines.loads] == [200, 400]
    steps, _ = serving.roofline_engine("Qwen2.5-7B", "H100 SXM")
    load = engines.loads[0]
    split = disaggregation.pd_run("split", 20, 200)
    assert load.tpot["split"] == float(np.nanmedian(split.tpot))
    # one decode engine holds every decoding request of the split pair; each colocated one, half
    assert load.batch["split"] == 20 * float(np.mean(split.e2e - split.ttft))
    whole = disaggregation.pd_run("colocated", 20, 200)
    assert load.batch["colocated"] == 10 * float(np.mean(whole.e2e - whole.ttft))
    context = np.mean([r.prompt + r.output / 2 for r in disaggregation.pd_trace(20, 200)])
    b = round(load.batch["split"])
    assert load.alone["split"] == steps(Step((), b, round(load.batch["split"] * context), b))
    assert load.excess("split") == load.tpot["split"] - load.alone["split"]
    assert all(0 < share <= 1 for share in (*engines.split_busy, *engines.colocated_busy))
    assert len(engines.colocated_busy) == 2


def test_md1_wait_is_pollaczek_khinchine_and_refuses_a_full_server():
    assert disaggregation.md1_wait(0.5, 0.01) == 0.5 * 0.01 / (2 * 0.5)
    assert disaggregation.md1_wait(0.0, 0.01) == 0.0
    for rho in (1.0, 1.2, -0.1):
        with pytest.raises(ValueError, match="rho"):
            disaggregation.md1_wait(rho, 0.01)


def test_md1_study_rows_follow_the_run():
    study = disaggregation.md1_study(rhos=(0.3, 0.6), n=2000)
    steps, kv = serving.roofline_engine("Qwen2.5-7B", "H100 SXM")
    assert study.service_s == steps(Step(((512, 0),), 0, 0, 1))
    for row in study.rows:
        trace = serving.poisson_trace(2000, row.rho / study.service_s, 512, 1, seed=6,
                                      lengths="fixed")  # fmt: skip
        run = serving.simulate(trace, steps, kv, max_batch=1)
        assert row.wait_s == float(np.mean(run.steady().ttft)) - study.service_s
        assert row.formula_s == disaggregation.md1_wait(row.rho, study.service_s)
        assert row.busy == run.busy_seconds / run.makespan
        # Little's law: the sampled number inside is lambda W, to sampling noise
        assert row.inside == pytest.approx(row.little, rel=0.05)
    assert study.rows[0].wait_s < study.rows[1].wait_s
    with pytest.raises(ValueError, match="prompt"):
        disaggregation.md1_study(prompt=0)


def test_utilization_states_follow_the_doubling_checks():
    study = disaggregation.utilization_study(rates=(20, 200), requests=200)
    steps, _ = serving.roofline_engine("Qwen2.5-7B", "H100 SXM")
    low, high = study.rows
    work = np.mean([steps.request_work(r.prompt, r.output)[0]
                    for r in disaggregation.pd_trace(20, 200)])  # fmt: skip
    assert low.of_peak == 20 * work / (2 * steps.hw.peak("bf16"))
    assert high.state == "queue grows" and high.of_peak > 1
    runs = [disaggregation.pd_run("colocated", 20, n) for n in (200, 400)]
    p50 = [np.percentile(run.ttft, 50) for run in runs]
    p90 = [np.percentile(run.ttft, 90) for run in runs]
    moved = max(p50) > 1.1 * min(p50) or max(p90) > 1.1 * min(p90)
    assert low.state == ("not steady" if moved else "steady")
    assert (low.ttft_p50, low.ttft_p90) == (p50[0], p90[0])
    lines = study.table().split("\n")
    assert lines[2].endswith("queue grows: no steady state")
