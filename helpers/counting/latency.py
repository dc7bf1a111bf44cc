"""Latency: how long inference's phases take, predicted and measured (chapters 4 to 9).

Each phase is estimated on the roofline: prefill of the prompt gives the time to first token
(TTFT); one decode step gives the time per output token (TPOT); a request that generates n
tokens takes about TTFT + (n − 1)·TPOT, because the first token comes out of prefill.
These are lower bounds: real kernels reach a fraction of peak (chapter 4 measures it).

The module holds, in this order: the roofline's predictions of a request's phases; the same
predictions read off curves measured on a device, and a queue in front of prefill; a measured
time held against the roofline (the verdict on a timing, MFU and MBU, a prediction's error);
and what a measured decode batch sweep says. One streamed request's metrics, read from its
token times, live in ``helpers.serving.metrics``; speculative decoding's, ``helpers.serving.spec``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from helpers.counting._validate import positive_int
from helpers.counting.flops import forward_flops
from helpers.counting.hardware import HardwareSpec
from helpers.counting.memory import dtype_bytes, forward_bytes, max_concurrent_sequences
from helpers.counting.models import ModelConfig
from helpers.counting.roofline import (
    RooflineTime,
    decode_split,
    decode_split_weight_only,
    matmul_time,
    roofline_time,
)

__all__ = [
    "prefill_time",
    "ttft",
    "decode_step_time",
    "tpot",
    "end_to_end",
    "e2e_fixed_tpot",
    "phase_speedups",
    "upgrade_speedups",
    "flops_to_match",
    "batch_at_load",
    "interpolate",
    "predict_e2e",
    "longest_answer",
    "fifo_first_tokens",
    "roofline_verdict",
    "flops_utilization",
    "bandwidth_utilization",
    "prediction_error",
    "check_sweep",
    "sweep_summary",
    "steps_at_context",
    "batch_at_context",
    "measured_knee",
    "quantized_knee",
]


# Predicted on the roofline: a request's phases (chapters 6, 7 and 9).


def prefill_time(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, batch: int = 1, dtype: str = "bf16"
) -> RooflineTime:
    """Roofline time of prefilling ``batch`` prompts: causal attention (a good kernel skips
    the masked half), logits for the last token only, as a server runs it."""
    flops = forward_flops(cfg, prompt_tokens, batch=batch, attention="causal", logits="last")
    bytes_moved = forward_bytes(cfg, prompt_tokens, batch=batch, dtype=dtype, logits="last")
    return roofline_time(flops.total, sum(bytes_moved.values()), hw, dtype)


def ttft(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, batch: int = 1, dtype: str = "bf16"
) -> float:
    """Time to first token, in seconds: the prefill time (queueing and sampling left out)."""
    return prefill_time(cfg, hw, prompt_tokens, batch, dtype).seconds


def decode_step_time(
    cfg: ModelConfig, hw: HardwareSpec, batch: int, context: int, dtype: str = "bf16",
    activation_dtype: str | None = None,
) -> float:  # fmt: skip
    """Seconds for one decode step of ``batch`` sequences with ``context`` cached tokens.

    The split model: the weight matmuls and attention are each bounded on their own and their
    times add (they run one after the other), so a large batch cannot hide attention's
    memory traffic behind the weights' compute (chapters 3 and 7). ``activation_dtype``: the
    activations and KV cache wider than the weights' ``dtype``, as weight-only quantization
    runs (``roofline.decode_split_weight_only``, chapter 7); None: all in ``dtype``.
    """
    parts = (decode_split(cfg, hw, batch, context, dtype) if activation_dtype is None else
             decode_split_weight_only(cfg, hw, batch, context, dtype, activation_dtype))
    return parts["weights"].seconds + parts["attention"].seconds


def tpot(
    cfg: ModelConfig, hw: HardwareSpec, context: int, batch: int = 1, dtype: str = "bf16"
) -> float:
    """Time per output token for one sequence in a batch of ``batch``: one decode step."""
    return decode_step_time(cfg, hw, batch, context, dtype)


def end_to_end(
    cfg: ModelConfig,
    hw: HardwareSpec,
    prompt_tokens: int,
    output_tokens: int,
    batch: int = 1,
    dtype: str = "bf16",
) -> float:
    """TTFT + the decode steps for tokens 2 … n, each at its own context length: after an
    S-token prefill the first step runs at context S (``flops.forward_flops``' convention),
    the last at S + n − 2.

    With a fixed TPOT this is TTFT + (n − 1)·TPOT; here TPOT grows as the cache grows.
    """
    positive_int(prompt_tokens, "prompt_tokens")
    positive_int(output_tokens, "output_tokens")
    total = ttft(cfg, hw, prompt_tokens, batch, dtype)
    for context in range(prompt_tokens, prompt_tokens + output_tokens - 1):
        total += decode_step_time(cfg, hw, batch, context, dtype)
    return total


def e2e_fixed_tpot(ttft_seconds: float, tpot_seconds: float, output_tokens: int) -> float:
    """The simple model: e2e = TTFT + (n − 1)·TPOT (chapter 6). A one-token output has no
    decode step, so its TPOT is not read (it is NaN by ``serving.metrics.tpot_from``)."""
    positive_int(output_tokens, "output_tokens")
    checked = ((ttft_seconds, "ttft_seconds"),) + (
        ((tpot_seconds, "tpot_seconds"),) if output_tokens > 1 else ())
    for value, name in checked:
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
    return ttft_seconds + (output_tokens - 1) * tpot_seconds if output_tokens > 1 else ttft_seconds


def phase_speedups(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, context: int, batch: int,
    factor: float = 2.0, dtype: str = "bf16",
) -> dict[str, dict[str, float]]:  # fmt: skip
    """How much faster each phase runs on a chip ``factor`` times ``hw`` in one ceiling
    (chapter 9): ``{"prefill" | "decode": {"flops" | "bandwidth": speedup}}``, the prefill
    of ``prompt_tokens`` and one decode step of ``batch`` sequences at ``context``."""
    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    chips = {
        "flops": dataclasses.replace(
            hw, peak_flops={name: peak * factor for name, peak in hw.peak_flops.items()}),
        "bandwidth": dataclasses.replace(hw, bandwidth=hw.bandwidth * factor),
    }  # fmt: skip

    def prefill(chip: HardwareSpec) -> float:
        return prefill_time(cfg, chip, prompt_tokens, dtype=dtype).seconds

    def decode(chip: HardwareSpec) -> float:
        return decode_step_time(cfg, chip, batch, context, dtype)

    return {phase: {name: float(seconds(hw) / seconds(chip)) for name, chip in chips.items()}
            for phase, seconds in (("prefill", prefill), ("decode", decode))}  # fmt: skip


def _run_parts(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, output_tokens: int, batch: int,
    dtype: str,
) -> list[RooflineTime]:  # fmt: skip
    """The roofline parts of a request's run (chapter 9's upgrade questions): the prefill
    pass, then each decode step's weight matmuls and attention, each with its FLOPs' and its
    bytes' times, so that one ceiling can be scaled without the other."""
    positive_int(output_tokens, "output_tokens")
    parts = [prefill_time(cfg, hw, prompt_tokens, batch, dtype)]
    for context in range(prompt_tokens, prompt_tokens + output_tokens - 1):
        parts += decode_split(cfg, hw, batch, context, dtype).values()
    return parts


