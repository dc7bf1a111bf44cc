"""The results record of a matmul sweep, and what is read from it (chapter 5, `05_matmuls`).

``results_record`` is the one record of a sweep (``helpers.measuring.sweep``): the dict ``python -m
helpers.programs.bench`` writes as JSON, chapter 5's explorer (``helpers.widgets.matmuls``) draws
and
the GPU reference (``helpers.programs.gpu_reference``) keeps: the device, ``"ceilings"``
(``Ceilings.to_dict()``) and ``"points"`` (one dict per ``SweepPoint``), so that a record from
another device reads the same. ``roofline_results`` is the record an ideal device would write.

Read from a record or its points: ``summarize`` (the headline figures over whole layers),
``shortfalls`` (what set each matmul ceiling, and the points under ``SHORT_SHARE`` of one),
``points_above_roofline`` (a check that the ceilings were reconciled), ``layer_points`` (one
layer's points), ``compute_end``, ``measured_ridge`` and ``token_knee`` (the point that
stands for the compute roof, the ridge, and the knee in tokens m,
that the measurements imply; not ``latency.measured_knee``, chapter 7's knee in batch size).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from helpers.counting.latency import prediction_error
from helpers.counting.roofline import bound_time, gemm_knee, matmul_time
from helpers.measuring import timing
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.sweep import (
    LAYERS,
    PREFILL_MIN_TOKENS,
    SweepPoint,
    layer_shapes,
    predict,
    sweep_point,
    token_counts,
)

__all__ = [
    "results_record",
    "record_points",
    "record_ceilings",
    "roofline_results",
    "summarize",
    "shortfalls",
    "points_above_roofline",
    "results_ceilings",
    "layer_points",
    "compute_end",
    "measured_ridge",
    "token_knee",
]

SHORT_SHARE = 0.9
"""A decode (m = 1) or prefill (m ≥ ``PREFILL_MIN_TOKENS``) point under this share of its
ceiling is one that misses it (``shortfalls``)."""


def results_record(
    ceilings: Ceilings, points: Sequence[SweepPoint | Mapping[str, Any]], **extra: Any
) -> dict[str, Any]:
    """The one record of a sweep: the device, ``extra`` fields (the model, the scales, the
    date, …), the ceilings (``Ceilings.to_dict()``) and one dict per point. What ``python -m
    helpers.programs.bench`` writes as JSON, chapter 5's explorer draws and the GPU reference
    keeps."""
    return {
        "device": ceilings.device,
        "device_name": ceilings.device_name,
        "torch_version": ceilings.torch_version,
        **extra,
        "ceilings": ceilings.to_dict(),
        "points": [asdict(p) if is_dataclass(p) else dict(p) for p in points],
    }


def record_points(results: Mapping[str, Any]) -> list[SweepPoint]:
    """A record's points as ``SweepPoint`` objects (``results_record``'s inverse)."""
    return [SweepPoint(**p) for p in results["points"]]


def record_ceilings(results: Mapping[str, Any]) -> Ceilings:
    """A record's ceilings as a ``Ceilings`` (``results_record``'s inverse)."""
    return Ceilings(**results["ceilings"])


def roofline_results(
    model: str = "Qwen2.5-7B", chip: str = "H100 SXM", dtypes: Sequence[str] = ("fp32", "bf16"),
    tokens: Sequence[int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A results record whose every "measurement" is the roofline's own prediction from a
    chip's datasheet (``helpers.counting.hardware``): what a device meeting its ceilings exactly
    would
    show, for the model's real shapes at m = 1, 2, 4, …, 4096. A prediction, never a
    measurement: its device is "roofline", its name says so, and its ceilings are labelled
    "datasheet"."""
    from helpers.counting import hardware, models

    cfg, hw = models.get(model), hardware.get(chip)
    ideal = Ceilings(
        device="roofline", device_name=f"{chip} datasheet roofline (predicted, not measured)",
        torch_version="", date="", threads=0, matmul_flops={d: hw.peak(d) for d in dtypes},
        matmul_shape={}, bandwidth=hw.bandwidth, bandwidth_method="datasheet",
        cache_bytes=int(hw.llc_bytes or 0), memory_bytes=int(hw.memory_bytes), datasheet_chip=chip,
        label="datasheet",
    )  # fmt: skip
    points = []
    for dtype in dtypes:
        for shape in layer_shapes(cfg):
            for m in token_counts() if tokens is None else tokens:
                seconds = matmul_time(m, shape.k, shape.n, ideal.peak(dtype), ideal.bandwidth,
                                      dtype).seconds  # fmt: skip
                exact = timing.Timing.from_samples([seconds], device="roofline", threads=0)
                points.append(predict(sweep_point(shape, m, dtype, 1, exact, kernel="roofline",
                                             cache_defeat="none", copies=0), ideal))  # fmt: skip
    return results_record(ideal, points, model=model)


