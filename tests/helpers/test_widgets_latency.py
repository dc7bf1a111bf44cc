"""The chapter 6 latency-breakdown widget: curves and sliders in, numbers and a bar out."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.counting import latency  # noqa: E402
from helpers.widgets.latency import (  # noqa: E402
    LatencyControls,
    draw_latency_breakdown,
    latency_breakdown,
    plot_latency_breakdown,
    show_latency_breakdown,
)

TTFT = {16: 0.05, 256: 0.4}
TPOT = {0: 0.06, 4096: 0.08}


def test_breakdown_numbers_come_from_helpers_latency():
    b = latency_breakdown(TTFT, TPOT, LatencyControls(128, 50))
    assert b.ttft_s == pytest.approx(latency.interpolate(TTFT, 128))
    assert b.e2e_s == pytest.approx(latency.predict_e2e(TTFT, TPOT, 128, 50))
    assert b.mean_tpot_s == pytest.approx(b.decode_s / 49)
    assert list(b.segments()) == ["prefill (TTFT)", "decode (n − 1 steps)"]
    assert "49 × TPOT" in b.summary()
    assert latency_breakdown(TTFT, TPOT, LatencyControls(128, 1)).decode_s == 0.0


def test_a_request_beyond_the_measured_curves_says_so():
    def outside(prompt, output, tpot=TPOT):
        return latency_breakdown(TTFT, tpot, LatencyControls(prompt, output)).outside

    assert outside(128, 50) == ""  # inside both curves
    b = latency_breakdown(TTFT, TPOT, LatencyControls(272, 50))
    assert b.ttft_s == TTFT[256]  # held, not measured: the summary must say it
    assert b.outside == "TTFT held at its value for 256 prompt tokens (measured 16–256)"
    assert b.summary().endswith("\nnot measured: " + b.outside)
    assert "TTFT held at its value for 16" in outside(8, 2)
    late = latency_breakdown(TTFT, TPOT, LatencyControls(200, 4000))  # steps see contexts 200–4198
    assert late.outside == "TPOT held at its end values past contexts 0–4,096 (this " \
        "request's steps see 200–4,198)"
    assert outside(200, 3898) == ""  # last context 4096
    assert outside(32, 2, {64: 0.06, 4096: 0.08}).startswith("TPOT")


def test_draw_makes_one_bar_per_segment():
    fig, ax = plt.subplots()
    b = latency_breakdown(TTFT, TPOT, LatencyControls(64, 10))
    draw_latency_breakdown(ax, b)
    assert [p.get_width() for p in ax.patches] == pytest.approx([b.ttft_s * 1e3,
                                                                 b.decode_s * 1e3])
    assert ax.patches[1].get_x() == pytest.approx(b.ttft_s * 1e3)  # decode starts after TTFT
    plt.close(fig)


def test_plot_and_show_draw_one_figure_and_return_nothing():
    assert plot_latency_breakdown(latency_breakdown(TTFT, TPOT, LatencyControls(64, 10))) is None
    assert show_latency_breakdown(TTFT, TPOT, prompt_tokens=64, output_tokens=10) is None
    assert plt.get_fignums() == []  # each closed its figure after showing it


def test_bad_slider_values_raise():
    with pytest.raises(ValueError, match="output_tokens"):
        latency_breakdown(TTFT, TPOT, LatencyControls(64, 0))