def upgrade_speedups(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, output_tokens: int, batch: int,
    factor: float = 2.0, dtype: str = "bf16",
) -> dict[str, float]:  # fmt: skip
    """End to end, how much faster ``batch`` requests served together run on a chip
    ``factor`` times ``hw`` in one ceiling (chapter 9): one prefill pass of the ``batch``
    prompts, then ``output_tokens`` − 1 decode steps at contexts prompt, prompt + 1, …,
    prompt + output_tokens − 2 (the first step reads the prompt's S tokens). Returns
    ``{"prefill_share": share of the time on hw spent in prefill, "flops": speedup,
    "bandwidth": speedup}``.

    Amdahl's law over the roofline's parts: each part (the prefill pass; each decode step's
    weight matmuls and its attention) keeps its FLOPs and bytes, so on the faster chip it
    takes max(compute / factor, memory) or max(compute, memory / factor) of its times on
    ``hw``. A part gains the whole factor only while it stays on the ceiling that grew."""
    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    parts = _run_parts(cfg, hw, prompt_tokens, output_tokens, batch, dtype)
    before = sum(part.seconds for part in parts)
    flops = sum(max(part.compute_seconds / factor, part.memory_seconds) for part in parts)
    bandwidth = sum(max(part.compute_seconds, part.memory_seconds / factor) for part in parts)
    return {"prefill_share": parts[0].seconds / before, "flops": before / flops,
            "bandwidth": before / bandwidth}  # fmt: skip


