"""The matmul sweep as a library (chapter 5, `05_matmuls`): ``python -m helpers.programs.bench`` is
its
command line and reports.

Sweeps the linear layers of one decoder layer of a preset (q, k, v, o, gate, up, down;
identical shapes timed once) over m = 1, 2, 4, …, 4096 tokens. For each point: time, FLOPs
(2mkn), bytes (b·(mk + kn + mn)), intensity, achieved FLOP/s and B/s, the roofline prediction
from the *measured* ceilings (``roofline.bound_time``), and which roof bounds it.

Kernels. Each point is timed with the fastest of torch's kernels for it on this device
(``helpers.measuring.kernels``: on a CPU, eager ``F.linear``, two oneDNN forms of the weight, and
for
bf16/fp16 torch's own kernel; on a GPU, ``F.linear``), chosen by a race (``kernels.fastest``)
and then measured properly. Each point names the kernel and keeps the race's times of the
others.

Cache. Each point is timed reading its weight from memory (``timing.plan_cache_defeat``):
rotating among at most ``timing.MAX_COPIES`` weight copies that together exceed twice the
last-level cache, or, for a weight too small for that, a round of a few copies (at most half
the cache) with the cache flushed before each round. Each point records which
(``cache_defeat``: "rotate" or "flush") and how many copies.

Sizes. At each m, each shape's weight is divided by the square of a power of two, its
``scale``: k and n each by ``scale``, but k no lower than ``MIN_SCALED_K`` (``scaled``), and
the scale is 1 unless the device lacks memory for that weight's copies and activations (a quarter
of its memory is the budget). In quick mode each shape's scale also grows until its
GEMM would take at most ``QUICK_GEMM_SECONDS`` at the *measured* matmul ceiling of its dtype
(each dtype and each shape has its own scale, so the thin k,v matrix keeps its real size
where the gate shrinks): a fast CPU or a GPU times the real prefill shapes, a slow laptop
scaled ones (``choose_scales``). A point under the budget (small m) keeps the real sizes.

Ceilings. The bandwidth is streamed before the sweep, between dtypes and after it, and the
matmul ceilings are measured before and after it; the final ceilings are the best of all of
them *and* of every point of the sweep (a one-token matmul that streams faster than
``x.sum()`` sets the bandwidth ceiling), and every prediction is made from those
(``raise_ceilings``). A point sets a ceiling only if its timing is steady (IQR under
``ceilings.STEADY_SPREAD`` of its median, ``ceilings.steady``). So no steady point sits above
its own roofline. Its results record, and what is read from it: ``sweep_record``.

Paired decode. ``paired_decode`` alternates the bandwidth stream and a one-token matmul, to
tell a kernel's shortfall from a busy machine's (``fastest_group``; ``pairs.pairs_reading``
says which).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from helpers.counting.flops import matmul_flops
from helpers.counting.latency import prediction_error
from helpers.counting.memory import dtype_bytes, linear_bytes
from helpers.counting.models import ModelConfig
from helpers.counting.roofline import bound_time
from helpers.measuring import ceilings as ceilings_mod
from helpers.measuring import kernels, machine, timing
from helpers.measuring.ceilings import Ceilings

__all__ = [
    "input_bytes",
    "LAYERS",
    "MAX_TOKENS",
    "PREFILL_MIN_TOKENS",
    "LinearShape",
    "SweepPoint",
    "layer_shapes",
    "token_counts",
    "scaled",
    "scaled_shapes",
    "choose_scales",
    "sweep_point",
    "measure_point",
    "predict",
    "raise_ceilings",
    "remeasure_ceilings",
    "measure_sweep",
    "paired_decode",
    "fastest_group",
]

MAX_TOKENS = 4096
QUICK_GEMM_SECONDS = 0.05
"""In quick mode, the longest a point's largest GEMM may take at the measured ceiling."""
PREFILL_MIN_TOKENS = 1024
MIN_SCALED_K = 896
MIN_SCALED_N = 64
"""A scaled shape keeps k up to ``MIN_SCALED_K`` while n stays at least ``MIN_SCALED_N``."""
PAIRS = 60
PAIR_GROUPS = 5
LAYERS = ("q", "k", "v", "o", "gate", "up", "down")
"""The linear maps of one decoder layer that the sweep times (the explorer's layers)."""


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
    "flush" (a round of ``copies`` copies, the cache streamed out before every round)."""
    copies: int = 1


def layer_shapes(cfg: ModelConfig, scale: int = 1) -> list[LinearShape]:
    """The distinct (in, out) shapes of a layer's linear maps, each ``scaled`` by ``scale``;
    maps sharing a shape (q and o, k and v, gate and up) are grouped."""
    grouped: dict[tuple[int, int], list[str]] = {}
    for name, (k, n) in cfg.linear_shapes().items():
        if name in LAYERS:
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
    plan = timing.plan_cache_defeat(input_bytes(1, shape.k, shape.n, dtype), cache_bytes)
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
    between loads and stores: on the 2-core EPYC this book was written on (AVX-512 with
    AVX512-BF16, no AMX; torch 2.13, December 2026), the gate at m = 4096 with k = 112 ran at
    under half the bf16 rate of the same FLOPs with k = 896, and so would sit far below the
    matmul ceiling for a reason real prefill shapes (k ≥ 3584) never meet."""
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


