"""helpers.measuring.sweep: shapes and scales, FLOP/byte accounting, measured points, predictions,
reconciled ceilings and the paired decode check."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

import pytest
import torch

from helpers.counting import models
from helpers.measuring import kernels, machine, pairs, sweep, sweep_record, sweep_run, timing
from helpers.measuring.ceilings import Ceilings

# Made-up ceilings for the pure functions: round numbers, ridge at 10 FLOP/B in fp32.
FAKE = Ceilings(
    device="cpu", device_name="test CPU", torch_version=torch.__version__,
    date="2026-01-01T00:00:00+00:00", threads=1,
    matmul_flops={"fp32": 1e11, "bf16": 4e11}, matmul_shape={"fp32": (1, 1, 1),
                                                             "bf16": (1, 1, 1)},
    bandwidth=1e10, bandwidth_method="test", cache_bytes=2**20, memory_bytes=2**34,
)  # fmt: skip


def test_qwen_7b_layer_shapes_group_identical_matmuls():
    shapes = sweep.layer_shapes(models.get("Qwen2.5-7B"))
    got = {s.label: (s.k, s.n) for s in shapes}
    assert got == {"q,o": (3584, 3584), "k,v": (3584, 512), "gate,up": (3584, 18944),
                   "down": (18944, 3584)}  # fmt: skip
    assert sum(s.count for s in shapes) == 7


def test_scaled_shapes_divide_the_weight_keeping_k_long():
    """Scale s divides each weight by s²: k and n by s each while k stays at MIN_SCALED_K
    or more; below that, n gives up what k keeps, as long as n stays MIN_SCALED_N or more."""
    qwen = models.get("Qwen2.5-7B")
    assert (sweep.MIN_SCALED_K, sweep.MIN_SCALED_N) == (896, 64)
    got = {s.label: (s.k, s.n) for s in sweep.layer_shapes(qwen, 4)}
    assert got == {"q,o": (896, 896), "k,v": (896, 128), "gate,up": (896, 4736),
                   "down": (4736, 896)}  # fmt: skip
    got = {s.label: (s.k, s.n) for s in sweep.layer_shapes(qwen, 8)}
    # q,o and gate,up keep k = 896 (n ÷ 16); k,v keeps n = 64 (plain ÷ 8); down's k is long
    assert got == {"q,o": (896, 224), "k,v": (448, 64), "gate,up": (896, 1184),
                   "down": (2368, 448)}  # fmt: skip
    got = {s.label: (s.k, s.n) for s in sweep.layer_shapes(qwen, 32)}
    assert got == {"q,o": (112, 112), "k,v": (112, 16), "gate,up": (896, 74),
                   "down": (592, 112)}  # fmt: skip
    for scale in (1, 2, 4, 8, 16, 32):
        for full, small in zip(sweep.layer_shapes(qwen), sweep.layer_shapes(qwen, scale),
                               strict=True):  # fmt: skip
            assert full.k * full.n == small.k * small.n * scale**2
    with pytest.raises(ValueError, match="scale must be at least 1"):
        sweep.scaled(sweep.layer_shapes(qwen)[0], 0)


def test_token_counts():
    assert sweep.token_counts() == [2**i for i in range(13)]
    assert sweep.token_counts(4096)[-1] == 4096
    assert sweep.token_counts(5) == [1, 2, 4]
    assert sweep.token_counts(1) == [1]
    with pytest.raises(ValueError):
        sweep.token_counts(0)


def test_scales_keep_full_sizes_unless_memory_or_a_quick_run_needs_less():
    cfg = models.get("Qwen2.5-7B")
    tokens = sweep.token_counts()
    labels = {s.label for s in sweep.layer_shapes(cfg)}
    slow = sweep.choose_scales(cfg, ["fp32"], tokens, FAKE, quick=False)
    assert {s for by_shape in slow.values() for s in by_shape.values()} == {1}

    def gemm_seconds(m, shape, dtype="fp32", ceilings=FAKE):
        return sweep.matmul_flops(m, shape.k, shape.n) / ceilings.peak(dtype)

    quick = sweep.choose_scales(cfg, ["fp32"], tokens, FAKE, quick=True)
    assert all(set(by_shape) == labels for by_shape in quick.values())
    assert set(quick[1].values()) == {1}  # decode-shaped GEMMs keep the real sizes
    for full in sweep.layer_shapes(cfg):
        per_m = [quick[m][full.label] for m in tokens]
        assert per_m == sorted(per_m)  # only the prefill end shrinks
        for m in tokens:
            scale = quick[m][full.label]
            assert gemm_seconds(m, sweep.scaled(full, scale)) <= sweep.QUICK_GEMM_SECONDS
            if scale > 1:  # the largest size within the time budget, for this shape
                assert gemm_seconds(m, sweep.scaled(full, scale // 2)) > sweep.QUICK_GEMM_SECONDS
    # each shape its own scale: the thin k,v matrix (1/37 of the gate's FLOPs) keeps a
    # larger size than the gate at the prefill end instead of sharing the gate's divisor
    assert quick[4096]["k,v"] < quick[4096]["gate,up"]
    kv = sweep.scaled(next(s for s in sweep.layer_shapes(cfg) if s.label == "k,v"),
                      quick[4096]["k,v"])
    assert {s.label: (s.k, s.n) for s in sweep.scaled_shapes(cfg, quick[4096])}["k,v"] == (
        kv.k, kv.n)
    # a device 1000x faster (a GPU) times the real prefill shapes
    fast = replace(FAKE, matmul_flops={"fp32": 1e14, "bf16": 4e14})
    assert set(sweep.choose_scales(cfg, ["fp32"], tokens, fast, quick=True)[4096].values()) == {1}
    # the slowest dtype decides: bf16 at 4x fp32's ceiling allows no larger a scale than fp32
    both = sweep.choose_scales(cfg, ["fp32", "bf16"], tokens, FAKE, quick=True)
    assert both == quick
    with pytest.raises(ValueError, match="seconds must be positive"):
        sweep.choose_scales(cfg, ["fp32"], tokens, FAKE, quick=True, seconds=0)

    small = replace(FAKE, memory_bytes=2**30)  # 256 MiB budget: full-size gate does not fit
    by_shape = sweep.choose_scales(cfg, ["fp32"], [4096], small, quick=False)[4096]
    scale = by_shape["gate,up"]
    assert scale > 1 and scale & (scale - 1) == 0
    assert by_shape["k,v"] < scale  # the smaller weight fits at a larger size
    biggest = sweep.scaled(next(s for s in sweep.layer_shapes(cfg) if s.label == "gate,up"),
                           scale)
    assert sweep._memory_needed(biggest, 4096, "fp32", small.cache_bytes, "cpu") <= 2**30 // 4
    # a CPU holds each weight copy in three forms (plain, oneDNN, packed), a GPU in one
    cpu, gpu = (sweep._memory_needed(biggest, 1, "fp32", 2**25, device)
                for device in ("cpu", "cuda"))  # fmt: skip
    forms = len({k.prepare for k in kernels.linear_kernels("cpu", "fp32")})
    copies = timing.plan_cache_defeat(
        sweep.linear_bytes(1, biggest.k, biggest.n, "fp32"), 2**25
    ).copies
    assert cpu - gpu == (forms - 1) * copies * 4 * biggest.k * biggest.n
    # a weight larger than the cache is a single copy, but held whole in every form
    gate = sweep.LinearShape(("gate", "up"), 3584, 18944)
    assert sweep._memory_needed(gate, 1, "fp32", 2**25, "cpu") >= forms * 4 * 3584 * 18944


def test_memory_for_small_weights_and_a_huge_cache_is_bounded():
    """66 KB weights against a 300 MiB cache: flushed, in rounds of at most ``MAX_COPIES``
    copies, not the thousands a rotation would need."""
    tiny = sweep.LinearShape(("k", "v"), 296, 56)
    need = sweep._memory_needed(tiny, 1, "fp32", 300 * 2**20, "cpu")
    forms = len({k.prepare for k in kernels.linear_kernels("cpu", "fp32")})
    assert need <= forms * timing.MAX_COPIES * 4 * 296 * 56 + 2 * 4 * (296 + 56)


@pytest.mark.parametrize("dtype, b", [("fp32", 4), ("bf16", 2)])
def test_measured_point_accounting(dtype, b):
    shape = sweep.LinearShape(("up",), k=96, n=80)
    weights = [torch.randn(80, 96).to(torch.bfloat16 if b == 2 else torch.float32)]
    p = sweep.measure_point(shape, 3, dtype, weights, FAKE)
    assert (p.m, p.k, p.n, p.dtype, p.shape, p.count) == (3, 96, 80, dtype, "up", 1)
    assert p.flops == 2 * 3 * 96 * 80
    assert p.bytes == b * (3 * 96 + 96 * 80 + 3 * 80)
    assert p.intensity == pytest.approx(p.flops / p.bytes)
    assert p.achieved_flops == pytest.approx(p.flops / p.median_s)
    assert p.achieved_bandwidth == pytest.approx(p.bytes / p.median_s)
    compute, memory = p.flops / FAKE.peak(dtype), p.bytes / FAKE.bandwidth
    assert p.predicted_s == pytest.approx(max(compute, memory))
    assert p.bound == ("compute" if compute >= memory else "memory")
    assert p.prediction_error == pytest.approx(p.predicted_s / p.median_s - 1)
    offered = [k.name for k in kernels.linear_kernels("cpu", dtype, 3)]
    assert p.kernel in offered
    if len(offered) > 1:  # a lone kernel is not raced (bf16 where oneDNN lacks it)
        assert set(p.race_s) == set(offered)
        assert p.race_s[p.kernel] == min(p.race_s.values())
    else:
        assert p.race_s == {}
    # one 30 KB weight against a 1 MiB cache: too few copies to rotate, so flushed
    assert (p.cache_defeat, p.copies) == ("flush", 1)


def test_a_point_rotates_when_it_has_enough_copies():
    shape = sweep.LinearShape(("up",), k=256, n=256)  # 256 KiB: 8 copies exceed 2 x 1 MiB
    weights = sweep._weight_copies(shape, "fp32", "cpu", 8)
    p = sweep.measure_point(shape, 1, "fp32", weights, FAKE)
    needed = timing.copies_to_exceed_cache(p.bytes, FAKE.cache_bytes)
    assert (p.cache_defeat, p.copies) == ("rotate", needed) and needed <= 8
    few = sweep.measure_point(shape, 1, "fp32", weights[:2], FAKE)
    assert (few.cache_defeat, few.copies) == ("flush", 1)


def test_bound_follows_the_measured_ridge():
    shape = sweep.LinearShape(("x",), k=64, n=64)
    weights = [torch.randn(64, 64)]
    assert sweep.measure_point(shape, 1, "fp32", weights, FAKE).bound == "memory"
    assert sweep.measure_point(shape, 64, "fp32", weights, FAKE).bound == "compute"


def _point(dtype, m, count, flops, nbytes, median_s, predicted_s):
    return sweep.SweepPoint(
        dtype=dtype,
        shape="s",
        count=count,
        scale=1,
        m=m,
        k=1,
        n=1,
        flops=flops,
        bytes=nbytes,
        intensity=flops / nbytes,
        median_s=median_s,
        iqr_s=0.0,
        min_s=median_s,
        max_s=median_s,
        samples=4,
        achieved_flops=flops / median_s,
        achieved_bandwidth=nbytes / median_s,
        predicted_s=predicted_s,
        prediction_error=predicted_s / median_s - 1,
        bound="memory",
    )


def test_summary_weights_shapes_by_use():
    points = [
        _point("fp32", 1, 2, 1e6, 1e8, 0.01, 0.01),  # two of these per layer
        _point("fp32", 1, 1, 1e6, 2e8, 0.04, 0.02),
        _point("fp32", 2048, 1, 4e10, 1e8, 1.0, 0.4),
        _point("fp32", 64, 1, 1.0, 1.0, 9.9, 9.9),  # neither decode nor prefill: ignored
    ]
    summary = sweep_record.summarize(points, FAKE)["fp32"]
    # decode: 4e8 B in 0.06 s over 1e10 B/s; predicted 0.04 s
    assert summary["decode_bandwidth_fraction"] == pytest.approx(4e8 / 0.06 / 1e10)
    assert summary["decode_prediction_error"] == pytest.approx(0.04 / 0.06 - 1)
    assert summary["prefill_flops_fraction"] == pytest.approx(0.4)
    assert summary["prefill_prediction_error"] == pytest.approx(-0.6)


def test_predict_reprices_a_point_from_new_ceilings():
    point = _point("fp32", 1, 1, flops=2e6, nbytes=4e6, median_s=1e-3, predicted_s=0.0)
    priced = sweep.predict(point, FAKE)
    assert priced.predicted_s == pytest.approx(4e6 / FAKE.bandwidth) and priced.bound == "memory"
    faster = sweep.predict(point, replace(FAKE, bandwidth=2 * FAKE.bandwidth))
    assert faster.predicted_s == pytest.approx(priced.predicted_s / 2)
    assert faster.prediction_error == pytest.approx(faster.predicted_s / point.median_s - 1)
    assert faster.median_s == point.median_s  # the measurement is untouched


@pytest.mark.cache_size
def test_remeasured_ceilings_raise_the_ceilings_and_re_predict():
    slow = replace(FAKE, bandwidth=1.0, matmul_flops={"fp32": 1.0})  # any real rate beats these
    point = sweep.predict(_point("fp32", 1, 1, flops=2e6, nbytes=4e6, median_s=1e-3,
                                 predicted_s=0.0), slow)  # fmt: skip
    points, ceilings, again = sweep.remeasure_ceilings([point], slow)
    assert ceilings.bandwidth == max(again, point.achieved_bandwidth) > 1.0
    assert ceilings.matmul_flops["fp32"] > 1e9  # a real GEMM, not the point's 2 GFLOP/s
    assert points[0].predicted_s < point.predicted_s


def test_a_point_faster_than_its_ceiling_raises_it():
    # a one-token matmul streaming 2e10 B/s against a 1e10 B/s sum: the GEMV is the ceiling
    gemv = _point("fp32", 1, 1, flops=2e6, nbytes=4e8, median_s=0.02, predicted_s=0.0)
    gemm = _point("fp32", 2048, 1, flops=3e11, nbytes=1e8, median_s=1.0, predicted_s=0.0)
    gemm = replace(gemm, k=640, n=512, kernel="packed")
    points, raised = sweep.raise_ceilings([gemv, gemm], FAKE, bandwidths=[0.5e10])
    assert raised.bandwidth == pytest.approx(2e10)
    assert "fp32 s matmul at m=1" in raised.bandwidth_method
    assert raised.matmul_flops["fp32"] == pytest.approx(3e11)
    assert raised.matmul_shape["fp32"] == (2048, 640, 512)
    assert raised.matmul_kernel["fp32"] == "packed"
    assert raised.matmul_flops["bf16"] == FAKE.matmul_flops["bf16"]  # no bf16 point: kept
    assert points[0].predicted_s == pytest.approx(4e8 / 2e10)  # re-predicted
    assert points[0].prediction_error == pytest.approx(0.0)
    results = {"ceilings": raised.to_dict(), "points": [dataclasses.asdict(p) for p in points]}
    assert sweep_record.points_above_roofline(results, tolerance=0.0) == []
    # a faster stream than any point wins; nothing faster leaves the ceilings as they were
    _, streamed = sweep.raise_ceilings([gemv], FAKE, bandwidths=[3e10])
    assert streamed.bandwidth == 3e10 and "best of 2 streams" in streamed.bandwidth_method
    same_points, same = sweep.raise_ceilings([], FAKE)
    assert same == FAKE and same_points == []
    matmul = {"fp32": (5e11, (1, 2, 3), "eager")}
    assert sweep.raise_ceilings([], FAKE, matmuls=matmul)[1].matmul_flops["fp32"] == 5e11


def test_a_two_mode_point_sets_no_ceiling():
    # IQR 10x the median (some rounds fast, some stalled): above the ceilings, yet sets neither
    gemv = replace(_point("fp32", 1, 1, flops=2e6, nbytes=4e8, median_s=0.02, predicted_s=0.0),
                   iqr_s=0.2)
    gemm = replace(_point("fp32", 2048, 1, flops=3e11, nbytes=1e8, median_s=1.0,
                          predicted_s=0.0), iqr_s=10.0)
    points, raised = sweep.raise_ceilings([gemv, gemm], FAKE)
    assert (raised.bandwidth, raised.matmul_flops) == (FAKE.bandwidth, FAKE.matmul_flops)
    assert points[0].predicted_s == pytest.approx(4e8 / FAKE.bandwidth)  # still re-predicted
    # just under the limit it counts; at the limit it does not
    under = replace(gemv, iqr_s=0.0099)
    assert sweep.raise_ceilings([under], FAKE)[1].bandwidth == pytest.approx(2e10)
    at = replace(gemv, iqr_s=0.01)
    assert sweep.raise_ceilings([at], FAKE)[1].bandwidth == FAKE.bandwidth


def test_a_matmul_stream_that_sets_the_ceiling_is_labelled_a_matmul():
    labelled = [(4e10, "the bf16 gate,up matmul at m=1, paired"), (1e9, "a slow one")]
    _, raised = sweep.raise_ceilings([], FAKE, bandwidths=[2e10], matmul_streams=labelled)
    assert raised.bandwidth == 4e10
    assert raised.bandwidth_method.startswith("the bf16 gate,up matmul at m=1, paired")
    assert "x.sum() over" not in raised.bandwidth_method
    # below the best x.sum(), a matmul stream leaves the stream's label
    _, kept = sweep.raise_ceilings([], FAKE, bandwidths=[5e10], matmul_streams=labelled)
    assert kept.bandwidth == 5e10 and "best of 2 streams" in kept.bandwidth_method


def test_points_above_roofline_finds_them():
    results = {"ceilings": {"matmul_flops": {"fp32": 1e11}, "bandwidth": 1e10},
               "points": [{"dtype": "fp32", "flops": 1e6, "bytes": 1e6, "intensity": 1.0,
                           "achieved_flops": 1.05e10},
                          {"dtype": "fp32", "flops": 1e6, "bytes": 1e6, "intensity": 1.0,
                           "achieved_flops": 1.2e10},
                          {"dtype": "fp32", "flops": 1e8, "bytes": 1e6, "intensity": 100.0,
                           "achieved_flops": 1.2e11}]}
    above = sweep_record.points_above_roofline(results)
    assert [p["achieved_flops"] for p in above] == [1.2e10, 1.2e11]


@pytest.mark.cache_size
def test_paired_decode_alternates_stream_and_matmul(monkeypatch):
    calls = []
    real_call_seconds = timing.call_seconds

    def recording_call_seconds(fn, args, device="cpu", flush=None):
        calls.append("stream" if fn is torch.sum else "matmul")
        return real_call_seconds(fn, args, device, flush)

    monkeypatch.setattr(sweep.timing, "call_seconds", recording_call_seconds)
    shape = sweep.LinearShape(("gate", "up"), 256, 1024)
    kernel, timed, rates = sweep.paired_decode(shape, "fp32", "cpu", pairs=5)
    assert kernel in {k.name for k in kernels.linear_kernels("cpu", "fp32", 1)}
    assert timed == shape  # small enough to time at full size
    assert calls[-10:] == ["stream", "matmul"] * 5  # after one warm-up call of each
    assert len(rates) == 5 and rates == sorted(rates)
    assert all(stream > 0 and matmul > 0 for stream, matmul in rates)


@pytest.mark.cache_size
def test_paired_decode_scales_a_shape_too_large_for_memory_down():
    huge = sweep.LinearShape(("gate", "up"), 2**20, 2**20)  # 4 TiB of fp32 weight
    kernel, timed, rates = sweep.paired_decode(huge, "fp32", "cpu", pairs=2)
    forms = len({k.prepare for k in kernels.linear_kernels("cpu", "fp32")})
    budget = machine.device_memory_bytes("cpu") // 4
    assert timed.names == huge.names and timed.k == timed.n < huge.k
    assert forms * sweep.linear_bytes(1, timed.k, timed.n, "fp32") <= budget
    assert forms * sweep.linear_bytes(1, 2 * timed.k, 2 * timed.n, "fp32") > budget / 2
    assert len(rates) == 2


@pytest.mark.parametrize("matmul, reading", [
    (lambda s: 1.3 * s, "the notch lies above 95%–105%, so x.sum() is not the best stream here"),
    (lambda s: 0.98 * s, "98.0% of x.sum()'s rate (the median of 30 pairs, notch 98.0%–98.0%) at "
                         "the same moment: the notch reaches 95%–105%, so it streams as well as "
                         "x.sum(), within the spread; the matmul rose with it"),
    (lambda s: 0.98 * s, "it follows the moment's traffic, so its gap to the ceiling moves with "
                         "the moment's traffic, as x.sum()'s does"),
    (lambda s: 0.6 * s, "60.0% of x.sum()'s rate (the median of 30 pairs, notch 60.0%–60.0%) "
                        "at the same moment: the notch lies below 95%–105%, so that shortfall is "
                        "the kernel's; the matmul rose with it"),
    (lambda s: 0.6 * s, "at a steady share of the stream"),
    # As fast as the stream on average, but flat while the stream climbs: the trend is tested.
    (lambda s: 25e9 * (1 + 0.001 * (s % 3e9 > 1.5e9)), "levelled off"),
    (lambda s: 0.8 * min(s, 20e9), "levelled off"),
    (lambda s: 0.3 * (50e9 - s), "fell (-"),
    # Down 0.2% from the group of slowest streams to the fastest's: printed -0%, no fall.
    (lambda s: 25e9 * (1 - 0.002 * (s >= 30e9)), "levelled off (-0%)"),
    # Pairs alternating 60% and 130%: the notch spans 95%-105%, no shortfall shown.
    (lambda s: (0.6 if s % 2e9 else 1.3) * s, "within the spread"),
])  # fmt: skip
def test_pairs_reading_covers_every_outcome(matmul, reading):
    rates = [(s * 1e9, matmul(s * 1e9)) for s in range(10, 40)]
    assert reading in pairs.pairs_reading(rates)


_SPREAD = [0.02 * (i / 19 - 0.5) for i in range(20)]  # ratios 1% either side of the median
_NOTCH = 1.57 * timing.median_and_iqr(_SPREAD)[1] / math.sqrt(len(_SPREAD))


def _pairs_with_notch_from(low: float) -> list[tuple[float, float]]:
    """Pairs at a steady 30 GB/s stream whose ratios' notch starts at ``low``."""
    shift = low - (timing.median_and_iqr(_SPREAD)[0] - _NOTCH)
    return [(30e9, 30e9 * (shift + r)) for r in _SPREAD]