def flops_to_match(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, output_tokens: int, batch: int,
    bandwidth_factor: float, dtype: str = "bf16",
) -> float | None:  # fmt: skip
    """The factor by which ``hw``'s peak FLOP/s must grow for ``batch`` requests served
    together (the run of ``upgrade_speedups``) to finish as fast as on a chip with
    ``bandwidth_factor`` times the bandwidth (chapter 9): the smallest f >= 1 with
    Σ max(compute / f, memory) <= Σ max(compute, memory / bandwidth_factor) over the run's
    parts. None when no f can: more FLOP/s never take a part below its memory time, so the
    run never beats Σ memory. Found by bisection on f (the time falls as f grows)."""
    if not bandwidth_factor > 0:
        raise ValueError(f"bandwidth_factor must be positive, got {bandwidth_factor!r}")
    parts = _run_parts(cfg, hw, prompt_tokens, output_tokens, batch, dtype)

    def run(flops_factor: float) -> float:
        return sum(max(p.compute_seconds / flops_factor, p.memory_seconds) for p in parts)

    target = sum(max(p.compute_seconds, p.memory_seconds / bandwidth_factor) for p in parts)
    if run(1.0) <= target:
        return 1.0
    if sum(p.memory_seconds for p in parts) > target * (1 + 1e-12):
        return None
    low, high = 1.0, 2.0
    while run(high) > target * (1 + 1e-13):
        low, high = high, 2 * high
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (low, middle) if run(middle) <= target else (middle, high)
        if high - low <= 1e-14 * high:
            break
    return high


def batch_at_load(
    cfg: ModelConfig, hw: HardwareSpec, context: int, rate: float, decode_steps: int,
    dtype: str = "bf16",
) -> dict[str, float] | None:  # fmt: skip
    """The smallest batch that keeps up with a load, the steady flow's batch rounded up, with
    prefill left out and every sequence at ``context`` (random arrivals make an engine hold
    more on average: its completion rate is concave in B), and its TPOT (chapter 9). ``rate``
    requests/s each need ``decode_steps`` decode steps, every sequence at ``context`` cached
    tokens; a step of B sequences takes ``decode_step_time``. By Little's law the engine
    holds rate · decode_steps · TPOT sequences on average, and TPOT is the step of the batch
    it holds: the smallest B >= 1 with B >= rate · decode_steps · step(B) keeps
    up (below it sequences pile up); at a steady flow the mean held, rate · decode_steps ·
    step(B), is at most B.
    Returns ``{"batch": B, "tpot": step(B)}``, or None when no B that fits in memory
    (``max_concurrent_sequences``) keeps up.

    B / step(B), the tokens a second a batch of B turns out, never falls as B grows (the
    step's fixed part, the weights' read, is shared), so the batches that keep up run from
    the first one to the memory's cap: found by bisection."""
    if not rate > 0:
        raise ValueError(f"rate must be positive, got {rate!r}")
    positive_int(decode_steps, "decode_steps")
    cap = max_concurrent_sequences(cfg, hw.memory_bytes, context, dtype)

    def keeps_up(batch: int) -> bool:
        return batch - rate * decode_steps * decode_step_time(cfg, hw, batch, context, dtype) >= 0

    if cap < 1 or not keeps_up(cap):
        return None
    first, last = 1, cap
    while first < last:
        middle = (first + last) // 2
        first, last = (first, middle) if keeps_up(middle) else (middle + 1, last)
    return {"batch": first, "tpot": decode_step_time(cfg, hw, first, context, dtype)}


# Predicted from curves measured on a device, and behind a queue (chapter 6).


def interpolate(curve: Mapping[int, float], x: float) -> float:
    """A measured curve {x: seconds} read at ``x``: linear between the measured points,
    constant beyond them (as ``numpy.interp``)."""
    if not curve:
        raise ValueError("the curve has no measured points")
    points = sorted((float(k), float(v)) for k, v in curve.items())
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def predict_e2e(
    ttft_curve: Mapping[int, float],
    tpot_curve: Mapping[int, float],
    prompt_tokens: int,
    output_tokens: int,
) -> float:
    """End-to-end seconds of a request from measured curves (chapter 6).

    ``ttft_curve``: prompt length → TTFT; ``tpot_curve``: tokens already in the KV cache →
    seconds of one decode step. Decode step j = 1 … n − 1 starts with prompt + j − 1 tokens
    cached (the prompt and the tokens generated before it, minus the one it feeds in), so
    e2e = TTFT(P) + Σⱼ TPOT(P + j − 1).
    """
    positive_int(prompt_tokens, "prompt_tokens")
    positive_int(output_tokens, "output_tokens")
    total = interpolate(ttft_curve, prompt_tokens)
    for step in range(1, output_tokens):
        total += interpolate(tpot_curve, prompt_tokens + step - 1)
    return total


