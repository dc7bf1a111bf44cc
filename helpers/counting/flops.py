"""Counting FLOPs (chapter 1, `01_flops`).

One multiply-add is 2 FLOPs, so a matmul [m×k]·[k×n] costs 2mkn. These counts cover the
matmuls only, exactly what ``torch.utils.flop_counter.FlopCounterMode`` counts: norms,
activations, RoPE, softmax, bias adds and residual adds are elementwise and left out (they
are a few FLOPs per element, negligible beside the matmuls, and memory-bound anyway).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import ceil

from helpers.counting._validate import non_negative_int, one_of, positive_int
from helpers.counting.models import ModelConfig, layer_kinds

__all__ = ["ForwardFlops", "matmul_flops", "param_count", "active_param_count", "forward_flops",
           "attended_keys", "op_names", "attention_flops", "attention_flops_per_key",
           "decode_flops_split", "attention_balance_keys", "attention_crossover"]

OPS = ("q", "k", "v", "o", "attn_scores", "attn_values", "gate", "up", "down", "lm_head")
"""The ops of a dense decoder's forward pass, in ``forward_flops``' order."""
MLA_OPS = ("q", "q_a", "q_b", "kv_a", "kv_b")
"""Latent attention's projections (chapter 10), in place of q, k and v: ``q`` (one matrix)
when there is no query latent, else ``q_a`` then ``q_b``; ``kv_a`` writes the latent and
the rotary key, ``kv_b`` turns the latent into each head's key and value."""
MOE_OPS = ("router", "experts", "shared_experts")
"""A MoE layer's MLP (chapter 10): the router's scores, the routed experts each token runs
(gate, up and down together), the shared experts every token runs."""


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of [m×k]·[k×n]: 2mkn (chapter 1)."""
    for value, name in ((m, "m"), (k, "k"), (n, "n")):
        positive_int(value, name)
    return 2 * m * k * n


def _attention_params(cfg: ModelConfig) -> int:
    """Weights of one layer's attention: projections, biases, and any head norms."""
    d = cfg.hidden
    if cfg.is_mla:
        h, latent, rope = cfg.n_q_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
        q_rank = cfg.q_lora_rank
        # A query latent has its own RMSNorm (q_rank weights), as the kv latent has.
        query = d * q_rank + q_rank + q_rank * cfg.q_dim if q_rank else d * cfg.q_dim
        kv = d * (latent + rope) + latent + latent * h * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        return query + kv + h * cfg.v_head_dim * d
    projections = d * (cfg.q_dim + 2 * cfg.kv_dim) + cfg.q_dim * d
    biases = cfg.q_dim + 2 * cfg.kv_dim if cfg.qkv_bias else 0
    head_norms = 2 * cfg.head_dim if cfg.qk_norm else 0
    return projections + biases + head_norms


def _mlp_params(cfg: ModelConfig, experts: int) -> tuple[int, int]:
    """(weights of one dense layer's MLP, of one MoE layer's with ``experts`` routed experts
    counted): the router, those experts and the shared experts."""
    d = cfg.hidden
    dense = (3 if cfg.gated_mlp else 2) * d * cfg.intermediate
    moe = d * cfg.n_experts + (experts + cfg.shared_experts) * 3 * d * cfg.expert_intermediate
    return dense, moe


def _params(cfg: ModelConfig, experts: int) -> int:
    d = cfg.hidden
    dense_mlp, moe_mlp = _mlp_params(cfg, experts)
    dense_layers = cfg.layers - cfg.moe_layers
    norms = 2 * d
    embeddings = cfg.vocab * d * (1 if cfg.tied_embeddings else 2)
    layers = cfg.layers * (_attention_params(cfg) + norms)
    return embeddings + layers + dense_layers * dense_mlp + cfg.moe_layers * moe_mlp + d


def param_count(cfg: ModelConfig) -> int:
    """Parameters of the model: embeddings (once if tied), every layer, the final norm.

    Per layer: q, k, v, o projections (+ q, k, v biases for Qwen2), gate/up/down (SwiGLU),
    and two RMSNorm weight vectors (chapter 1). A mixture of experts counts every expert
    and the router; latent attention its projections and latent norms (chapter 10).
    """
    return _params(cfg, cfg.n_experts)


def active_param_count(cfg: ModelConfig) -> int:
    """Parameters one token's forward pass uses (chapter 10): ``param_count`` with only
    ``experts_per_token`` of each MoE layer's routed experts (the router and the shared
    experts run for every token). Embeddings and LM head included; a dense model's is its
    ``param_count``."""
    return _params(cfg, cfg.experts_per_token)


