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
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models import ModelConfig, RopeScaling

__all__ = ["Decoder", "KVCache", "left_pad", "random_decoder", "rope_frequencies", "rotate"]


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


class Decoder(nn.Module):
    """The whole decoder. ``forward(ids, cache)`` returns (logits, updated cache)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
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
        positions = query_slots if pad is None else (query_slots[None] - pad[:, None]).clamp(min=0)
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
