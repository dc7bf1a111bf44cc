"""The decoder's KV caches: contiguous per sequence (chapter 6) and paged (chapters 7–9).

``KVCache`` holds, per layer, key and value buffers of a fixed capacity; each forward pass
writes its new keys and values into the next free slots in place and attends over the
filled slots, so a decode step copies one token's keys and values, not the cache.
``PagedKVCache`` is a pool of fixed-size blocks, as in vLLM: which blocks a sequence owns is
its caller's block table (``helpers.decoder.paged_step``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from helpers.counting._validate import positive_int
from helpers.counting.memory import kv_blocks
from helpers.counting.models import ModelConfig

__all__ = ["KVCache", "PagedKVCache"]


def _layer_buffers_shape(
    keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], cache: str, buffer: str,
    layout: str,
) -> tuple[int, ...]:
    """The one 4-d shape of a cache's per-layer key and value ``buffer``s (as many keys as
    values, at least one), else ValueError naming ``cache`` and the expected ``layout``."""
    if len(keys) != len(values) or not keys:
        raise ValueError(f"{cache} needs the same number (≥ 1) of key and value {buffer}s, "
                         f"got {len(keys)} and {len(values)}")  # fmt: skip
    shape = tuple(keys[0].shape)
    if len(shape) != 4 or any(tuple(t.shape) != shape for t in (*keys, *values)):
        raise ValueError(f"every key and value {buffer} must have the same shape {layout}, "
                         f"got {[tuple(t.shape) for t in keys]}")  # fmt: skip
    return shape


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
        shape = _layer_buffers_shape(keys, values, "a KVCache", "buffer",
                                     "[batch, n_kv_heads, capacity, head_dim]")
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
        shape = (positive_int(batch, "batch"), cfg.n_kv_heads, positive_int(capacity, "capacity"),
                 cfg.head_dim)
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
        _layer_buffers_shape(keys, values, "a PagedKVCache", "pool",
                             "[num_blocks, block_size, n_kv_heads, head_dim]")
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
        shape = (positive_int(num_blocks, "num_blocks"), positive_int(block_size, "block_size"),
                 cfg.n_kv_heads, cfg.head_dim)
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
        needed = kv_blocks(tokens, self.block_size)
        index = torch.as_tensor(blocks, dtype=torch.long).reshape(-1)
        if index.numel() < needed:
            raise ValueError(f"{tokens} tokens need {needed} blocks, the table has {index.numel()}")
        index = index[:needed].to(self.device)
        return tuple(pool[layer][index].flatten(0, 1)[:tokens].transpose(0, 1)
                     for pool in (self.keys, self.values))  # fmt: skip
