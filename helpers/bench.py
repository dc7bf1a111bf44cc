"""Prefill and decode matmuls, measured (chapter 5, `05_matmuls`): ``python -m helpers.bench``.

Measures this device's ceilings (``helpers.ceilings``), then sweeps the linear layers of one
decoder layer of a preset (q, k, v, o, gate, up, down; identical shapes timed once) over
m = 1, 2, 4, …, 4096 tokens. For each point: time, FLOPs (2mkn), bytes (b·(mk + kn + mn)),
intensity, achieved FLOP/s and B/s, the roofline prediction from the *measured* ceilings,
and which roof bounds it. Prints a table and writes a JSON results file and a roofline PNG.

Kernels. Each point is timed with the fastest of torch's kernels for it on this device
(``helpers.kernels``: on a CPU, eager ``F.linear``, two oneDNN forms of the weight, and for
bf16/fp16 torch's own kernel; on a GPU, ``F.linear``), chosen by a race (``kernels.fastest``)
and then measured properly. The table and JSON name the kernel, and the JSON keeps the
race's times of the others.

Cache. Each point is timed reading its weight from memory (``timing.plan_cache_defeat``):
rotating among at most ``timing.MAX_COPIES`` weight copies that together exceed twice the
last-level cache, or, for a weight too small for that, one copy with the cache flushed before
each timed call. Each point records which (``cache_defeat``: "rotate" or "flush").

Sizes. At each m, each shape's weight is divided by the square of a power of two, its
``scale``: k and n each by ``scale``, but k no lower than ``MIN_SCALED_K`` (``scaled``), and
the scale is 1 unless the device lacks memory for that weight's copies and activations (a quarter
of its memory is the budget). In ``--quick`` mode each shape's scale also grows until its
GEMM would take at most ``QUICK_GEMM_SECONDS`` at the *measured* matmul ceiling of its dtype
(each dtype and each shape has its own scale, so the thin k,v matrix keeps its real size
where the gate shrinks): a fast CPU or a GPU times the real prefill shapes, a slow laptop
scaled ones. Decode-shaped points (small m, where the cost is a weight read)
keep the real sizes; the table and JSON give each point's k and n. ``--scale`` fixes one
scale for every m.

Ceilings. The bandwidth is streamed before the sweep, between dtypes and after it, and the
matmul ceilings are measured before and after it; the final ceilings are the best of all of
them *and* of every point of the sweep (a one-token matmul that streams faster than
``x.sum()`` sets the bandwidth ceiling), and every prediction is made from those
(``raise_ceilings``). So no point sits above its own roofline.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from helpers import ceilings as ceilings_mod
from helpers import kernels, machine, plots, timing
from helpers.ceilings import Ceilings
from helpers.flops import matmul_flops
from helpers.memory import dtype_bytes, linear_bytes
from helpers.models import ModelConfig

__all__ = [
    "LinearShape",
    "SweepPoint",
    "layer_shapes",
    "token_counts",
    "scaled",
    "scaled_shapes",
    "choose_scales",
    "measure_point",
    "predict",
    "raise_ceilings",
    "remeasure_ceilings",
    "points_above_roofline",
    "sweep",
    "paired_decode",
    "format_pairs",
    "fastest_group",
    "run_pairs",
    "summarize",
    "plot_roofline",
    "run",
    "main",
]

DEFAULT_MODEL = "Qwen2.5-7B"
DEFAULT_DTYPES = ("fp32", "bf16")
MAX_TOKENS = 4096
QUICK_GEMM_SECONDS = 0.05
"""In quick mode, the longest a point's largest GEMM may take at the measured ceiling."""
PREFILL_MIN_TOKENS = 1024
MIN_SCALED_K = 896
MIN_SCALED_N = 64
"""A scaled shape keeps k up to ``MIN_SCALED_K`` while n stays at least ``MIN_SCALED_N``."""
BUSY_SHARE = 0.05
BANDWIDTH_DRIFT = 0.15
PAIRS = 60
PAIR_GROUPS = 5
LAYER_OPS = ("q", "k", "v", "o", "gate", "up", "down")


@dataclass(frozen=True)
class LinearShape:
    """One weight shape of a decoder layer: y[m×n] = x[m×k] · Wᵀ, W stored [n×k]."""

    names: tuple[str, ...]
    k: int
    n: int

    @property
    def label(self) -> str:
        return ",".join(self.names)

    @property
    def count(self) -> int:
        """How many of the layer's matmuls have this shape."""
        return len(self.names)


