"""Counting bytes (chapter 2, `02_bytes`).

Weights, the KV cache, and the activations each matmul reads and writes. Quantized formats
(fp8, int8, int4) are counted at their element size; real checkpoints add small per-group
scales, which ``int4_checkpoint_bytes`` counts for an AWQ-style int4 checkpoint and the other
counts leave out.

One precision vocabulary in every signature of the helpers: ``dtype`` is the weights' (and
the activations') dtype, ``kv_dtype`` the KV cache's, None meaning the same as ``dtype``
(``kv_dtype_or`` resolves it). Weight-only quantization, whose activations stay wider than
its weights, names those ``activation_dtype`` (``roofline.decode_split_weight_only``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from helpers.counting._validate import non_negative_int, one_of, positive_int
from helpers.counting.flops import param_count
from helpers.counting.models import ModelConfig, layer_kinds

__all__ = [
    "kv_blocks",
    "kv_footprint",
    "DTYPE_BITS",
    "dtype_bytes",
    "kv_dtype_or",
    "weight_bytes",
    "int4_checkpoint_bytes",
    "kv_bytes_per_token",
    "kv_width",
    "experts_read",
    "expected_experts",
    "kv_cache_bytes",
    "config_kv_cache_bytes",
    "cached_tokens",
    "linear_bytes",
    "forward_bytes",
    "max_concurrent_sequences",
    "longest_context",
    "config_longest_context",
]

DTYPE_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}


def _bits(dtype: str) -> int:
    return DTYPE_BITS[one_of(dtype, tuple(DTYPE_BITS), "dtype")]


def dtype_bytes(dtype: str) -> float:
    """Bytes per element: fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5 (chapter 2)."""
    return _bits(dtype) / 8


def kv_dtype_or(dtype: str, kv_dtype: str | None) -> str:
    """The KV cache's dtype: ``kv_dtype``, or ``dtype`` (the weights') when it is None, the
    one default of every signature that takes both (chapters 2, 7–10). An unknown dtype
    raises, by name."""
    resolved = dtype if kv_dtype is None else kv_dtype
    _bits(resolved)
    return resolved


def _bytes(elements: int, dtype: str) -> int:
    """Bytes of ``elements`` values, rounded up to whole bytes (int4 packs two per byte)."""
    return math.ceil(elements * _bits(dtype) / 8)


def weight_bytes(cfg: ModelConfig, dtype: str = "bf16") -> int:
    """Bytes of all parameters stored in ``dtype`` (chapter 2)."""
    return _bytes(param_count(cfg), dtype)


def int4_checkpoint_bytes(cfg: ModelConfig, group_size: int = 128) -> int:
    """Bytes of a weight-only int4 checkpoint as AWQ files store it (chapter 2; GPTQ's add
    a ``g_idx`` of one int32 per input of each matrix, not counted here).

    Each weight matrix of the decoder layers (q, k, v, o, gate, up, down: ``in × out``)
    holds its values in int4, two a byte, and, for each output column and each group of
    ``group_size`` consecutive inputs (the last group of a column may be shorter), one fp16
    scale and one 4-bit zero point, two a byte; each matrix rounds its packed halves up to
    whole bytes. Everything else (embedding table, LM head, norms, biases) stays bf16.
    The tensors are AutoAWQ's GEMM format (``awq/modules/linear/gemm.py``, ``WQLinear_GEMM``):
    ``qweight`` [in, out/8] int32, ``scales`` [in/group, out] fp16, ``qzeros`` [in/group,
    out/8] int32; for sizes that divide evenly the count above is their ``nbytes``.
    """
    positive_int(group_size, "group_size")
    shapes = cfg.linear_shapes()
    del shapes["lm_head"]  # kept in bf16, as the embedding table is
    packed = quantized = 0
    for k, n in shapes.values():
        groups = n * -(-k // group_size)
        packed += _bytes(k * n, "int4") + groups * 2 + _bytes(groups, "int4")
        quantized += k * n
    return cfg.layers * packed + _bytes(param_count(cfg) - cfg.layers * quantized, "bf16")


def kv_width(cfg: ModelConfig) -> int:
    """Values one token adds to one layer's cache: K and V of each key/value head, or under
    latent attention the latent and the shared rotary key, ``kv_lora_rank`` +
    ``qk_rope_head_dim`` (chapter 10)."""
    if cfg.is_mla:
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim
    return 2 * cfg.kv_dim


def kv_bytes_per_token(cfg: ModelConfig, dtype: str = "bf16") -> int:
    """κ: bytes one token adds to the KV cache, 2 (K and V) · layers · kv heads · head_dim ·
    bytes. It follows the *key/value* heads: GQA shrinks it by n_q / n_kv (chapter 2).
    Latent attention caches layers · (``kv_lora_rank`` + ``qk_rope_head_dim``) values
    (``kv_width``; chapter 10)."""
    return _bytes(cfg.layers * kv_width(cfg), dtype)


def cached_tokens(cfg: ModelConfig, tokens: int) -> int:
    """Tokens a sequence keeps in its KV cache: all of them, or the sliding window's worth."""
    non_negative_int(tokens, "tokens")
    return tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)


