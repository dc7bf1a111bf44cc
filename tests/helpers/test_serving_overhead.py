"""The roofline step model's per-step constant (chapter 8's launch overhead)."""

import math

import numpy as np
import pytest

from helpers.counting import hardware, models
from helpers.serving import KVMemory, Request, RooflineSteps, Step, simulate

QWEN = models.get("Qwen2.5-0.5B")
H100 = hardware.get("H100 SXM")
OVERHEAD = 1.7e-3

STEPS = [Step((), 1, 1024, 1), Step((), 64, 64 * 900, 64), Step(((512, 0),), 0, 0, 1),
         Step(((256, 128), (64, 0)), 12, 12 * 300, 13), Step(((300, 0),), 3, 600, 3)]  # fmt: skip


@pytest.mark.parametrize("step", STEPS)
def test_the_constant_is_added_once_to_every_step(step):
    plain, loaded = RooflineSteps(QWEN, H100), RooflineSteps(QWEN, H100, step_overhead_s=OVERHEAD)
    assert loaded(step) == pytest.approx(plain(step) + OVERHEAD, rel=1e-12)
    assert RooflineSteps(QWEN, H100, step_overhead_s=0)(step) == plain(step)


def test_decode_runs_carry_it_on_every_step():
    plain, loaded = RooflineSteps(QWEN, H100), RooflineSteps(QWEN, H100, step_overhead_s=OVERHEAD)
    for batch, context, steps in ((1, 100, 50), (32, 32 * 4000, 7), (8, 0, 1)):
        assert np.allclose(loaded.decode_run(batch, context, steps),
                           plain.decode_run(batch, context, steps) + OVERHEAD,
                           rtol=1e-12, atol=0)  # fmt: skip


def test_a_simulation_pays_it_once_a_step():
    # Every request arrives at once, so the schedule cannot depend on the step times: the
    # same steps run, each OVERHEAD longer.
    trace = [Request(0.0, 200 + 37 * i, 5 + 3 * i) for i in range(12)]
    memory = KVMemory(50_000)
    for policy, budget in (("continuous", None), ("chunked", 256)):
        plain = simulate(trace, RooflineSteps(QWEN, H100), memory, policy, 4, budget)
        loaded = simulate(trace, RooflineSteps(QWEN, H100, step_overhead_s=OVERHEAD), memory,
                          policy, 4, budget)  # fmt: skip
        assert loaded.steps == plain.steps
        assert loaded.makespan == pytest.approx(plain.makespan + plain.steps * OVERHEAD,
                                                rel=1e-9)  # fmt: skip


@pytest.mark.parametrize("bad", [-1e-6, math.nan, math.inf, "1e-3", True, None])
def test_a_bad_constant_is_refused(bad):
    with pytest.raises(ValueError, match="step_overhead_s"):
        RooflineSteps(QWEN, H100, step_overhead_s=bad)


def test_resimulate_scores_another_step_model_on_the_fidelity_runs_traces():
    from helpers.serving import fidelity, poisson_trace

    work = fidelity.Workload(requests=40)
    policy = dict(policy="chunked", max_batch=work.max_batch, token_budget=work.token_budget)
    traces = {0.5: poisson_trace(40, 20.0, 96, 24, seed=3)}
    truth = RooflineSteps(QWEN, H100, step_overhead_s=OVERHEAD)

    def figures(model):
        return fidelity.figures(simulate(traces[0.5], model, work.memory(), **policy))

    real = figures(truth)  # the "real" runs: this model's own simulation
    run = {"rows": {0.5: (real, figures(RooflineSteps(QWEN, H100)), 0, 0)},
           "traces": traces, "work": work, "policy": policy}  # fmt: skip
    assert fidelity.resimulate(run, truth) == 0.0
    without = fidelity.resimulate(run, RooflineSteps(QWEN, H100))
    assert without == fidelity.worst_error(run) > 0
    assert without == max(abs(run["rows"][0.5][1][n] / real[n] - 1) for n in fidelity.METRICS)


