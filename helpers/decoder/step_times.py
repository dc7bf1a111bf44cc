"""Timing the decoder's ragged steps on the reader's device (chapter 8's fitted step model).

``profile_step_times`` times ``Decoder.forward_paged`` on step shapes (decodes at a context,
beside a prompt chunk), the measurements a step-time model is fitted to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from helpers.counting.memory import kv_blocks
from helpers.decoder.kv_cache import PagedKVCache
from helpers.decoder.model import Decoder
from helpers.decoder.paged_step import PagedEntry
from helpers.measuring import machine, timing

__all__ = ["StepShape", "StepTiming", "profile_step_times"]


class StepShape(NamedTuple):
    """A ragged step to time (``profile_step_times``): ``decode`` sequences with ``context``
    tokens cached each decode one token, beside one prompt chunk of ``prefill`` new tokens
    after ``prefill_context`` cached ones (``prefill=0``: a decode-only step). The chunk
    emits a token (its LM-head row runs) when ``prefill_emits``: a prompt's last chunk."""

    prefill: int = 0
    decode: int = 0
    context: int = 0
    prefill_context: int = 0
    prefill_emits: bool = True

    @property
    def tokens(self) -> int:
        """Tokens the linear layers see: the chunk's plus one per decode."""
        return self.prefill + self.decode

    @property
    def heads(self) -> int:
        """Rows the LM head computes: one per sequence that emits a token."""
        return self.decode + int(self.prefill > 0 and self.prefill_emits)


@dataclass(frozen=True)
class StepTiming:
    """One profiled step shape and its seconds per step (median, IQR, min, max, n)."""

    shape: StepShape
    timing: timing.Timing


def _step_shape(shape: object) -> StepShape:
    try:
        shape = StepShape(*shape)
    except TypeError:
        raise ValueError(f"a step shape is (prefill, decode, context[, prefill_context"
                         f"[, prefill_emits]]), got {shape!r}") from None  # fmt: skip
    for name in ("prefill", "decode", "context", "prefill_context"):
        value = getattr(shape, name)
        if type(value) is not int or value < 0:
            raise ValueError(f"step shape {shape}: {name} must be an int ≥ 0, got {value!r}")
    if not shape.tokens:
        raise ValueError(f"step shape {shape} has no tokens: give a prefill chunk or decodes")
    return shape


def _step_entries(
    shape: StepShape, tables: Sequence[torch.Tensor], vocab: int, generator: torch.Generator
) -> list[PagedEntry]:
    """A step of ``shape`` on fresh random token ids: ``tables[0]`` the chunk's blocks
    (empty without a chunk), then one table per decoding sequence."""

    def ids(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (n,), generator=generator)

    entries = [PagedEntry(ids(1), shape.context, table) for table in tables[1:]]
    if shape.prefill:
        entries.append(PagedEntry(ids(shape.prefill), shape.prefill_context, tables[0],
                                  shape.prefill_emits))  # fmt: skip
    return entries


@torch.no_grad()
def profile_step_times(
    model: Decoder,
    cache: PagedKVCache,
    shapes: Sequence[StepShape | tuple],
    repeats: int = 5,
    warmup: int = 1,
    *,
    seed: int = 0,
    cold: bool = False,
) -> list[StepTiming]:
    """Seconds of ``model.forward_paged`` for each step shape, measured on the model's device:
    the table a step-time model is fitted to (Vidur profiles a model's operators the same way
    before it simulates a serving system).

    For each shape: blocks for the chunk and every decoding sequence are drawn at random from
    ``cache`` (scattered, as a block manager's tables are once requests have come and gone)
    and filled with random keys and values (never zeros, which some kernels run faster on);
    ``warmup`` untimed steps run, then ``repeats`` timed ones, each on fresh random token
    ids, each timed alone with the device synchronized before and after
    (``timing.call_seconds``), so a step's time holds all of its work and nothing else. The
    result is each shape's median with its spread (``timing.Timing``), in the order given.

    Steps run back to back, as a serving engine runs them: each finds in the caches what the
    step before left there (the same weights, the same sequences' blocks), which is what the
    engine's steps find. ``cold=True`` flushes the last-level cache before every timed step
    instead (``timing.flush_buffer``), for the time of a step whose weights and cache must all
    come from memory.
    The decodes of one shape share one context, so none is padded; a served batch with mixed
    contexts gathers at most 1/3 more than its total context (``paged_step.DECODE_GROUP_FILL``).
    ``cache`` is scratch: the blocks drawn are overwritten. It must hold the largest shape's
    blocks: ⌈(prefill_context + prefill) / block_size⌉ + decode · ⌈(context + 1) / block_size⌉.
    """
    for value, name, low in ((repeats, "repeats", 1), (warmup, "warmup", 0)):
        if type(value) is not int or value < low:
            raise ValueError(f"{name} must be an int ≥ {low}, got {value!r}")
    shapes = [_step_shape(shape) for shape in shapes]  # every shape checked before any runs
    if not shapes:
        raise ValueError("profile_step_times needs at least one step shape")
    device = str(cache.device)
    bs, generator = cache.block_size, torch.Generator().manual_seed(seed)
    flush = None
    if cold:
        cache_bytes = machine.last_level_cache_bytes(device)
        flush = timing.flush_buffer(device, math.ceil(timing.FLUSH_FACTOR * cache_bytes))
    records = []
    for shape in shapes:
        chunk_blocks = kv_blocks(shape.prefill_context + shape.prefill, bs) if shape.prefill else 0
        per_decode = kv_blocks(shape.context + 1, bs)
        needed = chunk_blocks + shape.decode * per_decode
        if needed > cache.num_blocks:
            raise ValueError(f"step shape {shape} needs {needed} blocks of {bs} tokens; the pool "
                             f"has {cache.num_blocks}")  # fmt: skip
        drawn = torch.randperm(cache.num_blocks, generator=generator)[:needed]
        for pool in (*cache.keys, *cache.values):
            noise = torch.empty((needed, *pool.shape[1:])).uniform_(-1.0, 1.0, generator=generator)
            pool.index_copy_(0, drawn.to(device), noise.to(device, pool.dtype))
        tables = drawn.split([chunk_blocks, *[per_decode] * shape.decode])
        steps = [_step_entries(shape, tables, model.cfg.vocab, generator)
                 for _ in range(warmup + repeats)]  # fmt: skip
        for entries in steps[:warmup]:
            model.forward_paged(entries, cache)
        timing.synchronize(device)
        samples = [timing.call_seconds(model.forward_paged, (entries, cache), device, flush)
                   for entries in steps[warmup:]]  # fmt: skip
        records.append(StepTiming(shape, timing.Timing.from_samples(
            samples, device=device, threads=torch.get_num_threads())))  # fmt: skip
    return records
