"""``python -m helpers.serving --fidelity``: the simulator against the real engine.

As Vidur (Agrawal et al., MLSys 2024) and LLMServingSim validate their simulators against
vLLM, this checks ``simulate`` against ``real.serve_real`` on this machine: profile the
chapter 6 decoder's ragged steps briefly (``profile_step_times``), measure the real
engine's capacity on a burst, fit a step-time model to the profiled steps and the burst's own
(``steps.FittedSteps``); then at about 30%, 60% and 90% of that capacity, refit it with a
short calibration run's steps at that load, run the engine on a Poisson trace (another
draw), simulate the very same trace with the refitted model, and compare p50/p90 TTFT,
p50/p90 TPOT and throughput. The same scheduler code chooses every step on both sides, so
what differs is only time: the fitted model's error and what the machine does meanwhile
(other processes, the Python between steps).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence

import numpy as np

from helpers.memory import kv_blocks
from helpers.serving.engine import simulate
from helpers.serving.kv import KVMemory
from helpers.serving.metrics import Result
from helpers.serving.steps import FittedSteps, Step
from helpers.serving.trace import poisson_trace

__all__ = ["LOADS", "METRICS", "fidelity_setup", "profile_steps", "fidelity", "report",
           "worst_error", "resimulate"]

LOADS = (0.3, 0.6, 0.9)  # shares of the measured capacity
METRICS = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90", "throughput")
TOLERANCE = 0.15  # the target: every figure within 15% of the measured one


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the fidelity runs serve: geometric lengths (prompt and output means, capped at
    4x), a chunked-prefill engine (Sarathi-Serve) with this batch cap and token budget, KV
    memory of ``kv_tokens`` slots in blocks of ``block_size``, ``requests`` per trace."""

    prompt_mean: int = 96
    output_mean: int = 24
    max_batch: int = 16
    token_budget: int = 192
    kv_tokens: int = 16384
    block_size: int = 16
    requests: int = 300  # per load; at 120 the percentiles were noisier (worst 18.7% in 3 runs)

    def trace(self, rate: float, seed: int, n: int | None = None):
        return poisson_trace(n or self.requests, rate, self.prompt_mean, self.output_mean,
                             seed=seed, max_prompt=4 * self.prompt_mean,
                             max_output=4 * self.output_mean)  # fmt: skip

    def memory(self) -> KVMemory:
        return KVMemory(self.kv_tokens, block_size=self.block_size)


def fidelity_setup(device: str | None = None):
    """The decoder the benchmark serves: on a CPU, Qwen2.5-0.5B's layer shapes with 1 layer
    and a 4,096-token vocabulary in fp32 (chapter 9's cut-down model); on a GPU the
    published Qwen2.5-0.5B in bf16. Random weights; threads as ``timing.timing_threads``."""
    import torch

    from helpers import machine, models, timing
    from helpers.decoder.model import random_decoder

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    preset = models.get("Qwen2.5-0.5B")
    if device == "cpu":
        torch.set_num_threads(timing.timing_threads(os.cpu_count() or 1, machine.busy_cores()))
        cfg = dataclasses.replace(preset, name="Qwen2.5-0.5B shapes, 1 layer, vocab 4,096",
                                  layers=1, vocab=4096)  # fmt: skip
        return random_decoder(cfg, device, torch.float32)
    return random_decoder(preset, device, torch.bfloat16)


def _profile_shapes(work: Workload) -> list[tuple[int, int, int, int, bool]]:
    """Step shapes around what the engine runs: decode batches, prompt chunks, mixtures."""
    shapes = [(0, b, c, 0, True) for b in (1, 2, 4, 8, 12, 16) for c in (32, 128, 384)]
    shapes += [(p, 0, 0, c, True) for p in (8, 32, 96, 192) for c in (0, 192)]
    shapes += [(p, b, c, 0, emits) for p, b, c, emits in
               ((176, 16, 96, False), (96, 8, 128, True), (32, 12, 200, True),
                (184, 8, 48, True), (64, 16, 300, True))]  # fmt: skip
    return shapes