def kv_cache_bytes(cfg: ModelConfig, tokens: int, batch: int = 1, dtype: str = "bf16") -> int:
    """KV cache of ``batch`` sequences of ``tokens`` each (chapter 2).

    A sliding-window model (Mistral-7B-v0.1: 4096) keeps only the last window of tokens.
    """
    positive_int(batch, "batch")
    return batch * cached_tokens(cfg, tokens) * kv_bytes_per_token(cfg, dtype)


def _config_layers(config: Mapping) -> tuple[int, int, int, int | None]:
    """How a Hugging Face ``config.json`` dict's cache grows (``config_kv_cache_bytes`` says
    how its fields are read): values one token adds to one layer, full layers, sliding
    layers, and the window (None if no layer slides or the file's window is turned off)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv_heads = positive_int(config.get("num_key_value_heads") or heads, "num_key_value_heads")
    head_dim = positive_int(config.get("head_dim") or config["hidden_size"] // heads, "head_dim")
    window = None if config.get("use_sliding_window") is False else config.get("sliding_window")
    full, sliding = layer_kinds(config.get("layer_types"), layers, window)
    return 2 * kv_heads * head_dim, full, sliding, window


def config_kv_cache_bytes(
    config: Mapping, tokens: int, batch: int = 1, dtype: str = "bf16"
) -> int:
    """KV cache of ``batch`` sequences of ``tokens`` each, read from a Hugging Face
    ``config.json`` dict (chapter 2): every layer keeps a key and a
    value of ``head_dim`` for each of ``num_key_value_heads`` (missing: multi-head,
    ``num_attention_heads``); ``head_dim`` missing or null is ``hidden_size //
    num_attention_heads``. A layer ``layer_types`` marks ``"sliding_attention"`` keeps the
    last ``sliding_window`` tokens; without ``layer_types``, every layer does when
    ``sliding_window`` is set, unless ``use_sliding_window`` is false (Qwen2.5's files name
    a window they do not use). Qwen2's ``max_window_layers`` (transformers keeps layers below
    it full when the window is on) is ignored: no released Qwen2.5 turns the window on.
    Elements at ``dtype``'s size, the total rounded up.
    """
    non_negative_int(tokens, "tokens")
    positive_int(batch, "batch")
    width, full, sliding, window = _config_layers(config)
    kept = full * tokens + (sliding * min(tokens, window) if sliding else 0)
    return _bytes(batch * kept * width, dtype)


def linear_bytes(m: int, k: int, n: int, dtype: str = "bf16") -> int:
    """Bytes a matmul [m×k]·[k×n] moves at the least: read both inputs, write the output once.

    b·(mk + kn + mn): the weights (kn) dominate when m is small, the activations (mk + mn)
    when m is large (chapter 2; its intensity is chapter 3's ``gemm_intensity``).
    """
    for value, name in ((m, "m"), (k, "k"), (n, "n")):
        positive_int(value, name)
    return _bytes(m * k + k * n + m * n, dtype)


def experts_read(cfg: ModelConfig, tokens: int) -> int:
    """Routed experts whose weights one MoE layer reads for ``tokens`` tokens (chapter 10):
    min(n_experts, tokens · experts_per_token), as many as the tokens can reach, which a
    router trained to balance its load approaches; 0 for a dense model. One decode token
    reads ``experts_per_token`` experts; a large enough batch reads them all."""
    non_negative_int(tokens, "tokens")
    return min(cfg.n_experts, tokens * cfg.experts_per_token)


def expected_experts(
    cfg: ModelConfig, tokens: int, load: Sequence[float] | None = None
) -> float:
    """Routed experts one MoE layer reads, in expectation, for ``tokens`` tokens routed
    independently (chapter 10). ``load[i]``: the chance that one token's router picks expert
    i among its ``experts_per_token`` (the chances sum to ``experts_per_token``); default
    uniform, k/E each. Expert i is read unless every token passes it by, so the expectation
    is Σᵢ 1 − (1 − loadᵢ)^B, which for a uniform router is E·(1 − (1 − k/E)^B): k at one
    token, all E as B grows, below ``experts_read``'s min(E, B·k) in between, which needs a
    router that never sends two tokens to one expert. 0 for a dense model."""
    non_negative_int(tokens, "tokens")
    if not cfg.is_moe:
        return 0.0
    if load is None:
        return cfg.n_experts * (1 - (1 - cfg.experts_per_token / cfg.n_experts) ** tokens)
    chances = [float(p) for p in load]
    if len(chances) != cfg.n_experts or not all(0 <= p <= 1 for p in chances):
        raise ValueError(f"load must hold {cfg.n_experts} chances in [0, 1], one an expert")
    if not math.isclose(sum(chances), cfg.experts_per_token, rel_tol=1e-6):
        raise ValueError(f"load must sum to experts_per_token={cfg.experts_per_token}, "
                         f"got {sum(chances):.6g}")  # fmt: skip
    return sum(1 - (1 - p) ** tokens for p in chances)


def forward_bytes(
    cfg: ModelConfig,
    new_tokens: int,
    context: int = 0,
    batch: int = 1,
    dtype: str = "bf16",
    logits: str = "all",
    *,
    kv_dtype: str | None = None,
    experts: float | None = None,
) -> dict[str, int]:
    """Least bytes each op of one forward pass moves, summed over layers (chapter 2).

    Linear ops: their weights once plus activations in and out (``linear_bytes``). Attention:
    read Q, read the K and V cache (``context + new_tokens`` tokens, or the sliding window),
    write the new K and V, write the output. ``embedding``: the looked-up rows. The common
    interview answer counts only weights and the KV cache; this is the better number.

    A MoE layer (chapter 10) reads the router, the weights of ``experts_read`` routed
    experts and the shared experts; each token's activations go in and out of each of its
    experts. Latent attention is counted in the absorbed form (``forward_flops``' default):
    ``kv_b`` reads its weights once and turns each new query's no-rope part into the latent
    space and each head's output back; attention reads those queries, the cached latents
    (``kv_width``), writes the new latent and its output, ``kv_lora_rank`` wide a head.

    ``kv_dtype``: the KV cache stored in another dtype than ``dtype`` (an fp8 or int8 cache
    beside bf16 weights, chapter 10): the cache's reads and writes are counted at its size,
    the queries and outputs at ``dtype``'s. ``experts``: the routed experts a MoE layer reads
    (default ``experts_read``; ``expected_experts`` for a router's expectation, chapter 10).
    """
    positive_int(new_tokens, "new_tokens")
    non_negative_int(context, "context")
    positive_int(batch, "batch")
    one_of(logits, ("all", "last"), "logits")
    if experts is not None and not 0 <= experts <= cfg.n_experts:
        raise ValueError(f"experts must be in 0 … n_experts={cfg.n_experts}, got {experts!r}")
    kv_dtype = kv_dtype_or(dtype, kv_dtype)
    tokens = batch * new_tokens
    d, layers = cfg.hidden, cfg.layers
    cached = batch * cached_tokens(cfg, context + new_tokens)

    def attention_bytes(q_and_out: int, cache: int) -> int:
        if kv_dtype == dtype:  # one rounding, as chapters 1-9 count it
            return _bytes(q_and_out + cache, dtype)
        return _bytes(q_and_out, dtype) + _bytes(cache, kv_dtype)

    traffic: dict[str, int] = {}
    if cfg.is_mla:
        h, latent, rope = cfg.n_q_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
        if cfg.q_lora_rank:
            traffic["q_a"] = layers * linear_bytes(tokens, d, cfg.q_lora_rank, dtype)
            traffic["q_b"] = layers * linear_bytes(tokens, cfg.q_lora_rank, cfg.q_dim, dtype)
        else:
            traffic["q"] = layers * linear_bytes(tokens, d, cfg.q_dim, dtype)
        traffic["kv_a"] = layers * linear_bytes(tokens, d, latent + rope, dtype)
        weights = latent * h * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        # In: the queries' no-rope parts and the heads' latent outputs; out: both turned.
        turned = tokens * h * (cfg.qk_nope_head_dim + latent + latent + cfg.v_head_dim)
        traffic["kv_b"] = layers * _bytes(weights + turned, dtype)
        traffic["o"] = layers * linear_bytes(tokens, h * cfg.v_head_dim, d, dtype)
        width = kv_width(cfg)
        q_and_out = tokens * h * (latent + rope) + tokens * h * latent
        attention = attention_bytes(q_and_out, cached * width + tokens * width)
    else:
        for name, width in (("q", cfg.q_dim), ("k", cfg.kv_dim), ("v", cfg.kv_dim)):
            traffic[name] = layers * linear_bytes(tokens, d, width, dtype)
        traffic["o"] = layers * linear_bytes(tokens, cfg.q_dim, d, dtype)
        q_and_out = 2 * tokens * cfg.q_dim
        kv_read = cached * 2 * cfg.kv_dim
        kv_write = 2 * tokens * cfg.kv_dim
        attention = attention_bytes(q_and_out, kv_read + kv_write)
    dense, moe = layers - cfg.moe_layers, cfg.moe_layers
    if dense:
        f = cfg.intermediate
        if cfg.gated_mlp:
            traffic["gate"] = dense * linear_bytes(tokens, d, f, dtype)
        traffic["up"] = dense * linear_bytes(tokens, d, f, dtype)
        traffic["down"] = dense * linear_bytes(tokens, f, d, dtype)
    if moe:
        f = cfg.expert_intermediate
        traffic["router"] = moe * linear_bytes(tokens, d, cfg.n_experts, dtype)
        # Gate and up read d and write f per routed token, down reads f and writes d.
        routed = tokens * cfg.experts_per_token
        read = experts_read(cfg, tokens) if experts is None else experts
        traffic["experts"] = moe * _bytes(read * 3 * d * f + routed * 3 * (d + f), dtype)
        if cfg.shared_experts:
            shared = cfg.shared_experts * f
            up_and_gate = 2 * linear_bytes(tokens, d, shared, dtype)
            traffic["shared_experts"] = moe * (up_and_gate + linear_bytes(tokens, shared, d, dtype))
    traffic["attention"] = layers * attention
    head_tokens = tokens if logits == "all" else batch
    traffic["lm_head"] = linear_bytes(head_tokens, d, cfg.vocab, dtype)
    traffic["embedding"] = _bytes(tokens * d, dtype)
    return traffic


def max_concurrent_sequences(
    cfg: ModelConfig,
    memory_bytes: float,
    context: int,
    dtype: str = "bf16",
    *,
    kv_dtype: str | None = None,
    reserve_bytes: float = 0,
) -> int:
    """How many sequences of ``context`` tokens fit beside the weights (chapter 2):
    ⌊(memory − weights − reserve) / (κ · cached tokens)⌋, the weights in ``dtype`` and the
    KV cache in ``kv_dtype`` (default ``dtype``), before activations, fragmentation and the
    framework's own reserve (unless ``reserve_bytes`` sets it aside), so a real server fits
    fewer. 0 if the weights alone do not fit.

    Weight-only quantization (int8 or int4 weights, bf16 activations and KV cache; chapter
    7) is ``dtype="int4", kv_dtype="bf16"``; an fp8 cache beside bf16 weights (chapter 10)
    is ``kv_dtype="fp8"``.
    """
    positive_int(context, "context")
    if not memory_bytes > 0:
        raise ValueError(f"memory_bytes must be positive, got {memory_bytes!r}")
    if not reserve_bytes >= 0:
        raise ValueError(f"reserve_bytes must be >= 0, got {reserve_bytes!r}")
    kv_dtype = kv_dtype_or(dtype, kv_dtype)
    free = memory_bytes - weight_bytes(cfg, dtype) - reserve_bytes
    if free <= 0:
        return 0
    return int(free // (kv_bytes_per_token(cfg, kv_dtype) * cached_tokens(cfg, context)))


def _longest_context(
    memory_bytes: float,
    weights: float,
    users: int,
    max_context: int,
    full_bits: int,
    sliding_bits: int,
    window: int | None,
) -> int:
    """The one implementation of ``longest_context`` and ``config_longest_context``: the
    longest context c ≤ ``max_context`` at which ``users`` sequences fit beside ``weights``
    when one sequence of c tokens holds ``full_bits`` · c + ``sliding_bits`` · min(c,
    ``window``) bits of cache, the batch's total rounded up to whole bytes.

    That cache is piecewise linear in c: every layer grows up to the window, only the full
    layers past it, none at all if every layer slides. Each piece is inverted in closed form,
    so any ``max_context`` takes the same few operations."""
    positive_int(users, "users")
    positive_int(max_context, "max_context")
    if not memory_bytes > 0:
        raise ValueError(f"memory_bytes must be positive, got {memory_bytes!r}")
    if not weights >= 0:
        raise ValueError(f"weights must be >= 0, got {weights!r}")
    # ⌈users · bits / 8⌉ ≤ ⌊free⌋ exactly when bits ≤ ⌊8 ⌊free⌋ / users⌋ (bits is whole):
    # a budget in bits per sequence, in integers, so no boundary is lost to a float
    budget = 8 * math.floor(memory_bytes - weights) // users
    growth = full_bits + sliding_bits  # bits a token adds while every layer still grows
    if window is None or window * growth > budget:
        longest = budget // growth  # the budget runs out before the window
    elif full_bits == 0:
        return max_context  # every layer slides: no cache grows past the window
    else:
        longest = (budget - sliding_bits * window) // full_bits  # the full layers alone grow
    return max(0, min(max_context, longest))


def longest_context(
    cfg: ModelConfig,
    memory_bytes: float,
    weights: float,
    users: int,
    max_context: int,
    kv_dtype: str = "bf16",
) -> int:
    """The longest context, at most ``max_context``, at which ``users`` sequences each fit
    their KV cache (in ``kv_dtype``, sized as ``kv_cache_bytes`` sizes it) in
    ``memory_bytes`` beside ``weights`` bytes of weights however stored (``weight_bytes``,
    ``int4_checkpoint_bytes``) (chapter 2): ⌊(memory − weights) / (users · κ)⌋, or
    ``max_context`` when a sliding window caps every sequence's cache within the memory; 0
    if the weights leave no room for one token each. ``config_longest_context`` reads a
    ``config.json`` instead, whose layers may mix windows."""
    kappa_bits = 8 * kv_bytes_per_token(cfg, kv_dtype)  # κ whole, as kv_cache_bytes counts it
    slides = cfg.sliding_window is not None
    return _longest_context(memory_bytes, weights, users, max_context,
                            0 if slides else kappa_bits, kappa_bits if slides else 0,
                            cfg.sliding_window)  # fmt: skip


def config_longest_context(
    config: Mapping,
    memory_bytes: float,
    weights: float,
    users: int,
    max_context: int,
    kv_dtype: str = "bf16",
) -> int:
    """``longest_context`` for a Hugging Face ``config.json`` dict (chapter 2, Exercise 3):
    the longest context, at most ``max_context``, at which ``users`` sequences fit their KV
    caches, sized as ``config_kv_cache_bytes`` sizes them (the batch's total rounded up),
    beside ``weights`` bytes in ``memory_bytes``; 0 if not one token each fits. Up to the
    window every layer grows, past it only the full layers (gpt-oss-20b's half), and no
    cache grows past it if every layer slides: then any context fits once the window does."""
    width, full, sliding, window = _config_layers(config)
    bits = width * _bits(kv_dtype)  # one token in one layer
    return _longest_context(memory_bytes, weights, users, max_context,
                            full * bits, sliding * bits, window)  # fmt: skip


def kv_blocks(tokens: int, block_size: int) -> int:
    """Blocks of ``block_size`` KV slots that ``tokens`` cached tokens take under paging
    (vLLM's PagedAttention; chapters 7–8): ⌈tokens / block_size⌉."""
    non_negative_int(tokens, "tokens")
    positive_int(block_size, "block_size")
    return -(-tokens // block_size)


def kv_footprint(
    requests: Sequence[tuple[int, int]], block_size: int, max_seq_len: int
) -> dict:
    """KV slots a set of finished requests holds, reserved vs paged (chapter 7).

    ``requests``: (prompt, output) tokens. At its end a request's cache holds prompt +
    output − 1 tokens: the last token is emitted but never fed back. A reservation allocator
    (Orca (Max) in the vLLM paper) set aside ``max_seq_len`` slots for each; a paged one
    (vLLM) holds ⌈tokens / block_size⌉ blocks of ``block_size`` slots. Shares: tokens over
    slots, the fraction of the memory holding real tokens.
    """
    positive_int(block_size, "block_size")
    positive_int(max_seq_len, "max_seq_len")
    if not requests:
        raise ValueError("requests is empty")
    tokens = paged = 0
    for index, (prompt, output) in enumerate(requests):
        positive_int(prompt, f"request {index}: prompt")
        positive_int(output, f"request {index}: output")
        if prompt + output > max_seq_len:
            raise ValueError(f"request {index} is {prompt + output} tokens, over "
                             f"max_seq_len={max_seq_len}")  # fmt: skip
        cached = prompt + output - 1
        tokens += cached
        paged += kv_blocks(cached, block_size) * block_size
    reserved = len(requests) * max_seq_len
    return {"tokens": tokens, "paged_slots": paged, "reserved_slots": reserved,
            "paged_share": tokens / paged, "reserved_share": tokens / reserved}  # fmt: skip