@pytest.mark.parametrize("low, printed, verdict", [
    (1.0504, "notch 105.0%–", "the notch reaches 95%–105%, so it streams as well as x.sum()"),
    (1.0506, "notch 105.1%–", "the notch lies above 95%–105%, so x.sum() is not the best stream"),
    (0.9496 - 2 * _NOTCH, "–95.0%)", "the notch reaches 95%–105%"),
    (0.9494 - 2 * _NOTCH, "–94.9%)", "the notch lies below 95%–105%, so that shortfall is"),
])  # fmt: skip
def test_the_pairs_verdict_follows_the_notch_as_printed(low, printed, verdict):
    # The reviewed bf16 pairs: every group at 105%-109%, printed as "106% ± 1%" and read as
    # within 95%-105%. Now the notch's ends are printed to 0.1% and the verdict reads them.
    reading = pairs.pairs_reading(_pairs_with_notch_from(low))
    assert printed in reading and verdict in reading


def test_a_kernel_that_reached_the_ceiling_elsewhere_is_not_blamed_for_the_pairs_gap():
    # Flat while the stream climbs: on its own that reads as the kernel's limit; the same
    # kernel and shape at 100% of the ceiling in the sweep puts it down to the pairs' timing.
    rates = [(s * 1e9, 0.8 * min(s, 20) * 1e9) for s in range(10, 40)]  # matmul tops at 16 GB/s
    assert "shortfall is the kernel's" in pairs.pairs_reading(rates, kernel_best=16.5e9)
    reading = pairs.pairs_reading(rates, kernel_best=20e9)
    assert "levelled off" in reading and "1.25× its best group's rate" in reading
    assert "not the kernel alone" in reading and "is the kernel's" not in reading
    # a matmul that follows the stream keeps its reading
    follows = [(s * 1e9, 0.98 * s * 1e9) for s in range(10, 40)]
    assert pairs.pairs_reading(follows, kernel_best=50e9) == pairs.pairs_reading(follows)


