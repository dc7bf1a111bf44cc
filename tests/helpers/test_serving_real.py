"""The real engine: the scheduler's steps run by the chapter 6 decoder, end to end."""

import dataclasses

import numpy as np
import pytest
import torch

from helpers.counting import models
from helpers.decoder.model import random_decoder
from helpers.serving import KVMemory, LinearSteps, Request, simulate
from helpers.serving.real import serve_real

# Qwen2.5's architecture at a tiny size: the engine's behaviour, not its speed, is tested.
TINY = dataclasses.replace(models.get("Qwen2.5-0.5B"), name="tiny Qwen2.5", hidden=64,
                           intermediate=128, layers=2, n_q_heads=4, n_kv_heads=2, head_dim=16,
                           vocab=256)  # fmt: skip


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return random_decoder(TINY)


def greedy(model, prompt, n):
    return model.generate(prompt[None], n)[0].tolist()


@pytest.mark.parametrize("policy, budget", [("continuous", None), ("chunked", 8)])
def test_real_engine_generates_what_greedy_decoding_does(model, policy, budget):
    # Five requests arriving over 20 ms, two of them with prompts longer than the chunk
    # budget; every request's tokens must be the model's own greedy continuation.
    trace = [Request(0.0, 5, 4), Request(0.0, 17, 3), Request(0.005, 3, 6),
             Request(0.01, 12, 1), Request(0.02, 9, 5)]  # fmt: skip
    result = serve_real(trace, model, KVMemory(512, block_size=4), policy, max_batch=4,
                        token_budget=budget)  # fmt: skip
    for r, prompt, tokens in zip(trace, result.extra["prompts"], result.extra["tokens"],
                                 strict=True):  # fmt: skip
        assert tokens == greedy(model, prompt, r.output)
    assert (result.first_token >= result.arrival).all()
    assert (result.finish >= result.first_token).all()
    for times, r in zip(result.token_times, trace, strict=True):
        assert len(times) == r.output and (np.diff(times) > 0).all()
    assert result.step_tokens.sum() == sum(r.output for r in trace)
    assert result.extra == result.extra | {"held_at_end": 0, "stored_at_end": 0}


def test_real_engine_preempts_recomputes_and_still_generates_the_same_tokens(model):
    # The colocated hand-worked case of the simulator: 4 blocks of 4 tokens, two requests of
    # prompt 4 and 9 tokens. The scheduler preempts B at 8 cached tokens; the engine frees its
    # blocks, later recomputes its prompt and 5 tokens in one chunk, and B's tokens are still
    # its greedy continuation. The schedule is the simulator's, step for step.
    trace = [Request(0.0, 4, 9), Request(0.0, 4, 9)]
    memory = KVMemory(16, block_size=4)
    result = serve_real(trace, model, memory)
    assert result.preemptions == 1
    for prompt, tokens in zip(result.extra["prompts"], result.extra["tokens"], strict=True):
        assert tokens == greedy(model, prompt, 9)
    simulated = simulate(trace, LinearSteps(1.0, 0.0), memory)
    assert result.steps == simulated.steps == 13
    assert list(result.step_tokens) == list(simulated.step_tokens)


def test_real_engine_refuses_what_it_cannot_run(model):
    with pytest.raises(ValueError, match="paged KV memory without prefix caching"):
        serve_real([Request(0.0, 4, 2)], model, KVMemory(64, "reserve"))
    with pytest.raises(ValueError, match="cannot fit in KV memory"):
        serve_real([Request(0.0, 40, 2)], model, KVMemory(16, block_size=4))


