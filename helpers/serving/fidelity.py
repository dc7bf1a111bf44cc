"""``python -m helpers.serving --fidelity``: the simulator against the real engine.

As Vidur (Agrawal et al., MLSys 2024) and LLMServingSim validate their simulators against
vLLM, this checks ``simulate`` against ``real.serve_real`` on this machine: profile the
chapter 6 decoder's ragged steps briefly (``profile_step_times``), measure the real
engine's capacity on a burst, and fit a step-time model to the profiled steps and the
burst's steps with prompt chunks (``steps.FittedSteps``: a regression over the step's tokens
through the linear layers, its prompt chunks and their keys, its decodes' keys and its LM-head
rows), with the
engine's own time between forwards regressed on the burst's steps as well. Then at about
30%, 60% and 90% of that capacity it runs the engine on a Poisson trace and simulates the
very same trace twice, and compares p50/p90 TTFT, p50/p90 TPOT and throughput:

* **predictive**: with that one model, fitted once, as Vidur validates (nothing measured at
  the load is used);
* **calibrated**: with the model refitted per load on a short calibration run's steps at
  that load (another draw), its median overhead added and its time scaled to the
  calibration run's (stalls), which follows a machine whose speed drifts.

The same scheduler code chooses every step on both sides, so what differs is only time: the
step model's error and what the machine does meanwhile (other processes, the Python between
steps). On a CPU the engine's steps jitter by about 5% (sd) from one to the next, and a
short run's percentiles move with that even under an exact model: simulated with 5% noise a
step against none, 75 requests a load of ~96-token prompts in 192-token chunks and ~12-token
answers differed by 11% at the median draw and 21% at worst (16 draws); the default workload
by 4% and 7% (16 draws). Each run measures this floor on its own traces (``jitter_floor``),
so a miss can be read against what step jitter alone makes.

``roofline_fidelity`` holds the roofline step model, without and with a per-step launch
constant (``decoder.launches.launch_overhead``), against the same real runs (chapter 8).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from helpers.counting.memory import kv_blocks
from helpers.measuring.machine import cpu_seconds, others_cores
from helpers.serving.engine import simulate
from helpers.serving.kv import KVMemory
from helpers.serving.metrics import Result
from helpers.serving.steps import FittedSteps, RooflineSteps, Step
from helpers.serving.trace import poisson_trace

if TYPE_CHECKING:
    from helpers.decoder.launches import LaunchOverhead

__all__ = ["LOADS", "METRICS", "KINDS", "fidelity_setup", "profile_steps", "predictive_model",
           "fidelity", "requests_in", "calibration_requests", "report", "worst_error",
           "worst_miss", "resimulate", "jitter_floor", "RooflineFidelity", "roofline_fidelity"]

LOADS = (0.3, 0.6, 0.9)  # shares of the measured capacity
METRICS = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90", "throughput")
TOLERANCE = 0.15  # the target: every figure within 15% of the measured one
KINDS = ("predictive", "calibrated")  # the two simulations of each load (module docstring)


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
    published Qwen2.5-0.5B in bf16. Random weights. On a CPU, torch gets the cores
    ``machine.timing_threads`` leaves free of the ones this process may use, less one (at
    least one): the engine's own loop (scheduling, the KV blocks, the clock) runs on the
    host too, and with every core in torch's GEMMs the two contend, so small batches' steps
    swing (on 2 cores with 2 threads: batch 2 and 3 slower than 4) in a way no step model
    profiled ahead can follow."""
    import torch

    from helpers.counting import models
    from helpers.decoder.model import random_decoder
    from helpers.measuring import machine

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    preset = models.get("Qwen2.5-0.5B")
    if device == "cpu":
        free = machine.timing_threads(_usable_cores(), machine.busy_cores())
        torch.set_num_threads(max(1, free - 1))  # a core for the engine's loop
        cfg = dataclasses.replace(preset, name="Qwen2.5-0.5B shapes, 1 layer, vocab 4,096",
                                  layers=1, vocab=4096)  # fmt: skip
        return random_decoder(cfg, device, torch.float32)
    return random_decoder(preset, device, torch.bfloat16)


