"""Arithmetic intensity and the roofline (chapter 3, `03_roofline`).

Intensity I = FLOPs / bytes moved. A device that does P FLOP/s and moves β B/s attains
min(P, I·β): below the ridge point P/β an op is memory-bound, above it compute-bound.

The roofline has one name per question it answers:

- ``roof``: the FLOP/s attainable at an intensity, min(P, I·β);
- ``bound_time``: the seconds of a given work (FLOPs, bytes) under two ceilings,
  max(FLOPs/P, bytes/β), labelled by the winning term: every roofline time in the
  helpers is this one;
- ``roofline_time``: ``bound_time`` on a chip of ``helpers.counting.hardware``'s table at a dtype;
- ``matmul_time``: ``bound_time`` of one matmul [m×k]·[k×n] under given ceilings
  (chapters 4, 5 and 7);
- ``decode_split`` / ``decode_aggregate``: a decode step's parts, or the whole step, as
  ``roofline_time``s (the prefill's is ``latency.prefill_time``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from helpers.counting._validate import non_negative_int, one_of, positive_int
from helpers.counting.flops import (
    attention_flops,
    attention_flops_per_key,
    forward_flops,
    matmul_flops,
    param_count,
)
from helpers.counting.hardware import HardwareSpec
from helpers.counting.memory import (
    dtype_bytes,
    expected_experts,
    forward_bytes,
    kv_bytes_per_token,
    linear_bytes,
)
from helpers.counting.models import ModelConfig

__all__ = [
    "gemm_intensity",
    "interview_prefill_intensity",
    "interview_decode_intensity",
    "batched_decode_intensity",
    "gemm_knee",
    "ridge_point",
    "roof",
    "bound_time",
    "RooflineTime",
    "roofline_time",
    "prefill_matmul_times",
    "prefill_split",
    "matmul_time",
    "fusion_speedup",
    "fusion_stops_paying",
    "decode_split",
    "decode_aggregate",
    "critical_batch_aggregate",
    "critical_batch_split",
    "free_batch",
    "decode_attention_intensity",
    "critical_batch_moe",
    "first_batch",
    "decode_split_weight_only",
    "critical_batch_weight_only",
]


def gemm_intensity(m: int, k: int, n: int, dtype: str = "bf16") -> float:
    """[m×k]·[k×n]: 2mkn / (b·(mk + kn + mn)) FLOP/B (chapter 3)."""
    return matmul_flops(m, k, n) / linear_bytes(m, k, n, dtype)


def _check_interview_args(params: int, bytes_per_param: float, kappa: float, tokens: int) -> None:
    positive_int(params, "params")
    positive_int(tokens, "tokens")
    if bytes_per_param <= 0 or kappa <= 0:
        raise ValueError("bytes_per_param and kv_bytes_per_token must be positive")


def interview_prefill_intensity(
    params: int, bytes_per_param: float, kv_bytes_per_token: float, prompt_tokens: int
) -> float:
    """A common interview answer's prefill_I(S) = 2NS / (Nb + κS): every weight read once,
    the prompt's KV cache written once; activations ignored (chapter 3 shows what that misses)."""
    _check_interview_args(params, bytes_per_param, kv_bytes_per_token, prompt_tokens)
    n, s = params, prompt_tokens
    return 2 * n * s / (n * bytes_per_param + kv_bytes_per_token * s)


def interview_decode_intensity(
    params: int, bytes_per_param: float, kv_bytes_per_token: float, context: int
) -> float:
    """A common interview answer's decode_I(S) = 2N / (Nb + κS): one token's FLOPs over every
    weight and the whole KV cache read once."""
    _check_interview_args(params, bytes_per_param, kv_bytes_per_token, context)
    n, s = params, context
    return 2 * n / (n * bytes_per_param + kv_bytes_per_token * s)


def batched_decode_intensity(
    cfg: ModelConfig, batch: int, context: int, dtype: str = "bf16"
) -> float:
    """Aggregate decode intensity for ``batch`` sequences of ``context`` = c cached tokens:
    2NB / (Nb + B·κc).

    Weights are shared by the batch, the KV cache is not, so as B grows this saturates at
    2N / (κc), which for long contexts lies *below* most ridge points (chapter 3).
    """
    positive_int(batch, "batch")
    positive_int(context, "context")
    cfg.require_dense("batched_decode_intensity (N parameters, all used by every token)")
    n = param_count(cfg)
    kappa = kv_bytes_per_token(cfg, dtype)
    return 2 * n * batch / (n * dtype_bytes(dtype) + batch * kappa * context)