def attended_keys(new_tokens: int, context: int, attention: str) -> int:
    """Sum over the new tokens of the keys each one's scores are computed against.

    ``dense``: every new token against all ``context + new_tokens`` keys (what a dense kernel
    executes before masking). ``causal``: new token i sees only ``context + i + 1`` keys.
    """
    total = context + new_tokens
    if attention == "dense":
        return new_tokens * total
    return new_tokens * context + new_tokens * (new_tokens + 1) // 2


def op_names(cfg: ModelConfig) -> tuple[str, ...]:
    """The keys of ``forward_flops(cfg, …).by_op``, in order: ``OPS`` for a dense decoder;
    latent attention's projections (``MLA_OPS``) replace q, k and v, and a MoE's ops
    (``MOE_OPS``, no shared experts if it has none) follow the dense layers' MLP."""
    attention = ("q", "k", "v")
    if cfg.is_mla:
        attention = ("q_a", "q_b", "kv_a", "kv_b") if cfg.q_lora_rank else ("q", "kv_a", "kv_b")
    mlp: tuple[str, ...] = ("gate", "up", "down") if cfg.layers > cfg.moe_layers else ()
    if cfg.is_moe:
        mlp += ("router", "experts") + (("shared_experts",) if cfg.shared_experts else ())
    if not cfg.gated_mlp:
        mlp = tuple(name for name in mlp if name != "gate")
    return attention + ("o", "attn_scores", "attn_values") + mlp + ("lm_head",)


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
    mla: str = "absorbed",
) -> ForwardFlops:
    """FLOPs of one forward pass over ``new_tokens`` per sequence (chapter 1).

    ``context`` is the number of tokens already in the KV cache, so prefill of a prompt of S
    tokens is ``forward_flops(cfg, S)`` and one decode step after S tokens is
    ``forward_flops(cfg, 1, context=S)``. Attention FLOPs follow the *query* heads (each query
    head scores its own keys, even when key/value heads are shared under GQA).
    ``logits="last"``: the LM head runs on the last token only, as in serving.

    A mixture of experts (chapter 10) counts the router over all experts and, per token,
    only the ``experts_per_token`` routed experts it runs, plus the shared experts.
    Latent attention (chapter 10) keeps the latent in the cache either way; ``mla`` says how
    attention runs over it. ``"absorbed"`` (DeepSeek-V2's inference form, what serving
    engines decode with): ``kv_b``'s key half is folded into each new query and its value
    half into each head's output, so every head scores and sums over the latent itself,
    ``kv_lora_rank`` + ``qk_rope_head_dim`` wide for the scores and ``kv_lora_rank`` for the
    values. ``"expanded"`` (what transformers runs): every cached and new token's latent goes
    through ``kv_b`` on every pass, and each head scores its ``head_dim``-wide keys and sums
    its ``v_head_dim``-wide values.
    """
    positive_int(new_tokens, "new_tokens")
    non_negative_int(context, "context")
    positive_int(batch, "batch")
    one_of(attention, ("dense", "causal"), "attention")
    one_of(logits, ("all", "last"), "logits")
    one_of(mla, ("absorbed", "expanded"), "mla")

    tokens = batch * new_tokens
    keys = attended_keys(new_tokens, context, attention)
    d, h = cfg.hidden, cfg.n_q_heads
    layers, moe, dense = cfg.layers, cfg.moe_layers, cfg.layers - cfg.moe_layers
    by_op: dict[str, int] = {}
    if cfg.is_mla:
        latent, rope = cfg.kv_lora_rank, cfg.qk_rope_head_dim
        if cfg.q_lora_rank:
            by_op["q_a"] = layers * matmul_flops(tokens, d, cfg.q_lora_rank)
            by_op["q_b"] = layers * matmul_flops(tokens, cfg.q_lora_rank, cfg.q_dim)
        else:
            by_op["q"] = layers * matmul_flops(tokens, d, cfg.q_dim)
        by_op["kv_a"] = layers * matmul_flops(tokens, d, latent + rope)
        # kv_b's FLOPs per row are the same either way; expanded runs it on every key's row.
        kv_b_rows = tokens if mla == "absorbed" else batch * (context + new_tokens)
        by_op["kv_b"] = layers * matmul_flops(
            kv_b_rows, latent, h * (cfg.qk_nope_head_dim + cfg.v_head_dim))
        by_op["o"] = layers * matmul_flops(tokens, h * cfg.v_head_dim, d)
        score_width, value_width = ((latent + rope, latent) if mla == "absorbed"
                                    else (cfg.head_dim, cfg.v_head_dim))  # fmt: skip
    else:
        for name, width in (("q", cfg.q_dim), ("k", cfg.kv_dim), ("v", cfg.kv_dim)):
            by_op[name] = layers * matmul_flops(tokens, d, width)
        by_op["o"] = layers * matmul_flops(tokens, cfg.q_dim, d)
        score_width = value_width = cfg.head_dim
    # Scores: Q·Kᵀ, score_width multiply-adds per (query, key) pair; values: P·V.
    by_op["attn_scores"] = layers * 2 * batch * h * keys * score_width
    by_op["attn_values"] = layers * 2 * batch * h * keys * value_width
    if dense:
        f = cfg.intermediate
        if cfg.gated_mlp:
            by_op["gate"] = dense * matmul_flops(tokens, d, f)
        by_op["up"] = dense * matmul_flops(tokens, d, f)
        by_op["down"] = dense * matmul_flops(tokens, f, d)
    if moe:
        expert = 3 * matmul_flops(tokens, d, cfg.expert_intermediate)  # gate, up, down
        by_op["router"] = moe * matmul_flops(tokens, d, cfg.n_experts)
        by_op["experts"] = moe * cfg.experts_per_token * expert
        if cfg.shared_experts:
            by_op["shared_experts"] = moe * cfg.shared_experts * expert
    lm_head = matmul_flops(tokens, d, cfg.vocab)
    by_op["lm_head"] = lm_head if logits == "all" else lm_head // new_tokens
    by_op = {name: by_op[name] for name in op_names(cfg)}
    return ForwardFlops(total=sum(by_op.values()), by_op=by_op)