def _jitter_run():
    from helpers.serving import fidelity, poisson_trace

    work = fidelity.Workload(requests=60)
    policy = dict(policy="chunked", max_batch=work.max_batch, token_budget=work.token_budget)
    traces = {0.3: poisson_trace(60, 10.0, 96, 24, seed=5),
              0.9: poisson_trace(60, 40.0, 96, 24, seed=6)}  # fmt: skip
    return {"traces": traces, "work": work, "policy": policy,
            "predictive": RooflineSteps(QWEN, H100, step_overhead_s=OVERHEAD)}  # fmt: skip


def test_the_jitter_floor_is_zero_without_jitter_and_grows_with_it():
    from helpers.serving import fidelity

    run = _jitter_run()
    assert fidelity.jitter_floor(run, 0.0, draws=3) == (0.0, 0.0)
    small, large = fidelity.jitter_floor(run, 0.01), fidelity.jitter_floor(run, 0.2)
    assert 0 < small[0] <= small[1] and 0 < large[0] <= large[1]
    assert large[0] > 5 * small[0]
    assert fidelity.jitter_floor(run, 0.01) == small  # seeded: the same draws each time


@pytest.mark.parametrize("bad", [-0.01, math.nan])
def test_a_bad_jitter_is_refused(bad):
    from helpers.serving import fidelity

    with pytest.raises(ValueError, match="jitter"):
        fidelity.jitter_floor(_jitter_run(), bad)


def _launch(overhead_s):
    """A LaunchOverhead by hand (no measuring): an operator count and cost whose product is
    ``overhead_s``, on the H100's datasheet roofline."""
    import collections

    from helpers.decoder.launches import LaunchOverhead, StepOps
    from helpers.measuring.timing import Timing

    ops = StepOps(collections.Counter({"aten::add": 10}), collections.Counter({"aten::mm": 90}))
    per_op = Timing(overhead_s / 100, 0.0, overhead_s / 100, overhead_s / 100, 5, 1, "cpu", 1)
    return LaunchOverhead(QWEN, 1, 96, ops, per_op, H100, "bf16", 1e-3)


def test_roofline_fidelity_sets_the_roofline_with_and_without_launches_beside_the_fits():
    from helpers.serving import fidelity, poisson_trace

    work = fidelity.Workload(requests=40)
    policy = dict(policy="chunked", max_batch=work.max_batch, token_budget=work.token_budget)
    traces = {0.5: poisson_trace(40, 20.0, 96, 24, seed=3)}
    truth = RooflineSteps(QWEN, H100, step_overhead_s=OVERHEAD)

    def figures(model):
        return fidelity.figures(simulate(traces[0.5], model, work.memory(), **policy))

    real = figures(truth)  # the "real" runs: the roofline plus OVERHEAD a step
    run = {"rows": {0.5: (real, figures(RooflineSteps(QWEN, H100)), 0, 0)},
           "predicted": {0.5: (figures(truth), 0)},
           "traces": traces, "work": work, "policy": policy}  # fmt: skip
    exact = fidelity.roofline_fidelity(run, _launch(OVERHEAD))
    assert exact.launch_s == pytest.approx(OVERHEAD, rel=1e-12)
    assert exact.plain == fidelity.resimulate(run, RooflineSteps(QWEN, H100)) > 0
    assert exact.launched == pytest.approx(0.0, abs=1e-9)
    assert (exact.predictive, exact.calibrated) == (0.0, fidelity.worst_error(run))
    assert exact.narrows and exact.within
    assert "narrows" in exact.report() and "brings it within the 15% target" in exact.report()
    # a constant far larger than the real one: the roofline misses by more than without it
    wide = fidelity.roofline_fidelity(run, _launch(100 * OVERHEAD))
    assert not wide.narrows and not wide.within
    assert "widens" in wide.report() and "leaves it outside" in wide.report()


