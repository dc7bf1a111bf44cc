"""A decoder layer's matmuls on the roofline, against their measured times (chapter 5).

A layer runs its linear maps one after the other, so its roofline time is each matmul's
``roofline.matmul_time`` added up; these functions hold a measured layer against that sum,
say which one kernel fix would shorten it most, and carry a time measured at a scaled-down
shape to the real one (an estimate where both have one bound, else a floor).
"""

from __future__ import annotations

from collections.abc import Mapping

from helpers.counting.latency import prediction_error
from helpers.counting.roofline import matmul_time

__all__ = ["layer_time", "layer_check", "best_fix", "carried_time", "full_size_time"]


def layer_time(
    shapes: Mapping[str, tuple[int, int]], m: int, peak: float, bandwidth: float,
    dtype: str = "bf16",
) -> float:  # fmt: skip
    """Roofline seconds of a layer's matmuls run one after the other (chapter 5): the sum of
    ``roofline.matmul_time`` over its ``{name: (in_features, out_features)}`` at m tokens,
    each matmul with its own bound."""
    return sum(matmul_time(m, k, n, peak, bandwidth, dtype).seconds for k, n in shapes.values())


def layer_check(
    shapes: Mapping[str, tuple[int, int]], m: int, seconds: Mapping[str, float], peak: float,
    bandwidth: float, dtype: str = "bf16",
) -> dict[str, float]:  # fmt: skip
    """A layer's measured matmuls against the roofline (chapter 5). ``shapes`` maps each
    matmul's name to its (in, out) features, ``seconds`` the same names to their measured
    times at m tokens. Returns ``"predicted"``: ``layer_time``, each matmul at its own bound
    and the times added, not the roofline of the layer's total FLOPs and bytes (which lets a
    memory-bound matmul's bytes hide behind a compute-bound one's FLOPs); ``"error"``:
    ``prediction_error`` against the layer's measured time."""
    if set(seconds) != set(shapes) or not shapes:
        raise ValueError("need a measured time for each matmul of shapes, and at least one")
    predicted = layer_time(shapes, m, peak, bandwidth, dtype)
    return {"predicted": float(predicted),
            "error": prediction_error(predicted, sum(seconds.values()))}  # fmt: skip


def best_fix(
    shapes: Mapping[str, tuple[int, int]], m: int, seconds: Mapping[str, float], peak: float,
    bandwidth: float, dtype: str = "bf16",
) -> dict[str, object]:
    """The one kernel fix that shortens a layer most (chapter 5). A fix serves a shape: it
    brings every matmul of that (in, out) to its roofline time (``roofline.matmul_time``),
    or leaves one already there as it is. Arguments as ``layer_check``'s. Returns
    ``"names"``: the matmuls of the shape whose fix saves the most seconds, in ``shapes``'
    order (the shape named first on a tie); ``"roof"``: their bound, the ceiling they fell
    short of; ``"speedup"``: the layer's measured time over its time after the fix. The time
    lost is summed over the names sharing a shape, so the fix need not serve the slowest
    matmul, nor the one furthest below its roof."""
    if set(seconds) != set(shapes) or not shapes:
        raise ValueError("need a measured time for each matmul of shapes, and at least one")
    by_shape: dict[tuple[int, int], list[str]] = {}
    for name, (k, n) in shapes.items():
        by_shape.setdefault((k, n), []).append(name)
    floors = {kn: matmul_time(m, *kn, peak, bandwidth, dtype) for kn in by_shape}
    saved = {kn: sum(max(seconds[name] - floors[kn].seconds, 0.0) for name in names)
             for kn, names in by_shape.items()}  # fmt: skip
    fixed = max(by_shape, key=saved.__getitem__)
    total = sum(seconds.values())
    return {"names": tuple(by_shape[fixed]), "roof": floors[fixed].bound,
            "speedup": total / (total - saved[fixed])}


def carried_time(
    m: int, timed: tuple[int, int], real: tuple[int, int], median_s: float, peak: float,
    bandwidth: float, dtype: str = "bf16",
) -> float:  # fmt: skip
    """The real shape's seconds at m tokens carried from a point timed at a scaled shape
    (chapter 5). ``timed`` and ``real`` are (k, n). The timed point reached a share of the
    ceiling that bound it (its ``roofline.matmul_time`` over ``median_s``); the kernel is
    taken to reach that share of that ceiling on the real shape, and at most the other
    ceiling. Where both shapes have one bound this is ``median_s`` · t(real) / t(timed); where
    they differ (a scaled shape has less intensity, so between its knee and the real shape's
    it is memory-bound while the real one is compute-bound) it is only a floor: a share of
    one ceiling says nothing of the other."""
    if not median_s > 0:
        raise ValueError(f"median_s must be positive, got {median_s!r}")
    roof, real_roof = (matmul_time(m, k, n, peak, bandwidth, dtype) for k, n in (timed, real))
    if roof.bound == real_roof.bound:  # the same ceiling, scaled alike: the ratio, exactly
        return float(median_s * real_roof.seconds / roof.seconds)
    share = roof.seconds / median_s
    if roof.bound == "compute":
        peak *= share
    else:
        bandwidth *= share
    return float(matmul_time(m, *real, peak, bandwidth, dtype).seconds)


def full_size_time(
    m: int, timed: tuple[int, int], real: tuple[int, int], median_s: float, peak: float,
    bandwidth: float, dtype: str = "bf16",
) -> float | None:  # fmt: skip
    """The real shape's seconds at m tokens estimated from a point timed at a scaled shape
    (chapter 5): ``carried_time`` where the two shapes have one bound, None where they differ
    (there it is a floor, not an estimate). The real shape is assumed to run at the share of
    its roofline the timed one reached; a smaller matrix may suit the kernel better or worse
    (chapter 5's section 6 prints how far apart the shares ran)."""
    timed_time, real_time = (matmul_time(m, k, n, peak, bandwidth, dtype) for k, n in (timed, real))
    if timed_time.bound != real_time.bound:
        return None
    return carried_time(m, timed, real, median_s, peak, bandwidth, dtype)
