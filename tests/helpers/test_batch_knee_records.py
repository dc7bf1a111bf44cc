"""Chapter 7 §3's readings as records (``helpers.decoder.batch_knee``): the critical batch
against the sweep's knee, the GPUs' critical batch past their ridge, and the up-projection
timed alone at each batch (for real, on this CPU, at a tiny size)."""

import dataclasses

import pytest
import torch

from helpers.counting import hardware, latency, memory, models, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder.batch_knee import (
    DATASHEET_CHIPS,
    MatmulSweep,
    datasheet_critical,
    knee_reading,
    matmul_batch_sweep,
)
from helpers.decoder.batch_sweep import DecodeSweep
from helpers.measuring.ceilings import Ceilings

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip
QWEN = models.get("Qwen2.5-0.5B")
PEAK, BANDWIDTH = 2e11, 3e10  # a CPU's measured fp32 ceilings: ridge 6.7 FLOP/B


def ceilings(peak: float = PEAK, bandwidth: float = BANDWIDTH, cache: int = 1 << 20) -> Ceilings:
    return Ceilings("cpu", "test CPU", "t", "today", 1, {"fp32": peak}, {"fp32": (1, 1, 1)},
                    bandwidth, "test", cache, 1 << 34)  # fmt: skip


def sweep_of(step_seconds: dict[int, float], predicted: dict[int, float],
             context: int = 64) -> DecodeSweep:  # fmt: skip
    return DecodeSweep(QWEN.name, "fp32", context, 1, step_seconds, predicted)


def on_roofline(measured: Ceilings, batches, context: int = 64, cfg: ModelConfig = QWEN,
                dtype: str = "fp32") -> dict[int, float]:  # fmt: skip
    """The split roofline's step (weights plus attention) at each batch, on ``measured``."""
    hw = measured.as_hardware_spec()
    return {b: sum(part.seconds for part in roofline.decode_split(cfg, hw, b, context,
                                                                  dtype).values())
            for b in batches}  # fmt: skip


def roofline_like(t1_ratio: float, steep: float, context: int = 64,
                  batches=(1, 2, 4, 8, 16, 32, 64, 128, 256)) -> DecodeSweep:  # fmt: skip
    """Steps off the split roofline (measured ceilings ``ceilings()``): t(1) = ``t1_ratio`` ·
    r(1), each larger batch max(t(1), ``steep`` · r(b)), so the top is ``steep`` × its own
    (where that passes t(1)) and the knee the roofline's own times ``t1_ratio`` / ``steep``."""
    predicted = on_roofline(ceilings(), batches, context)
    t1 = t1_ratio * predicted[1]
    steps = {b: t1 if b == 1 else max(t1, steep * r) for b, r in predicted.items()}
    return sweep_of(steps, predicted, context)


def test_the_reading_s_fields_are_the_roofline_s_and_the_sweep_s():
    measured = ceilings()
    sweep = roofline_like(2.0, 2.0)
    reading = knee_reading(sweep, QWEN, measured, published=QWEN)
    hw = measured.as_hardware_spec()
    star = roofline.critical_batch_split(QWEN, hw, "fp32")
    assert reading.critical == star and reading.dtype_bytes == memory.dtype_bytes("fp32")
    assert reading.half_ridge == pytest.approx(PEAK / BANDWIDTH * 4 / 2)
    # the weights' part meets the ridge at the real crossing: B* is the first whole batch past it
    assert star - 1 < reading.crossing <= star
    # by hand: the weights' part moves W0 + pB bytes and does fB FLOPs, f / (W0/B + p) = ridge
    w1, w2 = (roofline.decode_split(QWEN, hw, b, 1, "fp32")["weights"] for b in (1, 2))
    per_sequence = w2.bytes_moved - w1.bytes_moved
    crossing_bytes = w1.bytes_moved - per_sequence + per_sequence * reading.crossing
    assert w1.flops * reading.crossing / crossing_bytes == pytest.approx(PEAK / BANDWIDTH)
    assert reading.knee == latency.measured_knee(sweep.step_seconds)
    assert reading.roofline_knee == latency.measured_knee(sweep.predicted)
    assert reading.t1_ratio == pytest.approx(2.0) and reading.steep == pytest.approx(2.0)
    # the knee is the roofline's own times t(1)'s factor over t(B_max)'s
    assert reading.knee == pytest.approx(reading.roofline_knee * 2.0 / 2.0)
    assert reading.top == 256 and reading.proportional and not reading.knee_is_lower_bound
    assert "within an eighth below t(1)/s" in reading.report()
    at_top = roofline.decode_split(QWEN, hw, 256, 64, "fp32")
    assert reading.attention_share == pytest.approx(
        at_top["attention"].seconds / sum(part.seconds for part in at_top.values()))
    assert reading.top_past_critical and reading.line_is_compute
    assert reading.faster == ()
    assert reading.datasheets == datasheet_critical(QWEN)


