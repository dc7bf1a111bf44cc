"""Chapter 7 §3's readings as records (``helpers.decoder.batch_knee``): the critical batch
against the sweep's knee, the GPUs' critical batch past their ridge, and the up-projection
timed alone at each batch (for real, on this CPU, at a tiny size)."""

import pytest
import torch

from helpers.counting import flops, hardware, latency, memory, models, roofline
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


def sweep_of(step_seconds: dict[int, float], predicted: dict[int, float]) -> DecodeSweep:
    return DecodeSweep(QWEN.name, "fp32", 64, 1, step_seconds, predicted)


def roofline_like(critical: int, t1_ratio: float, steep: float) -> DecodeSweep:
    """Steps t = max(t1, sB) with the slope s = ``steep`` × 2N/P and the knee t1/s at
    ``critical``; the roofline's t(1) is t1 / ``t1_ratio``. The top batch is compute-bound."""
    slope = steep * 2 * flops.param_count(QWEN) / PEAK
    t1 = slope * critical
    steps = {b: max(t1, slope * b) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)}
    return sweep_of(steps, {b: t / t1_ratio for b, t in steps.items()})


def test_the_reading_s_fields_are_the_roofline_s_and_the_sweep_s():
    measured = ceilings()
    sweep = roofline_like(16, 2.0, 2.0)
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
    assert reading.knee == latency.measured_knee(sweep.step_seconds) == pytest.approx(16)
    assert reading.t1_ratio == pytest.approx(2.0) and reading.steep == pytest.approx(2.0)
    assert reading.top == 256 and reading.top_compute_bound and not reading.knee_is_lower_bound
    assert reading.faster == ()
    assert reading.datasheets == datasheet_critical(QWEN)


@pytest.mark.parametrize("steps, t1_ratio, steep, expected", [
    ("compute-bound top", 2.0, 2.0, "errors cancel"),  # both 2× off: the knee lands near B*
    ("compute-bound top", 1.2, 2.0, "off the roofline"),  # t(1) near its roofline
    ("flat top", 2.0, 2.0, "lower bound"),  # the largest batch still reads the weights
])  # fmt: skip
def test_the_reading_flips_with_the_sweep(steps, t1_ratio, steep, expected):
    measured = ceilings()
    star = roofline.critical_batch_split(QWEN, measured.as_hardware_spec(), "fp32")
    sweep = roofline_like(star, t1_ratio, steep)
    if steps == "flat top":  # stop the sweep at B*/2: every step still the flat t(1)
        sweep = sweep_of({b: s for b, s in sweep.step_seconds.items() if b <= star // 2},
                         {b: s for b, s in sweep.predicted.items() if b <= star // 2})
    reading = knee_reading(sweep, QWEN, measured, published=QWEN)
    assert reading.reading == expected
    last = reading.report().splitlines()[-1]
    assert last.startswith({"errors cancel": "so the knee lands near B*",
                            "off the roofline": "their ratio",
                            "lower bound": "so the knee lies at or past"}[expected])  # fmt: skip


def test_a_step_faster_than_its_roofline_is_named_and_batch_1_is_needed():
    sweep = roofline_like(16, 0.5, 2.0)  # every step half its roofline: ceilings measured low
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
