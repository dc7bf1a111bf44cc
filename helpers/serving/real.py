"""The real engine: the scheduler's steps run by chapter 6's decoder on a wall clock.

The same ``scheduler.Scheduler`` that drives the simulated engine chooses each step; here
the step is executed: one ``Decoder.forward_paged`` call runs its prompt chunks and decodes
as one ragged batch, every sequence's KV cache in the blocks the scheduler's block manager
gave it (``BlockManager.table``), and the greedy next tokens are fed back. Requests arrive
in wall time from the trace (the engine sleeps while it is idle), prompts are random token
ids, and each request stops at its trace's output length (as a benchmark's ``ignore_eos``).
A preempted sequence frees its blocks and later recomputes its prompt and the tokens it
had generated, exactly as the simulator assumes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from helpers.serving.engine import scheduler_result
from helpers.serving.kv import KVMemory
from helpers.serving.metrics import Result
from helpers.serving.scheduler import Scheduler, check_fits
from helpers.serving.trace import Request, check_trace

__all__ = ["serve_real"]


@torch.no_grad()
def serve_real(
    trace: Sequence[Request],
    model,  # helpers.decoder.model.Decoder (imported lazily: serving does not need torch models)
    memory: KVMemory,
    policy: str = "continuous",
    max_batch: int = 256,
    token_budget: int | None = None,
    seed: int = 0,
) -> Result:
    """Serve ``trace`` on ``model`` for real (chapter 8): arrivals in wall time, each step
    chosen by the scheduler and run by ``model.forward_paged`` on a paged KV cache of
    ``memory.blocks`` blocks of ``memory.block_size`` tokens. Times in the ``Result`` are
    seconds since the first arrival, measured with ``time.perf_counter`` after the device
    has finished the step; ``extra["step_seconds"]`` holds each step's forward time and
    ``extra["overhead_seconds"]`` the engine's own time around it (scheduling, building the
    step's inputs, reading its tokens),
    ``extra["steps"]`` the ``Step`` each forward ran (what a step-time model is fitted to),
    ``extra["prompts"]`` and ``extra["tokens"]`` each request's prompt and generated ids.
    ValueError for bad input, a reservation allocator or a prefix cache (the real engine
    pages, without sharing)."""
    from helpers.measuring import timing

    check_trace(trace)
    check_fits(trace, memory)
    if memory.allocator != "paged" or memory.prefix_caching:
        raise ValueError("the real engine needs paged KV memory without prefix caching")
    sch = Scheduler(trace, memory, policy, max_batch, token_budget)
    cache = model.new_paged_cache(memory.blocks, memory.block_size)
    device = str(cache.device)
    generator = torch.Generator().manual_seed(seed)
    vocab = model.cfg.vocab
    prompts = [torch.randint(0, vocab, (r.prompt,), generator=generator) for r in trace]
    generated: list[list[int]] = [[] for _ in trace]
    n, order = len(trace), sorted(range(len(trace)), key=lambda i: trace[i].arrival)
    ends: list[float] = []
    emitted: list[int] = []
    forward_seconds: list[float] = []
    shapes: list = []  # the Step of each forward
    ptr = 0
    begin = time.perf_counter()
    overheads: list[float] = []  # per step: the engine's own time around the forward
    while sch.done < n:
        iteration = time.perf_counter()  # the engine's own time counts from here: arrivals too
        now = iteration - begin
        while ptr < n and trace[order[ptr]].arrival <= now:
            sch.arrive(order[ptr])
            ptr += 1
        scheduled = sch.admit(now)
        if scheduled is None:  # idle: wait for the next arrival
            if ptr == n:
                raise RuntimeError("the engine is idle with requests left: a scheduler bug")
            time.sleep(max(0.0, trace[order[ptr]].arrival - now))
            continue
        sch.grow()
        step = sch.step(scheduled)
        entries, emitters = [], []
        for i, take, before in scheduled.chunks:
            ids = prompts[i] if not generated[i] else torch.cat(
                (prompts[i], torch.tensor(generated[i], dtype=torch.long)))
            emits = before + take == sch.target[i]
            entries.append((ids[before:before + take], before,
                            sch.blocks.table(i, before + take), emits))  # fmt: skip
            if emits:
                emitters.append(i)
        for i in sch.decoding:
            cached = sch.cached(i)
            entries.append((torch.tensor(generated[i][-1:], dtype=torch.long), cached,
                            sch.blocks.table(i, cached + 1), True))  # fmt: skip
            emitters.append(i)
        started = time.perf_counter()
        logits = model.forward_paged(entries, cache)
        tokens = logits.argmax(-1).tolist()
        timing.synchronize(device)
        done = time.perf_counter()
        for i, token in zip(emitters, tokens, strict=True):
            generated[i].append(token)
        t = done - begin
        forward_seconds.append(done - started)
        shapes.append(step)
        ends.append(t)
        emitted.append(step.heads)
        sch.complete(scheduled, t, done - started)
        overheads.append(time.perf_counter() - iteration - (done - started))
    result = scheduler_result(sch, ends, emitted)
    result.extra.update(step_seconds=np.array(forward_seconds), steps=shapes,
                        overhead_seconds=np.array(overheads), tokens=generated,
                        prompts=prompts)  # fmt: skip
    return result
