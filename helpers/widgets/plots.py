"""Figures the chapters share: the roofline (chapter 3, `03_roofline`; reused by chapter 5
and the benchmark).

Plain numbers in (peak FLOP/s, bandwidth in B/s, intensities in FLOP/B), so the same call
draws a datasheet roofline, a measured one, or several chips on one set of axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matplotlib.markers import MarkerStyle

from helpers.counting.roofline import roof

__all__ = ["RooflinePlot", "roof", "plot_roofline"]

MARKERS = "osD^v<>ph*"
# (dx, dy, alignment) of a point's label, in the order tried: above right, below right, above
# left, below left, straight above and below, then the same a line further out.
LABEL_SPOTS = ((7, 5, "left"), (7, -14, "left"), (-7, 5, "right"), (-7, -14, "right"),
               (0, 9, "center"), (0, -18, "center"), (7, 18, "left"), (7, -27, "left"),
               (-7, 18, "right"), (-7, -27, "right"), (0, 22, "center"), (0, -31, "center"))
MARKER_HALF_PT = 4  # half the width of a drawn point (scatter size 50 is about 7 points across)


@dataclass(frozen=True)
class RooflinePlot:
    """What ``plot_roofline`` drew, as data (for tests and for a table beside the figure).

    ``intensities`` and ``roof_flops``: the roof's samples. ``points``: label → (intensity,
    FLOP/s) where each point was placed. ``ceilings``: label → the extra horizontal lines.
    """

    peak_flops: float
    bandwidth: float
    ridge: float
    intensities: tuple[float, ...]
    roof_flops: tuple[float, ...]
    points: dict[str, tuple[float, float]]
    ceilings: dict[str, float]


def _positive(value: float, name: str) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return float(value)


def _geomspace(low: float, high: float, count: int) -> list[float]:
    ratio = (high / low) ** (1 / (count - 1))
    return [low * ratio**i for i in range(count)]


def _place_labels(ax, placed: Mapping[str, tuple[float, float]]) -> None:
    """Label each point at the first of ``LABEL_SPOTS`` whose text covers no text already on
    the axes and no other point, else where it covers least: labels taking fixed turns round
    their points can land two on one spot, or one beside the wrong point. Reads the axes'
    limits as they are now: set them first."""
    from matplotlib.transforms import Bbox

    ax.autoscale_view()
    renderer = ax.figure.canvas.get_renderer()
    half = MARKER_HALF_PT * ax.figure.dpi / 72
    dots = {name: ax.transData.transform(xy) for name, xy in placed.items()}
    taken = [t.get_window_extent(renderer) for t in ax.texts]

    def covered(box: Bbox, name: str) -> float:
        others = [Bbox.from_extents(x - half, y - half, x + half, y + half)
                  for other, (x, y) in dots.items() if other != name]
        return sum(_overlap(box, b) for b in (*taken, *others))

    for name, xy in placed.items():
        best = None  # (area covered, annotation)
        for dx, dy, align in LABEL_SPOTS:
            text = ax.annotate(name, xy, xytext=(dx, dy), textcoords="offset points",
                               fontsize=9, ha=align)  # fmt: skip
            area = covered(text.get_window_extent(renderer), name)
            if best is None or area < best[0]:
                if best is not None:
                    best[1].remove()
                best = (area, text)
            else:
                text.remove()
            if area == 0:
                break
        taken.append(best[1].get_window_extent(renderer))


def _overlap(a, b) -> float:
    """The area two display boxes share."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(width, 0.0) * max(height, 0.0)


def plot_roofline(
    ax,
    peak_flops: float,
    bandwidth: float,
    points: Mapping[str, float | tuple[float, float]] | None = None,
    label: str | None = None,
    *,
    ceilings: Mapping[str, float] | None = None,
    intensity_range: Sequence[float] | None = None,
    flops_range: Sequence[float] | None = None,
    color: str | None = None,
    marker: str | None = None,
    annotate: bool = True,
) -> RooflinePlot:
    """Draw a roofline on ``ax`` (log-log) and put labelled points on it.

    ``peak_flops`` in FLOP/s and ``bandwidth`` in B/s define the roof min(P, I·β) and the
    ridge point P/β (a dotted vertical line). ``points``: label → intensity, placed *on* the
    roof (its attainable FLOP/s), or label → (intensity, FLOP/s) for a measured point.
    ``ceilings``: label → FLOP/s drawn as dashed horizontal lines under the roof (e.g. the
    best measured matmul). ``label`` names this roof in the legend; call the function again
    on the same axes to compare chips or datasheet against measurement. Points take turns
    through ``MARKERS`` unless ``marker`` gives one for all (e.g. a sweep, ``annotate=False``).
    ``flops_range`` fixes the vertical axis before the labels are placed (``_place_labels``:
    each where it covers no other label or point). Returns what was drawn.
    """
    peak = _positive(peak_flops, "peak_flops")
    beta = _positive(bandwidth, "bandwidth")
    ridge = peak / beta
    placed: dict[str, tuple[float, float]] = {}
    for name, point in (points or {}).items():
        intensity, flops = point if isinstance(point, (tuple, list)) else (point, None)
        intensity = _positive(intensity, f"intensity of {name!r}")
        flops = roof(intensity, peak, beta) if flops is None else _positive(flops, name)
        placed[str(name)] = (intensity, flops)
    extra = {str(name): _positive(value, name) for name, value in (ceilings or {}).items()}

    if intensity_range is None:  # cover the ridge and every point, with a margin each side
        spots = [ridge, *(i for i, _ in placed.values())]
        low, high = min(spots) / 8, max(spots) * 8
    else:
        low, high = (_positive(v, "intensity_range") for v in intensity_range)
        if not low < high:
            raise ValueError(f"intensity_range must be increasing, got {intensity_range!r}")
    xs = _geomspace(low, high, 256)
    # The ridge itself is a sample, so the corner is drawn sharp.
    xs = sorted({*xs, ridge}) if low < ridge < high else xs
    ys = [roof(x, peak, beta) for x in xs]

    (line,) = ax.plot(xs, ys, color=color, lw=2, label=label)
    colour = line.get_color()
    ax.axvline(ridge, color=colour, ls=":", lw=1)
    if annotate:
        # At the foot of the ridge line (x in data, y in axes units), clear of the points.
        ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, 0.02), xytext=(4, 0),
                    xycoords=ax.get_xaxis_transform(), textcoords="offset points",
                    color=colour, fontsize=8)  # fmt: skip
    for name, value in extra.items():
        ax.axhline(value, color=colour, ls="--", lw=1, alpha=0.7)
        if annotate:
            ax.annotate(name, (high, value), xytext=(-4, -11), textcoords="offset points",
                        color=colour, fontsize=8, ha="right")  # fmt: skip
    for i, (intensity, flops) in enumerate(placed.values()):
        shape = marker or MARKERS[i % len(MARKERS)]
        # A black rim on filled markers only: matplotlib warns about one on "x" or "+".
        rim = {"edgecolor": "black", "linewidth": 0.5} if MarkerStyle(shape).is_filled() else {}
        ax.scatter([intensity], [flops], marker=shape, s=50, zorder=3, color=colour, **rim)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/B)")
    ax.set_ylabel("attainable FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    if flops_range is not None:
        ax.set_ylim(*(_positive(v, "flops_range") for v in flops_range))
    if annotate:
        _place_labels(ax, placed)
    if label is not None:
        ax.legend(loc="upper left", fontsize=8)
    return RooflinePlot(peak, beta, ridge, tuple(xs), tuple(ys), placed, extra)
