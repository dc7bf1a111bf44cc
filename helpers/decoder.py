"""A compact Llama/Qwen2/Mistral-style decoder in torch (chapters 1, 2 and 6).

RMSNorm, rotary position embeddings (with the config's θ and Llama-3.1's "llama3" scaling),
grouped-query attention over a preallocated KV cache, SwiGLU MLP, an LM head (tied to the
embedding where the config says so). It computes what transformers' Qwen2, Mistral and Llama
models compute given the same weights (tests/helpers/test_decoder_hf.py checks it), and built
on the ``meta`` device it has every shape and no memory, so ``FlopCounterMode`` can count a
70B model's forward pass on a laptop.

The KV cache (``KVCache``) holds, per layer, key and value buffers of a fixed capacity; each
forward pass writes its new keys and values into the next free slots in place and attends
over the filled slots, so a decode step copies one token's keys and values, not the cache.
Prompts of different lengths are batched by left padding (``left_pad``), and ``generate``
decodes greedily. Mistral's sliding window is honoured: a token attends to itself and the
``sliding_window − 1`` tokens before it, and a decode step reads only those keys.

For serving (chapters 7–9), ``Decoder.forward_paged`` runs one ragged step of many sequences
over a paged cache (``PagedKVCache``: a pool of fixed-size blocks, as in vLLM): prompt chunks
and decodes mixed, every new token packed into one batch, each sequence's keys and values in
blocks its caller's block manager chose. ``profile_step_times`` times such steps on the
reader's device, the measurements a step-time model is fitted to.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from helpers import timing
from helpers.models import ModelConfig, RopeScaling

__all__ = ["Decoder", "KVCache", "PagedEntry", "PagedEntryError", "PagedKVCache", "StepShape",
           "StepTiming", "left_pad", "padded_prefill", "profile_step_times", "random_decoder",
           "rope_frequencies", "rotate", "split_kv_attention"]


def rope_frequencies(
    head_dim: int,
    theta: float = 10000.0,
    scaling: RopeScaling | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """RoPE's inverse frequencies θ^(−2i/head_dim), i < head_dim/2, in fp32 (chapter 6).

    Computed as transformers does (``1 / θ^(2i/d)``), then, for ``scaling`` ("llama3"), long
    wavelengths divided by ``factor`` and the middle band blended (``_compute_llama3_parameters``).
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    inverse = 1.0 / (theta**exponents)
    if scaling is None:
        return inverse
    old = scaling.original_max_position_embeddings
    low_wavelen = old / scaling.low_freq_factor
    high_wavelen = old / scaling.high_freq_factor
    wavelen = 2 * math.pi / inverse
    scaled = torch.where(wavelen > low_wavelen, inverse / scaling.factor, inverse)
    smooth = (old / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _cos_sin(
    inverse: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    # Angles in fp32, then cast, as transformers does: bf16 positions would lose whole tokens.
    angles = positions.to(torch.float32)[..., None] * inverse
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def rotate(
    x: torch.Tensor,
    positions: torch.Tensor,
    theta: float = 10000.0,
    scaling: RopeScaling | None = None,
) -> torch.Tensor:
    """Rotary position embedding over the last dimension, half-split layout (as in HF Llama).

    ``x``: [..., tokens, head_dim]; ``positions``: [tokens] (or broadcastable to x's leading
    dimensions followed by tokens).
    """
    cos, sin = _cos_sin(rope_frequencies(x.shape[-1], theta, scaling, x.device), positions,
                        x.dtype)  # fmt: skip
    return _apply_rope(x, cos, sin)


class KVCache:
    """Keys and values of every layer, in buffers preallocated to a capacity (chapter 6).

    ``keys[i]`` and ``values[i]``: [batch, n_kv_heads, capacity, head_dim]; slots
    ``0 … tokens − 1`` are filled. ``pad``: per sequence, how many leading slots are left
    padding (None when no sequence is padded). Indexing and iterating give each layer's
    *filled* (keys, values) views, so ``cache[0][0].shape[2]`` is the tokens cached.

    A forward pass returns a new handle on the same buffers with ``tokens`` advanced; the
    handle passed in still sees only its own tokens. Writing into a cache that has no room left
    reallocates it at least twice as large (one copy, amortised), so ``Decoder.new_cache`` or
    ``max_tokens`` with the final length avoids any copy.
    """

    def __init__(
        self,
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
        tokens: int = 0,
        pad: torch.Tensor | None = None,
    ) -> None:
        if len(keys) != len(values) or not keys:
            raise ValueError(
                f"a KVCache needs the same number (≥ 1) of key and value buffers, "
                f"got {len(keys)} and {len(values)}"
            )
        shape = tuple(keys[0].shape)
        if len(shape) != 4 or any(tuple(t.shape) != shape for t in (*keys, *values)):
            raise ValueError(
                "every key and value buffer must have the same shape "
                f"[batch, n_kv_heads, capacity, head_dim], got {[tuple(t.shape) for t in keys]}"
            )
        if not 0 <= tokens <= shape[2]:
            raise ValueError(f"tokens={tokens} is outside the cache's capacity {shape[2]}")
        self.keys, self.values, self.tokens, self.pad = list(keys), list(values), tokens, pad

    @classmethod
    def allocate(
        cls,
        cfg: ModelConfig,
        batch: int,
        capacity: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``capacity`` tokens each."""
        cfg.require_dense("helpers.decoder's KV cache")
        for value, name in ((batch, "batch"), (capacity, "capacity")):
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        shape = (batch, cfg.n_kv_heads, capacity, cfg.head_dim)
        keys = [torch.empty(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        values = [torch.empty(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        return cls(keys, values)

    @classmethod
    def from_tensors(
        cls, layers: Sequence[tuple[torch.Tensor, torch.Tensor]], extra: int = 0
    ) -> KVCache:
        """A cache holding given per-layer (keys, values) [batch, n_kv, tokens, head_dim],
        copied into buffers with room for ``extra`` more tokens."""
        if not layers or any(len(kv) != 2 for kv in layers):
            raise ValueError("a cache is a non-empty list of (keys, values) pairs, one per layer")
        tokens = layers[0][0].shape[2]
        keys, values = [], []
        for k, v in layers:
            for t, out in ((k, keys), (v, values)):
                buffer = t.new_empty((*t.shape[:2], tokens + extra, t.shape[3]))
                buffer[:, :, :tokens].copy_(t)
                out.append(buffer)
        return cls(keys, values, tokens)

    @property
    def batch(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[layer][:, :, : self.tokens], self.values[layer][:, :, : self.tokens]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return (self[i] for i in range(len(self)))

    def extended(self, new: int) -> KVCache:
        """A handle with ``new`` more slots counted as filled (the caller writes them)."""
        needed = self.tokens + new
        keys, values = self.keys, self.values
        if needed > self.capacity:  # grow geometrically: a rare copy, never one per step
            grown = max(needed, 2 * self.capacity)
            keys, values = [], []
            for old, out in ((self.keys, keys), (self.values, values)):
                for t in old:
                    buffer = t.new_empty((*t.shape[:2], grown, t.shape[3]))
                    buffer[:, :, : self.tokens].copy_(t[:, :, : self.tokens])
                    out.append(buffer)
        return KVCache(keys, values, needed, self.pad)

    def clone(self) -> KVCache:
        """An independent copy (to branch two continuations from one prefix)."""
        return KVCache([k.clone() for k in self.keys], [v.clone() for v in self.values],
                       self.tokens, None if self.pad is None else self.pad.clone())  # fmt: skip


class PagedKVCache:
    """Keys and values of every layer in a pool of fixed-size blocks (paged, as in vLLM).

    ``keys[i]`` and ``values[i]``: [num_blocks, block_size, n_kv_heads, head_dim]. Token ``t``
    of a sequence whose block table is ``blocks`` lives in block ``blocks[t // block_size]``,
    slot ``t % block_size``. The pool only stores blocks: which blocks belong to which
    sequence is the caller's block manager's business (vLLM's scheduler owns allocation, its
    model runner reads and writes the blocks it is told), so a sequence's blocks can be
    anywhere in the pool, and a freed block is reused as it is.

    Layout: token-major within a block (vLLM's layout for FlashAttention), so one token's keys
    for all heads are one contiguous row: a step writes one row per new token, and gathering a
    sequence's blocks copies whole contiguous blocks. The pool starts zeroed rather than empty:
    attention reads every slot of a sequence's last, partly filled block and masks the unused
    ones, and a masked NaN that ``torch.empty`` left behind would still poison the output
    (its weight is 0, and 0 × NaN = NaN).
    """

    def __init__(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
        if len(keys) != len(values) or not keys:
            raise ValueError(
                f"a PagedKVCache needs the same number (≥ 1) of key and value pools, "
                f"got {len(keys)} and {len(values)}"
            )
        shape = tuple(keys[0].shape)
        if len(shape) != 4 or any(tuple(t.shape) != shape for t in (*keys, *values)):
            raise ValueError(
                "every key and value pool must have the same shape "
                f"[num_blocks, block_size, n_kv_heads, head_dim], got "
                f"{[tuple(t.shape) for t in keys]}"
            )
        if any(not t.is_contiguous() for t in (*keys, *values)):
            raise ValueError("key and value pools must be contiguous (writes go through a view)")
        self.keys, self.values = list(keys), list(values)

    @classmethod
    def allocate(
        cls,
        cfg: ModelConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> PagedKVCache:
        """A zeroed pool of ``num_blocks`` blocks of ``block_size`` tokens for every layer."""
        cfg.require_dense("helpers.decoder's paged KV cache")
        for value, name in ((num_blocks, "num_blocks"), (block_size, "block_size")):
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        shape = (num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
        keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        return cls(keys, values)

    @property
    def num_blocks(self) -> int:
        return self.keys[0].shape[0]

    @property
    def block_size(self) -> int:
        return self.keys[0].shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.keys[0].dtype

    @property
    def device(self) -> torch.device:
        return self.keys[0].device

    def __len__(self) -> int:
        return len(self.keys)

    def sequence(
        self, layer: int, blocks: Sequence[int] | torch.Tensor, tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One sequence's first ``tokens`` cached (keys, values) of ``layer``, gathered from
        its ``blocks`` into [n_kv_heads, tokens, head_dim] copies (``KVCache``'s per-sequence
        layout): for tests and for looking inside, not for the forward pass."""
        needed = -(-tokens // self.block_size)
        index = torch.as_tensor(blocks, dtype=torch.long).reshape(-1)
        if index.numel() < needed:
            raise ValueError(f"{tokens} tokens need {needed} blocks, the table has {index.numel()}")
        index = index[:needed].to(self.device)
        return tuple(pool[layer][index].flatten(0, 1)[:tokens].transpose(0, 1)
                     for pool in (self.keys, self.values))  # fmt: skip


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
class _PagedPlan:
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


def _paged_plan(
    entries: Sequence[PagedEntry | tuple], cache: PagedKVCache, cfg: ModelConfig,
    device: torch.device,
) -> _PagedPlan:  # fmt: skip
    """Check every entry against the pool and build the step's index tensors (``_PagedPlan``).

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
        needed = -(-end // bs)
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
    return _PagedPlan(
        ids=ids, positions=positions.to(device), slots=slots.to(device),
        chunks=plan_chunks, decode_groups=plan_groups, last_rows=last_rows.to(device),
        entry_order=torch.cat([rows[i] for i in range(len(entries))]).to(device),
    )  # fmt: skip


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths as one [batch, longest] id tensor, left-padded so every
    prompt ends in the last column, and their lengths (for ``Decoder(..., lengths=…)``)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("left_pad needs at least one prompt, and no empty prompt")
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    return ids, lengths


def split_kv_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, chunks: int
) -> torch.Tensor:
    """One decode token's attention, Flash-Decoding's way: ``softmax(q·Kᵀ/√d)·V`` with the
    cache split along its sequence into ``chunks`` pieces attended independently, then merged.

    ``q`` [batch, n_q, 1, d]; ``keys``, ``values`` [batch, n_kv, T, d], query head ``h``
    reading kv head ``h // g`` (``g = n_q / n_kv``), as ``Attention.forward`` does. Chunk
    sizes are ⌈T/C⌉ or ⌊T/C⌋ (``torch.tensor_split``'s), each group of equal-sized chunks a
    view of the cache, so each is one batched matmul over (batch, kv head, chunk).

    Each chunk yields its partial numerator ``o_c = Σ exp(s − m_c)·v``, its max score ``m_c``
    and its sum ``ℓ_c = Σ exp(s − m_c)`` (log-sum-exp ``m_c + log ℓ_c``). With ``M = max m_c``
    the merge is ``Σ e^{m_c−M} o_c / Σ e^{m_c−M} ℓ_c``: exactly the softmax over the whole
    cache, whatever the split. The arithmetic is in float32; the result has ``q``'s dtype.
    """
    batch, n_q, new, d = q.shape
    n_kv, length = keys.shape[1], keys.shape[2]
    if new != 1 or n_q % n_kv or values.shape != keys.shape:
        raise ValueError("split_kv_attention: one query token, n_q a multiple of n_kv, "
                         "keys and values of one shape")  # fmt: skip
    if type(chunks) is not int or not 1 <= chunks <= length:
        raise ValueError(f"chunks must be an int in [1, {length}], got {chunks!r}")
    packed = q.view(batch, n_kv, 1, n_q // n_kv, d).float() / math.sqrt(d)
    size, longer = divmod(length, chunks)  # the first `longer` chunks hold size + 1 tokens
    maxima, sums, partials = [], [], []
    groups = ((0, longer, size + 1), (longer * (size + 1), chunks - longer, size))
    for start, count, width in groups:
        if count == 0:
            continue
        stop = start + count * width
        k = keys[:, :, start:stop].unflatten(2, (count, width)).float()  # [b, n_kv, c, w, d]
        v = values[:, :, start:stop].unflatten(2, (count, width)).float()
        scores = packed @ k.transpose(-1, -2)  # [b, n_kv, c, g, w]
        top = scores.amax(-1, keepdim=True)
        weights = torch.exp(scores - top)
        maxima.append(top)
        sums.append(weights.sum(-1, keepdim=True))
        partials.append(weights @ v)  # [b, n_kv, c, g, d]
    top, total, out = (torch.cat(t, dim=2) for t in (maxima, sums, partials))
    scale = torch.exp(top - top.amax(2, keepdim=True))  # each chunk's rescale to the global max
    merged = (scale * out).sum(2) / (scale * total).sum(2)  # [b, n_kv, g, d]
    return merged.reshape(batch, n_q, 1, d).to(q.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(cfg.hidden, cfg.q_dim, bias=cfg.qkv_bias)
        self.k = nn.Linear(cfg.hidden, cfg.kv_dim, bias=cfg.qkv_bias)
        self.v = nn.Linear(cfg.hidden, cfg.kv_dim, bias=cfg.qkv_bias)
        self.o = nn.Linear(cfg.q_dim, cfg.hidden, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: KVCache,
        layer: int,
        first_key: int,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Attend the new tokens over cache slots ``first_key … cache.tokens − 1``, after
        writing their keys and values into the last ``new`` of those slots."""
        cfg = self.cfg
        batch, new = x.shape[:2]

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(batch, new, n, cfg.head_dim).transpose(1, 2)

        q = _apply_rope(heads(self.q(x), cfg.n_q_heads), *rope)
        k = _apply_rope(heads(self.k(x), cfg.n_kv_heads), *rope)
        end = cache.tokens
        # In place: the step's only KV traffic is this write and the read below.
        cache.keys[layer][:, :, end - new : end].copy_(k)
        cache.values[layer][:, :, end - new : end].copy_(heads(self.v(x), cfg.n_kv_heads))
        keys = cache.keys[layer][:, :, first_key:end]
        values = cache.values[layer][:, :, first_key:end]
        if new == 1 and cfg.group_size > 1:
            # Decode: a kv head's g query heads become g query rows against its keys, so
            # the cache is read as it is, never expanded g-fold (as decode kernels do).
            packed = q.view(batch, cfg.n_kv_heads, cfg.group_size, cfg.head_dim)
            out = F.scaled_dot_product_attention(packed, keys, values, attn_mask=mask)
            out = out.view(batch, cfg.n_q_heads, 1, cfg.head_dim)
        else:
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                 enable_gqa=cfg.group_size > 1)  # fmt: skip
        return self.o(out.transpose(1, 2).reshape(batch, new, cfg.q_dim))

    def forward_paged(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: PagedKVCache,
        layer: int,
        plan: _PagedPlan,
    ) -> torch.Tensor:
        """``x`` [tokens, hidden]: every entry's new tokens packed, so q, k, v and o are one
        GEMM each over the whole step. Writes the new keys and values into their pool slots
        in place, then attends each prompt chunk over its own blocks, and every decode at
        per group of similar length over theirs (padded to the group's longest, masked).

        Torch has no paged-attention kernel, so each sequence's blocks are gathered into a
        contiguous copy once per layer per step: about 3× the KV bytes that reading them in
        place moves (written, then read again, as chapter 6 counts for ``torch.cat``). A
        fused kernel (vLLM's PagedAttention, FlashAttention with block tables) reads the
        blocks where they lie; the values computed are the same."""
        cfg = self.cfg
        tokens = x.shape[0]
        q = _apply_rope(self.q(x).view(tokens, cfg.n_q_heads, cfg.head_dim), *rope)
        k = _apply_rope(self.k(x).view(tokens, cfg.n_kv_heads, cfg.head_dim), *rope)
        v = self.v(x).view(tokens, cfg.n_kv_heads, cfg.head_dim)
        pool_k, pool_v = cache.keys[layer], cache.values[layer]
        # A view of the pool as one row per token slot: index_copy_ writes in place.
        pool_k.view(-1, cfg.n_kv_heads, cfg.head_dim).index_copy_(0, plan.slots, k)
        pool_v.view(-1, cfg.n_kv_heads, cfg.head_dim).index_copy_(0, plan.slots, v)
        out = torch.empty_like(q)
        for first, last, blocks, mask in plan.chunks:
            # [blocks, block_size, n_kv, d] → [1, n_kv, keys, d]: a sequence's cache in order.
            keys = pool_k[blocks].flatten(0, 1).transpose(0, 1)[None]
            values = pool_v[blocks].flatten(0, 1).transpose(0, 1)[None]
            chunk = F.scaled_dot_product_attention(
                q[first:last].transpose(0, 1)[None], keys, values, attn_mask=mask,
                enable_gqa=cfg.group_size > 1)  # fmt: skip
            out[first:last] = chunk[0].transpose(0, 1)
        for first, last, blocks, mask in plan.decode_groups:
            keys = pool_k[blocks].flatten(1, 2).transpose(1, 2)  # [decodes, n_kv, keys, d]
            values = pool_v[blocks].flatten(1, 2).transpose(1, 2)
            # As in forward's decode: a kv head's g query heads are g rows against its keys.
            packed = q[first:last].view(last - first, cfg.n_kv_heads, cfg.group_size,
                                        cfg.head_dim)  # fmt: skip
            step = F.scaled_dot_product_attention(packed, keys, values, attn_mask=mask)
            out[first:last] = step.view(last - first, cfg.n_q_heads, cfg.head_dim)
        return self.o(out.view(tokens, cfg.q_dim))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.attention = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, rope, cache, layer, first_key, mask):
        x = x + self.attention(self.attention_norm(x), rope, cache, layer, first_key, mask)
        return x + self.mlp(self.mlp_norm(x))

    def forward_paged(self, x, rope, cache, layer, plan):
        x = x + self.attention.forward_paged(self.attention_norm(x), rope, cache, layer, plan)
        return x + self.mlp(self.mlp_norm(x))


def _visible(
    query_slots: torch.Tensor,
    key_slots: torch.Tensor,
    pad: torch.Tensor | None,
    window: int | None,
) -> torch.Tensor | None:
    """Which keys each new token may see: causal, within the window, never padding.
    None when every key is visible (SDPA's fastest path)."""
    i, j = query_slots[:, None], key_slots[None, :]
    visible = j <= i
    if window is not None:
        visible = visible & (i - j < window)
    if pad is not None:
        # A padding query sees itself only: a row with no visible key would give NaN.
        visible = visible[None] & ((j[None] >= pad[:, None, None]) | (j == i)[None])
        return visible[:, None]  # [batch, 1 (heads), new, keys]
    if query_slots.numel() == 1 and window is None:
        return None  # one new token after the cache sees every key
    return visible


def _positions(query_slots: torch.Tensor, pad: torch.Tensor | None) -> torch.Tensor:
    """RoPE positions of the new tokens: their slots, less each row's left padding (a
    prompt's first real token is at 0); padding slots at 0."""
    if pad is None:
        return query_slots
    return (query_slots[None] - pad[:, None]).clamp(min=0)


def padded_prefill(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention mask and RoPE positions of a left-padded prefill (chapter 7): prompts of
    ``lengths`` (1-D) in a [batch, longest] batch, each ending in the last column
    (``left_pad``), nothing cached before them. Returns ``mask``, bool [batch, 1, longest,
    longest], True where query slot i may attend to key slot j (a real token: the real
    tokens up to itself; a padding slot: itself only, since a row with no visible key gives
    NaN, which reaches the real tokens at the next layer as 0 × NaN), and ``positions``,
    long [batch, longest]. What ``Decoder.forward(ids, lengths=…)`` uses."""
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or not len(lengths) or bool((lengths < 1).any()):
        raise ValueError(f"lengths must be a 1-D tensor of prompt lengths >= 1, got {lengths}")
    longest = int(lengths.max())
    slots = torch.arange(longest, device=lengths.device)
    pad = longest - lengths
    return _visible(slots, slots, pad, None), _positions(slots, pad)


class Decoder(nn.Module):
    """The whole decoder. ``forward(ids, cache)`` returns (logits, updated cache)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        cfg.require_dense("helpers.decoder")
        if cfg.qk_norm:
            raise ValueError(f"{cfg.name}: this decoder has no q/k head norms (Qwen3's)")
        if not cfg.gated_mlp:
            raise ValueError(f"{cfg.name}: this decoder implements the gated (SwiGLU) MLP only")
        if cfg.head_dim % 2:  # RoPE rotates pairs of dimensions
            raise ValueError(f"{cfg.name}: head_dim={cfg.head_dim} must be even for RoPE")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied_embeddings:
            self.lm_head.weight = self.embed.weight

    def new_cache(self, batch: int, max_tokens: int) -> KVCache:
        """An empty cache on this model's device and dtype, for up to ``max_tokens`` each."""
        weight = self.embed.weight
        return KVCache.allocate(self.cfg, batch, max_tokens, weight.device, weight.dtype)

    def forward(
        self,
        ids: torch.Tensor,
        cache: KVCache | Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
        logits: str = "all",
        *,
        lengths: torch.Tensor | None = None,
        max_tokens: int | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Run ``ids`` [batch, new_tokens] after the tokens in ``cache``.

        ``logits="last"`` runs the LM head on the last token only. ``lengths`` (prefill only):
        each row's real prompt length, the rows left-padded (``left_pad``). ``max_tokens``:
        the capacity of a new cache (default: just the prompt). ``cache`` may also be a list
        of per-layer (keys, values), copied once into a ``KVCache``.
        """
        if logits not in ("all", "last"):
            raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
            raise ValueError(
                "ids must be a torch.long tensor [batch, new_tokens], got "
                + (f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, torch.Tensor)
                   else type(ids).__name__)  # fmt: skip
            )
        batch, new = ids.shape
        if new == 0:
            raise ValueError("ids has no tokens: new_tokens must be at least 1")
        if cache is None:
            cache = self.new_cache(batch, max(max_tokens or 0, new))
        elif not isinstance(cache, KVCache):
            cache = KVCache.from_tensors(list(cache), extra=new)
        if len(cache) != self.cfg.layers or cache.batch != batch:
            raise ValueError(
                f"cache has {len(cache)} layers × batch {cache.batch}; this model needs "
                f"{self.cfg.layers} layers and ids have batch {batch}"
            )
        pad = cache.pad
        if lengths is not None:
            if cache.tokens:
                raise ValueError("lengths describes a padded prompt: pass it at prefill only")
            lengths = torch.as_tensor(lengths, device=ids.device)
            if lengths.shape != (batch,) or bool(((lengths < 1) | (lengths > new)).any()):
                raise ValueError(
                    f"lengths must hold {batch} prompt lengths in 1 … {new}, got {lengths}"
                )
            pad = new - lengths
        start = cache.tokens
        cache = cache.extended(new)
        cache.pad = pad
        window = self.cfg.sliding_window
        # A decode step reads only the keys the first new token can see.
        first_key = 0 if window is None else max(0, start - window + 1)
        device = ids.device
        query_slots = torch.arange(start, start + new, device=device)
        key_slots = torch.arange(first_key, start + new, device=device)
        mask = _visible(query_slots, key_slots, pad, window)
        positions = _positions(query_slots, pad)
        if pad is not None:
            positions = positions[:, None]  # [batch, 1 (heads), new]
        x = self.embed(ids)
        inverse = rope_frequencies(self.cfg.head_dim, self.cfg.rope_theta, self.cfg.rope_scaling,
                                   device)  # fmt: skip
        rope = _cos_sin(inverse, positions, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, cache, i, first_key, mask)
        x = self.norm(x)
        if logits == "last":
            x = x[:, -1:]
        return self.lm_head(x), cache

    def new_paged_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        """An empty (zeroed) block pool on this model's device and dtype."""
        weight = self.embed.weight
        return PagedKVCache.allocate(self.cfg, num_blocks, block_size, weight.device,
                                     weight.dtype)  # fmt: skip

    @torch.no_grad()
    def forward_paged(
        self,
        entries: Sequence[PagedEntry | tuple],
        cache: PagedKVCache,
        logits: str = "last",
    ) -> torch.Tensor:
        """Run one ragged step: every entry's new tokens at once, over a paged KV cache.

        ``entries``: ``PagedEntry`` (or plain ``(ids, start, blocks[, emits])`` tuples), one
        per sequence, prompt chunks and decodes mixed in any order. The new tokens of all
        entries are packed into one [tokens, hidden] tensor, so every linear layer is one GEMM
        over the whole step (what makes batching pay, and what a step-time model counts).
        Each entry's keys and values are written into its blocks of ``cache`` in place; its
        queries attend causally to its cached and new keys (Mistral's window honoured), at
        RoPE positions ``start …``. Inference only (no autograd).

        Returns ``logits="last"``: [emitting entries, vocab], the last new token's logits of
        each entry with ``emits`` (all of them by default), in entry order. ``logits="all"``:
        [total new tokens, vocab], every new token's logits, entries in order (split by
        their lengths to get each entry's).
        Bad input (an empty entry, a block table too short for ``start + len(ids)`` or
        naming a block outside the pool or twice, two entries writing one slot, a token
        outside the vocabulary, a sequence longer than the pool) raises ``ValueError``
        naming the entry, before anything is written.
        """
        if logits not in ("all", "last"):
            raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
        if not isinstance(cache, PagedKVCache):
            raise ValueError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
        cfg, weight = self.cfg, self.embed.weight
        if (len(cache), *cache.keys[0].shape[2:]) != (cfg.layers, cfg.n_kv_heads, cfg.head_dim):
            raise ValueError(
                f"the pool has {len(cache)} layers × {tuple(cache.keys[0].shape[2:])} "
                f"(n_kv_heads, head_dim); this model needs {cfg.layers} × "
                f"{(cfg.n_kv_heads, cfg.head_dim)}"
            )
        if (cache.dtype, cache.device) != (weight.dtype, weight.device):
            raise ValueError(
                f"the pool is {cache.dtype} on {cache.device}, the model {weight.dtype} on "
                f"{weight.device}: make it with Decoder.new_paged_cache"
            )
        plan = _paged_plan(entries, cache, cfg, weight.device)
        x = self.embed(plan.ids)
        inverse = rope_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, weight.device)
        cos, sin = _cos_sin(inverse, plan.positions, x.dtype)
        rope = (cos[:, None], sin[:, None])  # [tokens, 1 (heads), head_dim / 2]
        for i, layer in enumerate(self.layers):
            x = layer.forward_paged(x, rope, cache, i, plan)
        # The norm and LM head act on each token alone: run them on the rows returned only.
        rows = plan.last_rows if logits == "last" else plan.entry_order
        return self.lm_head(self.norm(x[rows]))

    @torch.no_grad()
    def generate(
        self, ids: torch.Tensor, new_tokens: int, *, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Greedy decoding: ``new_tokens`` ids [batch, new_tokens] after the prompts ``ids``.

        One prefill (its last logits give the first token), then one decode step per further
        token, into a cache preallocated to the final length.
        """
        if type(new_tokens) is not int or new_tokens < 1:
            raise ValueError(f"new_tokens must be a positive int, got {new_tokens!r}")
        out = torch.empty(ids.shape[0], new_tokens, dtype=torch.long, device=ids.device)
        logits, cache = self(ids, logits="last", lengths=lengths,
                             max_tokens=ids.shape[1] + new_tokens - 1)  # fmt: skip
        for step in range(new_tokens):
            out[:, step] = logits[:, -1].argmax(-1)
            if step + 1 < new_tokens:
                logits, cache = self(out[:, step : step + 1], cache, logits="last")
        return out


def random_decoder(
    cfg: ModelConfig,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    scale: float = 0.05,
) -> Decoder:
    """A decoder with random weights, made fast: built on ``meta``, then every matrix filled
    uniformly in ±``scale`` (random, never zeros, so timings are honest) and the norms set to
    1, directly on ``device`` in ``dtype`` (chapter 6 times it). Inference mode: ``eval()``."""
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    with torch.device("meta"):
        model = Decoder(cfg)
    model = model.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, param in model.named_parameters():  # a tied matrix is listed once
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.uniform_(-scale, scale)
    if cfg.tied_embeddings:
        model.lm_head.weight = model.embed.weight
    return model.eval()


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
    contexts gathers at most 1/3 more than its total context (``DECODE_GROUP_FILL``).
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
        cache_bytes = timing.last_level_cache_bytes(device)
        flush = timing.flush_buffer(device, math.ceil(timing.FLUSH_FACTOR * cache_bytes))
    records = []
    for shape in shapes:
        chunk_blocks = -(-(shape.prefill_context + shape.prefill) // bs) if shape.prefill else 0
        per_decode = -(-(shape.context + 1) // bs)
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