@dataclass(frozen=True)
class SweepPoint:
    """One measured matmul of the sweep, next to its roofline prediction."""

    dtype: str
    shape: str
    count: int
    scale: int
    m: int
    k: int
    n: int
    flops: int
    bytes: int
    intensity: float
    median_s: float
    iqr_s: float
    min_s: float
    max_s: float
    samples: int
    achieved_flops: float
    achieved_bandwidth: float
    predicted_s: float
    prediction_error: float
    bound: str
    kernel: str = kernels.EAGER.name
    race_s: dict[str, float] = field(default_factory=dict)
    """Each kernel's median seconds over the interleaved rounds of the race that chose
    ``kernel`` (empty when only one kernel was available): for choosing, not a measurement to
    quote."""
    cache_defeat: str = "rotate"
    """How the weight was kept out of the cache: "rotate" (``copies`` weight copies) or
    "flush" (one copy, the cache streamed out before every timed call)."""
    copies: int = 1


def layer_shapes(cfg: ModelConfig, scale: int = 1) -> list[LinearShape]:
    """The distinct (in, out) shapes of a layer's linear maps, each ``scaled`` by ``scale``;
    maps sharing a shape (q and o, k and v, gate and up) are grouped."""
    grouped: dict[tuple[int, int], list[str]] = {}
    for name, (k, n) in cfg.linear_shapes().items():
        if name in LAYER_OPS:
            grouped.setdefault((k, n), []).append(name)
    return [scaled(LinearShape(tuple(names), k, n), scale) for (k, n), names in grouped.items()]


def token_counts(max_tokens: int = MAX_TOKENS) -> list[int]:
    """1, 2, 4, … up to ``max_tokens``: decode-shaped at the left, prefill at the right."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    return [2**i for i in range(max_tokens.bit_length()) if 2**i <= max_tokens]


def _memory_needed(
    shape: LinearShape, m: int, dtype: str, cache_bytes: int, device: str = "cpu"
) -> int:
    """Bytes the sweep holds for one shape: its weight copies (as many as m = 1, the point
    with the smallest working set, rotates among; one where it flushes instead,
    ``timing.plan_cache_defeat``) in each form the device's kernels prepare
    (``kernels.prepare_all``: on a CPU plain, oneDNN and packed), plus the largest point's
    inputs and output, with room for one more of each. The flush buffer is shared by every
    point and not counted here."""
    plan = timing.plan_cache_defeat(linear_bytes(1, shape.k, shape.n, dtype), cache_bytes)
    copies = plan.copies
    forms = len({kernel.prepare for kernel in kernels.linear_kernels(device, dtype)})
    b = dtype_bytes(dtype)
    return math.ceil(forms * copies * b * shape.k * shape.n + 2 * b * m * (shape.k + shape.n))


def _weight_copies(shape: LinearShape, dtype: str, device: str, copies: int) -> list[Any]:
    """``copies`` distinct random weights of ``shape``, stored [n×k] as ``nn.Linear`` does."""
    weight = timing.random_tensor((shape.n, shape.k), machine.torch_dtype(dtype), device)
    return timing.shifted_copies(weight, copies)


def scaled(shape: LinearShape, scale: int) -> LinearShape:
    """``shape`` with its weight divided by ``scale``²: k and n each by ``scale``, except
    that k, the length of the sum behind every output element, is cut no lower than
    ``MIN_SCALED_K`` (or its real size) as long as n can give up what k keeps and stay at
    least ``MIN_SCALED_N`` (a thinner output is a different, memory-bound shape). The FLOPs at
    every m fall by ``scale``² either way. A short sum leaves a CPU's vector units idle
    between loads and stores: on the 2-core EPYC this book was written on (AVX2, no native
    bf16; torch 2.13, December 2026), the gate at m = 4096 with k = 112 ran at under half the
    bf16 rate of the same FLOPs with k = 896, and so would sit far below the matmul ceiling
    for a reason real prefill shapes (k ≥ 3584) never meet."""
    if scale < 1:
        raise ValueError(f"scale must be at least 1, got {scale}")
    k_div = scale
    while (k_div > 1 and shape.k // k_div < min(shape.k, MIN_SCALED_K)
           and shape.n // (scale * scale // (k_div // 2)) >= min(shape.n, MIN_SCALED_N)):
        k_div //= 2
    n_div = scale * scale // k_div
    return LinearShape(shape.names, max(1, shape.k // k_div), max(1, shape.n // n_div))


def scaled_shapes(cfg: ModelConfig, scales: int | dict[str, int]) -> list[LinearShape]:
    """The layer's distinct shapes (``layer_shapes``), each divided by its own scale:
    ``scales`` is one scale for all, or ``choose_scales``'s {shape label: scale} at one m."""
    if isinstance(scales, int):
        return [scaled(s, scales) for s in layer_shapes(cfg)]
    return [scaled(s, scales[s.label]) for s in layer_shapes(cfg)]