def gemm_knee(k: int, n: int, ridge: float, dtype: str = "bf16") -> int | None:
    """Smallest m at which [m×k]·[k×n] reaches intensity ``ridge``, or None (chapters 3, 5).

    2mkn ≥ ridge·b·(mk + kn + mn)  ⟺  m·(2kn − ridge·b·(k + n)) ≥ ridge·b·kn, so the knee is
    ⌈ridge·b·kn / (2kn − ridge·b·(k + n))⌉, and there is none when the shape's ceiling
    2kn / (b(k + n)) is at or below the ridge: then no number of tokens makes it compute-bound.
    """
    positive_int(k, "k")
    positive_int(n, "n")
    if not ridge > 0:
        raise ValueError(f"ridge must be positive, got {ridge!r}")
    b = dtype_bytes(dtype)
    room = 2 * k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    m = max(1, math.ceil(ridge * b * k * n / room))
    # The closed form in floats can land one off: settle it with the exact intensity.
    while m > 1 and gemm_intensity(m - 1, k, n, dtype) >= ridge:
        m -= 1
    while gemm_intensity(m, k, n, dtype) < ridge:
        m += 1
    return m


def ridge_point(hw: HardwareSpec, dtype: str = "bf16") -> float:
    """Peak FLOP/s over bandwidth: the intensity where an op stops being memory-bound."""
    return hw.ridge(dtype)


def roof(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roofline itself: attainable FLOP/s = min(peak, intensity · bandwidth) (chapter 3).
    For a chip of the table: ``roof(I, hw.peak(dtype), hw.bandwidth)``."""
    if not intensity > 0:
        raise ValueError(f"intensity must be positive, got {intensity!r}")
    return min(peak_flops, intensity * bandwidth)


@dataclass(frozen=True)
class RooflineTime:
    """Roofline estimate: the slower of the compute time and the memory time, and the work
    it bounds (``flops`` and ``bytes_moved``, whose ratio is the intensity)."""

    seconds: float
    compute_seconds: float
    memory_seconds: float
    bound: str
    flops: float
    bytes_moved: float


def bound_time(
    flops: float, bytes_moved: float, peak: float, bandwidth: float
) -> RooflineTime:
    """The roofline's time, the one place it is computed: max(FLOPs / peak, bytes /
    bandwidth), labelled by which term wins, a tie going to compute (chapter 3). ``peak``
    and ``bandwidth`` are FLOP/s and B/s: a datasheet's or a device's measured ceilings."""
    if flops < 0 or bytes_moved < 0 or flops + bytes_moved == 0:
        raise ValueError("flops and bytes must be >= 0 and not both zero")
    if not (peak > 0 and bandwidth > 0):
        raise ValueError(f"peak and bandwidth must be positive, got {peak} and {bandwidth}")
    compute = flops / peak
    memory = bytes_moved / bandwidth
    bound = "compute" if compute >= memory else "memory"
    return RooflineTime(max(compute, memory), compute, memory, bound, flops, bytes_moved)


def roofline_time(
    flops: float, bytes_moved: float, hw: HardwareSpec, dtype: str = "bf16"
) -> RooflineTime:
    """``bound_time`` on a chip of the table at a dtype's peak (chapter 3)."""
    return bound_time(flops, bytes_moved, hw.peak(dtype), hw.bandwidth)


def decode_split(
    cfg: ModelConfig, hw: HardwareSpec, batch: int, context: int, dtype: str = "bf16",
    *, kv_dtype: str | None = None, experts: float | None = None,
) -> dict[str, RooflineTime]:  # fmt: skip
    """One decode step split in two parts, each on its own roofline (chapters 3 and 7): they
    share only the small Q, K, V and attention-output activations, so neither hides the
    other's traffic.

    ``weights``: the linear layers and LM head (last token only) over the batch: weights read
    once, FLOPs grow with B. ``attention``: each sequence's scores and values against its
    own KV cache: bytes and FLOPs both grow with B, so its intensity never rises.
    ``kv_dtype`` and ``experts`` are ``memory.forward_bytes``' (chapter 10): a KV cache
    stored narrower than ``dtype``, and the routed experts a MoE layer reads.
    """
    step_flops = forward_flops(cfg, 1, context=context, batch=batch, logits="last").by_op
    step_bytes = forward_bytes(cfg, 1, context=context, batch=batch, dtype=dtype, logits="last",
                               kv_dtype=kv_dtype, experts=experts)  # fmt: skip
    attention = attention_flops(step_flops)
    attention_bytes = step_bytes["attention"]
    return {
        "weights": roofline_time(sum(step_flops.values()) - attention,
                                 sum(step_bytes.values()) - attention_bytes, hw, dtype),
        "attention": roofline_time(attention, attention_bytes, hw, dtype),
    }