def test_a_kernel_that_outstreamed_every_x_sum_is_not_blamed_when_it_follows_the_stream():
    # The reviewed bf16 pairs: the matmul at 78%-81% of the stream, rising with it, while the
    # sweep's blocks streamed the same kernel and shape at 30.1 GB/s, above every x.sum() the
    # run measured (at most 28.2 GB/s): no moment explains the pairs' shortfall.
    rates = [(s * 1e9, 0.8 * s * 1e9) for s in (25, 25.5, 26, 26.5, 27, 27.5, 28, 28.5)]
    alone = pairs.pairs_reading(rates, kernel_best=30.1e9)
    assert "rose with it" in alone and "shortfall is the kernel's" in alone  # moment unknown
    reading = pairs.pairs_reading(rates, kernel_best=30.1e9, fastest_stream=28.2e9)
    assert "107% of the fastest x.sum() this run measured (28.2 GB/s)" in reading
    assert "held it back, not the kernel" in reading and "is the kernel's" not in reading
    # a kernel that streamed under 95% of the fastest x.sum(): the kernel's, as before
    assert pairs.pairs_reading(rates, kernel_best=26e9, fastest_stream=28.2e9) == (
        pairs.pairs_reading(rates, kernel_best=26e9))


def test_pairs_reading_says_when_the_stream_moved_too_little_to_show_a_trend():
    rates = [((30 + 0.01 * i) * 1e9, (29.5 + 0.01 * i) * 1e9) for i in range(20)]
    reading = pairs.pairs_reading(rates)
    assert "too little to show whether the matmul follows it" in reading
    assert "moment's traffic" not in reading
    assert "falls as short of the ceiling as x.sum() does" in reading