def longest_answer(
    ttft_curve: Mapping[int, float],
    tpot_curve: Mapping[int, float],
    prompt_tokens: int,
    budget: float,
) -> int:
    """The most output tokens a request of ``prompt_tokens`` can have out within ``budget``
    seconds of its arrival on an idle engine, read off measured curves (chapter 6).

    The first token ends the prefill (``ttft_curve`` at the prompt); each later one costs a
    decode step whose cache holds the prompt and every earlier token but the one it feeds in
    (``tpot_curve`` at prompt + j − 1 for the j-th step, as ``predict_e2e``). 0 when even
    the first token is late. Every point of ``tpot_curve`` must be positive."""
    positive_int(prompt_tokens, "prompt_tokens")
    if not tpot_curve or min(tpot_curve.values()) <= 0:
        raise ValueError("tpot_curve needs at least one point, every one positive")
    clock = interpolate(ttft_curve, prompt_tokens)
    emitted = 0
    while clock <= budget:
        clock += interpolate(tpot_curve, prompt_tokens + emitted)
        emitted += 1
    return emitted


def fifo_first_tokens(
    arrivals: Sequence[float], prefill_s: Sequence[float]
) -> list[tuple[float, float]]:
    """Each request's (queueing wait, TTFT) on an engine that runs one prefill at a time, in
    order of arrival (ties in list order), idle when nothing has arrived (chapter 6).

    ``arrivals``: when each request arrived (any order); ``prefill_s``: its prefill's own
    time. A prefill starts at its arrival or when the one before it ends, whichever is later;
    the wait is that start minus the arrival, and TTFT = wait + prefill. Returned in the
    input order.
    """
    if len(arrivals) != len(prefill_s):
        raise ValueError(f"{len(arrivals)} arrivals but {len(prefill_s)} prefill times")
    if any(not d >= 0 for d in prefill_s):
        raise ValueError("prefill times must be >= 0")
    result: list[tuple[float, float]] = [(0.0, 0.0)] * len(arrivals)
    free = -math.inf  # when the engine finishes the prefill in progress
    for r in sorted(range(len(arrivals)), key=lambda r: arrivals[r]):  # stable: ties in order
        begin = max(float(arrivals[r]), free)
        free = begin + float(prefill_s[r])
        result[r] = (begin - arrivals[r], free - arrivals[r])
    return result


# A measured time held against the roofline: a matmul's, a step's (chapters 4-6; a layer's:
# ``layer_roofline``).


def roofline_verdict(
    m: int, k: int, n: int, dtype: str, seconds: float, peak: float, bandwidth: float,
    tolerance: float = 0.1, *, threads: int = 1, ceiling_threads: int = 1,
    peak_is_lower_bound: bool = False, bandwidth_is_lower_bound: bool = False,
) -> str:  # fmt: skip
    """Whether a timing of [m×k]·[k×n] in ``dtype`` on ``threads`` CPU threads can be, against
    ceilings ``peak`` FLOP/s and ``bandwidth`` B/s measured on ``ceiling_threads`` (chapter 4):
    beaten means by over ``tolerance``; the GEMM moves its inputs and output once. A thread
    adds at most its share of FLOP/s: more threads meet the peak × threads / ceiling_threads,
    fewer the peak itself, still a bound; the bandwidth bounds no more threads than its own.
    The peak first, measured on cached inputs (no cache explains beating it): ``"compute"``,
    the clock stopped before the work did; then ``"memory"``, a cache served the bytes (or the
    clock). A ceiling timed under load (``*_is_lower_bound``: load only slows) or a bandwidth
    beaten on more threads than it was measured on settles nothing, and the next is read:
    ``"unknown"`` if only such ceilings are beaten, ``"ok"`` if none is."""
    if not (seconds > 0 and peak > 0 and bandwidth > 0 and tolerance >= 0
            and threads >= 1 and ceiling_threads >= 1):  # fmt: skip
        raise ValueError("seconds, peak, bandwidth and the threads must be > 0, tolerance >= 0")
    floor = matmul_time(m, k, n, peak * max(1.0, threads / ceiling_threads), bandwidth, dtype)
    unsettled = (peak_is_lower_bound, bandwidth_is_lower_bound or threads > ceiling_threads)
    times = (floor.compute_seconds, floor.memory_seconds)
    beaten = [(verdict, lower) for t, verdict, lower in zip(times, ("compute", "memory"),
              unsettled, strict=True) if t / seconds > 1 + tolerance]  # fmt: skip
    settled = [verdict for verdict, lower in beaten if not lower]
    return settled[0] if settled else "unknown" if beaten else "ok"