def choose_scales(
    cfg: ModelConfig,
    dtypes: Sequence[str],
    tokens: Sequence[int],
    ceilings: Ceilings,
    quick: bool,
    seconds: float = QUICK_GEMM_SECONDS,
) -> dict[int, dict[str, int]]:
    """For each m and each of the layer's shapes, the smallest power-of-two divisor whose
    weight copies and activations fit in a quarter of the device's memory and, in quick mode,
    whose GEMM would take at most ``seconds`` at the measured matmul ceiling of the slowest
    of ``dtypes`` (see the module docstring). Per shape, not per layer: a thin k,v matrix is
    timed at its real size long after the gate has to shrink, since a tiny GEMM runs far
    below the ceiling and drags the prefill share down. Returns {m: {shape label: scale}}."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    scales: dict[int, dict[str, int]] = {}
    for m in tokens:
        scales[m] = {}
        for full in layer_shapes(cfg):
            scale = 1
            while scale < min(full.k, full.n):
                shape = scaled(full, scale)
                need = max(_memory_needed(shape, m, d, ceilings.cache_bytes, ceilings.device)
                           for d in dtypes)  # fmt: skip
                gemm_s = max(matmul_flops(m, shape.k, shape.n) / ceilings.peak(d) for d in dtypes)
                if need <= ceilings.memory_bytes // 4 and not (quick and gemm_s > seconds):
                    break
                scale *= 2
            scales[m][full.label] = scale
    return scales


def _candidates(
    prepared: Sequence[tuple[kernels.LinearKernel, Sequence[Any]]],
    xs: Sequence[Any],
    device: str,
    dtype: str,
    m: int,
) -> list[tuple[kernels.LinearKernel, list[tuple[Any, Any]]]]:
    """The kernels ``kernels.linear_kernels`` offers for ``m`` rows, each with its input sets:
    the i-th input beside the kernel's form of the i-th weight."""
    offered = kernels.linear_kernels(device, dtype, m)
    return [(kernel, list(zip(xs, forms[: len(xs)], strict=True)))
            for kernel, forms in prepared if kernel in offered]  # fmt: skip


def measure_point(
    shape: LinearShape,
    m: int,
    dtype: str,
    weights: Sequence[Any],
    ceilings: Ceilings,
    quick: bool = True,
    scale: int = 1,
    prepared: Sequence[tuple[kernels.LinearKernel, Sequence[Any]]] | None = None,
) -> SweepPoint:
    """Time y = x·Wᵀ for random x[m×k], rotating over ``weights`` (each stored [n×k], as
    ``nn.Linear`` stores it), with the fastest kernel of ``kernels.linear_kernels`` (chapter
    5). Where the cache is larger than ``weights`` can cover (``timing.plan_cache_defeat``
    with at most ``len(weights)`` copies), one weight is used and the cache is flushed
    before every timed call instead. ``prepared`` is ``kernels.prepare_all(weights, …)``
    when the caller already has it; the kernels raced are those ``kernels.linear_kernels``
    offers for ``m``."""
    device = ceilings.device
    flops = matmul_flops(m, shape.k, shape.n)
    nbytes = linear_bytes(m, shape.k, shape.n, dtype)
    plan = timing.plan_cache_defeat(nbytes, ceilings.cache_bytes,
                                    max_copies=min(len(weights), timing.MAX_COPIES))  # fmt: skip
    flush = timing.flush_buffer(device, plan.flush_bytes) if plan.method == "flush" else None
    if prepared is None:
        prepared = kernels.prepare_all(weights[: plan.copies], device, dtype)
    x = timing.random_tensor((m, shape.k), machine.torch_dtype(dtype), device)
    xs = timing.shifted_copies(x, plan.copies)
    candidates = _candidates(prepared, xs, device, dtype, m)
    kernel, race, measured = kernels.time_fastest(candidates, device, flush=flush,
                                                  min_run_time=0.03 if quick else 0.3,
                                                  max_run_time=0.1 if quick else 2.0)  # fmt: skip
    point = SweepPoint(
        dtype=dtype, shape=shape.label, count=shape.count, scale=scale, m=m, k=shape.k,
        n=shape.n,
        flops=flops, bytes=nbytes, intensity=flops / nbytes,
        median_s=measured.median_s, iqr_s=measured.iqr_s,
        min_s=measured.min_s, max_s=measured.max_s, samples=measured.n,
        achieved_flops=timing.achieved_flops(flops, measured.median_s),
        achieved_bandwidth=timing.achieved_bandwidth(nbytes, measured.median_s),
        predicted_s=0.0, prediction_error=0.0, bound="", kernel=kernel.name, race_s=race,
        cache_defeat=plan.method, copies=plan.copies,
    )  # fmt: skip
    return predict(point, ceilings)


