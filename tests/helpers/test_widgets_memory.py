"""The chapter 2 memory-budget widget: values in, numbers and bars out, no browser."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.counting import (
    hardware,
    memory,
    models,  # noqa: E402
)
from helpers.widgets.memory import (  # noqa: E402
    GB,
    MemoryControls,
    draw_memory_budget,
    memory_budget,
    show_memory_budget,
)


def test_numbers_come_from_helpers_memory():
    budget = memory_budget(MemoryControls("Qwen2.5-7B", "bf16", 4096, 32, "H100 SXM"))
    cfg = models.get("Qwen2.5-7B")
    assert budget.weights == memory.weight_bytes(cfg, "bf16") == 15_231_233_024
    assert budget.kv_cache == 32 * 4096 * 57_344
    assert budget.capacity == hardware.get("H100 SXM").memory_bytes == 80 * 2**30
    assert budget.fits and budget.overflow == 0
    assert budget.free == 80 * 2**30 - budget.weights - budget.kv_cache
    assert budget.max_sequences == memory.max_concurrent_sequences(cfg, 80 * 2**30, 4096)
    assert list(budget.segments()) == ["weights", "KV cache", "free"]
    assert sum(budget.segments().values()) == pytest.approx(budget.capacity)


def test_reference_capacity_number():
    """docs/sources.md: Qwen2.5-7B bf16 on H200 (141 GiB) at S = 1024: 2,318 sequences."""
    budget = memory_budget(MemoryControls("Qwen2.5-7B", "bf16", 1024, 1, "H200 SXM"))
    assert budget.max_sequences == 2318
    assert "2,318" in budget.verdict()


def test_overflow_when_the_cache_does_not_fit():
    budget = memory_budget(MemoryControls("Llama-3.1-8B", "bf16", 32768, 64, "H100 SXM"))
    assert not budget.fits
    assert budget.free == 0
    assert budget.overflow == budget.weights + budget.kv_cache - 80 * 2**30
    assert "does not fit" in budget.verdict() and "16 sequences" in budget.verdict()


def test_weights_alone_too_big():
    """Llama-3.1-70B in bf16 (141.1e9 B) does not fit an 80 GiB H100; it fits a 141 GiB H200."""
    budget = memory_budget(MemoryControls("Llama-3.1-70B", "bf16", 1024, 1, "H100 SXM"))
    assert not budget.fits and budget.max_sequences == 0
    assert "weights alone" in budget.verdict()
    on_h200 = memory_budget(MemoryControls("Llama-3.1-70B", "bf16", 1024, 1, "H200 SXM"))
    assert on_h200.fits and on_h200.max_sequences == 30
    assert memory_budget(MemoryControls("Llama-3.1-70B", "fp8", 1024, 1, "H100 SXM")).fits


def test_sliding_window_caps_the_bar():
    long = memory_budget(MemoryControls("Mistral-7B-v0.1", "bf16", 32768, 8, "H100 SXM"))
    window = memory_budget(MemoryControls("Mistral-7B-v0.1", "bf16", 4096, 8, "H100 SXM"))
    assert long.kv_cache == window.kv_cache == 8 * 4096 * 131_072


def test_dtype_shrinks_both_weights_and_cache():
    bf16 = memory_budget(MemoryControls("Qwen2.5-7B", "bf16", 2048, 4, "L4"))
    int4 = memory_budget(MemoryControls("Qwen2.5-7B", "int4", 2048, 4, "L4"))
    assert int4.weights * 4 == bf16.weights and int4.kv_cache * 4 == bf16.kv_cache


def test_drawn_bars_match_the_data():
    budget = memory_budget(MemoryControls("Llama-3.1-8B", "bf16", 32768, 64, "H100 SXM"))
    fig, ax = plt.subplots()
    try:
        draw_memory_budget(ax, budget)
        bars = [p for p in ax.patches]
        widths = [bar.get_width() for bar in bars]
        lefts = [bar.get_x() for bar in bars]
        expected = [v / GB for v in budget.segments().values()] + [budget.overflow / GB]
        assert widths == pytest.approx(expected)
        assert lefts[:3] == pytest.approx([0, budget.weights / GB, budget.needed / GB])
        assert lefts[3] == pytest.approx(80 * 2**30 / 1e9)  # the overflow starts at the capacity
        assert ax.get_xlim()[1] >= budget.needed / GB
        assert "does not fit" in ax.get_title()
    finally:
        plt.close(fig)


def test_no_overflow_bar_when_it_fits():
    fig, ax = plt.subplots()
    try:
        draw_memory_budget(ax, memory_budget())
        assert len(ax.patches) == 3
    finally:
        plt.close(fig)


def test_callback_returns_nothing_and_opens_no_pyplot_figure():
    # Its figure is made outside pyplot (helpers.widgets.figures); test_widgets_interact.py
    # sees it shown as a PNG.
    before = set(plt.get_fignums())
    shown = show_memory_budget(model="Qwen2.5-0.5B", dtype="fp32", context=512, batch=2, chip="L4")
    assert shown is None
    assert set(plt.get_fignums()) == before


@pytest.mark.parametrize(
    "kwargs, match",
    [({"chip": "H300"}, "unknown chip"), ({"model": "GPT-5"}, "unknown model"),
     ({"dtype": "fp64"}, "dtype must be one of"), ({"context": 0}, "context"),
     ({"batch": 0}, "batch")],
)  # fmt: skip
def test_bad_values_name_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        memory_budget(MemoryControls(**kwargs))