def _usable_cores() -> int:
    """The cores this process may run on (its affinity, e.g. under ``taskset``), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _profile_shapes(work: Workload) -> list[tuple[int, int, int, int, bool]]:
    """Step shapes around what the engine runs, (prefill, decodes, context, prefill context,
    emits): every decode batch up to ``max_batch`` (each row count is a knot of the fit,
    ``steps.token_knots``) at a short and a long context, prompt chunks at the fit's knots
    above 16 tokens, and chunks beside decodes, as chunked prefill mixes them: among them a
    prompt's small last chunk (4-24 tokens) beside a few decodes, the step a short prompt
    ends in at a light load (without them, on chapter 8's machine, such steps of the real runs
    took 5-10% longer than the fit said, and they sit in the TPOT tail's gaps)."""
    batches = range(1, work.max_batch + 1)
    short, long = work.prompt_mean // 2, 2 * work.prompt_mean + work.output_mean
    shapes = [(0, b, c, 0, True) for b in batches for c in (short, long)]
    budget = work.token_budget
    chunks = sorted({k for k in (24, 32, 48, 64, 96, 128, 192, 256) if k <= budget} | {budget})
    shapes += [(p, 0, 0, 0, True) for p in chunks]
    shapes += [(p, 0, 0, budget, True) for p in chunks[::3]]
    shapes += [(p, b, c, pc, emits) for p, b, c, pc, emits in
               ((budget - work.max_batch, work.max_batch, work.prompt_mean, 0, False),
                (work.prompt_mean, work.max_batch // 2, work.prompt_mean + 32, 0, True),
                (32, 3 * work.max_batch // 4, 2 * work.prompt_mean, 0, True),
                (budget - work.max_batch // 2, work.max_batch // 2, work.prompt_mean // 2, 0,
                 True),
                (8, work.max_batch, 3 * work.prompt_mean, 64, True),
                (40, work.max_batch // 2, work.prompt_mean, work.prompt_mean, False),
                (64, work.max_batch // 4, long, 0, True))
               if 0 < p and p + b <= budget]  # fmt: skip
    shapes += [(p, b, work.prompt_mean, 0, True) for p in (4, 8, 16, 24) for b in (2, 4, 8)
               if p + b <= budget]  # fmt: skip
    return shapes


def profile_steps(model, work: Workload, repeats: int = 5) -> list[tuple[Step, float]]:
    """(Step, median seconds) of each profiled shape (``decoder.step_times.profile_step_times``)."""
    return _profile(model, work, repeats)[0]


def _profile(model, work: Workload, repeats: int) -> tuple[list[tuple[Step, float]], float]:
    """``profile_steps``'s list, and the step's jitter: the median over shapes of the
    relative spread between repeats of one shape (IQR / 1.349 / median, which is the standard
    deviation for a normal spread, read from the IQR so that one stall does not set it)."""
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
    jitter = float(np.median([r.timing.iqr_s / 1.349 / r.timing.median_s for r in records]))
    return measured, jitter


def figures(result: Result) -> dict[str, float]:
    """The compared figures of a run (s, and output tokens/s over the makespan)."""
    tpot = result.tpot[~np.isnan(result.tpot)]
    return {"ttft_p50": float(np.percentile(result.ttft, 50)),
            "ttft_p90": float(np.percentile(result.ttft, 90)),
            "tpot_p50": float(np.percentile(tpot, 50)),
            "tpot_p90": float(np.percentile(tpot, 90)),
            "throughput": result.throughput}  # fmt: skip


def predictive_model(profiled: Sequence[tuple[Step, float]], burst: Result) -> FittedSteps:
    """The step-time model of the predictive simulation, fitted once: a ``FittedSteps``
    regression over the profiled steps and the burst's forwards that carry a prompt chunk
    (``_chunk_steps``), plus the engine's own
    time around each forward (scheduling, building the step's inputs, reading its tokens),
    regressed on the burst's steps as a cost a step and a cost a sequence that emits."""
    fitted = FittedSteps.fit(list(profiled) + _chunk_steps(burst))
    heads = np.array([step.heads for step in burst.extra["steps"]], dtype=float)
    spent = np.asarray(burst.extra["overhead_seconds"], dtype=float)
    (per_step, per_head), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(heads), heads]),
                                               spent, rcond=None)  # fmt: skip
    if per_head < 0 or per_step < 0:  # a cost no step can have: the median, a step
        per_step, per_head = float(np.median(spent)), 0.0
    return fitted.with_step_cost(float(per_step), float(per_head))


def fidelity(work: Workload = Workload(), loads: Sequence[float] = LOADS, seed: int = 0,
             model=None, budget_s: float | None = None) -> dict:  # fmt: skip
    """Run the whole check. ``budget_s``, if given, replaces ``work.requests``: the loads'
    traces get as many requests as keep the real runs (compared and calibration) to about
    that long in all at the measured capacity (``requests_in``), so a slower machine serves
    fewer requests and its percentiles are noisier (the module docstring gives how much).
    Returns the profiled steps (``"profiled"``: (Step, seconds)), the
    fit (``"fitted"``, a ``FittedSteps``, and its error on them), the predictive model
    (``"predictive"``), the capacity and per load the measured,
    predicted and calibrated figures and step counts (``report`` prints them), and the
    compared traces and policy (``resimulate`` reruns them on another step model), and the
    cores' worth of CPU time other processes used during each real run (``"others"``: where
    it is large, the machine that served is not the one the profile measured)."""
    from helpers.serving.real import serve_real

    begin = time.perf_counter()
    model = model or fidelity_setup()
    load_before = os.getloadavg()[0]
    clocks = cpu_seconds()
    profiled, jitter = _profile(model, work, repeats=5)
    memory = work.memory()
    policy = dict(policy="chunked", max_batch=work.max_batch, token_budget=work.token_budget)
    # Capacity: a burst of requests all at t = 0 keeps the batch full; completed requests
    # over the makespan is what the engine sustains.
    serve_real(work.trace(1e6, seed + 99, 16), model, memory, **policy)  # warm the engine
    burst = serve_real(work.trace(1e6, seed + 1, 4 * work.max_batch), model, memory, **policy)
    capacity = len(burst.arrival) / burst.makespan
    counts = ({share: work.requests for share in loads} if budget_s is None
              else requests_in(budget_s, capacity, loads, work))  # fmt: skip
    others_first = others_cores(clocks, cpu_seconds())  # during the profile and the burst
    # The fit sees the profiled shapes and the engine's own forwards with prompt chunks
    # (several chunks a step, mixed batches as its scheduler builds them: no profiled shape
    # has them).
    fitted = FittedSteps.fit(profiled + _chunk_steps(burst))
    fit_error = max(abs(fitted(step) / seconds - 1) for step, seconds in profiled)
    predictive = predictive_model(profiled, burst)
    rows, predicted, overheads, stalls, traces, others, calibrating = ({} for _ in range(7))
    for k, share in enumerate(loads):
        # Calibrated: just before each compared run, a short calibration run at the same
        # load, on another draw: its forwards join the fit (the small, mixed batches of that
        # load as the engine runs them), and its median time between forwards is added to
        # every step (Vidur models a step's CPU overhead so). Refitting per load also
        # follows a shared CPU's speed, which drifts by several percent within a minute.
        calibrating[share] = calibration_requests(counts[share], work)
        calibration = serve_real(work.trace(share * capacity, seed + 20 + k, calibrating[share]),
                                 model, memory, **policy)  # fmt: skip
        overheads[share] = float(np.median(calibration.extra["overhead_seconds"]))
        model_k = FittedSteps.fit(profiled + _chunk_steps(burst) + _own_steps(calibration))
        model_k = model_k.with_step_cost(overheads[share])
        # The fit follows a typical step; a shared machine also stalls now and then
        # (interrupts, other processes), and TPOT and throughput are means, so the model is
        # scaled to the calibration run's total time: its mean step, stalls included.
        spent = float(np.sum(calibration.extra["step_seconds"])
                      + np.sum(calibration.extra["overhead_seconds"]))  # fmt: skip
        stalls[share] = spent / sum(model_k(step) for step in calibration.extra["steps"])
        model_k = model_k.scaled(stalls[share])
        trace = work.trace(share * capacity, seed + 10 + k, counts[share])
        clocks = cpu_seconds()
        real = serve_real(trace, model, memory, **policy)
        others[share] = others_cores(clocks, cpu_seconds())
        sim = simulate(trace, model_k, memory, **policy)
        ahead = simulate(trace, predictive, memory, **policy)
        rows[share] = (figures(real), figures(sim), real.steps, sim.steps)
        predicted[share] = (figures(ahead), ahead.steps)
        traces[share] = trace
    run = {"fit_error": fit_error, "capacity": capacity, "rows": rows, "work": work,
            "requests": counts, "calibration_requests": calibrating,
            "profiled": profiled, "fitted": fitted, "predictive": predictive,
            "predicted": predicted,
            "traces": traces, "policy": policy, "overheads": overheads, "stalls": stalls,
            "others": others, "others_first": others_first,
            "model": model.cfg.name, "device": str(next(model.parameters()).device),
            "threads": _threads(), "load": (load_before, os.getloadavg()[0]),
            "jitter": jitter}  # fmt: skip
    run["floor"] = jitter_floor(run, jitter, seed=seed)
    run["seconds"] = time.perf_counter() - begin
    return run


def calibration_requests(requests: int, work: Workload) -> int:
    """Requests in a load's calibration run, beside a compared trace of ``requests``: a sixth
    as many, at least one full batch (``work.max_batch``)."""
    return max(requests // 6, work.max_batch)


def requests_in(budget_s: float, capacity: float, loads: Sequence[float],
                work: Workload) -> dict[float, int]:  # fmt: skip
    """Requests for each load (a share of ``capacity``, requests/s, below 1) such that serving
    them, plus each load's calibration run of about a sixth as many (``calibration_requests``),
    takes about ``budget_s``: a trace of n requests at rate r lasts about n / r. A busier
    queue's waits stay correlated over longer runs of requests (its relaxation time grows as
    the load nears 1), so its percentiles need more of them: each load gets requests in
    proportion to 1 / (1 - load). At least one full batch a load."""
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0, got {budget_s!r}")
    if not all(0 < share < 1 for share in loads):
        raise ValueError(f"every load must be a share of the capacity in (0, 1), got {loads!r}")
    weight = {share: 1 / (1 - share) for share in loads}
    seconds_a_weight = sum(w / (share * capacity) for share, w in weight.items()) * (1 + 1 / 6)
    return {share: max(work.max_batch, round(budget_s / seconds_a_weight * w))
            for share, w in weight.items()}


def _worst(pairs) -> float:
    """The largest |sim/real - 1| over (real figures, simulated figures) pairs."""
    return max(abs(sim[name] / real[name] - 1) for real, sim in pairs for name in METRICS)


def worst_miss(run: dict, kind: str = "calibrated") -> tuple[float, float, str, float]:
    """Where a ``fidelity`` run's simulation of one of ``KINDS`` (the calibrated one,
    refitted per load, or the predictive one) misses most: (|sim/real - 1|, the load, the
    figure, sim/real), the first load and figure in order on a tie."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    pairs = ({share: (run["rows"][share][0], sim) for share, (sim, _) in run["predicted"].items()}
             if kind == "predictive" else
             {share: (real, sim) for share, (real, sim, *_) in run["rows"].items()})  # fmt: skip
    misses = [(abs(sim[name] / real[name] - 1), share, name, sim[name] / real[name])
              for share, (real, sim) in pairs.items() for name in METRICS]  # fmt: skip
    return max(misses, key=lambda miss: miss[0])


def worst_error(run: dict, kind: str = "calibrated") -> float:
    """The worst |sim/real - 1| of a ``fidelity`` run, over its loads and figures, for one
    of ``KINDS`` (``worst_miss`` says where)."""
    return worst_miss(run, kind)[0]


def resimulate(run: dict, steps) -> float:
    """The worst |sim/real - 1| of ``run``'s real runs against the very same traces
    simulated again with another step-time model ``steps`` (chapter 8: the roofline, with
    and without a per-step constant)."""
    memory = run["work"].memory()
    return _worst((run["rows"][share][0], figures(simulate(trace, steps, memory, **run["policy"])))
                  for share, trace in run["traces"].items())  # fmt: skip


@dataclasses.dataclass(frozen=True)
class RooflineFidelity:
    """``roofline_fidelity``'s worst |sim/real - 1|: the roofline step model without
    (``plain``) and with (``launched``) the launch constant of ``launch_s`` a step, and
    the fitted models' (``predictive``, ``calibrated``), against the same real runs."""

    plain: float
    launched: float
    launch_s: float
    predictive: float
    calibrated: float

    @property
    def narrows(self) -> bool:
        """The launch constant brings the roofline closer to the real runs."""
        return self.launched < self.plain

    @property
    def within(self) -> bool:
        """With the constant, the roofline meets the ``TOLERANCE`` target."""
        return self.launched <= TOLERANCE

    def report(self) -> str:
        gap = abs(self.plain - self.launched)
        within = [kind for kind in KINDS if getattr(self, kind) <= TOLERANCE]
        fits = "both" if len(within) == 2 else f"only {within[0]}" if within else "neither"
        return (f"worst |sim/real - 1| against the real runs: roofline {self.plain:.1%}, "
                f"roofline + {self.launch_s * 1e3:.2f} ms a step {self.launched:.1%}; fitted, "
                f"predictive {self.predictive:.1%}, calibrated {self.calibrated:.1%} ({fits} "
                f"within the {TOLERANCE:.0%} target)\n"
                f"the launch constant {'narrows' if self.narrows else 'widens'} the roofline's "
                f"worst error by {gap * 100:.1f} points ({gap / self.plain:.0%} of it); it "
                f"{'brings it within' if self.within else 'leaves it outside'} the "
                f"{TOLERANCE:.0%} target")  # fmt: skip


def roofline_fidelity(run: dict, launch: LaunchOverhead) -> RooflineFidelity:
    """The roofline simulator against a ``fidelity`` run's real runs (chapter 8): its
    traces simulated again (``resimulate``) on the roofline of the device that served
    them, without and with ``launch``'s per-step constant (a
    ``decoder.launches.LaunchOverhead``: its model, measured chip, dtype and operators'
    fixed cost a step), beside the fitted models' errors on the same runs. A roofline
    step is a lower bound (no kernel reaches both ceilings), and the fitted models'
    measured steps include every launch."""
    def roofline(overhead: float) -> float:
        return resimulate(run, RooflineSteps(launch.cfg, launch.chip, launch.dtype,
                                             step_overhead_s=overhead))  # fmt: skip

    return RooflineFidelity(roofline(0.0), roofline(launch.launch_s), launch.launch_s,
                            worst_error(run, "predictive"), worst_error(run, "calibrated"))


class _Jittered:
    """A step model whose every step takes ``base``'s time times a lognormal draw of
    relative spread ``jitter`` (no ``decode_run``: every step is drawn alone)."""

    def __init__(self, base, jitter: float, seed: int):
        self.base, self.jitter = base, jitter
        self.rng = np.random.default_rng(seed)

    def __call__(self, step: Step) -> float:
        return self.base(step) * float(np.exp(self.rng.normal(0.0, self.jitter)))


def jitter_floor(run: dict, jitter: float, draws: int = 16, seed: int = 0) -> tuple[float, float]:
    """How far a perfect step model would miss on ``run``'s traces from step jitter alone:
    each draw simulates every trace with the predictive model's steps jittered by ``jitter``
    (a relative standard deviation) as the "real" run, and the same model without jitter as
    the simulation; the worst |sim/real - 1| over loads and figures, as ``worst_error``
    reads a run. Returns its median and its largest over ``draws`` draws: a measured miss
    below the largest is no evidence against the step model."""
    if not jitter >= 0:
        raise ValueError(f"jitter must be a relative spread >= 0, got {jitter!r}")
    memory, policy = run["work"].memory(), run["policy"]
    exact = {share: figures(simulate(trace, _Jittered(run["predictive"], 0.0, 0), memory,
                                     **policy))
             for share, trace in run["traces"].items()}  # fmt: skip
    worst = [_worst((figures(simulate(trace, _Jittered(run["predictive"], jitter, seed + d),
                                      memory, **policy)), exact[share])
                    for share, trace in run["traces"].items())
             for d in range(draws)]  # fmt: skip
    return float(np.median(worst)), float(max(worst))


def _own_steps(result: Result) -> list[tuple[Step, float]]:
    """(Step, forward seconds) of every step a ``serve_real`` run took."""
    return list(zip(result.extra["steps"], result.extra["step_seconds"], strict=True))


def _chunk_steps(burst: Result) -> list[tuple[Step, float]]:
    """The burst's forwards that carry a prompt chunk: what the fit needs from the engine (a
    profiled shape has one chunk, so a cost a chunk is only known from steps with several).
    Its decode-only steps are left to the profile, which has every batch size: they are the
    burst's tail, its longest requests finishing, and on chapter 8's machine (2 cores, quiet)
    they ran 4-8% slower at batches 1-3 than those batches did in the profile and in the
    real runs at every load, and outnumbered the profile's two shapes a batch in the fit."""
    return [(step, seconds) for step, seconds in _own_steps(burst) if step.prefill]


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _cores(busy: float | None) -> str:
    return "unknown" if busy is None else f"{busy:.2f} cores"


def report(run: dict, load_average: bool = True) -> str:
    """The fidelity table: per figure and load, the measured value, then the predictive and
    the calibrated simulation and each one's sim/real (``load_average``: print the
    machine's load average before and after, as the command line does)."""
    w = run["work"]
    where = f"{run['model']} on {run['device']}, {run['threads']} threads"
    if load_average:
        where += (f"; load average {run['load'][0]:.1f} -> {run['load'][1]:.1f}, "
                  f"{_usable_cores()} of {os.cpu_count()} cores usable")  # fmt: skip
    lines = [where,
             f"chunked prefill, batch <= {w.max_batch}, budget {w.token_budget}; prompts ~"
             f"{w.prompt_mean}, outputs ~{w.output_mean} tokens (geometric); requests "
             + ", ".join(f"{n} at {share:.0%}" for share, n in run["requests"].items())
             + "; measured capacity "
             f"{run['capacity']:.1f} requests/s (a burst)",
             "predictive: one step-time fit to the profile and the burst, the engine's own "
             f"time a step included, nothing refitted (worst {run['fit_error']:.1%} on the "
             "profiled shapes; other processes meanwhile: "
             + _cores(run.get("others_first")) + ")",
             "calibrated: refitted per load on a short run at that load ("
             + ", ".join(str(n) for n in run["calibration_requests"].values())
             + " requests), its overhead "
             + ", ".join(f"{o * 1e3:.2f}" for o in run["overheads"].values())
             + " ms a step added, time scaled by "
             + ", ".join(f"{f:.3f}" for f in run["stalls"].values()),
             f"{'load':>5} {'figure':<11}{'measured':>11}{'predictive':>12}{'sim/real':>9}"
             f"{'calibrated':>12}{'sim/real':>9}"]  # fmt: skip
    for share, (real, sim, real_steps, sim_steps) in run["rows"].items():
        ahead, ahead_steps = run["predicted"][share]
        for name in METRICS:
            unit, scale = ("tok/s", 1) if name == "throughput" else ("ms", 1e3)
            lines.append(f"{share:>5.0%} {name:<11}{real[name] * scale:>8.2f} {unit:<5}"
                         f"{ahead[name] * scale:>8.2f}   {ahead[name] / real[name]:>7.2f}x"
                         f"{sim[name] * scale:>10.2f}   {sim[name] / real[name]:>7.2f}x")
        lines.append(f"{'':>5} steps: real {real_steps}, predictive {ahead_steps}, "
                     f"calibrated {sim_steps}; other processes meanwhile: "
                     + _cores(run.get("others", {}).get(share)))  # fmt: skip
    typical, largest = run["floor"]
    lines.append(f"step jitter alone (a perfect step model, each step off by the profile's "
                 f"{run['jitter']:.1%} sd, 16 draws): worst |sim/real - 1| median "
                 f"{typical:.1%}, at most {largest:.1%}")  # fmt: skip
    for kind in KINDS:
        worst, share, name, ratio = worst_miss(run, kind)
        verdict = "within" if worst <= TOLERANCE else "NOT within"
        lines.append(f"{kind}: worst |sim/real - 1| = {worst:.1%} ({share:.0%} {name}, "
                     f"{ratio:.2f}x), {verdict} the {TOLERANCE:.0%} target"
                     + (f"; {'within' if worst <= largest else 'beyond'} what jitter alone "
                        "reaches" if worst > TOLERANCE else ""))  # fmt: skip
    lines.append("the whole check (profile, burst, real runs, fits, simulations): "
                 f"{run['seconds']:.0f} s")
    return "\n".join(lines)