def predict(point: SweepPoint, ceilings: Ceilings) -> SweepPoint:
    """``point`` with the roofline's prediction for its exact shape from ``ceilings``: the
    time, its error against the measurement (predicted / measured − 1) and the bound."""
    from helpers.roofline import roofline_time

    predicted = roofline_time(point.flops, point.bytes, ceilings.as_hardware_spec(),
                              point.dtype)  # fmt: skip
    return replace(point, predicted_s=predicted.seconds,
                   prediction_error=predicted.seconds / point.median_s - 1,
                   bound=predicted.bound)  # fmt: skip


def raise_ceilings(
    points: Sequence[SweepPoint],
    ceilings: Ceilings,
    bandwidths: Sequence[float] = (),
    matmuls: dict[str, tuple[float, tuple[int, int, int], str]] | None = None,
) -> tuple[list[SweepPoint], Ceilings]:
    """The ceilings raised to the best rate seen anywhere in a run, and every point
    re-predicted from them.

    ``bandwidths``: the stream measured again (between dtypes, after the sweep);
    ``matmuls``: per dtype, a ceiling GEMM measured again, as ``(FLOP/s, shape, kernel)``.
    Then the points themselves: a point's achieved B/s above the bandwidth ceiling (a
    one-token matmul can stream faster than ``x.sum()``: it is the better streaming kernel)
    becomes the ceiling, and a point's achieved FLOP/s above its dtype's matmul ceiling
    becomes that ceiling. On a shared machine other programs' traffic moves every rate from
    second to second; a ceiling is the best this device reached, so no point can beat its own
    roofline."""
    streamed = ceilings_mod.with_best_bandwidth(ceilings, bandwidths)
    bandwidth, method = streamed.bandwidth, streamed.bandwidth_method
    fastest = max(points, key=lambda p: p.achieved_bandwidth, default=None)
    if fastest is not None and fastest.achieved_bandwidth > bandwidth:
        bandwidth = fastest.achieved_bandwidth
        method = (f"the {fastest.dtype} {fastest.shape} matmul at m={fastest.m} "
                  f"({fastest.kernel} kernel), which streamed faster than x.sum()")  # fmt: skip
    flops = dict(ceilings.matmul_flops)
    shapes = dict(ceilings.matmul_shape)
    kernel_names = dict(ceilings.matmul_kernel)
    for dtype, (rate, shape, kernel) in (matmuls or {}).items():
        if dtype in flops and rate > flops[dtype]:
            flops[dtype], shapes[dtype], kernel_names[dtype] = rate, tuple(shape), kernel
    for dtype in flops:
        best = max((p for p in points if p.dtype == dtype), key=lambda p: p.achieved_flops,
                   default=None)  # fmt: skip
        if best is not None and best.achieved_flops > flops[dtype]:
            flops[dtype], shapes[dtype], kernel_names[dtype] = (
                best.achieved_flops, (best.m, best.k, best.n), best.kernel)
    raised = replace(ceilings, bandwidth=bandwidth, bandwidth_method=method,
                     matmul_flops=flops, matmul_shape=shapes,
                     matmul_kernel=kernel_names)  # fmt: skip
    return [predict(p, raised) for p in points], raised


def remeasure_ceilings(
    points: Sequence[SweepPoint],
    ceilings: Ceilings,
    quick: bool = True,
    bandwidths: Sequence[float] = (),
    matmul: bool = True,
) -> tuple[list[SweepPoint], Ceilings, float]:
    """After a sweep: stream the bandwidth again and (if ``matmul``) time each dtype's ceiling
    GEMMs again, then ``raise_ceilings`` with those, the earlier ``bandwidths`` and the
    points. Returns the re-predicted points, the final ceilings and the new stream rate."""
    again = ceilings_mod.measure_bandwidth(ceilings.device, quick)
    matmuls = ({dtype: ceilings_mod.measure_matmul_ceiling(ceilings.device, dtype, quick)
                for dtype in ceilings.matmul_flops} if matmul else {})  # fmt: skip
    points, final = raise_ceilings(points, ceilings, [*bandwidths, again], matmuls)
    return points, final, again


def points_above_roofline(
    results: dict[str, Any], tolerance: float = 0.10
) -> list[dict[str, Any]]:
    """The points of a results file (``run``'s JSON) that sit more than ``tolerance`` above
    their own roofline: achieved FLOP/s above min(matmul ceiling, intensity × bandwidth)."""
    peaks, bandwidth = results["ceilings"]["matmul_flops"], results["ceilings"]["bandwidth"]
    return [p for p in results["points"]
            if p["achieved_flops"] > (1 + tolerance) * min(peaks[p["dtype"]],
                                                           p["intensity"] * bandwidth)]  # fmt: skip