def test_the_fidelity_check_runs_end_to_end_on_a_small_workload():
    """The benchmark's whole path (profile, burst, fit, the predictive simulation, per-load
    calibration and refit, real and simulated runs, report) on a small workload. Its
    accuracy depends on the machine: the benchmark prints it."""
    from helpers.serving import fidelity

    work = fidelity.Workload(prompt_mean=16, output_mean=4, max_batch=4, token_budget=32,
                             kv_tokens=2048, requests=12)  # fmt: skip
    run = fidelity.fidelity(work, loads=(0.5,), budget_s=2.0)
    # the trace sized to the budget at the measured capacity, not work.requests
    assert run["requests"] == fidelity.requests_in(2.0, run["capacity"], (0.5,), work)
    assert len(run["traces"][0.5]) == run["requests"][0.5]
    (real, sim, real_steps, sim_steps), = run["rows"].values()
    assert set(real) == set(sim) == set(fidelity.METRICS)
    assert all(value > 0 for value in (*real.values(), *sim.values()))
    assert real_steps > 0 and sim_steps > 0 and run["capacity"] > 0
    # refitted at that load: the engine's own time a step, and the stalls' factor
    assert run["overheads"][0.5] > 0 and run["stalls"][0.5] > 0
    # predictive: the one fit, nothing refitted at the load; reported beside calibrated
    (ahead, ahead_steps), = run["predicted"].values()
    assert set(ahead) == set(fidelity.METRICS) and ahead_steps > 0
    assert run["predictive"] is not run["fitted"] and len(run["profiled"]) > 10
    for kind in fidelity.KINDS:
        assert fidelity.worst_error(run, kind) >= 0
    text = fidelity.report(run)
    assert "worst |sim/real - 1|" in text and "50% tpot_p90" in text
    assert f"requests {run['requests'][0.5]} at 50%;" in text
    assert "predictive: worst" in text and "calibrated: worst" in text
    # each verdict names where its worst miss is; the calibration run's size is printed
    for kind in fidelity.KINDS:
        worst, share, name, ratio = fidelity.worst_miss(run, kind)
        assert f"{kind}: worst |sim/real - 1| = {worst:.1%} ({share:.0%} {name}, " in text
    calibrating = fidelity.calibration_requests(run["requests"][0.5], work)
    assert run["calibration_requests"] == {0.5: calibrating}
    assert f"short run at that load ({calibrating} requests)" in text
    # the run's own noise floor: its jitter measured in the profile, simulated on its traces
    assert 0 < run["jitter"] < 1 and 0 <= run["floor"][0] <= run["floor"][1]
    assert f"{run['jitter']:.1%} sd" in text and f"at most {run['floor'][1]:.1%}" in text
    assert "load average" in text and "load average" not in fidelity.report(run, False)


def test_the_predictive_fit_takes_the_bursts_chunk_steps_and_leaves_its_decodes_to_the_profile():
    """The profile has one prompt chunk a shape, so the cost a chunk is learnt from the
    burst's steps with several; the burst's decode-only steps (its tail, slower at small
    batches than the same batches anywhere else) stay out of the fit, and its time between
    forwards is added as a cost a step and a cost a head."""
    from types import SimpleNamespace

    from helpers.serving import fidelity
    from helpers.serving.steps import FittedSteps, Step, token_knots

    knots = token_knots(192)
    layers = [2e-3, 4e-3, 3.8e-3] + [3e-3 + 2e-5 * t for t in knots[3:]]
    truth = FittedSteps([0.0, 5e-5, 1e-3, 1e-7, 2e-8, 3e-4] + layers, knots)  # 1 ms a chunk
    profiled = [Step((), b, b * c, b) for b in range(1, 17) for c in (24, 120)]
    profiled += [Step(((p, k),), 0, 0, 1) for p in (24, 32, 48, 64, 96, 128, 192)
                 for k in (0, 96)]
    profiled += [Step(((80, 0),), 16, 800, 16), Step(((48, 0),), 8, 640, 9)]
    chunked = [Step(((40, 0), (30, 0)), 4, 400, 6), Step(((20, 10), (20, 0), (24, 0)), 8, 900, 10),
               Step(((90, 0), (50, 0)), 2, 200, 4), Step(((60, 0), (60, 0)), 0, 0, 2)]
    tail = [Step((), b, b * 300, b) for b in (1, 1, 1, 2, 2, 3)]  # 8% slower than the profile
    steps = chunked + tail
    burst = SimpleNamespace(extra={
        "steps": steps,
        "step_seconds": [truth(s) for s in chunked] + [1.08 * truth(s) for s in tail],
        "overhead_seconds": [1e-4 + 1e-5 * s.heads for s in steps]})
    predictive = fidelity.predictive_model([(s, truth(s)) for s in profiled], burst)
    for step in (*profiled, *chunked, *tail, Step(((30, 0), (30, 0), (30, 0)), 1, 100, 4)):
        assert predictive(step) == pytest.approx(truth(step) + 1e-4 + 1e-5 * step.heads,
                                                 rel=1e-6)  # fmt: skip


def test_requests_in_sizes_the_loads_traces_to_the_time_asked():
    from helpers.serving.fidelity import Workload, requests_in

    work = Workload(max_batch=4)
    # At 10 requests/s, loads 50% and 75% weigh 2 and 4 (1 / (1 - load)); a unit of weight
    # costs (2 / 5 + 4 / 7.5) s, and 7/6 of it with the calibration runs: 1.0888... s.
    unit = (2 / 5 + 4 / 7.5) * 7 / 6
    assert requests_in(100 * unit, 10.0, (0.5, 0.75), work) == {0.5: 200, 0.75: 400}
    assert requests_in(200 * unit, 10.0, (0.5, 0.75), work) == {0.5: 400, 0.75: 800}
    assert requests_in(0.1, 10.0, (0.5, 0.75), work) == {0.5: 4, 0.75: 4}  # a batch at least
    with pytest.raises(ValueError, match="budget_s"):
        requests_in(0.0, 10.0, (0.5,), work)
    with pytest.raises(ValueError, match="load"):
        requests_in(10.0, 10.0, (1.0,), work)
