"""The simulated engine: the scheduler's steps on a virtual clock (chapters 7 and 8)."""

from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from helpers._validate import one_of, positive_int
from helpers.serving.kv import (
    KVMemory,
)
from helpers.serving.metrics import Result
from helpers.serving.steps import Step, StepModel
from helpers.serving.trace import Request, check_trace

POLICIES = ("static", "continuous", "chunked")
LOOKAHEAD = 128  # decode steps timed at once at most: arrivals usually cut a stretch sooner

# ------------------------------------------------------------------------------ the engine


class _Engine:
    """One engine's event loop. ``role``: "both" (prefill and decode here), "prefill" (hand
    each request over after its first token), "decode" (requests arrive prefilled)."""

    def __init__(self, trace, ready, steps, memory, policy, max_batch, token_budget, role,
                 handoff=None):  # fmt: skip
        self.trace, self.ready, self.steps, self.memory = trace, ready, steps, memory
        self.policy, self.max_batch, self.budget = policy, max_batch, token_budget
        self.role, self.handoff = role, handoff
        n = len(trace)
        self.first_token = [math.nan] * n
        self.finish = [math.nan] * n

    def _need(self, i: int, tokens: int, reuse: int) -> int:
        """Memory units (blocks, or slots) request i must take to be admitted."""
        m = self.memory
        if m.allocator == "reserve":
            return m.reserved(self.trace[i])
        return -(-tokens // m.block_size) - reuse // m.block_size

    def run(self) -> Result:
        trace, m, role = self.trace, self.memory, self.role
        n, paged, b = len(trace), m.allocator == "paged", m.block_size
        chunked, static = self.policy == "chunked", self.policy == "static"
        budget = self.budget if self.budget is not None else math.inf
        order = sorted(range(n), key=lambda i: self.ready[i])
        free = m.blocks if paged else m.capacity_tokens
        capacity = m.capacity_tokens  # a paged remainder smaller than a block counts as waste
        gen = [0] * n  # tokens generated so far
        target = [0] * n  # tokens to prefill: the prompt, + gen after a preemption
        done_tokens = [0] * n  # tokens of ``target`` in the cache
        held = [0] * n  # memory units held (blocks or slots), own only
        shared = [0] * n  # tokens counted in a shared prefix entry, not in ``held``
        start = [0] * n  # step at which it began decoding
        base = [0] * n  # cached tokens when it began decoding
        prefix: dict[int, list[int]] = {}  # id -> [blocks, users, last step used]
        uses_prefix = [False] * n
        ring = [0] * b  # decodes that need a new block at steps s ≡ phase (mod b)
        finishes: defaultdict[int, list[int]] = defaultdict(list)
        finish_steps: list[int] = []  # a heap of the keys of ``finishes`` (some stale)
        decoding: dict[int, None] = {}  # insertion order = admission order
        prefilling: deque[int] = deque()
        waiting: deque[int] = deque()
        releases: list[tuple[float, int]] = []  # prefill role: (time, i) memory freed then
        t, s, ptr, done = 0.0, 0, 0, 0
        batch, context, stored = 0, 0, 0
        busy = token_time = alloc_time = 0.0
        preemptions = prefix_hits = max_running = 0

        def release(i: int, tokens: int) -> None:
            """Free what request i holds; under paging that is its ``tokens``' own blocks,
            which it took at admission and then one at a time as it decoded."""
            nonlocal free
            free += -(-tokens // b) - shared[i] // b if paged else held[i]
            held[i] = 0
            if uses_prefix[i]:
                uses_prefix[i] = False
                prefix[trace[i].prefix_id][1] -= 1

        def evict(need: int, keep: int | None = None) -> None:
            """Free unused cached prefixes, least recently used first, but not ``keep``."""
            nonlocal free, stored
            idle = sorted((entry[2], pid) for pid, entry in prefix.items()
                          if entry[1] == 0 and pid != keep)  # fmt: skip
            for _, pid in idle:
                if free >= need:
                    return
                blocks = prefix.pop(pid)[0]
                free += blocks
                stored -= blocks * b

        def join_decode(i: int, step: int) -> None:
            nonlocal batch, context
            cached = trace[i].prompt + gen[i] - 1
            start[i], base[i] = step, cached
            batch += 1
            context += cached
            decoding[i] = None
            if paged:
                ring[(step - cached) % b] += 1
            last = step + trace[i].output - gen[i] - 1
            finishes[last].append(i)
            heapq.heappush(finish_steps, last)

        def leave_decode(i: int, cached: int) -> None:
            nonlocal batch, context, stored
            batch -= 1
            context -= cached
            del decoding[i]
            if paged:
                ring[(start[i] - base[i]) % b] -= 1
            stored -= cached - shared[i]

        def end_step(step: int) -> None:
            """Retire the decodes whose last token came out of ``step``, at time t."""
            nonlocal done
            for i in finishes.pop(step, ()):
                cached = base[i] + step - start[i] + 1
                leave_decode(i, cached)
                release(i, cached)
                self.finish[i] = t
                done += 1

        while done < n:
            while ptr < n and self.ready[order[ptr]] <= t:
                waiting.append(order[ptr])
                ptr += 1
            while releases and releases[0][0] <= t:
                _, i = heapq.heappop(releases)
                stored -= trace[i].prompt - shared[i]
                release(i, trace[i].prompt)
            # Admission, first come first served: the head of the queue waits for memory.
            chunks: list[tuple[int, int, int]] = []  # (request, new tokens, cached before)
            room = budget - batch if chunked else budget
            for i in prefilling:  # chunked prefill: finish the prompts already started
                if room <= 0:
                    break
                take = min(target[i] - done_tokens[i], room)
                chunks.append((i, take, done_tokens[i]))
                room -= take
            running = batch + len(prefilling)
            may_admit = not static or running == 0
            while waiting and may_admit and running < self.max_batch and room > 0:
                i = waiting[0]
                r = trace[i]
                tokens = r.prompt + gen[i] if role != "decode" else r.prompt
                entry = prefix.get(r.prefix_id) if m.prefix_caching and r.prefix_tokens else None
                reuse = min(entry[0] * b, r.prefix_tokens // b * b, tokens - 1) // b * b \
                    if entry else 0  # fmt: skip
                if role != "decode" and not chunked and chunks and tokens - reuse > room:
                    break  # a whole prompt over the budget waits, unless it runs alone
                need = self._need(i, tokens, reuse)
                if need > free and paged:
                    evict(need, keep=r.prefix_id if entry else None)  # the one it reuses
                if need > free:
                    break
                waiting.popleft()
                free -= need
                held[i] = need
                if entry:
                    entry[1] += 1
                    entry[2] = s
                    uses_prefix[i] = True
                    shared[i] = reuse
                    prefix_hits += reuse
                running += 1
                if role == "decode":
                    gen[i] = 1
                    stored += tokens
                    join_decode(i, s)
                    continue
                target[i], done_tokens[i] = tokens, reuse
                take = tokens - reuse if not chunked else min(tokens - reuse, room)
                chunks.append((i, take, reuse))
                prefilling.append(i)
                room -= take
            max_running = max(max_running, running)
            if not chunks and batch == 0:
                upcoming = [self.ready[order[ptr]]] if ptr < n else []
                upcoming += [releases[0][0]] if releases else []
                if not upcoming:
                    raise RuntimeError("the engine is idle with requests left: a scheduler bug")
                t = max(t, min(upcoming))
                continue
            run_many, bulk = getattr(self.steps, "decode_run", None), 0
            if not chunks and run_many:  # decode only: run up to the next event in one go
                while not finishes.get(finish_steps[0]):
                    heapq.heappop(finish_steps)
                # Through the step where someone finishes, or a stretch of LOOKAHEAD steps
                # (stopping early is always safe: the next iteration carries on).
                bulk = min(finish_steps[0] - s + 1, LOOKAHEAD)
            if bulk > 1:  # a single step is cheaper taken the plain way below
                seconds = run_many(batch, context, bulk)
                if not (seconds > 0).all():
                    raise ValueError(f"the step model returned {seconds.min()!r} s")
                ends = t + np.cumsum(seconds)
                if ptr < n and not static and not waiting and running < self.max_batch:
                    # an arrival joins the first step that starts after it: stop before that
                    arrival = self.ready[order[ptr]]
                    bulk = min(bulk, 1 + int(np.searchsorted(ends, arrival, "left")))
                if paged:
                    taken = np.cumsum(np.array(ring)[(s + np.arange(bulk)) % b])
                    bulk = min(bulk, int(np.searchsorted(taken, free, "right")))
                if bulk > 0:
                    seconds, k = seconds[:bulk], np.arange(1, bulk + 1)
                    allocated = (m.blocks - free) * b if paged else m.capacity_tokens - free
                    grown = taken[:bulk] * b if paged else 0
                    busy += float(seconds.sum())
                    token_time += float((seconds * (stored + k * batch)).sum())
                    alloc_time += float((seconds * (allocated + grown)).sum())
                    t = float(ends[bulk - 1])
                    if paged:
                        free -= int(taken[bulk - 1])
                    stored += bulk * batch
                    context += bulk * batch
                    s += bulk - 1
                    end_step(s)  # nothing to do unless the stretch reached a finish
                    s += 1
                    continue
            if paged:  # each decode writes one KV entry; some need a fresh block for it
                demand = ring[s % b]
                if demand > free:
                    evict(demand)
                while demand > free:  # preempt the latest admitted; it recomputes later
                    victim = next(reversed(decoding))
                    cached = base[victim] + s - start[victim]
                    if cached % b == 0:
                        demand -= 1
                    leave_decode(victim, cached)
                    finishes[start[victim] + trace[victim].output - gen[victim] - 1].remove(victim)
                    gen[victim] += s - start[victim]
                    release(victim, cached)
                    shared[victim] = 0
                    waiting.appendleft(victim)
                    preemptions += 1
                free -= demand
            completing = [i for i, take, before in chunks if before + take == target[i]]
            step = Step(tuple((take, before) for _, take, before in chunks), batch, context,
                        batch + len(completing))  # fmt: skip
            seconds = self.steps(step)
            if not seconds > 0:
                raise ValueError(f"the step model returned {seconds!r} s for {step}")
            t += seconds
            stored += batch + sum(take for _, take, _ in chunks)
            # Time-weighted KV use, counted with this step's tokens written.
            busy += seconds
            token_time += seconds * stored
            allocated = (m.blocks - free) * b if paged else m.capacity_tokens - free
            alloc_time += seconds * allocated
            context += batch
            for i, take, _ in chunks:
                done_tokens[i] += take
            end_step(s)
            for i in completing:
                prefilling.remove(i)
                r = trace[i]
                gen[i] += 1
                if math.isnan(self.first_token[i]):
                    self.first_token[i] = t
                if m.prefix_caching and r.prefix_tokens >= b and r.prefix_id not in prefix:
                    blocks = r.prefix_tokens // b  # its full blocks become the shared entry
                    prefix[r.prefix_id] = [blocks, 1, s]
                    held[i] -= blocks
                    shared[i] = blocks * b
                    uses_prefix[i] = True
                if gen[i] == r.output:
                    stored -= target[i] - shared[i]
                    release(i, target[i])
                    self.finish[i] = t
                    done += 1
                elif role == "prefill":
                    heapq.heappush(releases, (self.handoff(i, t), i))
                    self.finish[i] = t
                    done += 1
                else:
                    join_decode(i, s + 1)
            s += 1
        for _, i in releases:  # caches still on the link when the last request left
            stored -= trace[i].prompt - shared[i]
            release(i, trace[i].prompt)
        token_share = token_time / (busy * capacity) if busy else 0.0
        cached = sum(entry[0] for entry in prefix.values())  # prefixes kept for reuse
        total = m.blocks if paged else m.capacity_tokens
        return Result(
            arrival=np.array([r.arrival for r in trace]),
            output=np.array([r.output for r in trace]),
            first_token=np.array(self.first_token),
            finish=np.array(self.finish),
            steps=s,
            busy_seconds=busy,
            kv_token_share=token_share,
            kv_allocated_share=alloc_time / (busy * capacity) if busy else 0.0,
            preemptions=preemptions,
            prefix_hit_tokens=prefix_hits,
            max_running=max_running,
            # Both 0 once every request is done (a check that no memory leaks).
            extra={"held_at_end": total - free - cached, "stored_at_end": stored - cached * b},
        )


def _check_fits(trace: Sequence[Request], memory: KVMemory, decode_only: bool = False) -> None:
    for index, r in enumerate(trace):
        tokens = r.prompt + r.output - 1  # the last token is never fed back
        if memory.allocator == "reserve":
            need, what = memory.reserved(r), f"a {memory.reservation!r} reservation of"
            if memory.max_seq_len and r.prompt + r.output > memory.max_seq_len:
                raise ValueError(
                    f"request {index} is {r.prompt + r.output} tokens long, over "
                    f"max_seq_len={memory.max_seq_len}"
                )
        else:
            tokens = r.prompt if decode_only and r.output == 1 else tokens
            need = -(-tokens // memory.block_size) * memory.block_size
            what = "blocks for"
        if need > memory.capacity_tokens:
            raise ValueError(
                f"request {index} cannot fit in KV memory: it needs {what} {need} tokens, "
                f"the capacity is {memory.capacity_tokens}"
            )


def _check_policy(policy: str, max_batch: int, token_budget: int | None) -> None:
    one_of(policy, POLICIES, "policy")
    positive_int(max_batch, "max_batch")
    if token_budget is not None:
        positive_int(token_budget, "token_budget")
    if policy == "chunked" and token_budget is None:
        raise ValueError("policy 'chunked' needs a token_budget")
    if policy == "chunked" and token_budget <= max_batch:
        raise ValueError(
            f"token_budget={token_budget} must exceed max_batch={max_batch}: the decodes "
            "alone could fill it and prompts would never advance"
        )


def _round_robin(order: Sequence[int], engines: int) -> list[list[int]]:
    """Request indices per engine, dealt in ``order`` one at a time (a router that sees no
    load, which is what DistServe's and Splitwise's simplest baselines do)."""
    return [list(order[k::engines]) for k in range(engines)]


def _run_pool(trace, ready, groups, steps, memory, policy, max_batch, budget, role,
              handoffs=None):  # fmt: skip
    """Run one engine per group of request indices; per-request times in trace order."""
    first, finish = np.full(len(trace), math.nan), np.full(len(trace), math.nan)
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
        results.append(result)
    return first, finish, results


def _pooled(trace, first, finish, engines, extra) -> Result:
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
    _check_policy(policy, max_batch, token_budget)
    positive_int(engines, "engines")
    _check_fits(trace, memory)
    ready = [r.arrival for r in trace]
    if engines == 1:
        return _Engine(trace, ready, steps, memory, policy, max_batch, token_budget,
                       "both").run()  # fmt: skip
    groups = _round_robin(range(len(trace)), engines)
    first, finish, results = _run_pool(trace, ready, groups, steps, memory, policy, max_batch,
                                       token_budget, "both")  # fmt: skip
    return _pooled(trace, first, finish, results, {"engines": results})


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
    _check_policy("continuous", max_batch, prefill_budget)
    positive_int(prefill_engines, "prefill_engines")
    positive_int(decode_engines, "decode_engines")
    _check_fits(trace, prefill_memory)
    _check_fits(trace, decode_memory)
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
    first, finish, fronts = _run_pool(trace, ready, groups, prefill_steps, prefill_memory,
                                      "continuous", max_batch, prefill_budget, "prefill",
                                      [link(k) for k in range(prefill_engines)])  # fmt: skip
    decoding = sorted((i for i, r in enumerate(trace) if r.output > 1), key=lambda i: arrived[i])
    groups = _round_robin(decoding, decode_engines)
    _, done, backs = _run_pool(trace, arrived, groups, decode_steps, decode_memory,
                               "continuous", max_batch, None, "decode")  # fmt: skip
    finish[decoding] = done[decoding]
    result = _pooled(trace, first, finish, backs, {})
    return replace(
        result,
        steps=result.steps + sum(e.steps for e in fronts),
        busy_seconds=result.busy_seconds + sum(e.busy_seconds for e in fronts),
        preemptions=result.preemptions + sum(e.preemptions for e in fronts),
        prefix_hit_tokens=sum(e.prefix_hit_tokens for e in fronts),
        extra={"transfer_seconds": moving, "prefill": fronts, "decode": backs},
    )
