"""The chapter 7 batching widget: sliders in, the helpers' numbers and a curve out."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers import hardware, memory, models, roofline  # noqa: E402
from helpers.widgets.batching import (  # noqa: E402
    batch_curve,
    draw_batch_curve,
    show_batch_curve,
)


def test_curve_numbers_come_from_the_helpers():
    c = batch_curve("Qwen2.5-7B", "H100 SXM", 2048, "int8", batches=(1, 8, 64))
    cfg, hw = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
    split = roofline.decode_split_weight_only(cfg, hw, 8, 2048, "int8")
    assert c.tpot_s[1] == pytest.approx(split["weights"].seconds + split["attention"].seconds)
    assert c.throughput[1] == pytest.approx(8 / c.tpot_s[1])
    assert c.critical_batch == roofline.critical_batch_weight_only(cfg, hw, "int8")
    assert c.max_batch == memory.max_batch_weight_only(cfg, hw.memory_bytes, 2048, "int8")
    assert [r[3] for r in c.rows()] == [b <= c.max_batch for b in (1, 8, 64)]
    assert "int8 weights" in c.summary()


def test_tpot_and_throughput_grow_with_batch():
    c = batch_curve("Llama-3.1-8B", "A100 80GB SXM", 1024, "bf16")
    assert list(c.tpot_s) == sorted(c.tpot_s)
    assert c.throughput[-1] > 10 * c.throughput[0]


def test_draw_and_show_make_one_point_per_batch():
    c = batch_curve("Qwen2.5-7B", "H100 SXM", 1024, "bf16", batches=(1, 2, 4))
    fig, ax = plt.subplots()
    draw_batch_curve(c, ax)
    assert len(ax.lines) == 1 + 3
    assert ax.get_xscale() == "log"
    plt.close(fig)
    assert show_batch_curve("Qwen2.5-7B", "H100 SXM", 1024, "int4").weight_dtype == "int4"
    plt.close("all")


def test_bad_slider_values_raise():
    with pytest.raises(ValueError, match="context"):
        batch_curve("Qwen2.5-7B", "H100 SXM", 0)