def decode_aggregate(
    cfg: ModelConfig, hw: HardwareSpec, batch: int, context: int, dtype: str = "bf16"
) -> RooflineTime:
    """One decode step as a single op (the aggregate model, chapter 3): all its FLOPs and
    bytes under one bound, as if the weights' compute could hide attention's memory
    traffic. ``decode_split`` bounds the two parts on their own, which is what a step runs."""
    step_flops = forward_flops(cfg, 1, context=context, batch=batch, logits="last")
    step_bytes = forward_bytes(cfg, 1, context=context, batch=batch, dtype=dtype, logits="last")
    return roofline_time(step_flops.total, sum(step_bytes.values()), hw, dtype)


def prefill_matmul_times(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, batch: int = 1, dtype: str = "bf16"
) -> dict[str, RooflineTime]:
    """Prefill's weight matmuls on the roofline one shape at a time (chapter 3's explorer):
    the whole pass's average hides them. Each layer's matrices multiply all
    ``batch · prompt_tokens`` rows; the LM head one row per prompt (logits for the last
    token). Matrices with the same shape up to transposition have the same intensity and
    share an entry, keyed by their names joined with "/" ("q/o", "k/v", "gate/up/down",
    "lm_head"): the FLOPs, bytes and time of all of them over all layers."""
    op_flops = forward_flops(cfg, prompt_tokens, batch=batch, logits="last").by_op
    op_bytes = forward_bytes(cfg, prompt_tokens, batch=batch, dtype=dtype, logits="last")
    groups: dict[tuple, list[str]] = {}
    for name, (k, n) in cfg.linear_shapes().items():
        groups.setdefault(("lm_head",) if name == "lm_head" else tuple(sorted((k, n))),
                          []).append(name)  # fmt: skip
    return {"/".join(names): roofline_time(sum(op_flops[name] for name in names),
                                           sum(op_bytes[name] for name in names), hw, dtype)
            for names in groups.values()}  # fmt: skip



def prefill_split(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, batch: int = 1, dtype: str = "bf16"
) -> dict[str, RooflineTime]:
    """Prefill cut into parts that share only small activations, each on its own roofline
    (chapter 3): the weight matmuls one shape at a time (``prefill_matmul_times``), causal
    attention, and the embedding rows read. Their FLOPs and bytes add up to the whole pass's
    (``latency.prefill_time``), so their times add up to at least its bound (a sum of maxima
    is never below the maximum of the sums): kernels that run one after another cannot hide
    one's memory time under another's arithmetic."""
    op_flops = forward_flops(cfg, prompt_tokens, batch=batch, attention="causal",
                             logits="last").by_op  # fmt: skip
    op_bytes = forward_bytes(cfg, prompt_tokens, batch=batch, dtype=dtype, logits="last")
    return prefill_matmul_times(cfg, hw, prompt_tokens, batch, dtype) | {
        "attention": roofline_time(attention_flops(op_flops), op_bytes["attention"], hw, dtype),
        "embedding": roofline_time(0, op_bytes["embedding"], hw, dtype),
    }

def first_batch(holds, max_batch: int) -> int | None:
    """The smallest B in 1 … max_batch for which ``holds(B)`` is true, or None, for a
    ``holds`` that, once true, stays true as B grows (a step turning compute-bound, a TPOT
    past its SLO): bisect for the switch."""
    if not holds(max_batch):
        return None
    low, high = 1, max_batch
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle + 1
    return low


def critical_batch_aggregate(
    cfg: ModelConfig, hw: HardwareSpec, context: int, dtype: str = "bf16"
) -> int | None:
    """Smallest B whose aggregate decode intensity 2NB/(Nb + Bκc) reaches the ridge, or None
    when the saturation value 2N/(κc) stays below it: by this model decode never turns
    compute-bound (chapter 3)."""
    non_negative_int(context, "context")
    cfg.require_dense("critical_batch_aggregate (N parameters, all used by every token)")
    ridge = ridge_point(hw, dtype)
    n, b, kappa = param_count(cfg), dtype_bytes(dtype), kv_bytes_per_token(cfg, dtype)
    denominator = 2 * n - ridge * kappa * context
    if denominator <= 0:
        return None
    return max(1, math.ceil(ridge * n * b / denominator))