@pytest.mark.cache_size
def test_paired_decode_pairs_the_kernel_it_is_named():
    # The sweep names the kernel its own m = 1 point ran, so the verdict is about that point.
    shape = sweep.LinearShape(("gate", "up"), 256, 1024)
    for name in (k.name for k in kernels.linear_kernels("cpu", "fp32", 1)):
        kernel, _, rates = sweep.paired_decode(shape, "fp32", "cpu", pairs=2, kernel=name)
        assert kernel == name and len(rates) == 2
    with pytest.raises(ValueError, match="no 'cublas' kernel for fp32 on cpu"):
        sweep.paired_decode(shape, "fp32", "cpu", pairs=2, kernel="cublas")


def test_paired_decode_refuses_no_pairs():
    with pytest.raises(ValueError, match="pairs must be at least 1"):
        sweep.paired_decode(sweep.LinearShape(("q",), 64, 64), "fp32", "cpu", pairs=0)


def test_input_bytes_counts_what_rotation_must_push_past_the_cache():
    # x [8×3584] and a weight [512×3584] in bf16; the output [8×512] is only written.
    assert sweep.input_bytes(8, 3584, 512, "bf16") == 2 * (8 * 3584 + 512 * 3584)
    assert sweep.input_bytes(4096, 896, 896, "fp32") == 4 * (4096 * 896 + 896 * 896)