def flops_utilization(flop_count: float, seconds: float, peak: float) -> float:
    """MFU: FLOPs a step must do per second it took, over the matmul ceiling (chapter 6)."""
    for value, name in ((seconds, "seconds"), (peak, "peak")):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")
    return flop_count / seconds / peak


def bandwidth_utilization(bytes_moved: float, seconds: float, bandwidth: float) -> float:
    """MBU: bytes a step must move per second it took, over the bandwidth ceiling (ch. 6)."""
    for value, name in ((seconds, "seconds"), (bandwidth, "bandwidth")):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")
    return bytes_moved / seconds / bandwidth


def prediction_error(predicted: float, measured: float) -> float:
    """Relative error of a prediction against a measurement: predicted / measured − 1
    (negative: the roofline promised a faster run than the device delivered; chapter 5)."""
    if measured <= 0:
        raise ValueError(f"measured must be positive, got {measured}")
    return predicted / measured - 1


# A measured decode batch sweep: step time at each batch size (chapter 7).


def check_sweep(step_seconds: Mapping[int, float], name: str = "step_seconds") -> list[int]:
    """A measured sweep's batch sizes, sorted, once ``step_seconds`` (batch size → seconds
    of one step at that batch) has passed the checks every reader of a sweep needs: at
    least one batch, each a positive int, each time positive. ``name``: the argument's
    name in the caller, for the error messages."""
    if not step_seconds:
        raise ValueError(f"{name} is empty: give at least one measured batch size")
    for batch, seconds in step_seconds.items():
        positive_int(batch, f"a {name} batch size")
        if not seconds > 0:
            raise ValueError(f"{name}[{batch}] must be positive, got {seconds!r}")
    return sorted(step_seconds)


def sweep_summary(step_seconds: Mapping[int, float], tpot_slo: float) -> dict:
    """What a decode batch sweep says (chapter 7). ``step_seconds[B]``: the measured time of
    one decode step that advances B sequences by one token each.

    ``tpot``: every sequence waits one whole step per token, so TPOT(B) = step(B).
    ``throughput``: the step emits B tokens, so B / step(B) tokens/s in aggregate.
    ``best_batch``: the batch of highest throughput whose TPOT is at most ``tpot_slo``
    (the smaller batch on a tie), or None if no batch meets the SLO.
    """
    batches = check_sweep(step_seconds)
    if not tpot_slo > 0:
        raise ValueError(f"tpot_slo must be positive, got {tpot_slo!r}")
    tpot = {b: float(step_seconds[b]) for b in batches}
    throughput = {b: b / tpot[b] for b in batches}
    meeting = [b for b in batches if tpot[b] <= tpot_slo]
    best = max(meeting, key=lambda b: (throughput[b], -b)) if meeting else None
    return {"tpot": tpot, "throughput": throughput, "best_batch": best}


def steps_at_context(
    step_seconds: Mapping[int, float], context: int, serve_context: int,
    kv_bytes_per_token: float, bandwidth: float,
) -> dict[int, float]:  # fmt: skip
    """Each measured batch's decode step at ``serve_context`` tokens a sequence, from a sweep
    measured at ``context`` (chapter 7; ``batch_at_context`` chooses among them): every
    sequence reads its own (serve_context − context) · ``kv_bytes_per_token`` more bytes at
    ``bandwidth``; the weights' read and the linear layers' FLOPs stay."""
    batches = check_sweep(step_seconds)
    for value, name in ((kv_bytes_per_token, "kv_bytes_per_token"), (bandwidth, "bandwidth")):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    positive_int(serve_context, "serve_context")
    extra = (serve_context - context) * kv_bytes_per_token / bandwidth  # seconds a sequence
    return {b: step_seconds[b] + b * extra for b in batches}


