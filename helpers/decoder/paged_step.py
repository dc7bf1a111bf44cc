"""One ragged step over a paged KV cache: its entries, their checks and its index plan.

``Decoder.forward_paged`` runs many sequences' new tokens at once (prompt chunks and decodes
mixed), each sequence's keys and values in the blocks its caller's block table names.
``paged_plan`` checks every entry against the pool before anything is written, and builds
the step's index tensors once for every layer (``PagedPlan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from helpers.counting.memory import kv_blocks
from helpers.counting.models import ModelConfig
from helpers.decoder.kv_cache import PagedKVCache

__all__ = ["DECODE_GROUP_FILL", "PagedEntry", "PagedEntryError", "PagedPlan", "paged_plan"]


class PagedEntryError(ValueError):
    """A ``forward_paged`` entry that cannot run; ``entry`` is its index in the list (None
    when the problem is the step as a whole), so an engine can drop that sequence and run
    the rest of the step again: nothing is written before the entries are checked."""

    def __init__(self, message: str, entry: int | None = None) -> None:
        super().__init__(message if entry is None else f"entry {entry}: {message}")
        self.entry = entry


class PagedEntry(NamedTuple):
    """One sequence's part of a ragged step for ``Decoder.forward_paged``.

    ``ids``: the new tokens, a 1-D torch.long tensor: a prompt chunk of any length, or the
    single token a decode step feeds back. ``start``: tokens already cached for the sequence,
    so the new tokens take positions ``start … start + len(ids) − 1``. ``blocks``: the
    sequence's block table (physical block ids, a list or 1-D integer tensor) covering at
    least positions ``0 … start + len(ids) − 1``; entries past those are ignored, so a block
    manager may pass a table allocated ahead. ``emits``: whether this step emits a token for
    the sequence, i.e. needs its last token's logits: a decode and a prompt's last chunk do,
    an earlier chunk does not, and skipping its row saves an LM-head row (for a small model
    the LM head is the largest matrix: Qwen2.5-0.5B's is 136M of its 494M parameters).
    """

    ids: torch.Tensor
    start: int
    blocks: Sequence[int] | torch.Tensor
    emits: bool = True


@dataclass
class PagedPlan:
    """Index tensors for one ragged step, built once and used by every layer.

    New tokens are packed prompt chunks first, then decodes, so the decodes are one slice.
    ``slots``: the flat pool slot (block · block_size + offset) each packed token is written
    to. ``chunks``: per prompt chunk, its packed rows, the blocks its keys are gathered from
    and its [new, keys] visibility mask. ``decode_groups``: the decodes, longest first, in
    batches of similar length (``DECODE_GROUP_FILL``), each its packed rows, its block tables
    [decodes, longest table] (padded with block 0, masked) and its [decodes, 1, 1, keys] mask.
    """

    ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    chunks: list[tuple[int, int, torch.Tensor, torch.Tensor]]
    decode_groups: list[tuple[int, int, torch.Tensor, torch.Tensor]]
    last_rows: torch.Tensor  # the last packed row of each emitting entry, in entry order
    entry_order: torch.Tensor  # every packed row, entries in the order given


DECODE_GROUP_FILL = 0.75
"""Decodes attend in batches, one SDPA call each, padded to the batch's longest cache: a
decode joins the batch when it reads at least this fraction of the blocks the batch's
longest reads, so padding adds at most 1/3 to the cache a step reads (and one call per
decode, slow on GPUs, is avoided): a step's attention costs what its total context costs."""


def _first_block(start: int, window: int | None, block_size: int) -> int:
    """The first block a sequence's new tokens can see (after ``start`` cached tokens): a
    token sees at most the window's keys, so attention gathers only the blocks holding them."""
    return 0 if window is None else max(0, start - window + 1) // block_size


def _entry_table(i: int, blocks: object) -> torch.Tensor:
    """Entry ``i``'s block table as a CPU long tensor, or a PagedEntryError saying why not."""
    try:
        table = (blocks.detach().cpu() if isinstance(blocks, torch.Tensor)
                 else torch.as_tensor(list(blocks), dtype=torch.long))  # fmt: skip
    except (TypeError, ValueError, RuntimeError):
        raise PagedEntryError(f"blocks must be a list or 1-D tensor of block ids, "
                              f"got {blocks!r}", i) from None  # fmt: skip
    if table.dim() != 1 or table.dtype.is_floating_point or table.dtype == torch.bool:
        raise PagedEntryError(f"blocks must be a 1-D list or tensor of integer block ids, "
                              f"got {table.dtype} {tuple(table.shape)}", i)  # fmt: skip
    return table.long()


def paged_plan(
    entries: Sequence[PagedEntry | tuple], cache: PagedKVCache, cfg: ModelConfig,
    device: torch.device,
) -> PagedPlan:  # fmt: skip
    """Check every entry against the pool and build the step's index tensors (``PagedPlan``).

    Index arithmetic runs on the CPU, where the block tables are, and each tensor is moved
    to the model's device once, so a step costs a few small copies, not some per layer."""
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence) or not entries:
        raise PagedEntryError("forward_paged needs a non-empty list of entries "
                              "(ids, start, blocks)")  # fmt: skip
    bs, pool_blocks, window = cache.block_size, cache.num_blocks, cfg.sliding_window
    chunks, decodes = [], []  # (entry index, ids, start, table, emits)
    for i, entry in enumerate(entries):
        try:
            ids, start, blocks, emits = PagedEntry(*entry)
        except TypeError:
            raise PagedEntryError(f"expected (ids, start, blocks[, emits]), got {entry!r}",
                                  i) from None  # fmt: skip
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype != torch.long:
            got = (f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, torch.Tensor)
                   else type(ids).__name__)  # fmt: skip
            raise PagedEntryError(f"ids must be a 1-D torch.long tensor of new tokens, "
                                  f"got {got}", i)  # fmt: skip
        new = ids.numel()
        if new == 0:
            raise PagedEntryError("it has no tokens: a step feeds each entry at least one", i)
        if type(start) is not int or start < 0:
            raise PagedEntryError(f"start must be an int ≥ 0 (tokens already cached), "
                                  f"got {start!r}", i)  # fmt: skip
        end = start + new
        needed = kv_blocks(end, bs)
        if needed > pool_blocks:
            raise PagedEntryError(f"positions 0 … {end - 1} need {needed} blocks of {bs} "
                                  f"tokens, more than the pool's {pool_blocks}", i)  # fmt: skip
        table = _entry_table(i, blocks)
        if table.numel() < needed:
            raise PagedEntryError(
                f"its block table has {table.numel()} blocks ({table.numel() * bs} tokens), "
                f"too few for start + new = {start} + {new} = {end} tokens", i)  # fmt: skip
        table = table[:needed]
        outside = table[(table < 0) | (table >= pool_blocks)]
        if outside.numel():
            raise PagedEntryError(f"block id {outside[0].item()} is outside the pool's "
                                  f"0 … {pool_blocks - 1}", i)  # fmt: skip
        if torch.unique(table).numel() != needed:
            raise PagedEntryError(f"its block table repeats a block: {table.tolist()}", i)
        bad = ids[(ids < 0) | (ids >= cfg.vocab)]
        if bad.numel():
            raise PagedEntryError(f"token id {bad[0].item()} is outside the vocabulary "
                                  f"0 … {cfg.vocab - 1}", i)  # fmt: skip
        (chunks if new > 1 else decodes).append((i, ids, start, table, bool(emits)))

    # Longest first, so that decodes of similar length are neighbours (``DECODE_GROUP_FILL``).
    def read_blocks(entry: tuple) -> int:
        return entry[3].numel() - _first_block(entry[2], window, bs)

    decodes.sort(key=read_blocks, reverse=True)
    packed = chunks + decodes
    ids = torch.cat([e[1].to(device) for e in packed])
    each = [torch.arange(start, start + new.numel()) for _, new, start, _, _ in packed]
    positions = torch.cat(each)
    # Position p of a sequence lives in its block table[p // bs], slot p % bs.
    slots = torch.cat([e[3][p // bs] * bs + p % bs for e, p in zip(packed, each, strict=True)])
    if torch.unique(slots).numel() != slots.numel():
        ordered = slots.sort().values
        twice = ordered[1:][ordered[1:] == ordered[:-1]][0].item()
        owners = torch.cat([torch.full((e[1].numel(),), e[0]) for e in packed])
        first, second = sorted(owners[slots == twice].tolist())[:2]
        raise PagedEntryError(f"it writes block {twice // bs}, slot {twice % bs}, as entry "
                              f"{first} does: each sequence writes its new tokens into blocks "
                              "of its own", second)  # fmt: skip

    def visible(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        # Causal (which also hides the unfilled end of the last block), within the window.
        seen = key <= query
        return seen if window is None else seen & (query - key < window)

    plan_chunks, row = [], 0
    for _, chunk_ids, start, table, _ in chunks:
        first = _first_block(start, window, bs)
        keys = first * bs + torch.arange((table.numel() - first) * bs)
        query = torch.arange(start, start + chunk_ids.numel())
        mask = visible(query[:, None], keys[None])
        plan_chunks.append((row, row + chunk_ids.numel(), table[first:].to(device),
                            mask.to(device)))  # fmt: skip
        row += chunk_ids.numel()
    decode_groups, group = [], []
    for entry in decodes:  # one group per run of decodes within the fill of the group's first
        if group and read_blocks(entry) < DECODE_GROUP_FILL * read_blocks(group[0]):
            decode_groups.append(group)
            group = []
        group.append(entry)
    if group:
        decode_groups.append(group)
    plan_groups = []
    for group in decode_groups:
        firsts = [_first_block(start, window, bs) for _, _, start, _, _ in group]
        width = max(e[3].numel() - f for e, f in zip(group, firsts, strict=True))
        padded = torch.zeros(len(group), width, dtype=torch.long)  # block 0 fills, masked
        for b, ((_, _, _, table, _), first) in enumerate(zip(group, firsts, strict=True)):
            padded[b, : table.numel() - first] = table[first:]
        keys = torch.tensor(firsts)[:, None] * bs + torch.arange(width * bs)[None]
        query = torch.tensor([start for _, _, start, _, _ in group])[:, None]
        plan_groups.append((row, row + len(group), padded.to(device),
                            visible(query, keys)[:, None, None].to(device)))  # fmt: skip
        row += len(group)

    rows, offset = {}, 0
    for index, entry_ids, *_ in packed:
        rows[index] = torch.arange(offset, offset + entry_ids.numel())
        offset += entry_ids.numel()
    emitting = [rows[e[0]][-1:] for e in sorted(packed, key=lambda e: e[0]) if e[4]]
    last_rows = torch.cat(emitting) if emitting else torch.zeros(0, dtype=torch.long)
    return PagedPlan(
        ids=ids, positions=positions.to(device), slots=slots.to(device),
        chunks=plan_chunks, decode_groups=plan_groups, last_rows=last_rows.to(device),
        entry_order=torch.cat([rows[i] for i in range(len(entries))]).to(device),
    )  # fmt: skip