def profile_steps(model, work: Workload, repeats: int = 5) -> list[tuple[Step, float]]:
    """(Step, median seconds) of each profiled shape (``decoder.step_times.profile_step_times``)."""
    from helpers.decoder.step_times import profile_step_times

    blocks = max(kv_blocks(c + p, work.block_size) + b * kv_blocks(ctx + 1, work.block_size)
                 for p, b, ctx, c, _ in _profile_shapes(work))  # fmt: skip
    cache = model.new_paged_cache(blocks, work.block_size)
    records = profile_step_times(model, cache, _profile_shapes(work), repeats=repeats)
    measured = []
    for record in records:
        s = record.shape
        prefill = ((s.prefill, s.prefill_context),) if s.prefill else ()
        measured.append((Step(prefill, s.decode, s.decode * s.context, s.heads),
                         record.timing.median_s))  # fmt: skip
    return measured


def figures(result: Result) -> dict[str, float]:
    """The compared figures of a run (s, and output tokens/s over the makespan)."""
    tpot = result.tpot[~np.isnan(result.tpot)]
    return {"ttft_p50": float(np.percentile(result.ttft, 50)),
            "ttft_p90": float(np.percentile(result.ttft, 90)),
            "tpot_p50": float(np.percentile(tpot, 50)),
            "tpot_p90": float(np.percentile(tpot, 90)),
            "throughput": result.throughput}  # fmt: skip