def batch_at_context(
    step_seconds: Mapping[int, float], context: int, serve_context: int,
    kv_bytes_per_token: float, bandwidth: float, kv_room: float, tpot_slo: float,
) -> int | None:  # fmt: skip
    """The batch to serve at ``serve_context`` tokens a sequence, from a decode sweep
    measured at ``context`` (chapter 7).

    Only attention depends on the context, and no two sequences share its bytes: each
    sequence's step reads (serve_context − context) · ``kv_bytes_per_token`` more (less,
    if negative), streamed at ``bandwidth``, so step(B) grows by B times that; the weights'
    read and the FLOPs of the linear layers stay. A batch is served if its caches,
    B · serve_context · ``kv_bytes_per_token``, fit in ``kv_room`` bytes and its TPOT (the
    step) is at most ``tpot_slo``; of those, the one of most aggregate tokens/s (B / step),
    the smaller on a tie; None if none."""
    if not tpot_slo > 0:
        raise ValueError(f"tpot_slo must be positive, got {tpot_slo!r}")
    at_serve = steps_at_context(step_seconds, context, serve_context, kv_bytes_per_token,
                                bandwidth)  # fmt: skip
    served = [b for b in sorted(at_serve)
              if b * serve_context * kv_bytes_per_token <= kv_room and at_serve[b] <= tpot_slo]
    if not served:
        return None
    return max(served, key=lambda b: (b / at_serve[b], -b))


def measured_knee(step_seconds: Mapping[int, float]) -> float:
    """A sweep's knee through the origin (chapter 7): step(1) · B_max / step(B_max), batch 1's
    step over the largest batch's step per sequence. With steps a + sB (s: compute and each
    sequence's own KV read; a ≥ 0: what does not grow with B) it is a lower bound on t(1)/s,
    the knee a larger sweep would read (``DecodeSweep.knee_is_lower_bound``), and a puts
    t(1)/s past the two-point knee (t(1) − a)/s (``quantized_knee``) by a/s. It reads the
    critical batch only past it, with a and the KV read small. Needs batch 1 in the sweep."""
    batches = check_sweep(step_seconds)
    if batches[0] != 1:
        raise ValueError("the sweep needs batch 1: the knee is read against it")
    largest = batches[-1]
    return step_seconds[1] * largest / step_seconds[largest]


def quantized_knee(
    step_seconds: Mapping[int, float],
    n_params: int,
    bandwidth: float,
    dtype: str,
    quantized_dtype: str,
) -> dict[str, float]:
    """A sweep's knee, and the knee the same model would have with its weights stored in
    ``quantized_dtype`` (weight-only quantization), from the sweep alone (chapter 7).

    ``step_seconds``: decode steps with weights in ``dtype``, each reading ``n_params``
    weights (the matmuls' and the LM head's, not the embedding) at ``bandwidth`` B/s. The
    flat end is the smallest batch's step; the steep end, the line through the two largest
    batches (slope s, intercept a: a step's fixed cost); ``knee`` = (floor − a)/s. The
    caller promises those two batches compute-bound in their weights (at or past the
    critical batch of ``dtype``, so of ``quantized_dtype`` too); the times cannot show it.
    Then quantizing shrinks only the floor, by (W(dtype) − W(quantized_dtype))/bandwidth,
    whole bytes (int4 packs two weights per byte); the line, the same FLOPs and attention,
    stays. Short of B* the line still holds a weight read and the prediction misses.
    ``quantized_knee``: the lowered floor meets the line; at or below 0 is 0.0. With no fixed
    cost and no KV read the knee falls by the byte ratio, W(quantized_dtype)/W(dtype).
    """
    batches = check_sweep(step_seconds)
    if len(batches) < 3:
        raise ValueError("the sweep needs at least 3 batch sizes: a floor and a line of two")
    low, (before, last) = batches[0], batches[-2:]
    slope = (step_seconds[last] - step_seconds[before]) / (last - before)
    if not slope > 0:
        raise ValueError("the two largest batches do not grow with B: no compute-bound end")
    intercept = step_seconds[last] - slope * last
    floor = step_seconds[low]
    whole = [math.ceil(n_params * dtype_bytes(d)) for d in (dtype, quantized_dtype)]
    saved = (whole[0] - whole[1]) / bandwidth
    if not floor - saved > 0:
        raise ValueError("reading the weights saves more than the smallest step takes: "
                         "the bandwidth does not fit this sweep")
    return {"knee": max(0.0, (floor - intercept) / slope),
            "quantized_knee": max(0.0, (floor - saved - intercept) / slope)}