def test_a_sweep_point_slower_than_every_pair_is_put_down_to_the_sweeps_timing():
    # The reviewed run: pairs at 92% of the stream (about 43 GB/s), the sweep's own point of the
    # same kernel and shape at 35.5 GB/s, below the slowest group: the timing, not the kernel.
    rates = [((46 + 0.1 * i) * 1e9, 0.92 * (46 + 0.1 * i) * 1e9) for i in range(20)]
    reading = pairs.pairs_reading(rates, kernel_best=35.5e9)
    assert reading.startswith(pairs.pairs_reading(rates))  # the pairs' own reading stands
    assert "the sweep's own point (timed in blocks) streamed only 81% of the fastest group's" \
        in reading and "the sweep's timing or its moment, not the kernel" in reading
    # within 10% of the slowest group: nothing added
    assert pairs.pairs_reading(rates, kernel_best=40e9) == pairs.pairs_reading(rates)
    # The stream beside the sweep says which: at 38 GB/s the point ran 93% of it, as the
    # pairs' 92% (memory was slower then); at 46 GB/s, 77%: the sweep's timing.
    slow_moment = pairs.pairs_reading(rates, kernel_best=35.5e9, kernel_moment=38e9)
    assert ", yet 93% of the stream measured beside it (38.0 GB/s), as the pairs' 92%: memory " \
        "was slower at the sweep's moment, not the kernel or its timing" in slow_moment
    same_moment = pairs.pairs_reading(rates, kernel_best=35.5e9, kernel_moment=46e9)
    assert ", and 77% of the stream measured beside it (46.0 GB/s), under the pairs' 92%: the " \
        "sweep's timing, not the kernel or the moment, lost that difference" in same_moment