def attention_flops(by_op: Mapping[str, int]) -> int:
    """Attention's share of a pass's FLOPs, from ``forward_flops(…).by_op``: the scores
    (Q·Kᵀ) and the weighted sum of the values (P·V). Every other op is a matmul by weights,
    whose FLOPs do not depend on the context; these grow with the keys attended to."""
    return by_op["attn_scores"] + by_op["attn_values"]


def attention_flops_per_key(cfg: ModelConfig, mla: str = "absorbed") -> int:
    """Attention FLOPs of one query against one key, over every layer: one new token with
    an empty cache attends to one key (itself). For a dense decoder it is
    4 · layers · n_q_heads · head_dim (a multiply-add per element of the scores and of the
    values); a query attending to S keys costs S times this."""
    return attention_flops(forward_flops(cfg, 1, mla=mla).by_op)


def decode_flops_split(cfg: ModelConfig, keys: int) -> tuple[int, int]:
    """(attention FLOPs, all other FLOPs) of the decode step whose token attends to ``keys``
    keys (itself and ``keys - 1`` cached), as a server runs it: the LM head for its one
    token. The rest, every layer's weight matmuls and the LM head, does not grow with the
    keys (chapter 1; its explorer draws the two)."""
    step = forward_flops(cfg, 1, context=keys - 1, logits="last")
    attention = attention_flops(step.by_op)
    return attention, step.total - attention


def attention_balance_keys(cfg: ModelConfig) -> Fraction:
    """The keys (exactly, a fraction) at which a decode step's attention FLOPs equal
    everything else it runs (``decode_flops_split``; chapter 1, whose explorer draws this
    line). A sliding window is not applied: ``attention_crossover`` does."""
    per_key, rest = decode_flops_split(cfg, 1)  # the first token attends to itself only
    return Fraction(rest, per_key)


def attention_crossover(cfg: ModelConfig, layer_types: Sequence[str] | None = None) -> int | None:
    """Smallest context c (tokens already in the KV cache) at which a decode step spends at
    least as many FLOPs on attention as on everything else it runs as a server runs it:
    every layer's weight matmuls and the LM head for its one token (chapter 1, exercise 4).
    Its token attends to c + 1 keys in a full layer and to at most ``sliding_window`` in a
    sliding one; ``layer_types`` lists each layer's kind (``models.layer_kinds``; None:
    every layer slides when the config has a window). Past the window only the full layers'
    attention still grows, so a model with one full layer crosses at last; None when every
    layer slides and the window keeps attention below the rest."""
    full, sliding = layer_kinds(layer_types, cfg.layers, cfg.sliding_window)
    balance = attention_balance_keys(cfg)  # keys at which all layers' attention = the rest
    keys = max(1, ceil(balance))
    if sliding and keys > cfg.sliding_window:
        if not full:
            return None
        # In units of one layer's key: the rest is balance · L keys; the sliding layers stop
        # at the window, so the full layers make up what is left.
        keys = ceil((balance * cfg.layers - sliding * cfg.sliding_window) / full)
    return keys - 1  # the new token is one of its own keys
