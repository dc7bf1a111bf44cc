"""The chapter 7 batching widget: sliders in, the helpers' numbers and a curve out."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.counting import (
    hardware,
    memory,
    models,
    roofline,  # noqa: E402
)
from helpers.widgets.batching import (  # noqa: E402
    BatchControls,
    batch_curve,
    draw_batch_curve,
    plot_batch_curve,
    show_batch_curve,
)


def test_curve_numbers_come_from_the_helpers():
    c = batch_curve(BatchControls("Qwen2.5-7B", "H100 SXM", 2048, "int8"), batches=(1, 8, 64))
    cfg, hw = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
    split = roofline.decode_split_weight_only(cfg, hw, 8, 2048, "int8")
    assert c.tpot_s[1] == pytest.approx(split["weights"].seconds + split["attention"].seconds)
    assert c.throughput[1] == pytest.approx(8 / c.tpot_s[1])
    assert c.critical_batch == roofline.critical_batch_weight_only(cfg, hw, "int8")
    assert c.max_batch == memory.max_concurrent_sequences(cfg, hw.memory_bytes, 2048, "int8",
                                                      kv_dtype="bf16")
    assert [r[3] for r in c.rows()] == [b <= c.max_batch for b in (1, 8, 64)]
    assert "int8 weights" in c.summary()


def test_tpot_and_throughput_grow_with_batch():
    c = batch_curve(BatchControls("Llama-3.1-8B", "A100 80GB SXM", 1024, "bf16"))
    assert list(c.tpot_s) == sorted(c.tpot_s)
    assert c.throughput[-1] > 10 * c.throughput[0]


def test_draw_makes_one_point_per_batch_hollow_where_memory_is_short():
    c = batch_curve(BatchControls("Llama-3.1-8B", "H100 SXM", 4096, "bf16"), batches=(1, 64, 512))
    assert [r[3] for r in c.rows()] == [True, True, False]  # memory holds 130 sequences
    fig, ax = plt.subplots()
    draw_batch_curve(ax, c)
    line, *points = ax.lines
    assert len(points) == 3
    assert list(line.get_xdata()) == [r[1] for r in c.rows()]
    assert [p.get_markerfacecolor() for p in points] == ["#4c72b0", "#4c72b0", "white"]
    assert [t.get_text() for t in ax.texts] == ["1", "64", "512"]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert ax.get_title() == c.summary()
    plt.close(fig)


def test_plot_and_show_draw_one_figure_and_return_nothing():
    c = batch_curve(BatchControls("Qwen2.5-7B", "H100 SXM", 1024, "int4"), batches=(1, 2, 4))
    assert plot_batch_curve(c) is None
    assert show_batch_curve(model="Qwen2.5-7B", context=1024, dtype="int4") is None
    assert plt.get_fignums() == []  # each closed its figure after showing it


def test_bad_slider_values_raise():
    with pytest.raises(ValueError, match="context"):
        batch_curve(BatchControls("Qwen2.5-7B", "H100 SXM", 0))
