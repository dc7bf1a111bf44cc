"""A compact Llama/Qwen2/Mistral-style decoder in torch (chapters 1 and 6).

RMSNorm, rotary position embeddings, grouped-query attention with a KV cache, SwiGLU MLP,
an LM head (tied to the embedding where the config says so). It is the real implementation
the book's counts are checked against: built on the ``meta`` device it has every shape and
no memory, so ``FlopCounterMode`` can count a 70B model's forward pass on a laptop.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models import ModelConfig

__all__ = ["Decoder", "KVCache"]

KVCache = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer, keys and values of shape [batch, n_kv_heads, tokens, head_dim]."""


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding over the last dimension, half-split layout (as in HF Llama)."""
    half = x.shape[-1] // 2
    inverse_freq = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * inverse_freq[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


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
        positions: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.cfg
        batch, new = x.shape[:2]

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(batch, new, n, cfg.head_dim).transpose(1, 2)

        q = rotate(heads(self.q(x), cfg.n_q_heads), positions)
        k = rotate(heads(self.k(x), cfg.n_kv_heads), positions)
        v = heads(self.v(x), cfg.n_kv_heads)
        if cache is not None:  # the new keys and values join the cached ones
            k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
        context = k.shape[2] - new
        # New token i may see cached tokens and new tokens up to itself.
        mask = torch.ones(new, k.shape[2], dtype=torch.bool, device=x.device).tril(context)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        out = out.transpose(1, 2).reshape(batch, new, cfg.q_dim)
        return self.o(out), (k, v)


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
        self.attention_norm = RMSNorm(cfg.hidden)
        self.attention = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x, positions, cache):
        attended, cache = self.attention(self.attention_norm(x), positions, cache)
        x = x + attended
        return x + self.mlp(self.mlp_norm(x)), cache


class Decoder(nn.Module):
    """The whole decoder. ``forward(ids, cache)`` returns (logits, updated cache)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if not cfg.gated_mlp:
            raise ValueError(f"{cfg.name}: this decoder implements the gated (SwiGLU) MLP only")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied_embeddings:
            self.lm_head.weight = self.embed.weight

    def forward(
        self, ids: torch.Tensor, cache: KVCache | None = None, logits: str = "all"
    ) -> tuple[torch.Tensor, KVCache]:
        """``ids``: [batch, new_tokens]. ``logits="last"`` runs the LM head on the last token."""
        if logits not in ("all", "last"):
            raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
        context = cache[0][0].shape[2] if cache else 0
        positions = torch.arange(context, context + ids.shape[1], device=ids.device)
        x = self.embed(ids)
        new_cache: KVCache = []
        for i, layer in enumerate(self.layers):
            x, layer_cache = layer(x, positions, cache[i] if cache else None)
            new_cache.append(layer_cache)
        x = self.norm(x)
        if logits == "last":
            x = x[:, -1:]
        return self.lm_head(x), new_cache