def test_a_sweep_point_at_the_stream_beside_it_puts_the_pairs_shortfall_to_their_timing():
    # The reviewed bf16 pairs: 91% of the stream, the notch below the band; the sweep's own
    # point of the same kernel streamed 45.24 GB/s beside a 47.1 GB/s stream (96%, in the band).
    rates = [((47 + 0.01 * i) * 1e9, 0.913 * (47 + 0.01 * i) * 1e9) for i in range(20)]
    reading = pairs.pairs_reading(rates, kernel_best=45.24e9, kernel_moment=47.1e9)
    assert "the notch lies below 95%–105%" in reading and "the kernel's" not in reading
    assert ("yet in the sweep's blocks the same kernel and shape streamed 96% of the stream "
            "measured beside it (47.1 GB/s), within the band: the pairs' timing") in reading
    # The pairs whose fastest group set the bandwidth ceiling have no gap to it to read.
    level = [((47 + 0.01 * i) * 1e9, 1.0 * (47 + 0.01 * i) * 1e9) for i in range(20)]
    own = pairs.pairs_reading(level, set_ceiling=True)
    assert own.endswith("its fastest group set the bandwidth ceiling itself: no gap to it to read")
    assert "falls as short of the ceiling" in pairs.pairs_reading(level)
    # at 118% of the stream beside it, above the band: said so, not "within"
    above = pairs.pairs_reading(rates, kernel_best=55.6e9, kernel_moment=47.1e9)
    assert "streamed 118% of the stream measured beside it (47.1 GB/s), above the band" in above
    # at 90% of the stream beside it, out of the band: the shortfall stays the kernel's
    kernel = pairs.pairs_reading(rates, kernel_best=42.4e9, kernel_moment=47.1e9)
    assert "so that shortfall is the kernel's" in kernel