def _layer_totals(points: Sequence[SweepPoint]) -> tuple[float, float, float, float]:
    """FLOPs, bytes, measured and predicted seconds of whole layers: each shape counted as
    often as the layer uses it."""
    return (sum(p.count * p.flops for p in points), sum(p.count * p.bytes for p in points),
            sum(p.count * p.median_s for p in points),
            sum(p.count * p.predicted_s for p in points))  # fmt: skip


def summarize(points: Sequence[SweepPoint], ceilings: Ceilings) -> dict[str, dict[str, Any]]:
    """Per dtype, the sweep's headline figures over whole layers (every shape, weighted by
    use): decode (m = 1) achieved B/s as a fraction of the measured bandwidth and achieved
    FLOP/s as a fraction of the matmul ceiling, with ``"decode_bound"`` ("memory", "compute"
    or "mixed": which roof its points sit under, so which fraction is the one to read);
    prefill (m ≥ 1024) achieved FLOP/s as a fraction of the measured matmul ceiling; and the
    roofline prediction's relative error (``latency.prediction_error``) for each."""
    summary: dict[str, dict[str, Any]] = {}
    for dtype in dict.fromkeys(p.dtype for p in points):
        ours = [p for p in points if p.dtype == dtype]
        entry: dict[str, Any] = {}
        decode = [p for p in ours if p.m == 1]
        if decode:
            flops, nbytes, measured, predicted = _layer_totals(decode)
            entry["decode_bandwidth_fraction"] = nbytes / measured / ceilings.bandwidth
            entry["decode_flops_fraction"] = flops / measured / ceilings.peak(dtype)
            bounds = {p.bound == "compute" for p in decode}
            entry["decode_bound"] = ("mixed" if len(bounds) > 1
                                     else "compute" if bounds == {True} else "memory")
            entry["decode_prediction_error"] = prediction_error(predicted, measured)
            entry["decode_kernels"] = sorted({p.kernel for p in decode})
        prefill = [p for p in ours if p.m >= PREFILL_MIN_TOKENS]
        if prefill:
            flops, _, measured, predicted = _layer_totals(prefill)
            entry["prefill_flops_fraction"] = flops / measured / ceilings.peak(dtype)
            entry["prefill_prediction_error"] = prediction_error(predicted, measured)
            entry["prefill_kernels"] = sorted({p.kernel for p in prefill})
        summary[dtype] = entry
    return summary


def shortfalls(points: Sequence[SweepPoint], ceilings: Ceilings) -> dict[str, dict[str, Any]]:
    """Per dtype: ``"shape"``, the (m, k, n) that set its matmul ceiling, and ``"setter"``, the
    sweep point of that shape (None: a GEMM of the ceiling measurement, no layer's shape);
    ``"prefill"``, the points from ``PREFILL_MIN_TOKENS`` tokens under ``SHORT_SHARE`` of the
    matmul ceiling; ``"decode"``, the memory-bound m = 1 points under ``SHORT_SHARE`` of the
    bandwidth, and ``"decode_compute"``, the compute-bound ones (2/b at or above the ridge: bf16
    on a CPU without bf16 arithmetic) under ``SHORT_SHARE`` of the matmul ceiling, each held to
    the roof it sits under; ``"decode_bounds"``, the bounds of the m = 1 points;
    ``"swept"``, whether any point is that long a prefill."""
    found: dict[str, dict[str, Any]] = {}
    for dtype in dict.fromkeys(p.dtype for p in points):
        ours = [p for p in points if p.dtype == dtype]
        peak, shape = ceilings.peak(dtype), tuple(ceilings.matmul_shape.get(dtype, ()))
        found[dtype] = {
            "shape": shape,
            "setter": next((p for p in ours if (p.m, p.k, p.n) == shape), None),
            "prefill": [p for p in ours if p.m >= PREFILL_MIN_TOKENS
                        and p.achieved_flops < SHORT_SHARE * peak],
            "decode": [p for p in ours if p.m == 1 and p.bound != "compute"
                       and p.achieved_bandwidth < SHORT_SHARE * ceilings.bandwidth],
            "decode_compute": [p for p in ours if p.m == 1 and p.bound == "compute"
                               and p.achieved_flops < SHORT_SHARE * peak],
            "decode_bounds": sorted({"compute" if p.bound == "compute" else "memory"
                                     for p in ours if p.m == 1}),
            "swept": any(p.m >= PREFILL_MIN_TOKENS for p in ours),
        }  # fmt: skip
    return found