def critical_batch_split(
    cfg: ModelConfig, hw: HardwareSpec, dtype: str = "bf16", max_batch: int = 1 << 20
) -> int | None:
    """Smallest B at which a decode step's weight matmuls turn compute-bound (chapter 3).

    Their intensity, with activation traffic, is about 2B/b for B much smaller than the
    layer widths, so B ≈ ridge · b / 2 (≈ the ridge in bf16). Attention is left out: it
    stays memory-bound at any batch. None if not reached by ``max_batch``.
    """
    positive_int(max_batch, "max_batch")

    def compute_bound(batch: int) -> bool:  # the weights' part does not depend on context
        return decode_split(cfg, hw, batch, 1, dtype)["weights"].bound == "compute"

    return first_batch(compute_bound, max_batch)


def free_batch(
    cfg: ModelConfig, hw: HardwareSpec, context: int, slack: float, dtype: str = "bf16",
    max_batch: int = 1 << 40,
) -> int:  # fmt: skip
    """Largest batch B whose decode step, each sequence with ``context`` tokens cached,
    takes at most (1 + ``slack``) times the step of one sequence, both timed by the split
    model (``decode_split``: weight matmuls plus attention, each on its own roofline;
    chapter 3). The weights' part hardly grows until the ridge, attention's grows with B
    from the start, so at long contexts the cache ends cheap batching long before the
    critical batch. ``max_batch`` if no batch up to it is slower than that (the default,
    2⁴⁰, bounds a bisection of 40 steps, well past any batch a large slack allows)."""
    non_negative_int(context, "context")
    positive_int(max_batch, "max_batch")
    if not slack >= 0:
        raise ValueError(f"slack must be >= 0, got {slack!r}")

    def seconds(batch: int) -> float:
        return sum(part.seconds for part in decode_split(cfg, hw, batch, context, dtype).values())

    limit = (1 + slack) * seconds(1)
    slower = first_batch(lambda batch: seconds(batch) > limit, max_batch)
    return max_batch if slower is None else slower - 1


def decode_attention_intensity(
    cfg: ModelConfig, kv_dtype: str = "bf16", mla: str = "absorbed"
) -> float:
    """FLOPs per byte of decode attention over a long cache (chapter 10): one query's
    attention FLOPs against one cached token (``flops.attention_flops_per_key``) over the
    bytes that token's cache holds (``memory.kv_bytes_per_token`` in ``kv_dtype``); the
    query and output, read once per step, are left out. Multi-head attention: 1 FLOP/B in
    bf16; grouped-query: about the group n_q / n_kv; latent attention (absorbed): every
    head reads the one latent, 2 · heads · (2 · kv_lora_rank + qk_rope_head_dim) FLOPs over
    (kv_lora_rank + qk_rope_head_dim) values, about 242 FLOP/B for DeepSeek-V3 in bf16.
    A sliding window changes how many tokens are read, not this ratio."""
    return attention_flops_per_key(cfg, mla) / kv_bytes_per_token(cfg, kv_dtype)


ROUTINGS = ("uniform", "balanced", "dense")


def critical_batch_moe(
    cfg: ModelConfig, hw: HardwareSpec, dtype: str = "bf16", routing: str = "uniform",
    max_batch: int = 1 << 20,
) -> int | None:  # fmt: skip
    """Smallest B at which a decode step's weight matmuls turn compute-bound under a
    mixture of experts (chapter 10), the split roofline's ``critical_batch_split`` with the
    routed experts each MoE layer reads at batch B set by ``routing``: ``"uniform"``, the
    expectation of a router picking at random (``memory.expected_experts``); ``"balanced"``,
    min(E, B·k) (``memory.experts_read``); ``"dense"``, always k: a dense model of the same
    active size, whose every token uses the same weights. The FLOPs follow the active
    parameters and the bytes the experts read, so a batch large enough to read every
    expert needs about total / active times the dense model's B*. None past ``max_batch``."""
    positive_int(max_batch, "max_batch")
    one_of(routing, ROUTINGS, "routing")
    if not cfg.is_moe:
        raise ValueError(f"{cfg.name}: critical_batch_moe needs a mixture of experts")

    def experts(batch: int) -> float | None:
        if routing == "uniform":
            return expected_experts(cfg, batch)
        return None if routing == "balanced" else float(cfg.experts_per_token)

    def compute_bound(batch: int) -> bool:
        split = decode_split(cfg, hw, batch, 1, dtype, experts=experts(batch))
        return split["weights"].bound == "compute"

    return first_batch(compute_bound, max_batch)


