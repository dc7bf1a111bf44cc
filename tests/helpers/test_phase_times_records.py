"""Chapter 6's TTFT, TPOT and matmul timings (``helpers.decoder.phase_times``): a real run at
a tiny size keeps each record's invariants (its columns are the library's formulas on its own
timings), and each verdict flips where it should on records built by hand."""

import dataclasses

import pytest
import torch

from helpers.counting import flops, latency, memory, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder import phase_times
from helpers.decoder.model import Decoder
from helpers.decoder.phase_times import DecodeRow, PrefillCurve, PrefillRow, PrefillStep
from helpers.measuring.ceilings import Ceilings

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip
FAST = {"run_time": 0.02}


def ceilings_of(bandwidth: float = 1e9, cache_bytes: int = 2**20) -> Ceilings:
    """Ceilings as if measured: 10 GFLOP/s in fp32, ``bandwidth`` B/s, a 1 MiB cache."""
    return Ceilings("cpu", "test CPU", "t", "today", 1, {"fp32": 1e10}, {"fp32": (1, 1, 1)},
                    bandwidth, "stream", cache_bytes, 2**34)  # fmt: skip


@pytest.fixture(scope="module")
def model() -> Decoder:
    torch.manual_seed(0)
    return Decoder(TINY).eval()


def test_a_prefill_curve_holds_the_librarys_flops_roofline_and_mfu_of_its_timings(model):
    measured = ceilings_of()
    curve = phase_times.ttft_against_prompt(model, [4, 8, 16], measured, "fp32", **FAST)
    hw = measured.as_hardware_spec()
    assert [row.prompt for row in curve.rows] == [4, 8, 16] == list(curve.curve)
    assert list(curve.spread) == [4, 8, 16]
    for row in curve.rows:
        work = flops.forward_flops(TINY, row.prompt, attention="causal", logits="last").total
        assert row.flops == work and row.seconds > 0 and curve.spread[row.prompt] >= 0
        assert row.roofline == latency.ttft(TINY, hw, row.prompt, dtype="fp32")
        assert row.mfu == latency.flops_utilization(work, row.seconds, 1e10)
        assert curve.curve[row.prompt] == row.seconds
    assert curve.shortest_bound == latency.prefill_time(TINY, hw, 4, dtype="fp32").bound
    plan = phase_times.weights_flush_plan(TINY, "fp32", measured.cache_bytes)
    assert curve.flushed is (plan.method == "flush")
    assert len(curve.steps) == 2 and curve.growth == curve.rows[-1].seconds / curve.rows[0].seconds
    report = curve.report().splitlines()
    assert len(report) >= 1 + 3 + 2 + 2 and report[-2].startswith("TTFT(16) / TTFT(4): measured")
    assert report[-1].startswith("  over the whole range: ")
    with pytest.raises(ValueError, match="prompts"):
        phase_times.ttft_against_prompt(model, [8, 4], measured, "fp32", **FAST)
    with pytest.raises(ValueError, match="prompts"):
        phase_times.ttft_against_prompt(model, [], measured, "fp32", **FAST)


def row(prompt: int, seconds: float, work: float, predicted: float) -> PrefillRow:
    return PrefillRow(prompt, seconds, work, predicted, 0.5)