def sweep(
    ceilings: Ceilings,
    cfg: ModelConfig,
    dtypes: Sequence[str],
    scales: dict[int, int] | dict[int, dict[str, int]],
    quick: bool = True,
    progress: bool = True,
) -> list[SweepPoint]:
    """Measure every (dtype, shape, m), m and the shape's scale taken from ``scales``
    (``choose_scales``'s {m: {shape label: scale}}, or {m: one scale for every shape}). A
    shape's weight copies and each kernel's form of them are made once per scale and reused
    for every m at that scale: as many as the scale's smallest m (whose working set is the
    smallest) rotates among, or one where it flushes instead (``timing.plan_cache_defeat``)."""
    from tqdm.auto import tqdm

    full_shapes = layer_shapes(cfg)
    by_shape = {s.label: {m: (by_m if isinstance(by_m, int) else by_m[s.label])
                          for m, by_m in scales.items()} for s in full_shapes}  # fmt: skip
    points: list[SweepPoint] = []
    total = len(dtypes) * len(full_shapes) * len(scales)
    with tqdm(total=total, desc="sweep", disable=not progress) as bar:
        for dtype in dtypes:
            for full in full_shapes:
                for scale in sorted(set(by_shape[full.label].values())):
                    tokens = [m for m, s in by_shape[full.label].items() if s == scale]
                    shape = scaled(full, scale)
                    copies = timing.plan_cache_defeat(
                        linear_bytes(min(tokens), shape.k, shape.n, dtype), ceilings.cache_bytes
                    ).copies
                    weights = _weight_copies(shape, dtype, ceilings.device, copies)
                    prepared = kernels.prepare_all(weights, ceilings.device, dtype)
                    for m in tokens:
                        bar.set_postfix_str(f"{dtype} {shape.label} m={m}")
                        points.append(measure_point(shape, m, dtype, weights, ceilings, quick,
                                                    scale, prepared))  # fmt: skip
                        bar.update()
                    del weights, prepared
    order = {name: i for i, name in enumerate(s.label for s in full_shapes)}
    return sorted(points, key=lambda p: (dtypes.index(p.dtype), order.get(p.shape, 0), p.m))