def matmul_time(
    m: int, k: int, n: int, peak: float, bandwidth: float, dtype: str = "bf16"
) -> RooflineTime:
    """The roofline time of y[m×n] = x[m×k]·W under ceilings of ``peak`` FLOP/s and
    ``bandwidth`` B/s, a datasheet's or a device's measured ones (chapters 4, 5 and 7):
    ``bound_time`` of 2mkn FLOPs and b(mk + kn + mn) bytes. The knee of the same shape is
    ``gemm_knee(k, n, peak / bandwidth, dtype)``."""
    return bound_time(matmul_flops(m, k, n), linear_bytes(m, k, n, dtype), peak, bandwidth)


def fusion_speedup(
    m: int, k: int, widths: tuple[int, ...], hw: HardwareSpec, dtype: str = "bf16"
) -> float:
    """How many times faster one fused matmul [m×k]·[k×Σn] runs than the separate
    [m×k]·[k×n_i], one after another, each on its own roofline (chapter 3): fusion changes
    no FLOP, it reads the shared input once, so it gains only where a matmul is memory-bound."""
    peak, bandwidth = hw.peak(dtype), hw.bandwidth
    separate = sum(matmul_time(m, k, n, peak, bandwidth, dtype).seconds for n in widths)
    return separate / matmul_time(m, k, sum(widths), peak, bandwidth, dtype).seconds


def fusion_stops_paying(
    k: int, widths: tuple[int, ...], hw: HardwareSpec, dtype: str = "bf16"
) -> int | None:
    """The fewest rows m ≥ 1 of a shared input [m×k] at which the fused [m×k]·[k×Σn] runs
    no faster than the separate [m×k]·[k×n_i], one after another, each on its own roofline
    (chapter 3); None if fusion is faster at every m.

    Fused, the same FLOPs move fewer bytes (the input read once), so fusion gains exactly
    while some separate matmul is memory-bound, and a matmul's intensity grows with its
    width: the narrowest crosses the ridge last, at its ``gemm_knee``, and never where its
    ceiling 2kn / (b(k + n)) is at or below the ridge. One width: nothing to fuse, so 1."""
    positive_int(k, "k")
    if not widths:
        raise ValueError("widths must name at least one matrix")
    for n in widths:
        positive_int(n, "each width")
    if len(widths) == 1:
        return 1
    return gemm_knee(k, min(widths), ridge_point(hw, dtype), dtype)


# Weight-only quantization (chapter 7): int8/int4 weights, bf16 activations.


def decode_split_weight_only(
    cfg: ModelConfig,
    hw: HardwareSpec,
    batch: int,
    context: int,
    dtype: str,
    activation_dtype: str = "bf16",
) -> dict[str, RooflineTime]:
    """``decode_split`` with the weight matrices stored in ``dtype`` and everything
    else (activations, KV cache, the matmuls' arithmetic) in ``activation_dtype``, as
    weight-only quantization runs (chapter 7): the weights are dequantized on the fly, so
    the bytes of the weight part shrink while its FLOPs and peak stay those of
    ``activation_dtype``. With both dtypes equal it is ``decode_split``."""
    split = decode_split(cfg, hw, batch, context, activation_dtype)
    weights = split["weights"]
    elements = cfg.layers * sum(k * n for name, (k, n) in cfg.linear_shapes().items()
                                if name != "lm_head") + cfg.hidden * cfg.vocab  # fmt: skip
    saved = (dtype_bytes(activation_dtype) - dtype_bytes(dtype)) * elements
    flops = weights.compute_seconds * hw.peak(activation_dtype)
    moved = weights.memory_seconds * hw.bandwidth - saved
    return {"weights": roofline_time(flops, moved, hw, activation_dtype),
            "attention": split["attention"]}  # fmt: skip


def critical_batch_weight_only(
    cfg: ModelConfig,
    hw: HardwareSpec,
    dtype: str,
    activation_dtype: str = "bf16",
    max_batch: int = 1 << 20,
) -> int | None:
    """``critical_batch_split`` under weight-only quantization (chapter 7): the smallest B
    at which the weight part of a decode step turns compute-bound. The weight bytes shrink
    by b_w / b_a and the FLOPs do not, so B ≈ ridge · b_w / 2: int8 weights halve the bf16
    critical batch, int4 quarter it. None if not reached by ``max_batch``."""
    positive_int(max_batch, "max_batch")

    def compute_bound(batch: int) -> bool:
        split = decode_split_weight_only(cfg, hw, batch, 1, dtype, activation_dtype)
        return split["weights"].bound == "compute"

    return first_batch(compute_bound, max_batch)