def test_a_prefill_step_reads_its_pace_against_the_roofline():
    """Twice the tokens: near the roofline's pace within 1.5x either way; far below it, the
    shorter prompt paid the uncounted cost; far above, the longer one, and a FLOP rate that
    fell is named; less time for more tokens is called noise first."""
    near = PrefillStep(row(16, 1.0, 10, 1.0), row(32, 1.8, 20, 2.0))
    assert not near.far and near.costlier is None and len(near.lines()) == 1
    assert near.lines()[0].endswith("0.90 of the roofline's pace, within 1.5× of it")
    below = PrefillStep(row(16, 1.0, 10, 1.0), row(32, 1.2, 20, 2.0))
    assert below.far and below.pace == pytest.approx(0.6) and below.costlier == 16
    assert not below.rate_fell
    assert below.lines()[0].endswith("0.60 of the roofline's pace, more than 1.5× below it")
    above = PrefillStep(row(16, 1.0, 10, 1.0), row(32, 4.0, 20, 2.0))
    assert above.far and above.costlier == 32 and above.rate_fell  # 10 → 5 FLOP/s
    assert len(above.lines()) == 3 and "FLOP rate fell" in above.lines()[2]
    faster_rate = PrefillStep(row(16, 1.0, 10, 1.0), row(32, 4.0, 80, 2.0))
    assert faster_rate.far and not faster_rate.rate_fell
    inverted = PrefillStep(row(16, 1.0, 10, 1.0), row(32, 0.9, 20, 2.0))
    assert inverted.inverted and inverted.costlier is None
    assert "took less time" in inverted.lines()[1]
    curve = PrefillCurve("m", "fp32", (near.shorter, near.longer), {16: 0.0, 32: 0.0}, "memory",
                         False)  # fmt: skip
    assert curve.steps == (near,) and curve.report().count("\n") == 1 + 2 + 2
    # the whole range read as one step: 1.8x against the roofline's 2x, near it
    assert curve.report().endswith(
        "over the whole range: 0.90 of the roofline's pace, within 1.5× of it")
    far = dataclasses.replace(curve, rows=(below.shorter, below.longer))
    assert far.report().endswith("0.60 of the roofline's pace, more than 1.5× below it")


def test_a_decode_curve_keeps_the_best_stream_and_reads_its_rows_on_it(model):
    measured = ceilings_of(bandwidth=1.0)  # any stream beats 1 B/s: the ceiling is raised
    prefill = phase_times.ttft_against_prompt(model, [4, 8], measured, "fp32", **FAST)
    curve = phase_times.tpot_against_context(model, [4, 32], measured, "fp32", prefill=prefill,
                                             stream_bytes=2**20, **FAST)  # fmt: skip
    assert len(curve.streams) == 2 and curve.earlier_bandwidth == 1.0
    assert curve.measured.bandwidth == max(curve.streams) and curve.raised
    hw = curve.measured.as_hardware_spec()
    assert list(curve.spread) == [4, 32]
    for context, seconds, moved, predicted, mbu in curve.rows:  # MBU last, as the chapter reads
        assert moved == sum(memory.forward_bytes(TINY, 1, context=context, dtype="fp32",
                                                 logits="last").values())  # fmt: skip
        assert predicted == latency.tpot(TINY, hw, context, dtype="fp32")
        assert mbu == latency.bandwidth_utilization(moved, seconds, curve.measured.bandwidth)
        assert curve.curve[context] == seconds and curve.spread[context] >= 0
    assert curve.attention == roofline.decode_split(TINY, hw, 1, 32, "fp32")["attention"]
    assert curve.kv_bytes_per_token == memory.kv_bytes_per_token(TINY, "fp32")
    prompt, ttft, before, now = curve.prefill
    assert (prompt, ttft, before) == (4, prefill.rows[0].seconds, prefill.rows[0].roofline)
    assert now == latency.prefill_time(TINY, hw, 4, dtype="fp32")
    report = curve.report()
    assert "above section 3's" in report and report.splitlines()[-1].startswith(
        "the shortest prefill (4 tokens)")  # fmt: skip
    with pytest.raises(ValueError, match="contexts"):
        phase_times.tpot_against_context(model, [0, 4], measured, "fp32", **FAST)