def input_bytes(m: int, k: int, n: int, dtype: str) -> int:
    """Bytes of one input set of ``F.linear`` (x [m×k] and a weight [n×k]): what rotating
    among copies must push past the cache. The output is only written, to a fresh tensor each
    call, so it is not rotated and not counted (chapter 5's Exercise 1 uses the same rule)."""
    return int(dtype_bytes(dtype) * (m * k + n * k))


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
    plan = timing.plan_cache_defeat(input_bytes(m, shape.k, shape.n, dtype), ceilings.cache_bytes,
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
    point = sweep_point(shape, m, dtype, scale, measured, kernel=kernel.name, race_s=race,
                   cache_defeat=plan.method, copies=plan.copies)
    return predict(point, ceilings)


def sweep_point(
    shape: LinearShape, m: int, dtype: str, scale: int, measured: timing.Timing, **how: Any
) -> SweepPoint:
    """The sweep point of ``shape`` at ``m`` rows timed as ``measured``, not yet predicted
    (``predict``); ``how`` says how it was timed (kernel, race, cache defeat)."""
    flops = matmul_flops(m, shape.k, shape.n)
    nbytes = linear_bytes(m, shape.k, shape.n, dtype)
    return SweepPoint(
        dtype=dtype, shape=shape.label, count=shape.count, scale=scale, m=m, k=shape.k,
        n=shape.n, flops=flops, bytes=nbytes, intensity=flops / nbytes,
        median_s=measured.median_s, iqr_s=measured.iqr_s,
        min_s=measured.min_s, max_s=measured.max_s, samples=measured.n,
        achieved_flops=timing.achieved_flops(flops, measured.median_s),
        achieved_bandwidth=timing.achieved_bandwidth(nbytes, measured.median_s),
        predicted_s=0.0, prediction_error=0.0, bound="", **how,
    )  # fmt: skip


def predict(point: SweepPoint, ceilings: Ceilings) -> SweepPoint:
    """``point`` with the roofline's prediction for its exact shape from ``ceilings``
    (``roofline.bound_time`` of the point's recorded FLOPs and bytes): the time, its error
    against the measurement (``latency.prediction_error``) and the bound."""
    predicted = bound_time(point.flops, point.bytes, ceilings.peak(point.dtype),
                           ceilings.bandwidth)  # fmt: skip
    return replace(point, predicted_s=predicted.seconds,
                   prediction_error=prediction_error(predicted.seconds, point.median_s),
                   bound=predicted.bound)  # fmt: skip


def raise_ceilings(
    points: Sequence[SweepPoint],
    ceilings: Ceilings,
    bandwidths: Sequence[float] = (),
    matmuls: dict[str, tuple[float, tuple[int, int, int], str]] | None = None,
    matmul_streams: Sequence[tuple[float, str]] = (),
) -> tuple[list[SweepPoint], Ceilings]:
    """The ceilings raised to the best rate seen anywhere in a run, and every point
    re-predicted from them.

    ``bandwidths``: the stream measured again (between dtypes, after the sweep);
    ``matmuls``: per dtype, a ceiling GEMM measured again, as ``(FLOP/s, shape, kernel)``;
    ``matmul_streams``: B/s a matmul streamed outside the sweep (``paired_decode``), each with
    a label naming that matmul, which the bandwidth method then gives where it is the best.
    Then the points themselves, the steady ones (``ceilings.steady``: IQR under
    ``ceilings.STEADY_SPREAD`` of the median): a point's achieved B/s above the bandwidth
    ceiling (a one-token matmul can stream faster than ``x.sum()``: it is the better streaming
    kernel) becomes the ceiling, and a point's achieved FLOP/s above its dtype's matmul ceiling
    becomes that ceiling. On a shared machine other programs' traffic moves every rate from
    second to second; a ceiling is the best this device reached, so no steady point can beat
    its own roofline. A two-mode point (IQR several times its median) sets nothing: its
    median is a coin toss between a fast and a stalled mode."""
    streamed = ceilings_mod.with_best_bandwidth(ceilings, bandwidths)
    bandwidth, method = streamed.bandwidth, streamed.bandwidth_method
    candidates = [p for p in points if ceilings_mod.steady(p.median_s, p.iqr_s)]
    fastest = max(candidates, key=lambda p: p.achieved_bandwidth, default=None)
    if fastest is not None and fastest.achieved_bandwidth > bandwidth:
        bandwidth = fastest.achieved_bandwidth
        method = (f"the {fastest.dtype} {fastest.shape} matmul at m={fastest.m} "
                  f"({fastest.kernel} kernel), which streamed faster than x.sum()")  # fmt: skip
    for rate, label in matmul_streams:
        if rate > bandwidth:
            bandwidth, method = rate, f"{label}, which streamed faster than x.sum()"
    flops = dict(ceilings.matmul_flops)
    shapes = dict(ceilings.matmul_shape)
    kernel_names = dict(ceilings.matmul_kernel)
    for dtype, (rate, shape, kernel) in (matmuls or {}).items():
        if dtype in flops and rate > flops[dtype]:
            flops[dtype], shapes[dtype], kernel_names[dtype] = rate, tuple(shape), kernel
    for dtype in flops:
        best = max((p for p in candidates if p.dtype == dtype),
                   key=lambda p: p.achieved_flops, default=None)  # fmt: skip
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
    matmul_streams: Sequence[tuple[float, str]] = (),
) -> tuple[list[SweepPoint], Ceilings, float]:
    """After a sweep: stream the bandwidth again and (if ``matmul``) time each dtype's ceiling
    GEMMs again, then ``raise_ceilings`` with those, the earlier ``bandwidths`` (``x.sum()``
    streams), the labelled ``matmul_streams`` and the points. Returns the re-predicted points,
    the final ceilings and the new stream rate."""
    again = ceilings_mod.measure_bandwidth(ceilings.device, quick)
    matmuls = ({dtype: ceilings_mod.measure_matmul_ceiling(ceilings.device, dtype, quick)
                for dtype in ceilings.matmul_flops} if matmul else {})  # fmt: skip
    points, final = raise_ceilings(points, ceilings, [*bandwidths, again], matmuls,
                                   matmul_streams)
    return points, final, again


