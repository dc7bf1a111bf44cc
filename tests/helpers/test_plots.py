"""helpers.widgets.plots.plot_roofline: the roof, the ridge and the points, as data and as drawn."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.counting import hardware  # noqa: E402
from helpers.widgets import roofline  # noqa: E402
from helpers.widgets.plots import plot_roofline, roof  # noqa: E402

H100 = hardware.get("H100 SXM")


@pytest.fixture
def ax():
    fig, axes = plt.subplots()
    yield axes
    plt.close(fig)


def test_roof_is_min_of_peak_and_bandwidth_times_intensity():
    assert roof(1.0, 989e12, 3.35e12) == 3.35e12
    assert roof(1e4, 989e12, 3.35e12) == 989e12
    ridge = 989e12 / 3.35e12
    assert roof(ridge, 989e12, 3.35e12) == pytest.approx(989e12)


def test_plot_places_points_on_the_roof_and_returns_the_ridge(ax):
    drawn = plot_roofline(ax, H100.peak("bf16"), H100.bandwidth,
                          points={"decode": 1.0, "prefill": 684.0}, label="H100")  # fmt: skip
    assert drawn.ridge == pytest.approx(295.22, abs=0.01)
    assert drawn.points["decode"] == (1.0, 3.35e12)
    assert drawn.points["prefill"] == (684.0, 989e12)
    # The roof: rising at slope 1 below the ridge, flat above, the ridge sampled exactly.
    assert drawn.ridge in drawn.intensities
    for x, y in zip(drawn.intensities, drawn.roof_flops, strict=True):
        assert y == min(989e12, x * 3.35e12)
    assert min(drawn.intensities) < 1.0 and max(drawn.intensities) > 684.0
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["H100"]
    labels = {t.get_text() for t in ax.texts}
    assert {"decode", "prefill", "ridge 295 FLOP/B"} <= labels


def test_measured_points_and_ceilings_are_kept_as_given(ax):
    drawn = plot_roofline(ax, 1e12, 1e11, points={"measured": (3.0, 2e11)},
                          ceilings={"best matmul": 8e11})  # fmt: skip
    assert drawn.points == {"measured": (3.0, 2e11)}
    assert drawn.ceilings == {"best matmul": 8e11}
    assert ax.get_legend() is None  # no label, no legend


def test_one_marker_for_a_sweep(ax):
    sweep = {f"m={m}": (m / 2, m * 1e9) for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)}
    plot_roofline(ax, 1e12, 1e11, points=sweep, marker="x", annotate=False)
    assert len(ax.collections) == len(sweep)
    first = ax.collections[0].get_paths()[0].vertices.tolist()
    assert all(c.get_paths()[0].vertices.tolist() == first for c in ax.collections)


def test_two_roofs_on_one_axes(ax):
    first = plot_roofline(ax, 989e12, 3.35e12, label="H100 SXM")
    second = plot_roofline(ax, 989e12, 4.8e12, label="H200 SXM")
    assert second.ridge < first.ridge
    assert len(ax.get_legend().get_texts()) == 2
    assert ax.lines[0].get_color() != ax.lines[2].get_color()  # roof, ridge line, roof ...


def test_intensity_range_and_bad_inputs(ax):
    drawn = plot_roofline(ax, 1e12, 1e11, intensity_range=(0.5, 50), annotate=False)
    assert drawn.intensities[0] == pytest.approx(0.5) and drawn.intensities[-1] == pytest.approx(50)
    assert not ax.texts
    with pytest.raises(ValueError, match="peak_flops must be positive"):
        plot_roofline(ax, 0, 1e11)
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        plot_roofline(ax, 1e12, -1)
    with pytest.raises(ValueError, match="intensity of 'x' must be positive"):
        plot_roofline(ax, 1e12, 1e11, points={"x": 0.0})
    with pytest.raises(ValueError, match="increasing"):
        plot_roofline(ax, 1e12, 1e11, intensity_range=(10, 1))



def test_labels_of_nearby_points_do_not_cover_each_other(ax):
    # Chapter 3's explorer at its defaults: prefill's matrices a few percent apart in intensity,
    # k/v at the ridge beside them, three decode points on one spot. Labels taking fixed turns
    # round their points printed "prefill" over "prefill q/o" here.
    view = roofline.roofline_view()
    roofline.draw_roofline(ax, view)
    renderer = ax.figure.canvas.get_renderer()
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
    assert {p.phase for p in view.points.values()} <= set(boxes)
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not boxes[a].overlaps(boxes[b]), f"{a!r} covers {b!r}"
    assert ax.get_ylim() == roofline.FLOPS_RANGE