def test_the_last_doubling_s_line_splits_what_grows_with_b_from_what_does_not():
    """Short of B* the roofline's line through two batches has the weights' read for its
    intercept; past B* the read hides under compute and the intercept is zero."""
    measured = ceilings()
    star = roofline.critical_batch_split(QWEN, measured.as_hardware_spec(), "fp32")
    short = knee_reading(roofline_like(1.0, 1.0, batches=(1, 2, 4)), QWEN, measured,
                         published=QWEN)  # fmt: skip
    assert 4 < star and short.roofline_doubling_line[1] == pytest.approx(short.weights_read_s)
    assert short.doubling_line == pytest.approx(short.roofline_doubling_line)
    past = knee_reading(roofline_like(1.0, 1.0), QWEN, measured, published=QWEN)
    assert 128 >= star and past.roofline_doubling_line[1] == pytest.approx(0, abs=1e-12)
    assert past.roofline_doubling_line[0] == pytest.approx(past.top_roofline_s / 256)
    assert "past B* = 14 its weights' read" in past.report().splitlines()[4]
    assert "plus 0 ms" in past.report().splitlines()[4]


@pytest.mark.parametrize("t1_ratio, steep, context, top, expected", [
    (2.0, 2.0, 64, 256, "errors cancel"),  # both 2× off: the knee lands near B*
    (1.2, 2.0, 64, 256, "off the roofline"),  # t(1) near its roofline
    (2.0, 2.0, 64, "B*/2", "lower bound"),  # the largest batch still reads the weights
    (1.0, 1.0, 4096, 256, "not compute's"),  # each sequence's KV read holds the line down
])  # fmt: skip
def test_the_reading_flips_with_the_sweep(t1_ratio, steep, context, top, expected):
    measured = ceilings()
    star = roofline.critical_batch_split(QWEN, measured.as_hardware_spec(), "fp32")
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)
               if b <= (star // 2 if top == "B*/2" else top)]  # fmt: skip
    reading = knee_reading(roofline_like(t1_ratio, steep, context, batches), QWEN, measured,
                           published=QWEN)  # fmt: skip
    assert reading.reading == expected
    last = reading.report().splitlines()[-1]
    assert last.startswith({"errors cancel": "so the knee lands near B*",
                            "off the roofline": "so the knee is the roofline's own",
                            "lower bound": "so t(1)/s, the knee a larger sweep would read, "
                                           "lies at or past",
                            "not compute's": "so the knee, "}[expected])  # fmt: skip


@pytest.mark.parametrize("model, chip, context, batches", [
    # Qwen2.5-0.5B bf16 at 512 tokens on an H200: t(512)/t(256) 1.92, knee 89 against B* 292
    ("Qwen2.5-0.5B", "H200 SXM", 512, (1, 4, 16, 64, 128, 256, 512)),
    # Llama-3.1-8B at 32,768 tokens on an H100: ×1.90 from 32 to 64, far short of B* 332
    ("Llama-3.1-8B", "H100 SXM", 32768, (1, 2, 4, 8, 16, 32, 64)),
])  # fmt: skip
def test_a_doubling_of_1_8_from_the_kv_read_is_not_read_as_the_critical_batch(
        model, chip, context, batches):  # fmt: skip
    """A sweep exactly on the roofline whose last doubling passes ×1.8 because each
    sequence's own KV read grows with B: the knee is a measurement, but not of B*."""
    cfg, spec = models.get(model), hardware.get(chip)
    measured = Ceilings("cuda", chip, "t", "today", 1, {"bf16": spec.peak("bf16")},
                        {"bf16": (1, 1, 1)}, spec.bandwidth, "datasheet", 1 << 25,
                        spec.memory_bytes)  # fmt: skip
    steps = on_roofline(measured, batches, context, cfg, "bf16")
    sweep = DecodeSweep(cfg.name, "bf16", context, 1, steps, dict(steps))
    assert sweep.last_doubling >= 1.8 and not sweep.knee_is_lower_bound
    reading = knee_reading(sweep, cfg, measured, published=QWEN)
    assert reading.knee / reading.critical < 0.5 and not reading.line_is_compute
    assert reading.reading == "not compute's"
    report = reading.report()
    assert "that line is not compute's alone" in report
    assert f"not a reading of B* = {reading.critical}" in report.splitlines()[-1]
    assert "KV read" in report and f"{reading.attention_share:.1%}" in report


def test_a_doubling_under_1_8_names_the_criterion_and_weighs_the_weights_read():
    """Chapter 7's CPU sweep (stored run): ×1.70 at 128 → 256, far past B* = 8, with an
    intercept larger than the whole batch-1 step: the shortfall is not the weights' read."""
    cfg = dataclasses.replace(QWEN, layers=2, vocab=8192)
    measured = ceilings(217.3e9, 59.8e9)
    ms = {1: 11.51, 2: 24.74, 4: 20.56, 8: 21.07, 16: 24.71, 32: 34.95, 64: 51.22,
          128: 83.08, 256: 141.04}  # fmt: skip
    sweep = sweep_of({b: t / 1e3 for b, t in ms.items()}, on_roofline(measured, ms, 64, cfg))
    reading = knee_reading(sweep, cfg, measured, published=QWEN)
    assert reading.critical == 8 and reading.reading == "lower bound"
    slope, fixed = reading.doubling_line
    assert slope == pytest.approx((141.04 - 83.08) / 128 / 1e3)
    assert fixed == pytest.approx(2 * 83.08e-3 - 141.04e-3) and fixed > reading.t1_s
    assert reading.weights_read_s / fixed < 0.15
    report = reading.report()
    assert "not yet compute-bound" not in report and "still the weights' read" not in report
    assert "step ×1.697, under ×1.8: t(256) is not yet proportional to B" in report
    assert "intercept of 25.1 ms" in report and "more than the whole batch-1 step" in report
    assert "its weights' read, 2.49 ms, hides under compute" in report
    assert f"is {reading.weights_read_s / fixed:.0%} of the measured intercept" in report
    # A doubling just under the criterion is printed rounded down, never as the criterion.
    edge = sweep_of({b: t / 1e3 for b, t in {**ms, 256: 1.7996 * 83.08}.items()},
                    on_roofline(measured, ms, 64, cfg))
    edge_report = knee_reading(edge, cfg, measured, published=QWEN).report()
    assert "step ×1.799, under ×1.8:" in edge_report


def test_the_two_point_knee_is_exercise_2_s_and_a_fixed_cost_moves_only_the_origin_line_s():
    """Steps a + max(w, sB): the two-point knee is w/s whatever a (``latency.quantized_knee``);
    past B* a fixed cost a pushes the origin line's knee later, toward t(1)/s = (a + w)/s,
    and the report says so; an intercept at or above t(1) puts the two-point knee at 0."""
    batches = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    w, s = 0.010, 0.010 / 40  # the corner at batch 40

    def reading_of(steps: dict[int, float]):
        reading = knee_reading(sweep_of(steps, dict(steps)), QWEN, ceilings(), published=QWEN)
        assert reading.two_point_knee == latency.quantized_knee(steps, 0, 1.0, "fp32",
                                                                "fp32")["knee"]  # fmt: skip
        return reading

    plain = reading_of({b: max(w, s * b) for b in batches})
    lifted = reading_of({b: 0.004 + max(w, s * b) for b in batches})
    for reading in (plain, lifted):
        assert reading.two_point[:2] == (128, 256) and reading.two_point[2] == pytest.approx(s)
        assert reading.two_point_knee == pytest.approx(40)
    assert plain.knee == pytest.approx(40) and plain.two_point[3] == pytest.approx(0, abs=1e-15)
    assert "holds no cost that does not grow with B" in plain.report()
    # the fixed cost: the origin line's knee past the two-point knee, below t(1)/s = 56
    assert 40 < lifted.knee < (0.004 + w) / s and lifted.two_point[3] == pytest.approx(0.004)
    line = next(x for x in lifted.report().splitlines() if x.startswith("two-point knee"))
    assert "meets t(1) at 40.0; its intercept, 4 ms a step, does not grow with B" in line
    assert "t(1)/s = 56.0 past it by 16.0" in line
    assert f"knee, {lifted.knee:.1f}, lies past it" in line
    # batch 1 cheaper than the part of the large batches' steps that does not grow with B
    above = reading_of({b: 0.012 + max(w, s * b) for b in batches} | {1: 0.011})
    assert above.two_point_knee == 0.0 and above.two_point[3] > above.t1_s
    report = above.report()
    assert "(at or before batch 0): its intercept, 12 ms, is at or above t(1), 11 ms" in report
    assert "neither knee marks where a flat stretch ends" in report
    assert "no cost every step pays, so below batch 128 the step grew faster than this line" \
        in report
    measured = next(x for x in report.splitlines() if x.startswith("measured knee"))
    assert "only a lower bound on t(1)/s" in measured and "stops being flat" not in report
    # two batches: no line through the two largest beside the floor
    short = knee_reading(sweep_of({1: 0.01, 2: 0.02}, {1: 0.01, 2: 0.02}), QWEN, ceilings(),
                         published=QWEN)  # fmt: skip
    assert short.two_point is None and short.two_point_knee is None
    assert "two-point knee: none" in short.report()


def test_a_sweep_without_its_top_s_half_has_no_doubling_and_gives_a_lower_bound():
    sweep = sweep_of({1: 0.01, 3: 0.02}, {1: 0.005, 3: 0.006})
    reading = knee_reading(sweep, QWEN, ceilings(), published=QWEN)
    assert reading.last_doubling is None and reading.doubling_line is None
    assert reading.reading == "lower bound"
    assert "no last doubling to test: batch 3 is odd" in reading.report().splitlines()
    without_half = sweep_of({1: 0.01, 8: 0.02}, {1: 0.005, 8: 0.006})
    assert "no last doubling to test: batch 4 not measured" in knee_reading(
        without_half, QWEN, ceilings(), published=QWEN).report().splitlines()


def test_a_step_faster_than_its_roofline_is_named_and_batch_1_is_needed():
    sweep = roofline_like(0.5, 0.5)  # every step half its roofline: ceilings measured low
    reading = knee_reading(sweep, QWEN, ceilings(), published=QWEN)
    assert reading.faster == tuple(sweep.batches)
    assert reading.report().splitlines()[-1].startswith("steps faster than their roofline")
    without_1 = sweep_of({2: 0.01, 4: 0.02}, {2: 0.01, 4: 0.02})
    with pytest.raises(ValueError, match="batch 1"):
        knee_reading(without_1, QWEN, ceilings(), published=QWEN)


def test_the_datasheets_critical_batch_lies_past_the_ridge_by_the_activations():
    sheet = datasheet_critical(QWEN)
    assert tuple(sheet.chips) == DATASHEET_CHIPS
    for chip, (star, ridge) in sheet.chips.items():
        spec = hardware.get(chip)
        assert star == roofline.critical_batch_split(QWEN, spec, "bf16") and ridge == spec.ridge()
        assert star > ridge  # b / 2 = 1 in bf16: past the ridge only by the activations
    one = memory.forward_bytes(QWEN, 1, context=1, batch=1, logits="last")
    many = memory.forward_bytes(QWEN, 1, context=1, batch=sheet.at_batch, logits="last")
    assert sheet.at_batch == sheet.chips["H100 SXM"][0]
    assert sheet.extra_bytes == {op: many[op] - one[op] for op in one if op != "attention"}
    # the four groups hold every weight matrix; only the embedding's rows are left out
    assert sum(sheet.group_shares.values()) == pytest.approx(
        1 - sheet.extra_bytes["embedding"] / sum(sheet.extra_bytes.values()))
    with pytest.raises(ValueError, match="at must be one of"):
        datasheet_critical(QWEN, at="L4")


def test_the_matmul_sweep_times_the_up_projection_at_every_batch_of_the_sweep():
    """Timed for real on the CPU at a tiny size: each batch of the decode sweep is measured,
    beside ``roofline.matmul_time`` on the measured ceilings and the sweep's own step."""
    measured = ceilings(cache=1 << 16)
    sweep = DecodeSweep(TINY.name, "fp32", 8, 1, {1: 1e-3, 2: 1.5e-3, 4: 2e-3},
                        {1: 1e-3, 2: 1e-3, 4: 1e-3})  # fmt: skip
    torch.manual_seed(0)
    timed = matmul_batch_sweep(sweep, TINY, measured, "cpu", min_run_time=0.001,
                               max_run_time=0.01)  # fmt: skip
    assert timed.shape == (64, 96) and list(timed.matmul_s) == [1, 2, 4]
    assert all(seconds > 0 for seconds in timed.matmul_s.values())
    for b, bound in timed.roofline_s.items():
        assert bound == roofline.matmul_time(b, 64, 96, PEAK, BANDWIDTH, "fp32").seconds
    assert timed.step_s == sweep.step_seconds
    assert timed.critical == roofline.critical_batch_split(TINY, measured.as_hardware_spec(),
                                                           "fp32")  # fmt: skip
    assert timed.below_roofline == [b for b in (1, 2, 4)
                                    if timed.matmul_s[b] < timed.roofline_s[b]]  # fmt: skip


def test_the_matmul_record_reads_its_rises_below_the_critical_batch():
    record = MatmulSweep((64, 96), "fp32", 8, {1: 1.0, 2: 3.0, 4: 3.3, 8: 4.0, 16: 7.0},
                         {b: 0.5 * b for b in (1, 2, 4, 8, 16)},
                         {1: 10.0, 2: 20.0, 4: 21.0, 8: 25.0, 16: 50.0})  # fmt: skip
    assert record.below_roofline == [16]
    assert record.against_first == [(2, 2.0, 3.0), (4, 2.1, 3.3)]  # 8 and 16 are not below 8
    assert record.largest_rise == (1, 2)  # × 3 against × 1.1
    lines = record.report().splitlines()
    assert lines[-1] == ("largest rise of the matmul between neighbouring batches below B*: "
                         "1 -> 2, 3.00× (step 2.00×; roofline 2.00×)")
    assert "faster than the roofline at batches [16]" in lines[-3]
    # with B* at 2, no two batches lie below it: no rise to read
    assert MatmulSweep((64, 96), "fp32", 2, record.matmul_s, record.roofline_s,
                       record.step_s).largest_rise is None  # fmt: skip
