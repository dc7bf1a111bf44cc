"""The chapter 8 serving explorers: their numbers come from helpers.serving and latency."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers import hardware, latency, memory, models, serving  # noqa: E402
from helpers.serving import RooflineSteps, Step  # noqa: E402
from helpers.widgets import serving as widget  # noqa: E402


def test_stall_view_chunking_bounds_the_gap_and_costs_ttft():
    view = widget.stall_view(decodes=8, prompt_tokens=4096, token_budget=512)
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
        widget.stall_view(decodes=32, token_budget=16)
    assert widget.show_stall(decodes=32, token_budget=16) is None
    assert "token_budget" in capsys.readouterr().out


def test_prefix_view_no_sharing_no_gain_full_sharing_gains():
    none = widget.prefix_view(shared_fraction=0.0, n=60)
    assert none.hit_rate == 0 and none.ttft_mean[0] == pytest.approx(none.ttft_mean[1])
    full = widget.prefix_view(shared_fraction=1.0, n=60)
    assert full.hit_rate > 0.5 and full.ttft_mean[1] < full.ttft_mean[0]
    assert "served from the cache" in full.table()


def test_transfer_view_numbers_come_from_helpers():
    cfg = models.get("Qwen2.5-7B")
    view = widget.transfer_view(prompt_tokens=1024, link_gb_per_s=50)
    assert view.kv_bytes == memory.kv_cache_bytes(cfg, 1024) == 58_720_256
    assert view.transfer_s == pytest.approx(serving.kv_transfer_seconds(cfg, 1024, 50e9))
    assert view.transfer_s == pytest.approx(1.1744e-3, rel=1e-4)
    assert view.prefill_s > view.decode_step_s > 0
    assert "58.7 MB" in view.table()


def test_spec_view_matches_latency_and_the_worked_check():
    view = widget.spec_view(0.8, 0.05, 16)
    assert view.tokens[4] == pytest.approx(3.3616)
    assert round(view.speedup[4], 2) == 2.80
    assert view.best == latency.spec_best_gamma(0.8, 0.05, 16) == 8
    assert view.speedup[view.best] == pytest.approx(np.max(view.speedup))
    assert "best gamma = 8" in view.table()


def test_every_callback_draws_a_figure():
    for show, kwargs in ((widget.show_stall, {"decodes": 4, "prompt_tokens": 1024}),
                         (widget.show_prefix, {}), (widget.show_transfer, {}),
                         (widget.show_spec, {})):  # fmt: skip
        assert show(**kwargs) is not None
    plt.close("all")
