"""Counting FLOPs (chapter 1, `01_flops`).

One multiply-add is 2 FLOPs, so a matmul [m×k]·[k×n] costs 2mkn. These counts cover the
matmuls only, exactly what ``torch.utils.flop_counter.FlopCounterMode`` counts: norms,
activations, RoPE, softmax, bias adds and residual adds are elementwise and left out (they
are a few FLOPs per element, negligible beside the matmuls, and memory-bound anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers._validate import non_negative_int, one_of, positive_int
from helpers.models import ModelConfig

__all__ = ["ForwardFlops", "matmul_flops", "param_count", "forward_flops", "attended_keys"]

OPS = ("q", "k", "v", "o", "attn_scores", "attn_values", "gate", "up", "down", "lm_head")


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of [m×k]·[k×n]: 2mkn (chapter 1)."""
    for value, name in ((m, "m"), (k, "k"), (n, "n")):
        positive_int(value, name)
    return 2 * m * k * n


def param_count(cfg: ModelConfig) -> int:
    """Parameters of the model: embeddings (once if tied), every layer, the final norm.

    Per layer: q, k, v, o projections (+ q, k, v biases for Qwen2), gate/up/down (SwiGLU),
    and two RMSNorm weight vectors (chapter 1).
    """
    d, f = cfg.hidden, cfg.intermediate
    attention = d * (cfg.q_dim + 2 * cfg.kv_dim) + cfg.q_dim * d
    biases = cfg.q_dim + 2 * cfg.kv_dim if cfg.qkv_bias else 0
    mlp = (3 if cfg.gated_mlp else 2) * d * f
    norms = 2 * d
    embeddings = cfg.vocab * d * (1 if cfg.tied_embeddings else 2)
    return embeddings + cfg.layers * (attention + biases + mlp + norms) + d


def attended_keys(new_tokens: int, context: int, attention: str) -> int:
    """Sum over the new tokens of the keys each one's scores are computed against.

    ``dense``: every new token against all ``context + new_tokens`` keys (what a dense kernel
    executes before masking). ``causal``: new token i sees only ``context + i + 1`` keys.
    """
    total = context + new_tokens
    if attention == "dense":
        return new_tokens * total
    return new_tokens * context + new_tokens * (new_tokens + 1) // 2


@dataclass(frozen=True)
class ForwardFlops:
    """FLOPs of one forward pass: the total and the share of each op (summed over layers)."""

    total: int
    by_op: dict[str, int]


def forward_flops(
    cfg: ModelConfig,
    new_tokens: int,
    context: int = 0,
    batch: int = 1,
    attention: str = "dense",
    logits: str = "all",
) -> ForwardFlops:
    """FLOPs of one forward pass over ``new_tokens`` per sequence (chapter 1).

    ``context`` is the number of tokens already in the KV cache, so prefill of a prompt of S
    tokens is ``forward_flops(cfg, S)`` and one decode step after S tokens is
    ``forward_flops(cfg, 1, context=S)``. Attention FLOPs follow the *query* heads (each query
    head scores its own keys, even when key/value heads are shared under GQA).
    ``logits="last"``: the LM head runs on the last token only, as in serving.
    """
    positive_int(new_tokens, "new_tokens")
    non_negative_int(context, "context")
    positive_int(batch, "batch")
    one_of(attention, ("dense", "causal"), "attention")
    one_of(logits, ("all", "last"), "logits")

    tokens = batch * new_tokens
    per_layer = {name: matmul_flops(tokens, k, n) for name, (k, n) in cfg.linear_shapes().items()}
    lm_head = per_layer.pop("lm_head")
    keys = attended_keys(new_tokens, context, attention)
    # Scores: Q·Kᵀ, head_dim multiply-adds per (query, key) pair; values: P·V, the same.
    per_layer["attn_scores"] = 2 * batch * cfg.n_q_heads * keys * cfg.head_dim
    per_layer["attn_values"] = 2 * batch * cfg.n_q_heads * keys * cfg.head_dim

    by_op = {name: cfg.layers * per_layer[name] for name in OPS if name in per_layer}
    by_op["lm_head"] = lm_head if logits == "all" else lm_head // new_tokens
    return ForwardFlops(total=sum(by_op.values()), by_op=by_op)