def points_above_roofline(
    results: Mapping[str, Any], tolerance: float = 0.10
) -> list[dict[str, Any]]:
    """The points of a results record (``results_record``) that sit more than ``tolerance``
    above their own roofline: achieved FLOP/s above the FLOPs over ``roofline.bound_time``
    at the record's ceilings, i.e. above min(matmul ceiling, intensity × bandwidth)."""
    peaks, bandwidth = results["ceilings"]["matmul_flops"], results["ceilings"]["bandwidth"]
    return [p for p in results["points"]
            if p["achieved_flops"] > (1 + tolerance) * p["flops"] / bound_time(
                p["flops"], p["bytes"], peaks[p["dtype"]], bandwidth).seconds]  # fmt: skip


def results_ceilings(results: Mapping[str, Any], dtype: str) -> tuple[float, float]:
    """A record's matmul ceiling for ``dtype`` and its bandwidth; ValueError naming the
    dtypes it has otherwise."""
    ceilings = results["ceilings"]
    peaks = ceilings["matmul_flops"]
    if dtype not in peaks:
        raise ValueError(f"no {dtype!r} in this sweep; measured: {', '.join(peaks)}")
    return float(peaks[dtype]), float(ceilings["bandwidth"])


def layer_points(results: Mapping[str, Any], layer: str = "gate",
                 dtype: str = "fp32") -> list[SweepPoint]:  # fmt: skip
    """The sweep points of one layer in one dtype, by increasing m. A point's ``shape`` is
    the label of the layers sharing it ("q,o"), so "o" finds the q projection's points."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r}: one of {', '.join(LAYERS)}")
    results_ceilings(results, dtype)
    rows = [p for p in record_points(results)
            if p.dtype == dtype and layer in p.shape.split(",")]  # fmt: skip
    return sorted(rows, key=lambda row: row.m)


def compute_end(rows: Sequence[SweepPoint]) -> SweepPoint | None:
    """The point whose achieved FLOP/s stands for the compute roof this layer reached: the
    largest m timed at the shape of the smallest-m point (that point included), if that point
    is compute-bound; otherwise the largest m of all (a scaled point). A scaled point is a
    smaller GEMM, which runs at its own share of the ceiling, not the real shape's: where a
    sweep scales only its largest m, the real shape's own compute-bound point reads its knee.
    Where only the smallest m is timed at full size and it is compute-bound (2/b above the
    ridge: bf16 on a CPU without bf16 arithmetic), it is that point. None with fewer than two
    points."""
    if len(rows) < 2:
        return None
    first = min(rows, key=lambda r: r.m)
    same = [r for r in rows if (r.k, r.n) == (first.k, first.n)]
    last = max(same, key=lambda r: r.m)
    if last.bound == "compute":
        return last
    return max(rows, key=lambda r: r.m)


def measured_ridge(rows: Sequence[SweepPoint]) -> float | None:
    """The ridge this layer showed: the achieved FLOP/s of ``compute_end`` (the compute roof
    it really reached) over the achieved B/s at the smallest m (the bandwidth roof it really
    reached). A layer streams at most at its bandwidth roof, so this is never below the ridge
    it really has: where the smallest m is compute-bound (it streamed below the roof) it is
    an upper bound. None with fewer than two points."""
    last = compute_end(rows)
    if last is None:
        return None
    first = min(rows, key=lambda r: r.m)
    return last.achieved_flops / first.achieved_bandwidth


def token_knee(rows: Sequence[SweepPoint]) -> int | None:
    """The knee in tokens m the measurements imply (not ``latency.measured_knee``, a batch
    knee): ``roofline.gemm_knee`` of the smallest-m point's shape
    at the layer's own ridge (``measured_ridge``) in place of the device's.

    Where the flat, weight-read time of decode meets the time ∝ m of prefill: on a device
    that reached its measured ceilings at both ends it is the predicted knee. None with
    fewer than two points, or if that shape never reaches the layer's ridge; an upper bound
    where the ridge is one (``measured_ridge``)."""
    ridge = measured_ridge(rows)
    if ridge is None:
        return None
    first = min(rows, key=lambda r: r.m)
    return gemm_knee(first.k, first.n, ridge, first.dtype)