def fidelity(work: Workload = Workload(), loads: Sequence[float] = LOADS, seed: int = 0,
             model=None) -> dict:  # fmt: skip
    """Run the whole check; returns the fit (``"fitted"``, a ``FittedSteps``, and its
    error), the capacity and per load the measured and simulated figures and step counts
    (``report`` prints them), and the compared traces and policy (``resimulate`` reruns
    them on another step model)."""
    from helpers.serving.real import serve_real

    begin = time.perf_counter()
    model = model or fidelity_setup()
    load_before = os.getloadavg()[0]
    profiled = profile_steps(model, work)
    memory = work.memory()
    policy = dict(policy="chunked", max_batch=work.max_batch, token_budget=work.token_budget)
    # Capacity: a burst of requests all at t = 0 keeps the batch full; completed requests
    # over the makespan is what the engine sustains.
    serve_real(work.trace(1e6, seed + 99, 16), model, memory, **policy)  # warm the engine
    burst = serve_real(work.trace(1e6, seed + 1, 4 * work.max_batch), model, memory, **policy)
    capacity = len(burst.arrival) / burst.makespan
    # The fit sees the profiled shapes and the engine's own forwards (its block tables, its
    # cache's size and layout, which a profile in isolation does not have).
    fitted = FittedSteps.fit(profiled + _own_steps(burst))
    fit_error = max(abs(fitted(step) / seconds - 1) for step, seconds in profiled)
    rows, overheads, stalls, traces = {}, {}, {}, {}
    for k, share in enumerate(loads):
        # Just before each compared run, a short calibration run at the same load, on
        # another draw: its forwards join the fit (the small, mixed batches of that load as
        # the engine runs them), and its median time between forwards (arrivals, scheduling,
        # inputs, tokens: it grows with the batch) is added to every step (Vidur models a
        # step's CPU overhead so). Refitting per load also follows a shared CPU's speed,
        # which drifts by several percent within a minute.
        calibration = serve_real(work.trace(share * capacity, seed + 20 + k,
                                            max(work.requests // 6, 2 * work.max_batch)),
                                 model, memory, **policy)  # fmt: skip
        overheads[share] = float(np.median(calibration.extra["overhead_seconds"]))
        model_k = FittedSteps.fit(profiled + _own_steps(burst) + _own_steps(calibration))
        model_k = model_k.with_step_cost(overheads[share])
        # The fit follows a typical step; a shared machine also stalls now and then
        # (interrupts, other processes), and TPOT and throughput are means, so the model is
        # scaled to the calibration run's total time: its mean step, stalls included.
        spent = float(np.sum(calibration.extra["step_seconds"])
                      + np.sum(calibration.extra["overhead_seconds"]))  # fmt: skip
        stalls[share] = spent / sum(model_k(step) for step in calibration.extra["steps"])
        model_k = model_k.scaled(stalls[share])
        trace = work.trace(share * capacity, seed + 10 + k)
        real = serve_real(trace, model, memory, **policy)
        sim = simulate(trace, model_k, memory, **policy)
        rows[share] = (figures(real), figures(sim), real.steps, sim.steps)
        traces[share] = trace
    return {"fit_error": fit_error, "capacity": capacity, "rows": rows, "work": work,
            "fitted": fitted, "traces": traces, "policy": policy,
            "overheads": overheads, "stalls": stalls,
            "model": model.cfg.name, "device": str(next(model.parameters()).device),
            "threads": _threads(), "load": (load_before, os.getloadavg()[0]),
            "seconds": time.perf_counter() - begin}  # fmt: skip


def _worst(pairs) -> float:
    """The largest |sim/real - 1| over (real figures, simulated figures) pairs."""
    return max(abs(sim[name] / real[name] - 1) for real, sim in pairs for name in METRICS)


def worst_error(run: dict) -> float:
    """The worst |sim/real - 1| of a ``fidelity`` run, over its loads and figures."""
    return _worst((real, sim) for real, sim, *_ in run["rows"].values())


def resimulate(run: dict, steps) -> float:
    """The worst |sim/real - 1| of ``run``'s real runs against the very same traces
    simulated again with another step-time model ``steps`` (chapter 8: the roofline, with
    and without a per-step constant)."""
    memory = run["work"].memory()
    return _worst((run["rows"][share][0], figures(simulate(trace, steps, memory, **run["policy"])))
                  for share, trace in run["traces"].items())  # fmt: skip


def _own_steps(result: Result) -> list[tuple[Step, float]]:
    """(Step, forward seconds) of every step a ``serve_real`` run took."""
    return list(zip(result.extra["steps"], result.extra["step_seconds"], strict=True))


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def report(run: dict) -> str:
    """The fidelity table: measured, simulated and their ratio per figure and load."""
    w = run["work"]
    lines = [f"{run['model']} on {run['device']}, {run['threads']} threads; load average "
             f"{run['load'][0]:.1f} -> {run['load'][1]:.1f} on {os.cpu_count()} cores",
             f"chunked prefill, batch <= {w.max_batch}, budget {w.token_budget}; prompts ~"
             f"{w.prompt_mean}, outputs ~{w.output_mean} tokens (geometric); {w.requests} "
             "requests a load",
             f"step-time fit (profile and burst steps): worst error {run['fit_error']:.1%} "
             f"on the profiled shapes; measured capacity {run['capacity']:.1f} requests/s; "
             "refitted per load with a calibration run's steps, engine overhead "
             + ", ".join(f"{o * 1e3:.2f} ms" for o in run["overheads"].values())
             + " a step (added to the fit), time scaled for stalls by "
             + ", ".join(f"{f:.3f}" for f in run["stalls"].values()),
             f"{'load':>5} {'figure':<11}{'measured':>11}{'simulated':>11}{'sim/real':>9}"]
    for share, (real, sim, real_steps, sim_steps) in run["rows"].items():
        for name in METRICS:
            ratio = sim[name] / real[name]
            unit, scale = ("tok/s", 1) if name == "throughput" else ("ms", 1e3)
            lines.append(f"{share:>5.0%} {name:<11}{real[name] * scale:>8.2f} {unit:<3}"
                         f"{sim[name] * scale:>8.2f}   {ratio:>7.2f}x")  # fmt: skip
        lines.append(f"{'':>5} steps: real {real_steps}, simulated {sim_steps}")
    worst = worst_error(run)
    verdict = "within" if worst <= TOLERANCE else "NOT within"
    lines.append(f"worst |sim/real - 1| = {worst:.1%}: {verdict} the {TOLERANCE:.0%} target; "
                 f"{run['seconds']:.0f} s in all")  # fmt: skip
    return "\n".join(lines)