def test_the_sweep_moment_is_the_stream_beside_each_dtypes_sweep():
    run = sweep_run.SweepRun("m", ("fp32", "bf16"), (1,), True, "d", None, None, {}, (),
                             (30e9, 34e9, 46e9), {}, 4, {}, None, {})
    assert run.sweep_moment("fp32") == 32e9  # between the streams before and after it
    assert run.sweep_moment("bf16") is None  # the last: the next stream follows the pairs
    # Streams either side more than 15% apart: memory changed speed when no stream saw it.
    jumped = replace(run, streams=(30e9, 36e9, 46e9))
    assert jumped.sweep_moment("fp32") is None


def test_a_sweep_point_above_the_pairs_share_puts_part_of_their_shortfall_to_their_timing():
    # The reviewed fp32 pairs: 78% of the stream; the sweep's point in blocks at 92% of the
    # stream beside it (33.6 GB/s), well above the pairs' share.
    rates = [((50.4 + 0.16 * i) * 1e9, 0.777 * (50.4 + 0.16 * i) * 1e9) for i in range(20)]
    reading = pairs.pairs_reading(rates, kernel_best=0.92 * 33.6e9, kernel_moment=33.6e9)
    assert "so that shortfall is the kernel's as the pairs time it (a call at a time)" in reading
    assert ("92% of the stream measured beside it (33.6 GB/s), above the pairs' 78%, so the "
            "pairs' one-call timing cost part of their shortfall") in reading
    assert "as the pairs' 78%" not in reading


