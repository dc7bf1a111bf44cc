"""The chapter 8 serving explorers: their numbers come from helpers.serving and latency."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers import serving  # noqa: E402
from helpers.counting import hardware, memory, models
from helpers.serving import RooflineSteps, Step, spec  # noqa: E402
from helpers.widgets import serving as widget  # noqa: E402


def test_stall_view_chunking_bounds_the_gap_and_costs_ttft():
    view = widget.stall_view(widget.StallControls(decodes=8, prompt_tokens=4096, token_budget=512))
    whole, chunked = view.gaps["continuous (whole)"], view.gaps["chunked (512)"]
    steps = RooflineSteps(models.get("Qwen2.5-7B"), hardware.get("H100 SXM"))
    # The longest gap under continuous batching is the step that prefills the whole prompt
    # beside the decodes; chunked, no step carries more than the budget.
    assert whole.max() > 5 * chunked.max()
    assert chunked.max() <= steps(Step(((512 - 8, 4096 - 504),), 8, 8 * 1000, 8)) * 1.01
    assert view.ttft["chunked (512)"] > view.ttft["continuous (whole)"]
    assert "max gap ms" in view.table()


def test_stall_view_bad_budget_is_reported_by_the_callback(capsys):
    with pytest.raises(ValueError, match="token_budget"):
        widget.stall_view(widget.StallControls(decodes=32, token_budget=16))
    assert widget.show_stall(decodes=32, token_budget=16) is None
    assert "token_budget" in capsys.readouterr().out


def test_transfer_view_of_a_model_too_big_for_the_chip_is_reported_by_the_callback(capsys):
    with pytest.raises(ValueError, match="does not fit"):
        widget.transfer_view(widget.TransferControls(model="Llama-3.1-70B"))
    assert widget.show_transfer(model="Llama-3.1-70B") is None
    assert "does not fit" in capsys.readouterr().out


def test_prefix_view_no_sharing_no_gain_full_sharing_gains():
    none = widget.prefix_view(widget.PrefixControls(shared_fraction=0.0, shared_prefix=2048), n=60)
    assert none.hit_rate == 0 and none.ttft_mean[0] == pytest.approx(none.ttft_mean[1])
    full = widget.prefix_view(widget.PrefixControls(shared_fraction=1.0, shared_prefix=2048), n=60)
    assert full.hit_rate > 0.5 and full.ttft_mean[1] < full.ttft_mean[0]
    assert "served from the cache" in full.table()


def test_transfer_view_numbers_come_from_helpers():
    cfg = models.get("Qwen2.5-7B")
    view = widget.transfer_view(widget.TransferControls(prompt_tokens=1024, link_gb_per_s=50))
    assert view.kv_bytes == memory.kv_cache_bytes(cfg, 1024) == 58_720_256
    assert view.transfer_s == pytest.approx(serving.kv_transfer_seconds(cfg, 1024, 50e9))
    assert view.transfer_s == pytest.approx(1.1744e-3, rel=1e-4)
    assert view.prefill_s > view.decode_step_s > 0
    assert "58.7 MB" in view.table()


def test_spec_view_matches_latency_and_the_worked_check():
    view = widget.spec_view(widget.SpecControls(0.8, 0.05, 16))
    assert view.tokens[4] == pytest.approx(3.3616)
    assert round(view.speedup[4], 2) == 2.80
    assert view.best == spec.spec_best_gamma(0.8, 0.05, 16) == 8
    assert view.speedup[view.best] == pytest.approx(np.max(view.speedup))
    assert "best gamma = 8" in view.table()


def test_draw_stall_one_line_per_policy_from_the_view():
    view = widget.stall_view(widget.StallControls(decodes=4, prompt_tokens=1024, token_budget=256))
    fig, ax = plt.subplots()
    widget.draw_stall(ax, view)
    assert [line.get_label() for line in ax.lines] == list(view.gaps)
    for line, gaps in zip(ax.lines, view.gaps.values(), strict=True):
        assert np.allclose(line.get_ydata(), gaps * 1e3)
    assert ax.get_yscale() == "log"
    assert ax.get_title() == "4 decodes meet a 1,024-token prompt (Qwen2.5-7B, H100 SXM)"
    plt.close(fig)


def test_draw_prefix_bars_are_the_mean_and_p99_ttft():
    view = widget.prefix_view(widget.PrefixControls(shared_fraction=0.5, shared_prefix=1024), n=60)
    fig, ax = plt.subplots()
    widget.draw_prefix(ax, view)
    heights = [bar.get_height() for bar in ax.patches]
    assert np.allclose(heights, np.array([*view.ttft_mean, *view.ttft_p99]) * 1e3)
    assert ax.get_title().startswith("50% of requests share 1,024 tokens")
    plt.close(fig)


def test_draw_transfer_bars_are_the_three_times():
    view = widget.transfer_view(widget.TransferControls(prompt_tokens=2048, link_gb_per_s=25))
    fig, ax = plt.subplots()
    widget.draw_transfer(ax, view)
    widths = [bar.get_width() for bar in ax.patches]
    assert np.allclose(widths, np.array([view.transfer_s, view.prefill_s,
                                         view.decode_step_s]) * 1e3)  # fmt: skip
    assert ax.get_xscale() == "log"
    assert "2,048 tokens" in ax.get_title() and "25 GB/s" in ax.get_title()
    plt.close(fig)


def test_draw_spec_marks_the_best_gamma():
    view = widget.spec_view(widget.SpecControls(0.6, 0.1, 8))
    fig, ax = plt.subplots()
    widget.draw_spec(ax, view)
    speedup, tokens, best = ax.lines
    assert np.allclose(speedup.get_ydata(), view.speedup)
    assert np.allclose(tokens.get_ydata(), view.tokens)
    assert list(best.get_xdata()) == [view.best, view.best]
    assert ax.get_title() == "alpha = 0.6, draft cost r = 0.1"
    plt.close(fig)


def test_every_callback_prints_its_table_and_returns_nothing(capsys):
    for show, kwargs, view in (
        (widget.show_stall, {"decodes": 4, "prompt_tokens": 1024},
         widget.stall_view(widget.StallControls(decodes=4, prompt_tokens=1024))),
        (widget.show_prefix, {}, widget.prefix_view(widget.PrefixControls(0.5, 2048))),
        (widget.show_transfer, {}, widget.transfer_view()),
        (widget.show_spec, {}, widget.spec_view()),
    ):  # fmt: skip
        assert show(**kwargs) is None
        assert capsys.readouterr().out == view.table() + "\n"
    assert plt.get_fignums() == []  # each closed its figure after showing it


def test_transfer_compares_with_a_decode_step_of_the_chosen_batch():
    one = widget.transfer_view(widget.TransferControls(decode_batch=1))
    many = widget.transfer_view(widget.TransferControls(decode_batch=64))
    assert one.decode_step_s < many.decode_step_s and one.prefill_s == many.prefill_s
    assert "decode step (batch 64)" in many.table()
    study = serving.kv_handoff_study(prompt_tokens=1024, link_bytes_per_s=50e9, decode_batch=64)
    assert study["decode_step_s"] == many.decode_step_s