def test_the_decode_growth_verdict_flips_past_the_spread():
    """The bytes grow 10% (1 ms at the first step's 10 ms): TPOT growing 1.5 ms is within a
    spread of 1 ms, more beyond it at a spread of 0.2 ms, and growing 0.2 ms is less."""
    def curve(grown: float, iqr: float) -> phase_times.DecodeCurve:
        rows = (DecodeRow(16, 0.010, 100.0, 0.005, 0.5),
                DecodeRow(4096, 0.010 + grown, 110.0, 0.0055, 0.5))
        return phase_times.DecodeCurve("m", "fp32", rows, {16: iqr, 4096: iqr}, ceilings_of(),
                                       1e9, (1e9,), 4, 400,
                                       roofline.bound_time(1.0, 1.0, 1.0, 1.0))  # fmt: skip

    assert curve(0.0015, 0.0005).growth_verdict == "within"
    assert curve(0.0015, 0.0001).growth_verdict == "more"
    assert curve(0.0002, 0.0001).growth_verdict == "less"
    assert curve(0.0015, 0.0001).by_bytes_s == pytest.approx(0.001)
    assert "more than the bytes' growth, beyond the spread" in curve(0.0015, 0.0001).report()
    # less and growing beyond the spread: no reading added
    grew = curve(0.0005, 0.0001)
    assert grew.growth_verdict == "less" and not grew.fell
    assert "prices no cache byte" not in grew.report() and "did not grow" not in grew.report()
    # less, falling beyond the spread: the machine drifted
    fell = curve(-0.0035, 0.0001)
    assert fell.growth_verdict == "less" and fell.fell
    assert "TPOT fell by more than its spread while the bytes grew" in fell.report()
    # less, falling within the spread (the reviewed run: -0.06 ms, spread 1.76 ms): no fall
    # is claimed, only that the cache's bytes cost less than the step's rate
    for flat in (curve(-0.0001, 0.0001), curve(0.00015, 0.0001)):
        assert flat.growth_verdict == "less" and not flat.fell
        assert "TPOT fell" not in flat.report() and "drifts" not in flat.report()
        assert "TPOT did not grow beyond its spread while the bytes grew" in flat.report()
    over = dataclasses.replace(curve(0.0, 0.0), rows=(DecodeRow(16, 0.01, 100.0, 0.005, 1.2),))
    assert over.above_ceiling == [16] and "MBU above 100% at contexts [16]" in over.report()


def test_matmuls_alone_times_every_weight_matrix_of_a_step(model):
    linears = phase_times.weight_matrices(model)
    assert len(linears) == 7 * TINY.layers + 1 and linears[-1] is model.lm_head
    assert linears[0] is model.layers[0].attention.q and linears[6] is model.layers[0].mlp.down
    alone = phase_times.matmuls_alone(model, 16, ceilings_of(), "fp32", **FAST)
    assert alone.count == len(linears) and alone.context == 16
    assert alone.weight_bytes == sum(m.weight.numel() * 4 for m in linears)
    # the whole step is timed beside the matmuls, in turn: it holds them, so it takes longer
    assert alone.step_s > alone.median_s > 0
    assert alone.rest_s == pytest.approx(alone.step_s - alone.median_s)
    assert alone.rest_share == pytest.approx(1 - alone.median_s / alone.step_s)
    assert alone.report().splitlines()[1] == (
        f"whole decode step at context 16: {alone.step_s * 1e3:.2f} ms")
    with pytest.raises(ValueError, match="rounds"):
        phase_times.matmuls_alone(model, 16, ceilings_of(), "fp32", rounds=0, **FAST)


def test_decode_step_at_runs_one_step_on_a_cache_of_random_values(model):
    step, sets = phase_times.decode_step_at(model, 12, "cpu")
    (cache,) = sets[0]
    assert cache.tokens == 12 and all(bool(b[:, :, :12].abs().sum() > 0) for b in cache.keys)
    with torch.no_grad():
        logits, after = step(cache)  # the model returns its logits and the grown cache
    assert logits.shape == (1, 1, model.cfg.vocab) and after.tokens == 13


def test_the_weights_are_flushed_only_where_the_cache_could_hold_them():
    weights = memory.weight_bytes(TINY, "fp32")
    small, large = weights // 8, weights * 8  # a cache far under them, far over them
    assert phase_times.weights_flush_plan(TINY, "fp32", small).method == "rotate"
    assert phase_times.weights_flush(TINY, "fp32", small, "cpu") is None
    assert phase_times.unflushed_note(TINY, "fp32", small) == ""
    assert phase_times.weights_flush_plan(TINY, "fp32", large).method == "flush"
    buffer = phase_times.weights_flush(TINY, "fp32", large, "cpu")
    assert buffer.numel() * buffer.element_size() >= 2 * large
    assert phase_times.unflushed_note(TINY, "fp32", large).startswith(
        "unlike the curves' steps, these ran without a cache flush")  # fmt: skip
    assert phase_times.within_spread(1.0, 1.5, 0.5) and not phase_times.within_spread(1, 2, 0.5)
