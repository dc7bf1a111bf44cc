"""The chapter 1 explorer without a browser: slider values in, curve data and a figure out."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.counting import (
    flops,
    models,  # noqa: E402
)
from helpers.widgets import flops as widget  # noqa: E402
from helpers.widgets.flops import AttentionControls  # noqa: E402


def test_worked_numbers_qwen_7b():
    """docs/sources.md: attention adds 2.7% of 2N at 1k context and ~86% at 32k (Qwen2.5-7B)."""
    short = widget.attention_share(AttentionControls("Qwen2.5-7B", 1024))
    long = widget.attention_share(AttentionControls("Qwen2.5-7B", 32768))
    assert short.attention / short.two_n == pytest.approx(0.0270, abs=5e-4)
    assert long.attention / long.two_n == pytest.approx(0.8636, abs=5e-4)
    # Against the FLOPs that really run (matmuls, LM head for one token) the share is lower
    # than the ratio: at 32k attention is about half of the step.
    assert long.point_share == pytest.approx(0.4819, abs=5e-4)
    assert short.matmuls == long.matmuls  # the weight matmuls do not depend on the context


def test_point_equals_forward_flops():
    cfg = models.get("Llama-3.1-8B")
    data = widget.attention_share(AttentionControls("Llama-3.1-8B", 5000))
    step = flops.forward_flops(cfg, 1, context=4999, logits="last")
    attention = step.by_op["attn_scores"] + step.by_op["attn_values"]
    assert data.attention == attention == 4 * 5000 * cfg.n_q_heads * cfg.head_dim * cfg.layers
    assert data.attention + data.matmuls == step.total
    assert data.two_n == 2 * flops.param_count(cfg)


@pytest.mark.parametrize("preset", models.names())
def test_curve_rises_and_includes_the_chosen_context(preset):
    data = widget.attention_share(AttentionControls(preset, 3000))
    assert 3000 in data.key_counts and list(data.key_counts) == sorted(data.key_counts)
    assert len(data.share) == len(data.of_two_n) == len(data.key_counts)
    assert all(0 < s < 1 for s in data.share)
    assert all(a < b for a, b in zip(data.share, data.share[1:], strict=False))
    assert data.share[data.key_counts.index(3000)] == data.point_share


@pytest.mark.parametrize("preset", models.names())
def test_crossover_is_where_attention_equals_the_matmuls(preset):
    data = widget.attention_share(AttentionControls(preset))
    at = widget.attention_share(AttentionControls(preset, round(data.crossover)))
    assert at.point_share == pytest.approx(0.5, abs=1e-4)


def test_small_model_crosses_over_first():
    crossover = {name: widget.attention_share(AttentionControls(name)).crossover
                 for name in models.names()}
    assert min(crossover, key=crossover.get) == "Qwen2.5-0.5B"
    assert 11_000 < crossover["Qwen2.5-0.5B"] < 12_000
    assert 35_000 < crossover["Qwen2.5-7B"] < 35_500


def test_summary_counts_keys_and_cached_tokens_apart():
    """Chapter 1's c counts cached tokens; the explorer's axis counts keys, c + 1."""
    data = widget.attention_share(AttentionControls("Qwen2.5-7B", 4096))
    assert math.ceil(data.crossover) == data.crossover_tokens + 1  # first whole key count
    assert data.crossover_tokens == flops.attention_crossover(models.get("Qwen2.5-7B"))
    assert data.summary().startswith("Qwen2.5-7B, 4,096 keys:")
    assert "at 35,228 keys (c = 35,227 tokens cached)" in data.summary()


def test_summary_mentions_sliding_window_only_past_it():
    def summary(preset, context):
        return widget.attention_share(AttentionControls(preset, context)).summary()

    assert "sliding window" in summary("Mistral-7B-v0.1", 8192)
    assert "sliding window" not in summary("Mistral-7B-v0.1", 4096)
    assert "sliding window" not in summary("Llama-3.1-8B", 8192)


def test_draw_on_given_axes():
    fig, ax = plt.subplots()
    data = widget.attention_share(AttentionControls("Mistral-7B-v0.1", 2048))
    assert widget.draw_attention_share(ax, data) is ax
    xs, ys = ax.lines[0].get_data()
    assert list(xs) == list(data.key_counts)
    assert list(ys) == pytest.approx([100 * s for s in data.share])
    assert ax.get_xscale() == "log"
    assert ax.xaxis.get_major_formatter()(2048, 0) == "2k"
    assert ax.xaxis.get_major_formatter()(512, 0) == "512"
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any("sliding window" in label for label in labels)
    # the legend names the same whole key count as the printed summary: c + 1
    assert f"attention = matmuls (from {data.crossover_tokens + 1:,} keys)" in labels
    assert f"at {data.crossover_tokens + 1:,} keys" in data.summary()
    plt.close(fig)


def test_show_prints_summary_and_returns_nothing(capsys):
    assert widget.show_attention_share(preset="Qwen2.5-0.5B", keys=1024) is None
    assert "Qwen2.5-0.5B, 1,024 keys" in capsys.readouterr().out
    plt.close("all")


@pytest.mark.parametrize(
    "args, message",
    [
        (("Qwen2.5-7B", 0), "keys must be a positive int"),
        (("Qwen2.5-7B", 2.0), "keys must be a positive int"),
        (("GPT-5", 1024), "unknown model"),
    ],
)
def test_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        widget.attention_share(AttentionControls(*args))
