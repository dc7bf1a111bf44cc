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