def measure_sweep(
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
                        input_bytes(min(tokens), shape.k, shape.n, dtype), ceilings.cache_bytes
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
    shape: LinearShape, dtype: str, device: str, pairs: int = PAIRS, kernel: str | None = None
) -> tuple[str, LinearShape, list[tuple[float, float]]]:
    """Is a one-token matmul's gap to the bandwidth ceiling the kernel's or the machine's?

    Alternates ``pairs`` times between the bandwidth stream (``ceilings.measure_bandwidth``'s
    ``x.sum()``) and ``shape`` at m = 1 with its fastest kernel, each call timed on its own,
    so that both see the same moment's memory traffic from other programs. The stream reads
    at least twice the last-level cache, so it also flushes the weight out before each
    matmul: one weight copy suffices. Where that copy, in every kernel's form, would not fit
    beside the stream in a quarter of the device's memory, ``shape`` is halved until it does.
    ``kernel`` names the kernel to pair (the one a sweep point ran, so that the verdict is
    about that point's kernel); None races them here. Returns the kernel's name, the shape
    timed and (stream B/s, matmul B/s) per pair, sorted by the stream's rate. Where the stream
    is fast and the matmul is not, the kernel is what falls short."""
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
    named = [k for k, _ in candidates if k.name == kernel]
    if kernel is not None and not named:
        raise ValueError(f"no {kernel!r} kernel for {dtype} on {device}: "
                         f"{', '.join(k.name for k, _ in candidates)}")
    chosen = named[0] if named else kernels.fastest(candidates, device, flush=buffer)[0]
    (input_set,) = dict(candidates)[chosen]
    timing.call_seconds(torch.sum, (buffer,), device)  # warm-up, both
    timing.call_seconds(chosen.run, input_set, device)
    rates = []
    for _ in range(pairs):
        stream_s = timing.call_seconds(torch.sum, (buffer,), device)
        matmul_s = timing.call_seconds(chosen.run, input_set, device)
        rates.append((timing.achieved_bandwidth(stream_bytes, stream_s),
                      timing.achieved_bandwidth(matmul_bytes, matmul_s)))  # fmt: skip
    return chosen.name, shape, sorted(rates)


def pair_groups(rates: Sequence[tuple[float, float]],
                groups: int = PAIR_GROUPS) -> list[tuple[int, float, float]]:
    """``paired_decode``'s pairs in ``groups`` groups from the slowest stream to the fastest
    (``format_pairs``' rows): each group's pairs, median stream rate and median matmul rate."""
    if not rates:
        raise ValueError("need at least one pair")
    ordered = sorted(rates)
    bounds = [round(i * len(ordered) / groups) for i in range(groups + 1)]
    return [(b - a, statistics.median(r[0] for r in ordered[a:b]),
             statistics.median(r[1] for r in ordered[a:b]))
            for a, b in zip(bounds, bounds[1:], strict=False) if b > a]  # fmt: skip


def fastest_group(rates: Sequence[tuple[float, float]],
                  groups: int = PAIR_GROUPS) -> tuple[float, float]:
    """The median stream and matmul rates of the group with the fastest streams
    (``pair_groups``' last), a rate to hold against the ceilings."""
    _, stream, matmul = pair_groups(rates, groups)[-1]
    return stream, matmul
