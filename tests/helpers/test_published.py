"""helpers.counting.published: published GPU figures never beat the book's roofline, each is cited,
and the bounds are the values the formulas give by hand (issue 39)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from helpers.counting import published, published_report
from helpers.counting.flops import forward_flops, param_count
from helpers.counting.hardware import get as chip
from helpers.counting.latency import end_to_end, tpot
from helpers.counting.memory import forward_bytes
from helpers.counting.models import get as preset
from helpers.parallel.sharding import link, tp_tpot

ROWS = published.rows()
TABLE = published.table()


def _row(kind: str, label_start: str) -> published.Measurement:
    (row,) = [r for r in published.rows(kind) if r.label.startswith(label_start)]
    return row


def test_at_least_twenty_rows_from_five_sources_across_every_kind():
    assert len(ROWS) >= 20
    assert len({r.source for r in ROWS}) >= 5
    assert {r.kind for r in ROWS} == set(published.KINDS)


@pytest.mark.parametrize("comparison", TABLE, ids=lambda c: c.row.label)
def test_no_published_figure_beats_its_bound(comparison):
    assert 0 < comparison.share < 1, (
        f"{comparison.row.label}: {comparison.row.figure} {comparison.row.unit} against a "
        f"bound of {comparison.bound:.6g}: the formula or the row is wrong")
    assert comparison.binds in ("compute", "memory")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.label)
def test_every_row_is_cited(row):
    source = published.source_of(row)
    assert source.title and source.url.startswith("https://github.com/")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row.date)
    assert row.software.strip() and len(row.quote) > 40
    assert row.unit and row.chips >= 1
    if row.model is not None:
        published.model(row.model)  # a known config


def test_an_mlperf_row_names_its_own_summary_file():
    row = _row("mlperf", "llama2-70b-99 Offline")
    url = published.source_of(row).url
    assert url.endswith("results/H200-SXM-141GBx8_TRT/llama2-70b-99/Offline/performance/"
                        "run_1/mlperf_log_summary.txt")
    assert "Tokens per second: 31302.7" in row.quote


def test_mlperf_rows_carry_their_scenarios_limits():
    row = _row("mlperf", "llama3.1-8b Interactive")
    assert (row.ttft_limit, row.tpot_limit) == (0.5, 0.03)
    assert "ttft_latency (ns): 500000000 / tpot_latency (ns): 30000000" in row.quote
    assert published.source_of(row).url.startswith(
        "https://github.com/mlcommons/inference_results_v5.1/")
    assert {r.scenario for r in published.rows("mlperf")} == {"Offline", "Server",
                                                              "Interactive"}


def test_every_source_has_rows():
    assert {r.source for r in ROWS} == set(published.SOURCES)


def test_the_tensor_parallel_series_is_one_model_at_t_1_2_4_8():
    series = [r for r in published.rows("tp") if r.model == "Llama-3.1-8B"]
    assert [r.chips for r in series] == [1, 2, 4, 8]


def test_llama2_configs_count_their_parameters():
    # The "7B" and "70B" of the names: 6.74e9 and 68.98e9 from the configs' shapes.
    counts = {name: param_count(cfg) for name, cfg in published.MODELS.items()}
    assert counts == {"Llama-2-7B": 6_738_415_616, "Llama-2-70B": 68_976_648_192}


# ---- the bounds, computed by hand from the configs and datasheets


def test_gemm_bound_is_the_dense_peak_for_a_compute_bound_shape():
    c = published.compare(_row("gemm", "bf16 matmul 2048x2048x13312"))
    m, k, n = 2048, 13312, 2048
    intensity = 2 * m * k * n / (2 * (m * k + k * n + m * n))  # FLOP/B in bf16
    assert intensity > 989e12 / 3.35e12  # right of the H100's ridge
    assert c.bound == pytest.approx(989.0, rel=1e-12)
    assert c.share == pytest.approx(794.5 / 989, rel=1e-12)


def test_single_stream_decode_bound_by_hand():
    """Llama-3.1-8B bf16, one token at a context of 5 on an A100 80GB: every weight matrix
    once with its input and output vector, the cache of 6 tokens read, the new K and V
    written, the query and output, the LM head's token and one embedding row."""
    c = published.compare(_row("decode", "Llama-3.1-8B Base"))
    layers, d, q, kv, f, vocab = 32, 4096, 4096, 1024, 14336, 128256

    def linear(k, n):
        return k * n + k + n

    per_layer = (linear(d, q) + 2 * linear(d, kv) + linear(q, d) + 2 * linear(d, f)
                 + linear(f, d) + 2 * q + 6 * 2 * kv + 2 * kv)
    elements = layers * per_layer + linear(d, vocab) + d
    seconds = 2 * elements / 2.039e12
    assert c.binds == "memory"
    assert c.bound == pytest.approx(1 / seconds, rel=1e-12)
    assert c.work.bytes_moved == 2 * elements