def paired_decode(
    shape: LinearShape, dtype: str, device: str, pairs: int = PAIRS
) -> tuple[str, LinearShape, list[tuple[float, float]]]:
    """Is a one-token matmul's gap to the bandwidth ceiling the kernel's or the machine's?

    Alternates ``pairs`` times between the bandwidth stream (``ceilings.measure_bandwidth``'s
    ``x.sum()``) and ``shape`` at m = 1 with its fastest kernel, each call timed on its own,
    so that both see the same moment's memory traffic from other programs. The stream reads
    at least twice the last-level cache, so it also flushes the weight out before each
    matmul: one weight copy suffices. Where that copy, in every kernel's form, would not fit
    beside the stream in a quarter of the device's memory, ``shape`` is halved until it does.
    Returns the kernel's name, the shape timed and (stream B/s, matmul B/s) per pair, sorted
    by the stream's rate. Where the stream is fast and the matmul is not, the kernel is what
    falls short."""
    import torch

    if pairs < 1:
        raise ValueError(f"pairs must be at least 1, got {pairs}")
    buffer = ceilings_mod.stream_buffer(device)
    stream_bytes = buffer.numel() * buffer.element_size()
    budget = machine.device_memory_bytes(device) // 4 - stream_bytes
    forms = len({kernel.prepare for kernel in kernels.linear_kernels(device, dtype)})
    while forms * linear_bytes(1, shape.k, shape.n, dtype) > budget and min(shape.k, shape.n) > 1:
        shape = replace(shape, k=max(1, shape.k // 2), n=max(1, shape.n // 2))
    matmul_bytes = linear_bytes(1, shape.k, shape.n, dtype)
    weights = _weight_copies(shape, dtype, device, 1)
    x = timing.random_tensor((1, shape.k), machine.torch_dtype(dtype), device)
    candidates = _candidates(kernels.prepare_all(weights, device, dtype), [x], device, dtype, 1)
    kernel, _ = kernels.fastest(candidates, device, flush=buffer)
    (input_set,) = dict(candidates)[kernel]
    timing.call_seconds(torch.sum, (buffer,), device)  # warm-up, both
    timing.call_seconds(kernel.run, input_set, device)
    rates = []
    for _ in range(pairs):
        stream_s = timing.call_seconds(torch.sum, (buffer,), device)
        matmul_s = timing.call_seconds(kernel.run, input_set, device)
        rates.append((timing.achieved_bandwidth(stream_bytes, stream_s),
                      timing.achieved_bandwidth(matmul_bytes, matmul_s)))  # fmt: skip
    return kernel.name, shape, sorted(rates)


def format_pairs(
    title: str, rates: Sequence[tuple[float, float]], groups: int = PAIR_GROUPS
) -> str:
    """``paired_decode``'s pairs in ``groups`` groups from the slowest stream to the fastest:
    each group's median stream rate, median matmul rate and their ratio."""
    import statistics

    ordered = sorted(rates)
    bounds = [round(i * len(ordered) / groups) for i in range(groups + 1)]
    chunks = [ordered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    lines = [title, f"  {'pairs':>5} {'stream GB/s':>12} {'matmul GB/s':>12} {'matmul/stream':>14}"]
    for chunk in chunks:
        stream = statistics.median(r[0] for r in chunk)
        matmul = statistics.median(r[1] for r in chunk)
        lines.append(f"  {len(chunk):>5} {stream / 1e9:>12.1f} {matmul / 1e9:>12.1f} "
                     f"{matmul / stream:>14.0%}")  # fmt: skip
    return "\n".join(lines)


def fastest_group(
    rates: Sequence[tuple[float, float]], groups: int = PAIR_GROUPS
) -> tuple[float, float]:
    """``paired_decode``'s pairs: the median stream and matmul rates of the group with the
    fastest streams (``format_pairs``'s last row), a rate to hold against the ceilings."""
    import statistics

    if not rates:
        raise ValueError("need at least one pair")
    ordered = sorted(rates)
    top = ordered[round((groups - 1) * len(ordered) / groups):] or ordered[-1:]
    return statistics.median(r[0] for r in top), statistics.median(r[1] for r in top)


def _layer_totals(points: Sequence[SweepPoint]) -> tuple[float, float, float, float]:
    """FLOPs, bytes, measured and predicted seconds of whole layers: each shape counted as
    often as the layer uses it."""
    return (sum(p.count * p.flops for p in points), sum(p.count * p.bytes for p in points),
            sum(p.count * p.median_s for p in points),
            sum(p.count * p.predicted_s for p in points))  # fmt: skip


def summarize(points: Sequence[SweepPoint], ceilings: Ceilings) -> dict[str, dict[str, Any]]:
    """Per dtype, the sweep's headline figures over whole layers (every shape, weighted by
    use): decode (m = 1) achieved B/s as a fraction of the measured bandwidth; prefill
    (m ≥ 1024) achieved FLOP/s as a fraction of the measured matmul ceiling; and the
    roofline prediction's relative error (predicted / measured − 1) for each."""
    summary: dict[str, dict[str, Any]] = {}
    for dtype in dict.fromkeys(p.dtype for p in points):
        ours = [p for p in points if p.dtype == dtype]
        entry: dict[str, Any] = {}
        decode = [p for p in ours if p.m == 1]
        if decode:
            _, nbytes, measured, predicted = _layer_totals(decode)
            entry["decode_bandwidth_fraction"] = nbytes / measured / ceilings.bandwidth
            entry["decode_prediction_error"] = predicted / measured - 1
            entry["decode_kernels"] = sorted({p.kernel for p in decode})
        prefill = [p for p in ours if p.m >= PREFILL_MIN_TOKENS]
        if prefill:
            flops, _, measured, predicted = _layer_totals(prefill)
            entry["prefill_flops_fraction"] = flops / measured / ceilings.peak(dtype)
            entry["prefill_prediction_error"] = predicted / measured - 1
            entry["prefill_kernels"] = sorted({p.kernel for p in prefill})
        summary[dtype] = entry
    return summary


def format_table(points: Sequence[SweepPoint]) -> str:
    """The sweep as a fixed-width text table."""
    header = (f"{'dtype':5} {'shape':8} {'m':>5} {'k':>6} {'n':>6} {'median ms':>10} "
              f"{'IQR ms':>8} {'GFLOP/s':>8} {'GB/s':>7} {'FLOP/B':>7} {'pred ms':>9} "
              f"{'err':>6} {'bound':7} {'kernel':7} cache")  # fmt: skip
    rows = [header, "-" * len(header)]
    for p in points:
        rows.append(
            f"{p.dtype:5} {p.shape:8} {p.m:5d} {p.k:6d} {p.n:6d} {p.median_s * 1e3:10.4f} "
            f"{p.iqr_s * 1e3:8.4f} {p.achieved_flops / 1e9:8.1f} "
            f"{p.achieved_bandwidth / 1e9:7.2f} {p.intensity:7.1f} "
            f"{p.predicted_s * 1e3:9.4f} {p.prediction_error:+6.0%} {p.bound:7} {p.kernel:7} "
            f"{p.cache_defeat}{f' x{p.copies}' if p.cache_defeat == 'rotate' else ''}"
        )
    return "\n".join(rows)


def format_summary(summary: dict[str, dict[str, Any]], ceilings: Ceilings) -> str:
    """Ceilings and headline figures as text."""
    lines = [f"Measured on {ceilings.device_name} ({ceilings.device}), torch "
             f"{ceilings.torch_version}, {ceilings.threads} threads, {ceilings.date}",
             f"  bandwidth ceiling: {ceilings.bandwidth / 1e9:.1f} GB/s "
             f"({ceilings.bandwidth_method})"]  # fmt: skip
    for dtype, peak in ceilings.matmul_flops.items():
        m, k, n = ceilings.matmul_shape[dtype]
        kernel = ceilings.matmul_kernel.get(dtype, kernels.EAGER.name)
        lines.append(f"  {dtype} matmul ceiling: {peak / 1e9:.1f} GFLOP/s (best GEMM "
                     f"{m}x{k}x{n}, {kernel} kernel); ridge {ceilings.ridge(dtype):.1f} "
                     "FLOP/B")  # fmt: skip
    if ceilings.datasheet_chip:
        lines.append(f"  datasheet ({ceilings.datasheet_chip}): "
                     f"{ceilings.datasheet_bandwidth or 0:.3g} B/s, "
                     f"peaks {ceilings.datasheet_flops}")  # fmt: skip
    for dtype, entry in summary.items():
        parts = []
        if "decode_bandwidth_fraction" in entry:
            parts.append(f"decode m=1 {entry['decode_bandwidth_fraction']:.0%} of bandwidth "
                         f"(prediction {entry['decode_prediction_error']:+.0%}, kernel "
                         f"{'/'.join(entry.get('decode_kernels', []))})")  # fmt: skip
        if "prefill_flops_fraction" in entry:
            parts.append(f"prefill m>={PREFILL_MIN_TOKENS} {entry['prefill_flops_fraction']:.0%}"
                         f" of matmul ceiling (prediction "
                         f"{entry['prefill_prediction_error']:+.0%}, kernel "
                         f"{'/'.join(entry.get('prefill_kernels', []))})")  # fmt: skip
        lines.append(f"  {dtype}: " + "; ".join(parts))
    return "\n".join(lines)


def plot_roofline(
    points: Sequence[SweepPoint], ceilings: Ceilings, path: str, subtitle: str | None = None
) -> None:
    """Measured points on the measured roofline, one colour per dtype (log-log PNG), titled
    with the device's name and ``subtitle`` (default: the torch version and date)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    intensities = [p.intensity for p in points]
    span = (min(intensities) / 2, max(intensities) * 2)
    markers = dict(zip(dict.fromkeys(p.shape for p in points), plots.MARKERS, strict=False))
    for i, dtype in enumerate(dict.fromkeys(p.dtype for p in points)):
        colour = f"C{i}"
        plots.plot_roofline(ax, ceilings.peak(dtype), ceilings.bandwidth,
                            label=f"{dtype} measured roofline", color=colour,
                            intensity_range=span, annotate=False)  # fmt: skip
        for shape, marker in markers.items():
            ours = [p for p in points if p.dtype == dtype and p.shape == shape]
            ax.scatter([p.intensity for p in ours], [p.achieved_flops for p in ours],
                       color=colour, marker=marker, s=22, label=f"{dtype} {shape}")  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/B)",
           ylabel="achieved FLOP/s",
           title=f"Linear layers, measured on {ceilings.device_name}\n"
                 f"{subtitle or f'torch {ceilings.torch_version}, {ceilings.date}'}")  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _checked_model(model: str, dtypes: Sequence[str], device: str) -> ModelConfig:
    """The preset, after checking the model, every dtype and the device: a bad argument fails
    before anything is measured."""
    from helpers import models

    cfg = models.get(model)
    for dtype in dtypes:
        machine.torch_dtype(dtype)
    machine.check_device(device)
    return cfg


def run(
    device: str,
    dtypes: Sequence[str],
    model: str = DEFAULT_MODEL,
    quick: bool = False,
    out_dir: str = "bench-results",
    scale: int | None = None,
    max_tokens: int = MAX_TOKENS,
    progress: bool = True,
) -> dict[str, Any]:
    """Measure ceilings, sweep, print the table, write JSON and PNG; returns the results."""
    cfg = _checked_model(model, dtypes, device)
    if scale is not None and scale < 1:
        raise ValueError(f"scale must be at least 1, got {scale}")
    tokens = token_counts(max_tokens)

    start = machine.cpu_seconds()
    ceilings = ceilings_mod.measure_ceilings(device, tuple(dtypes), quick)
    # per dtype: a CPU without bf16 arithmetic must not shrink its fp32 prefill too
    labels = [s.label for s in layer_shapes(cfg)]
    scales = {dtype: ({m: dict.fromkeys(labels, scale) for m in tokens} if scale
                      else choose_scales(cfg, [dtype], tokens, ceilings, quick))
              for dtype in dtypes}  # fmt: skip
    streams = [ceilings.bandwidth]  # before, between dtypes, after
    points: list[SweepPoint] = []
    for i, dtype in enumerate(dtypes):
        if i:
            streams.append(ceilings_mod.measure_bandwidth(device, quick))
        points += sweep(ceilings, cfg, [dtype], scales[dtype], quick, progress)
    points, ceilings, bandwidth_after = remeasure_ceilings(points, ceilings, quick, streams[1:])
    streams.append(bandwidth_after)
    others = machine.others_share(start)
    bandwidth_before = streams[0]
    drift = bandwidth_after / bandwidth_before - 1
    summary = summarize(points, ceilings)

    print(format_table(points))
    print()
    print(format_summary(summary, ceilings))
    if others is not None and others > BUSY_SHARE:
        print(f"warning: other processes used {others:.0%} of the CPU during this run; they "
              "compete with the benchmark's threads, so its timings are slow and noisy",
              file=sys.stderr)  # fmt: skip
    print(f"  bandwidth before the sweep {bandwidth_before / 1e9:.1f} GB/s, after it "
          f"{bandwidth_after / 1e9:.1f} GB/s ({drift:+.0%}); each ceiling is the best rate "
          "of the run")  # fmt: skip
    if abs(drift) > BANDWIDTH_DRIFT:
        print(f"warning: the memory bandwidth changed by {drift:+.0%} during this run (other "
              "processes or tenants using memory): memory-bound timings vary with it",
              file=sys.stderr)  # fmt: skip
    results = {
        "device": device,
        "device_name": ceilings.device_name,
        "torch_version": ceilings.torch_version,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": model,
        "scales": {dtype: {str(m): by_shape for m, by_shape in by_m.items()}
                   for dtype, by_m in scales.items()},  # fmt: skip
        "quick": quick,
        "other_processes_cpu_share": others,
        "bandwidth_streams": streams,
        "cache_bytes": ceilings.cache_bytes,
        "dtypes": list(dtypes),
        "tokens": tokens,
        "shapes": [asdict(s) for s in layer_shapes(cfg)],
        "ceilings": ceilings.to_dict(),
        "summary": summary,
        "points": [asdict(p) for p in points],
    }
    os.makedirs(out_dir, exist_ok=True)
    stem = f"bench_{device.replace(':', '')}"
    json_path = os.path.join(out_dir, f"{stem}.json")
    png_path = os.path.join(out_dir, f"roofline_{device.replace(':', '')}.png")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    plot_roofline(points, ceilings, png_path)
    print(f"\nwrote {json_path} and {png_path}")
    return results


def run_pairs(device: str, dtypes: Sequence[str], model: str = DEFAULT_MODEL,
              pairs: int = PAIRS) -> None:  # fmt: skip
    """``paired_decode`` for the preset's largest linear layer, full size, in each dtype."""
    cfg = _checked_model(model, dtypes, device)
    shape = max(layer_shapes(cfg), key=lambda s: s.k * s.n)
    for dtype in dtypes:
        kernel, timed, rates = paired_decode(shape, dtype, device, pairs)
        title = (f"{model} {timed.label} ({timed.k}x{timed.n}), m=1, {dtype}, {kernel} kernel, "
                 f"on {machine.device_name(device)}:")  # fmt: skip
        print(format_pairs(title, rates))


def _dtype_list(values: Sequence[str] | None) -> list[str]:
    """--dtype given several times and/or as comma lists → unique names, in order."""
    names = [name.strip() for v in values or [] for name in v.split(",") if name.strip()]
    return list(dict.fromkeys(names)) or list(DEFAULT_DTYPES)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.bench",
        description="Measure this device's ceilings and sweep a preset's linear layers "
        "over m = 1 … 4096 tokens (chapter 5).",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:N or mps (default: cuda, then mps, then cpu)",
    )
    parser.add_argument(
        "--dtype",
        action="append",
        help="fp32, bf16 or fp16; repeat or comma-separate (default fp32,bf16)",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"preset (default {DEFAULT_MODEL})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short timings and ceiling GEMMs; on a CPU, prefill-sized GEMMs scaled down",
    )
    parser.add_argument("--out", default="bench-results", help="folder for the JSON and PNG")
    parser.add_argument(
        "--scale",
        type=int,
        default=None,
        help="divide every layer dimension by this at every m (default: automatic)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_TOKENS,
        help=f"largest m of the sweep (default {MAX_TOKENS})",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--pairs",
        type=int,
        default=None,
        metavar="N",
        help="instead of the sweep, alternate the bandwidth stream and the largest layer's "
        "one-token matmul N times: is a decode gap the kernel's or a busy machine's?",
    )
    args = parser.parse_args(argv)  # fmt: skip
    try:
        from helpers.notebook import pick_device

        device = args.device or pick_device()
        if args.pairs is not None:
            run_pairs(device, _dtype_list(args.dtype), args.model, args.pairs)
            return 0
        run(device=device, dtypes=_dtype_list(args.dtype), model=args.model, quick=args.quick,
            out_dir=args.out, scale=args.scale, max_tokens=args.max_tokens,
            progress=not args.no_progress)  # fmt: skip
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