def _verdict_run():
    """A ``fidelity`` run by hand (no engine): two loads whose real and simulated figures
    differ where the test says, with everything ``report`` prints."""
    from helpers.serving import fidelity

    real = {"ttft_p50": 0.030, "ttft_p90": 0.060, "tpot_p50": 0.016, "tpot_p90": 0.020,
            "throughput": 100.0}  # fmt: skip
    off = {0.3: {"ttft_p90": 1.90, "tpot_p50": 0.95}, 0.9: {"ttft_p50": 1.21}}
    predictive_off = {0.3: {"tpot_p50": 0.80}, 0.9: {"ttft_p90": 1.10}}

    def sim(factors):
        return {name: value * factors.get(name, 1.0) for name, value in real.items()}

    work = fidelity.Workload()
    counts = {0.3: 31, 0.9: 214}
    return {"work": work, "model": "a model", "device": "cpu", "threads": 1,
            "requests": counts,
            "calibration_requests": {s: fidelity.calibration_requests(n, work)
                                     for s, n in counts.items()},
            "capacity": 25.0, "fit_error": 0.05, "others_first": 0.0,
            "overheads": {0.3: 1e-4, 0.9: 1e-4}, "stalls": {0.3: 1.1, 0.9: 1.0},
            "rows": {s: (dict(real), sim(off[s]), 10, 11) for s in off},
            "predicted": {s: (sim(predictive_off[s]), 12) for s in predictive_off},
            "others": {0.3: 0.0, 0.9: 0.0}, "floor": (0.08, 0.17), "jitter": 0.04,
            "seconds": 30.0}  # fmt: skip


def test_the_worst_miss_names_its_load_and_figure_and_the_report_prints_it():
    from helpers.serving import fidelity

    run = _verdict_run()
    assert fidelity.worst_miss(run) == pytest.approx((0.90, 0.3, "ttft_p90", 1.90))
    assert fidelity.worst_miss(run, "predictive") == pytest.approx((0.20, 0.3, "tpot_p50", 0.80))
    for kind in fidelity.KINDS:
        assert fidelity.worst_error(run, kind) == fidelity.worst_miss(run, kind)[0]
    with pytest.raises(ValueError, match="kind"):
        fidelity.worst_miss(run, "roofline")
    text = fidelity.report(run, load_average=False)
    assert ("predictive: worst |sim/real - 1| = 20.0% (30% tpot_p50, 0.80x), NOT within the "
            "15% target; beyond what jitter alone reaches") in text
    assert ("calibrated: worst |sim/real - 1| = 90.0% (30% ttft_p90, 1.90x), NOT within the "
            "15% target; beyond what jitter alone reaches") in text
    # the calibration runs' sizes: a sixth of the compared trace, at least a full batch of 16
    assert "short run at that load (16, 35 requests)" in text
    # a miss within the target gets no jitter clause
    run["rows"] = {s: (real, dict(real), *steps) for s, (real, _, *steps) in run["rows"].items()}
    assert ("calibrated: worst |sim/real - 1| = 0.0% (30% ttft_p50, 1.00x), within the 15% "
            "target\n") in fidelity.report(run, load_average=False)


def test_the_calibration_run_is_a_sixth_as_long_and_at_least_a_full_batch():
    from helpers.serving import fidelity

    work = fidelity.Workload(max_batch=16)
    assert [fidelity.calibration_requests(n, work) for n in (31, 54, 96, 97, 214)] == \
        [16, 16, 16, 16, 35]  # fmt: skip


@pytest.mark.parametrize(("predictive", "calibrated", "says"),
                         [(0.05, 0.10, "(both within the 15% target)"),
                          (0.05, 0.90, "(only predictive within the 15% target)"),
                          (0.20, 0.10, "(only calibrated within the 15% target)"),
                          (0.20, 0.90, "(neither within the 15% target)")])  # fmt: skip
def test_the_roofline_report_says_whether_the_fits_met_the_target(predictive, calibrated, says):
    from helpers.serving import fidelity

    text = fidelity.RooflineFidelity(0.8, 0.7, 1e-3, predictive, calibrated).report()
    assert f"predictive {predictive:.1%}, calibrated {calibrated:.1%} {says}" in text