def test_mlperf_bound_by_hand():
    """Llama-2-70B, fp8, 8 H100s: one output token's matmul FLOPs (attending to itself
    only) at 8 × 1979 TFLOP/s; its own K and V (163,840 B) are far from binding."""
    c = published.compare(_row("mlperf", "llama2-70b-99.9 Offline"))
    layers, d, kv, f, heads, head_dim, vocab = 80, 8192, 1024, 28672, 64, 128, 32000
    per_layer = 2 * (d * d + 2 * d * kv + d * d + 3 * d * f) + 4 * heads * head_dim
    flops = layers * per_layer + 2 * d * vocab
    assert c.binds == "compute"
    assert c.bound == pytest.approx(8 * 1979e12 / flops, rel=1e-12)
    assert c.work.bytes_moved == 80 * 2 * 1024


def test_throughput_sum_over_steps_is_exact():
    """The affine shortcut equals a step-by-step sum of the formulas."""
    row = dataclasses.replace(_row("throughput", "Llama-2-7B fp8, batch 768, 128/128"),
                              output=9)
    cfg, b, s = published.model(row.model), row.batch, row.prompt
    flops = forward_flops(cfg, s, batch=b, attention="causal", logits="last").total
    moved = sum(forward_bytes(cfg, s, batch=b, dtype="fp8", logits="last").values())
    for j in range(1, row.output):
        flops += forward_flops(cfg, 1, context=s + j - 1, batch=b, logits="last").total
        moved += sum(forward_bytes(cfg, 1, context=s + j - 1, batch=b, dtype="fp8",
                                   logits="last").values())
    c = published.compare(row)
    assert (c.work.flops, c.work.bytes_moved) == (flops, moved)
    seconds = max(flops / 1979e12, moved / 3.35e12)
    assert c.bound == pytest.approx(b * row.output / seconds, rel=1e-12)


def test_per_gpu_figures_get_a_per_gpu_bound():
    row = _row("throughput", "Llama-2-70B fp8, batch 1024")
    whole = published.compare(dataclasses.replace(row, per_chip=False))
    assert published.compare(row).bound == pytest.approx(whole.bound / 2, rel=1e-12)


def test_aggregate_chip_adds_every_roof():
    eight = published.aggregate_chip("H100 SXM", 8)
    one = chip("H100 SXM")
    assert eight.bandwidth == 8 * one.bandwidth
    assert eight.peak("fp8") == 8 * one.peak("fp8")
    assert published.aggregate_chip("H100 SXM", 1) is one


# ---- generous: never tighter than the book's own predictions


@pytest.mark.parametrize("row", published.rows("tp"), ids=lambda r: r.label)
def test_tp_bound_is_above_the_books_tpot_model(row):
    """Chapter 10's TPOT(T) adds all-reduces and keeps the LM head whole on every chip:
    the bound, which does neither, must be faster."""
    cfg, hw = preset(row.model), chip(row.chip)
    book = 1 / tp_tpot(cfg, hw, link("NVLink 4"), row.chips, row.prompt)
    assert published.compare(row).bound >= book


def test_decode_and_throughput_bounds_are_above_the_books_latency_model():
    row = _row("decode", "Llama-3.1-8B Base")
    assert published.compare(row).bound >= 1 / tpot(preset(row.model), chip(row.chip),
                                                     row.prompt)
    for row in published.rows("throughput"):
        if row.chips > 1:
            continue
        cfg, hw = published.model(row.model), chip(row.chip)
        book = end_to_end(cfg, hw, row.prompt, 2, row.batch, row.dtype)
        # Two tokens: one prefill and one decode step; the bound's rate must be higher.
        short = dataclasses.replace(row, output=2)
        assert published.compare(short).bound >= row.batch * 2 / book


# ---- the chapters' text comes from the numbers


@pytest.mark.parametrize("kind", [k for k in published.KINDS if k != "gemm"])
def test_reason_prints_each_rows_share(kind):
    text = published_report.reason(kind)
    for c in published.table(kind):
        assert f"{c.share:.0%}" in text


def test_gemm_reason_prints_the_range_of_shares():
    text = published_report.reason("gemm")
    bf16 = [c.share for c in published.table("gemm") if c.row.compute_dtype == "bf16"]
    assert f"{min(bf16):.0%}-{max(bf16):.0%} of the bf16 peak" in text


def test_report_lists_rows_bounds_shares_and_sources():
    text = published_report.report("gemm", "mlperf")
    low, high = published.shares("mlperf")
    assert f"{low:.0%}-{high:.0%}" in text
    assert "bound 989 (compute); share 80.3%" in text
    assert "MLPerf Inference v4.1" in text and "2024-08-28" in text
    assert text.count("Why: ") == 2


def test_bad_rows_are_refused():
    row = ROWS[0]
    with pytest.raises(ValueError, match="kind"):
        dataclasses.replace(row, kind="training")
    with pytest.raises(ValueError, match="source"):
        dataclasses.replace(row, source="a blog")
    with pytest.raises(ValueError, match="unknown model"):
        published.model("GPT-5")
