"""The simulated engine: the scheduler's steps on a virtual clock (chapters 7 and 8).

``simulate`` serves a trace on one engine (or a pool of identical ones); each step the
``scheduler.Scheduler`` chooses (the same code the real engine runs) is timed by a step-time
model (``steps``) and the clock advances by that much. ``simulate_disaggregated`` runs
prefill and decode on two pools joined by a link that carries each prompt's KV cache, as in
DistServe (Zhong et al., OSDI 2024) and Splitwise (Patel et al., ISCA 2024).
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import accumulate, repeat
from operator import add

import numpy as np

from helpers.counting._validate import positive_int
from helpers.serving.kv import KVMemory, kv_capacity_tokens
from helpers.serving.metrics import Result, TokenTimes
from helpers.serving.scheduler import POLICIES, Scheduler, check_fits, check_policy
from helpers.serving.steps import RooflineSteps, StepModel
from helpers.serving.trace import Request, check_trace

__all__ = ["POLICIES", "LOOKAHEAD", "simulate", "simulate_disaggregated", "scheduler_result",
           "roofline_engine"]

_POSITIVE = (0.0).__lt__  # x > 0, as a function map can call
LOOKAHEAD = 128  # decode steps timed at once at most: arrivals usually cut a stretch sooner
# A step model may also offer ``decode_run(batch, context, steps)``: the seconds of that
# many decode-only steps, the context growing by ``batch`` a step, as an array. The engine
# then runs each stretch without arrivals, finishes or new blocks in one go.


@functools.cache
def roofline_engine(model: str, chip: str, dtype: str = "bf16", tp: int = 1,
                    kv_dtype: str | None = None,
                    link: str = "NVLink 4") -> tuple[RooflineSteps, KVMemory]:  # fmt: skip
    """One engine as chapters 8 and 9 simulate it: the preset ``model`` on ``chip``'s
    datasheet ceilings (``RooflineSteps``), and paged KV memory in what the chip's memory
    leaves beside the weights (``kv_capacity_tokens``). ``tp``: the engine spans T chips
    under Megatron's split (chapter 10), its all-reduces over ``link`` (a name of
    ``sharding.LINKS``); each chip holds its shard's weights and its share of every
    token's KV, so the engine's token slots are one chip's for its shard. ``kv_dtype``: the
    cache stored narrower than ``dtype`` (fp8, int8; default ``dtype``). ValueError if the
    weights leave no room. Cached: presets and chips are fixed, and the step model is never
    changed."""
    from helpers.counting import hardware, models
    from helpers.parallel import sharding

    cfg, hw = models.get(model), hardware.get(chip)
    net = sharding.link(link) if tp != 1 else None
    steps = RooflineSteps(cfg, hw, dtype, tp=tp, link=net, kv_dtype=kv_dtype)
    capacity = kv_capacity_tokens(sharding.shard_config(cfg, tp), hw.memory_bytes,
                                  dtype, kv_dtype)  # fmt: skip
    if capacity <= 0:
        chips = f"one {chip}'s memory" if tp == 1 else f"{tp} {chip}s' memory (T={tp})"
        raise ValueError(f"{model} in {dtype} does not fit in {chips}: pick a bigger chip, "
                         "a narrower dtype or more chips per engine (tp)")  # fmt: skip
    return steps, KVMemory(capacity)


def scheduler_result(sch: Scheduler, ends: Sequence[float], emitted: Sequence[int]) -> Result:
    """A ``Result`` from a scheduler that has served its trace: ``ends[s]`` the time step s
    ended and ``emitted[s]`` the tokens it emitted."""
    trace, blocks = sch.trace, sch.blocks
    ends = np.asarray(ends, dtype=float)
    capacity = blocks.memory.capacity_tokens  # a paged remainder under a block is waste
    cached = blocks.cached_prefix_blocks()  # prefixes kept for reuse
    busy = sch.busy
    return Result(
        arrival=np.array([r.arrival for r in trace]),
        output=np.array([r.output for r in trace]),
        first_token=np.array(sch.first_token),
        finish=np.array(sch.finish),
        steps=sch.s,
        busy_seconds=busy,
        kv_token_share=sch.token_time / (busy * capacity) if busy else 0.0,
        kv_allocated_share=sch.alloc_time / (busy * capacity) if busy else 0.0,
        preemptions=sch.preemptions,
        prefix_hit_tokens=sch.prefix_hits,
        max_running=sch.max_running,
        # Both 0 once every request is done (a check that no memory leaks).
        extra={"held_at_end": blocks.total - blocks.free - cached,
               "stored_at_end": sch.stored - cached * blocks.block_size},  # fmt: skip
        token_times=TokenTimes([(ends, sch.emits)], [(0, i) for i in range(len(trace))]),
        step_ends=ends,
        step_tokens=np.asarray(emitted, dtype=np.int64),
    )


class _Engine:
    """One simulated engine: the scheduler's steps, timed by ``steps``, on a virtual clock.
    ``ready[i]``: when request i reaches this engine (its arrival, or its cache's)."""

    def __init__(self, trace, ready, steps, memory, policy, max_batch, token_budget, role,
                 handoff=None):  # fmt: skip
        self.sch = Scheduler(trace, memory, policy, max_batch, token_budget, role, handoff)
        self.ready, self.steps = ready, steps

    def run(self) -> Result:
        sch, ready, model = self.sch, self.ready, self.steps
        n = len(sch.trace)
        order = sorted(range(n), key=lambda i: ready[i])
        arrivals = [ready[i] for i in order]  # ready times in the order requests come
        run_many = getattr(model, "decode_run", None)
        paged = sch.blocks.paged
        ends: list[float] = []  # when each step ended
        emitted: list[int] = []  # and how many tokens it emitted
        t, ptr = 0.0, 0
        while sch.done < n:
            while ptr < n and arrivals[ptr] <= t:
                sch.arrive(order[ptr])
                ptr += 1
            scheduled = sch.admit(t)
            if scheduled is None:  # idle: jump to the next arrival or freed cache
                upcoming = min(arrivals[ptr] if ptr < n else math.inf, sch.next_release())
                if upcoming == math.inf:
                    raise RuntimeError("the engine is idle with requests left: a scheduler bug")
                t = max(t, upcoming)
                continue
            bulk = sch.stretch(LOOKAHEAD) if not scheduled.chunks and run_many else 0
            if bulk > 1:  # a single step is cheaper taken the plain way below
                # Plain floats from here on: a stretch keeps about ten steps on chapter 9's
                # loads, where numpy's cost per call outweighs its speed. ``stop`` holds the
                # floats ``t + np.cumsum(seconds)`` would (both add in turn), and the ends
                # ascend, so bisect finds what ``np.searchsorted`` did.
                array = run_many(sch.batch, sch.context, bulk)
                seconds = array.tolist()
                if not all(map(_POSITIVE, seconds)):  # NaN is not positive either
                    raise ValueError(f"the step model returned {array.min()!r} s")
                stop = list(map(add, repeat(t), accumulate(seconds)))  # t + each running total
                running = sch.batch + len(sch.prefilling)
                if ptr < n and not sch.static and not sch.waiting and running < sch.max_batch:
                    # an arrival joins the first step that starts after it: stop before that
                    bulk = min(bulk, 1 + bisect_left(stop, arrivals[ptr]))
                taken = sch.blocks_for(bulk) if paged else None
                if paged:
                    bulk = min(bulk, bisect_right(taken, sch.blocks.free))
                if bulk > 0:
                    t = stop[bulk - 1]
                    ends.extend(stop[:bulk])
                    emitted.extend([sch.batch] * bulk)
                    sch.run_decodes(seconds[:bulk], taken, t)
                    continue
            sch.grow()
            step = sch.step(scheduled)
            seconds = model(step)
            if not seconds > 0:
                raise ValueError(f"the step model returned {seconds!r} s for {step}")
            t += seconds
            ends.append(t)
            emitted.append(step.heads)
            sch.complete(scheduled, t, seconds)
        sch.drain()
        return scheduler_result(sch, ends, emitted)


def _round_robin(order: Sequence[int], engines: int) -> list[list[int]]:
    """Request indices per engine, dealt in ``order`` one at a time (a router that sees no
    load, which is what DistServe's and Splitwise's simplest baselines do)."""
    return [list(order[k::engines]) for k in range(engines)]


def _run_pool(trace, ready, groups, steps, memory, policy, max_batch, budget, role,
              handoffs=None):  # fmt: skip
    """Run one engine per group of request indices; per-request times in trace order, and
    where each request's token times are (engine, its index there; -1 if none)."""
    first, finish = np.full(len(trace), math.nan), np.full(len(trace), math.nan)
    where = [(-1, 0)] * len(trace)
    results = []
    for k, group in enumerate(groups):
        if not group:
            continue

        def local_handoff(local: int, t: float, g: list[int] = group, k: int = k) -> float:
            return handoffs[k](g[local], t)  # the engine knows its requests by position

        handoff = local_handoff if handoffs is not None else None
        engine = _Engine([trace[i] for i in group], [ready[i] for i in group], steps, memory,
                         policy, max_batch, budget, role, handoff)  # fmt: skip
        result = engine.run()
        first[group], finish[group] = result.first_token, result.finish
        for local, i in enumerate(group):
            where[i] = (len(results), local)
        results.append(result)
    return first, finish, where, results


def _parts(engines: Sequence[Result]) -> list:
    return [part for e in engines for part in e.token_times._parts]


def _pooled(trace, first, finish, engines, extra, token_times) -> Result:
    """One Result for requests served by several engines: KV shares are their means."""
    return Result(
        arrival=np.array([r.arrival for r in trace]),
        output=np.array([r.output for r in trace]),
        first_token=first,
        finish=finish,
        steps=sum(e.steps for e in engines),
        busy_seconds=sum(e.busy_seconds for e in engines),
        kv_token_share=float(np.mean([e.kv_token_share for e in engines])) if engines else 0.0,
        kv_allocated_share=float(np.mean([e.kv_allocated_share for e in engines]))
        if engines else 0.0,  # fmt: skip
        preemptions=sum(e.preemptions for e in engines),
        prefix_hit_tokens=sum(e.prefix_hit_tokens for e in engines),
        max_running=max((e.max_running for e in engines), default=0),
        extra=extra,
        token_times=token_times,
        step_ends=np.concatenate([np.empty(0)] + [e.step_ends for e in engines]),
        step_tokens=np.concatenate([np.empty(0, np.int64)] + [e.step_tokens for e in engines]),
    )


def simulate(
    trace: Sequence[Request],
    steps: StepModel,
    memory: KVMemory,
    policy: str = "continuous",
    max_batch: int = 256,
    token_budget: int | None = None,
    engines: int = 1,
) -> Result:
    """Serve ``trace`` on one engine (chapter 7: static vs continuous; chapter 8: chunked).

    ``policy``: ``"static"`` (request-level batches of up to ``max_batch``, each run to its
    end; a finished sequence leaves the compute but its place stays empty, which flatters
    static batching), ``"continuous"`` (Orca's iteration-level scheduling; an optional
    ``token_budget`` caps the prompt tokens admitted per iteration, whole prompts only),
    ``"chunked"`` (Sarathi-Serve: decodes first, then prompt chunks up to ``token_budget``
    tokens per iteration). ``steps``: a step-time model (``RooflineSteps``, ``TableSteps``,
    ``LinearSteps`` or any callable on a ``Step``). Tokens of an iteration come out at its
    end. ``engines`` > 1: that many identical engines, requests dealt round-robin in arrival
    order (the colocated baseline to set against ``simulate_disaggregated`` on as many
    chips). Bad input raises ValueError naming it; a request that cannot fit in ``memory``
    even alone is bad input.
    """
    check_trace(trace)
    check_policy(policy, max_batch, token_budget)
    positive_int(engines, "engines")
    check_fits(trace, memory)
    ready = [r.arrival for r in trace]
    if engines == 1:
        return _Engine(trace, ready, steps, memory, policy, max_batch, token_budget,
                       "both").run()  # fmt: skip
    groups = _round_robin(range(len(trace)), engines)
    first, finish, where, results = _run_pool(trace, ready, groups, steps, memory, policy,
                                              max_batch, token_budget, "both")  # fmt: skip
    return _pooled(trace, first, finish, results, {"engines": results},
                   TokenTimes(_parts(results), where))  # fmt: skip


def simulate_disaggregated(
    trace: Sequence[Request],
    prefill_steps: StepModel,
    decode_steps: StepModel,
    prefill_memory: KVMemory,
    decode_memory: KVMemory,
    transfer_seconds: Callable[[int], float],
    prefill_budget: int | None = None,
    max_batch: int = 256,
    prefill_engines: int = 1,
    decode_engines: int = 1,
) -> Result:
    """Prefill and decode on two pools of engines, the KV cache moved between them
    (chapter 8), as in DistServe (Zhong et al., OSDI 2024) and Splitwise (Patel et al.,
    ISCA 2024).

    A prefill engine batches whole prompts (up to ``prefill_budget`` tokens an iteration)
    and emits each first token; the prompt's KV then crosses that engine's link, one
    transfer at a time, taking ``transfer_seconds(prompt tokens)`` (e.g. a lambda over
    ``kv_transfer_seconds``); the prefill engine frees it when the transfer ends. A decode
    engine runs continuous batching over the arrived caches. Requests are dealt round-robin:
    to the ``prefill_engines`` in arrival order, to the ``decode_engines`` in order of
    arrival of their caches. Decode steps never wait for a prefill, which is what
    disaggregation buys; the price is the transfer and the split of the chips.
    ``extra``: each request's ``transfer_seconds``, and the per-engine Results
    (``prefill``, ``decode``: lists). The KV shares are the decode engines' means.
    """
    check_trace(trace)
    check_policy("continuous", max_batch, prefill_budget)
    positive_int(prefill_engines, "prefill_engines")
    positive_int(decode_engines, "decode_engines")
    check_fits(trace, prefill_memory)
    check_fits(trace, decode_memory)
    if decode_memory.prefix_caching:
        raise ValueError("prefix caching is a prefill-side feature here; turn it off for decode")
    arrived = [math.nan] * len(trace)
    moving = np.zeros(len(trace))

    def link(k: int) -> Callable[[int, float], float]:
        free = [0.0]  # when this prefill engine's link is next idle

        def handoff(i: int, t: float) -> float:
            seconds = transfer_seconds(trace[i].prompt)
            if not seconds >= 0:
                raise ValueError(f"transfer_seconds returned {seconds!r} for request {i}")
            free[0] = max(free[0], t) + seconds
            arrived[i], moving[i] = free[0], seconds
            return free[0]

        return handoff

    ready = [r.arrival for r in trace]
    groups = _round_robin(range(len(trace)), prefill_engines)
    first, finish, _, fronts = _run_pool(trace, ready, groups, prefill_steps, prefill_memory,
                                      "continuous", max_batch, prefill_budget, "prefill",
                                      [link(k) for k in range(prefill_engines)])  # fmt: skip
    decoding = sorted((i for i, r in enumerate(trace) if r.output > 1), key=lambda i: arrived[i])
    groups = _round_robin(decoding, decode_engines)
    _, done, where, backs = _run_pool(trace, arrived, groups, decode_steps, decode_memory,
                                      "continuous", max_batch, None, "decode")  # fmt: skip
    finish[decoding] = done[decoding]
    # The first token came from the prefill engine, the rest from a decode engine.
    tokens = TokenTimes(_parts(backs), where, [np.array([f]) for f in first])
    result = _pooled(trace, first, finish, backs, {}, tokens)
    return replace(
        result,
        steps=result.steps + sum(e.steps for e in fronts),
        busy_seconds=result.busy_seconds + sum(e.busy_seconds for e in fronts),
        preemptions=result.preemptions + sum(e.preemptions for e in fronts),
        prefix_hit_tokens=sum(e.prefix_hit_tokens for e in fronts),
        extra={"transfer_seconds": moving, "prefill": fronts, "decode": backs},
        step_ends=np.concatenate([result.step_ends] + [e.step_ends for e in fronts]),
        step_tokens=np.concatenate([result.step_tokens] + [e.step_tokens for e in fronts]),
    )
