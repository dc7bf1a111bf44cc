"""A compact Llama/Qwen2/Mistral-style decoder in torch (chapters 1, 2 and 6).

RMSNorm, rotary position embeddings (``helpers.decoder.rope``), grouped-query attention over
a preallocated KV cache (``helpers.decoder.kv_cache``), SwiGLU MLP, an LM head (tied to the
embedding where the config says so). It computes what transformers' Qwen2, Mistral and Llama
models compute given the same weights (tests/helpers/test_decoder_hf.py checks it), and built
on the ``meta`` device it has every shape and no memory, so ``FlopCounterMode`` can count a
70B model's forward pass on a laptop.

``Decoder.forward`` runs a batch of sequences over a ``KVCache`` (left-padded prompts, see
``helpers.decoder.masks``); ``generate`` decodes greedily. Mistral's sliding window is
honoured: a decode step reads only the keys its window holds. For serving (chapters 7–9),
``Decoder.forward_paged`` runs one ragged step of many sequences over a ``PagedKVCache``
(``helpers.decoder.paged_step``): prompt chunks and decodes mixed, every new token packed
into one batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from helpers.counting.models import ModelConfig
from helpers.decoder.kv_cache import KVCache, PagedKVCache
from helpers.decoder.masks import rope_positions, visible_keys
from helpers.decoder.paged_step import PagedEntry, PagedPlan, paged_plan
from helpers.decoder.rope import apply_rope, cos_sin, rope_frequencies

__all__ = ["Attention", "Decoder", "Layer", "MLP", "RMSNorm", "random_decoder"]


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

        q = apply_rope(heads(self.q(x), cfg.n_q_heads), *rope)
        k = apply_rope(heads(self.k(x), cfg.n_kv_heads), *rope)
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
        plan: PagedPlan,
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
        q = apply_rope(self.q(x).view(tokens, cfg.n_q_heads, cfg.head_dim), *rope)
        k = apply_rope(self.k(x).view(tokens, cfg.n_kv_heads, cfg.head_dim), *rope)
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
        mask = visible_keys(query_slots, key_slots, pad, window)
        positions = rope_positions(query_slots, pad)
        if pad is not None:
            positions = positions[:, None]  # [batch, 1 (heads), new]
        x = self.embed(ids)
        inverse = rope_frequencies(self.cfg.head_dim, self.cfg.rope_theta, self.cfg.rope_scaling,
                                   device)  # fmt: skip
        rope = cos_sin(inverse, positions, x.dtype)
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
        plan = paged_plan(entries, cache, cfg, weight.device)
        x = self.embed(plan.ids)
        inverse = rope_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, weight.device)
        cos, sin = cos_sin(inverse, plan.positions, x.dtype)
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
