"""Chapter 6's decode-attention timings (``helpers.decoder.attention_times``): the roof is the
chapter's per-token arithmetic, a real run at a tiny size keeps its record, and the split's
verdicts flip where they should on records built by hand."""

import pytest
import torch

from helpers.counting import hardware, models, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder import attention_times
from helpers.decoder.attention_times import AttentionRoof, SplitAgainstPlain
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.timing import Timing

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip
FAST = {"run_time": 0.02}


def ceilings_of(peak: float, bandwidth: float) -> Ceilings:
    return Ceilings("cpu", "test CPU", "t", "today", 1, {"fp32": peak, "bf16": peak},
                    {"fp32": (1, 1, 1)}, bandwidth, "stream", 2**20, 2**34)  # fmt: skip


def test_the_roof_is_one_layers_kv_bytes_and_flops_and_its_bound_follows_the_ridge():
    """Per cached token, one layer reads 2 · n_kv · d_h values and does 4 · n_q · d_h FLOPs:
    2g/b FLOP/B (4 in fp32 at g = 2). Below a ridge of 4 it is compute-bound (a tie too),
    above it memory-bound; the share is the roof's time over the measured one."""
    qwen = models.get("Qwen2.5-0.5B")
    roof = attention_times.attention_roof(qwen, ceilings_of(3.5e9, 1e9), "fp32")
    assert roof.kv_bytes_per_token == 2 * 2 * 64 * 4 and roof.flops_per_token == 4 * 14 * 64
    assert roof.intensity == 3.5 and roof.bound == "compute"  # a tie goes to compute
    tiny = attention_times.attention_roof(TINY, ceilings_of(8e9, 1e9), "fp32")
    assert tiny.intensity == 2 * (4 // 2) / 4 and tiny.bound == "memory"
    assert tiny.share(1e-3, 1000) == pytest.approx(tiny.kv_bytes_per_token * 1000 / 1e-3 / 1e9)
    fast = attention_times.attention_roof(TINY, ceilings_of(0.5e9, 1e9), "fp32")
    assert fast.bound == "compute"
    assert fast.share(1e-3, 1000) == pytest.approx(fast.flops_per_token * 1000 / 1e-3 / 0.5e9)
    assert "read against the FLOP ceiling, 0.5 GFLOP/s" in fast.lines()[1]
    assert "read against the bandwidth ceiling, 1.0 GB/s" in tiny.lines()[1]


def test_a_real_attention_curve_keeps_its_rows_and_its_gpu_comparison():
    torch.manual_seed(0)
    measured = ceilings_of(1e10, 1e9)
    curve = attention_times.attention_against_context(TINY, [64, 256], measured, "fp32", **FAST)
    assert [r.length for r in curve.rows] == [64, 256]
    assert all(r.seconds > 0 and r.kv_bytes == curve.roof.kv_bytes_per_token * r.length
               for r in curve.rows)  # fmt: skip
    assert curve.roof == attention_times.attention_roof(TINY, measured, "fp32")
    assert curve.gpu_ridge == hardware.get("H100 SXM").ridge("bf16")
    assert curve.gpu_intensity == roofline.decode_attention_intensity(TINY, "bf16") == 2
    assert curve.latent_intensity == pytest.approx(128 * 2 * (576 + 512) / (576 * 2))
    assert len(curve.report().splitlines()) == 2 + 1 + 2 + 1
    with pytest.raises(ValueError, match="lengths"):
        attention_times.attention_against_context(TINY, [0], measured, "fp32", **FAST)


def timed(median: float, iqr: float) -> Timing:
    return Timing(median, iqr, median, median, 8, 1, "cpu", 1)


def test_each_split_is_judged_against_plain_past_the_two_spreads():
    roof = AttentionRoof("fp32", 256, 128, 1e10, 1e9)
    run = SplitAgainstPlain("m", roof, 1024, (("plain", timed(1.0, 0.1)),
                                              ("split, J = 4", timed(1.15, 0.1)),
                                              ("split, J = 16", timed(0.5, 0.1)),
                                              ("split, J = 64", timed(2.0, 0.1))))
    within, faster, slower = run.verdicts
    assert within.within and not faster.within and not slower.within
    assert faster.ratio == 2.0 and slower.ratio == 0.5
    lines = run.report().splitlines()
    assert lines[0] == "1,024 cached tokens, 0.3 MB of KV" and "(memory-bound)" in lines[1]
    assert lines[-3:] == [
        "split, J = 4 against plain: within the two timings' spread: no difference shown",
        "split, J = 16 against plain: faster beyond the spread, 2.00x plain's speed",
        "split, J = 64 against plain: slower beyond the spread, plain is 2.00x faster"]


def test_a_real_split_run_times_plain_then_each_split_on_the_same_cache():
    torch.manual_seed(0)
    run = attention_times.split_against_plain(TINY, 128, ceilings_of(1e10, 1e9), "fp32",
                                              chunks=(2, 8), **FAST)  # fmt: skip
    assert [name for name, _ in run.timings] == ["plain", "split, J = 2", "split, J = 8"]
    assert run.kv_bytes == run.roof.kv_bytes_per_token * 128
    assert [v.name for v in run.verdicts] == ["split, J = 2", "split, J = 8"]
    with pytest.raises(ValueError, match="chunks"):
        attention_times.split_against_plain(TINY, 16, ceilings_of(1e10, 1e9), "fp32",
                                            chunks=(32,), **FAST)  # fmt: skip


def test_attention_alone_is_set_against_the_decode_steps_growth():
    """Section 7's one-layer attention grew 762 µs from 1,024 to 8,192 tokens (4 layers: 3.05
    ms) where section 5's TPOT grew 1.61 ms, spreads 0.94 ms + 4 × 40 µs: they disagree."""
    from helpers.decoder.phase_times import DecodeCurve, DecodeRow

    measured = ceilings_of(1e10, 1e9)
    roof = attention_times.attention_roof(TINY, measured, "fp32")
    rows = (attention_times.AttentionRow(1024, 126e-6, 20e-6, 1),
            attention_times.AttentionRow(8192, 888e-6, 20e-6, 8),
            attention_times.AttentionRow(32768, 3333e-6, 20e-6, 32))
    curve = attention_times.AttentionCurve("m", roof, rows, "H100 SXM", 295.0, 7.0, "x", 242.0)

    def decode(grown: float) -> DecodeCurve:
        steps = (DecodeRow(16, 0.0572, 1.0, 0.01, 0.3), DecodeRow(1024, 0.05775, 1.0, 0.01, 0.3),
                 DecodeRow(8192, 0.05775 + grown, 1.0, 0.01, 0.3))
        return DecodeCurve("m", "fp32", steps, {16: 2e-4, 1024: 2.1e-4, 8192: 7.3e-4}, measured,
                           1e9, (1e9,), 4, 400, roofline.bound_time(1.0, 1.0, 1.0, 1.0))

    line = attention_times.against_steps(curve, decode(0.00161), layers=4)
    assert line.startswith("from 1,024 to 8,192 cached tokens: attention timed alone grew 3.05 "
                           "ms over 4 layers, section 5's TPOT 1.61 ms (spreads summed 1.10 ms)")
    assert "attention alone costs more beyond the spreads" in line
    agree = attention_times.against_steps(curve, decode(0.0025), layers=4)
    # 3.05 against 2.50 ms, spread 1.10
    assert agree.endswith("no difference shown within their spreads")
    short = DecodeCurve("m", "fp32", decode(0.0).rows[:1], {16: 1e-4}, measured, 1e9, (1e9,), 4,
                        400, roofline.bound_time(1.0, 1.0, 1.0, 1.0))
    assert attention_times.against_steps(curve, short, layers=4) is None  # one shared context