def test_a_matmul_that_levels_off_within_5_percent_of_its_stream_shows_no_limit_of_its_own():
    # The reviewed bf16 run: every group's ratio within 95%-105%, the matmul rising less than
    # half the stream's +5%: no kernel limit shown, unlike a matmul that falls 10% behind.
    close = [((31 + 0.1 * i) * 1e9, min(31 + 0.1 * i, 31.6) * 1e9) for i in range(20)]
    reading = pairs.pairs_reading(close)
    assert "levelled off" in reading and "no limit of the kernel's own shown" in reading
    assert "held it back" not in reading
    behind = [((31 + 0.2 * i) * 1e9, min(31 + 0.2 * i, 31.8) * 1e9) for i in range(20)]
    assert "fell behind the stream: a limit of the kernel's own" in pairs.pairs_reading(behind)
    # The reviewed fp32 pairs: matmul groups at 37.8, 32.4, 39.1, 33.0 GB/s against streams
    # rising 36.7 -> 39.6: the first-to-last trend fell, yet the third group's matmul came
    # within 5% of the fastest stream, so no limit of the kernel's own is shown.
    groups = [(36.7, 37.8), (37.5, 32.4), (38.3, 39.1), (39.6, 33.0)]
    scatter = [((s + 0.01 * i) * 1e9, m * 1e9) for s, m in groups for i in range(5)]
    reading = pairs.pairs_reading(scatter)
    assert "the matmul fell (-13%)" in reading and "a limit of the kernel's own" not in reading
    assert "another group's matmul reached 39.1 GB/s" in reading
    assert "the groups scatter, no limit of the kernel's own shown" in reading


def test_the_pairs_timing_is_blamed_only_below_the_band_and_past_every_group():
    # The reviewed bf16 pairs: groups at 95%, 103%, 95%, 89% of their streams; the sweep's
    # point 1.10x the fastest-stream group's matmul but below the 103% group's: one-call pairs
    # reached the sweep's rate, so they did not hold the kernel back.
    groups = [(29.6, 28.0), (30.0, 31.0), (30.6, 29.2), (31.5, 28.0)]
    rates = [((s + 0.01 * i) * 1e9, m * 1e9) for s, m in groups for i in range(5)]
    reading = pairs.pairs_reading(rates, kernel_best=30.7e9)
    assert "held it back" not in reading
    # Below the band, a sweep point past every group's matmul does blame the pairs' timing.
    low = [((s + 0.01 * i) * 1e9, 0.8 * m * 1e9) for s, m in groups for i in range(5)]
    assert "notch lies below" in pairs.pairs_reading(low, kernel_best=30.7e9)
    assert "held it back" in pairs.pairs_reading(low, kernel_best=30.7e9)
