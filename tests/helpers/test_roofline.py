"""Intensity, ridge, roofline time and the critical batch, against the worked numbers."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.counting import flops, hardware, models, roofline

QWEN = models.get("Qwen2.5-7B")
H100 = hardware.get("H100 SXM")


def test_interview_intensities():
    assert roofline.interview_prefill_intensity(7_615_000_000, 2, 57_344, 1024) == pytest.approx(
        1020.07, abs=0.005
    )
    assert roofline.interview_decode_intensity(7_615_000_000, 2, 57_344, 1024) == pytest.approx(
        0.996, abs=0.0005
    )


def test_gemm_and_dot_intensity():
    assert roofline.gemm_intensity(1024, 3584, 18944) == pytest.approx(764.3, abs=0.05)
    assert roofline.gemm_intensity(10**7, 3584, 512) < 3584 * 512 / (3584 + 512) == 448
    # a dot product is the [1 x n] . [n x 1] GEMM: 2n FLOPs over 2n + 1 elements
    assert roofline.gemm_intensity(1, 10**6, 1) == pytest.approx(0.5, abs=1e-6)
    assert roofline.gemm_intensity(1, 3, 1) == 6 / 14


def test_ridge_points():
    expected = {"A100 40GB SXM": 201, "A100 80GB SXM": 153, "H100 SXM": 295, "H100 PCIe": 378,
                "H200 SXM": 206, "B200": 281, "L4": 403, "L40S": 419, "MI300X": 247,
                "TPU v5e": 240}  # fmt: skip
    assert {name: round(roofline.ridge_point(hardware.get(name))) for name in expected} == expected


def test_unknown_chip_and_missing_dtype():
    with pytest.raises(ValueError, match="unknown chip 'H300'"):
        hardware.get("H300")
    with pytest.raises(ValueError, match="A100 80GB SXM has no datasheet peak for dtype 'fp8'"):
        hardware.get("A100 80GB SXM").peak("fp8")


def test_attainable_and_roofline_time():
    assert roofline.roof(1.0, H100.peak("bf16"), H100.bandwidth) == 3.35e12
    assert roofline.roof(1e4, H100.peak("bf16"), H100.bandwidth) == 989e12
    memory_bound = roofline.roofline_time(2e9, 2e9, H100)
    assert memory_bound.bound == "memory" and memory_bound.seconds == 2e9 / 3.35e12
    compute_bound = roofline.roofline_time(989e12, 1.0, H100)
    assert compute_bound.bound == "compute" and compute_bound.seconds == 1.0
    with pytest.raises(ValueError, match="intensity must be positive"):
        roofline.roof(0, H100.peak("bf16"), H100.bandwidth)


def test_batched_decode_saturates_below_ridge():
    saturation = 2 * flops.param_count(QWEN) / (57_344 * 1024)
    assert saturation == pytest.approx(259.39, abs=0.01)
    assert roofline.batched_decode_intensity(QWEN, 10**7, 1024) == pytest.approx(
        saturation, rel=1e-3
    )
    assert roofline.critical_batch_aggregate(QWEN, H100, 1024) is None
    # A100 80GB's ridge (153) lies below the saturation: a finite critical batch exists.
    a100 = hardware.get("A100 80GB SXM")
    batch = roofline.critical_batch_aggregate(QWEN, a100, 1024)
    assert roofline.batched_decode_intensity(QWEN, batch, 1024) >= a100.ridge()
    assert roofline.batched_decode_intensity(QWEN, batch - 1, 1024) < a100.ridge()


def test_split_model_weights_turn_compute_bound_attention_never():
    batch = roofline.critical_batch_split(QWEN, H100)
    assert H100.ridge() < batch < 1.2 * H100.ridge()  # ≈ ridge·b/2, plus activation traffic
    below = roofline.decode_split(QWEN, H100, batch - 1, 1024)
    at = roofline.decode_split(QWEN, H100, batch, 1024)
    assert below["weights"].bound == "memory" and at["weights"].bound == "compute"
    assert roofline.decode_split(QWEN, H100, 4096, 1024)["attention"].bound == "memory"


@given(batch=st.integers(1, 2048), context=st.integers(1, 32768))
def test_batched_decode_intensity_grows_with_batch_and_falls_with_context(batch, context):
    base = roofline.batched_decode_intensity(QWEN, batch, context)
    assert roofline.batched_decode_intensity(QWEN, batch + 1, context) > base
    assert roofline.batched_decode_intensity(QWEN, batch, context + 1) < base


@given(k=st.integers(1, 20000), n=st.integers(1, 20000), ridge=st.floats(0.01, 2000))
def test_gemm_knee_is_the_first_m_at_the_ridge(k, n, ridge):
    knee = roofline.gemm_knee(k, n, ridge)
    if knee is None:
        assert 2 * k * n <= ridge * 2 * (k + n)  # the shape's ceiling, m → ∞
    else:
        assert roofline.gemm_intensity(knee, k, n) >= ridge
        assert knee == 1 or roofline.gemm_intensity(knee - 1, k, n) < ridge


def test_gemm_knee_worked_numbers():
    ridge = H100.ridge()
    assert roofline.gemm_knee(3584, 512, ridge) == 866  # k/v projections cap at 448 FLOP/B,
    assert roofline.gemm_knee(3584, 512, 448.0) is None  # so a ridge at 448 is never reached
    up = roofline.gemm_knee(3584, 18944, ridge)
    assert (
        roofline.gemm_intensity(up, 3584, 18944)
        >= ridge
        > roofline.gemm_intensity(up - 1, 3584, 18944)
    )
    with pytest.raises(ValueError, match="ridge must be positive"):
        roofline.gemm_knee(10, 10, 0)


def test_decode_aggregate_bounds_the_split_parts_work_at_once():
    split = roofline.decode_split(QWEN, H100, 64, 2048)
    whole = roofline.decode_aggregate(QWEN, H100, 64, 2048)
    assert whole.flops == split["weights"].flops + split["attention"].flops
    assert whole.bytes_moved == split["weights"].bytes_moved + split["attention"].bytes_moved
    # One bound over the whole step never takes longer than the parts one after the other.
    assert whole.seconds <= split["weights"].seconds + split["attention"].seconds
    assert whole == roofline.bound_time(whole.flops, whole.bytes_moved, H100.peak("bf16"),
                                        H100.bandwidth)


def _step_seconds(cfg, hw, batch, context):
    return sum(part.seconds for part in roofline.decode_split(cfg, hw, batch, context).values())


@pytest.mark.parametrize("context, slack", [(1024, 0.1), (128, 0.5), (32768, 0.1), (1, 2.0)])
def test_free_batch_is_the_last_batch_within_the_slack(context, slack):
    batch = roofline.free_batch(QWEN, H100, context, slack)
    limit = (1 + slack) * _step_seconds(QWEN, H100, 1, context)
    assert _step_seconds(QWEN, H100, batch, context) <= limit
    assert _step_seconds(QWEN, H100, batch + 1, context) > limit


def test_free_batch_ends_long_before_the_critical_batch_at_long_contexts():
    assert roofline.free_batch(QWEN, H100, 1024, 0.1) == 22
    assert roofline.free_batch(QWEN, H100, 32768, 0.1) == 1
    assert roofline.free_batch(QWEN, H100, 1024, 0.1) < roofline.critical_batch_split(QWEN, H100)
    assert roofline.free_batch(QWEN, H100, 1024, 0.0) >= 1
    with pytest.raises(ValueError):
        roofline.free_batch(QWEN, H100, 1024, -0.1)


def test_fusion_speedup_gains_only_where_a_matmul_is_memory_bound():
    qkv = (3584, 512, 512)  # Qwen2.5-7B's q, k, v
    l40s = hardware.get("L40S")
    # Decode: all memory-bound, the bytes' ratio: two input re-reads saved out of 16.5 M weights.
    assert roofline.fusion_speedup(1, 3584, qkv, H100) == pytest.approx(
        (3 * 3584 + 3584 * 4608 + 4608) / (3584 + 3584 * 4608 + 4608))
    # A 1024-token prefill on an H100 SXM: every matmul compute-bound, the FLOPs unchanged.
    assert roofline.fusion_speedup(1024, 3584, qkv, H100) == 1.0
    # On an L40S (ridge 419) k and v (312 FLOP/B) are memory-bound alone, the fused one is not.
    separate = (flops.matmul_flops(1024, 3584, 3584) / l40s.peak("bf16")
                + 2 * 2 * (1024 * 3584 + 3584 * 512 + 1024 * 512) / l40s.bandwidth)
    fused = flops.matmul_flops(1024, 3584, 4608) / l40s.peak("bf16")
    assert roofline.fusion_speedup(1024, 3584, qkv, l40s) == pytest.approx(separate / fused)
    assert roofline.fusion_speedup(7, 100, (5,), H100) == 1.0  # nothing to fuse


def _fusion_pays(m, k, widths, hw, dtype="bf16"):
    # Fused faster than the separate matmuls by more than rounding.
    return roofline.fusion_speedup(m, k, widths, hw, dtype) > 1 + 1e-9


@pytest.mark.parametrize("k, widths, chip, dtype, expected", [
    (3584, (3584, 512, 512), "H100 SXM", "bf16", 866),  # q, k, v: k and v cross last
    (3584, (18944, 18944), "H100 SXM", "bf16", 328),  # gate, up
    (3584, (3584, 512, 512), "L40S", "bf16", 6469),
    (4096, (4096, 1024, 1024), "A100 40GB SXM", "fp32", 26),
    (4096, (4096, 1024, 1024), "B200", "fp8", 429),
    (2048, (512, 4096, 128), "MI300X", "fp32", 127),
])
def test_fusion_stops_paying_where_the_narrowest_matmul_crosses_the_ridge(
    k, widths, chip, dtype, expected
):
    hw = hardware.get(chip)
    assert roofline.fusion_stops_paying(k, widths, hw, dtype) == expected
    assert not _fusion_pays(expected, k, widths, hw, dtype)
    assert _fusion_pays(expected - 1, k, widths, hw, dtype)


def test_fusion_stops_paying_edge_cases():
    # Qwen2.5-0.5B's k and v (ceiling 112 FLOP/B) never reach the H100's ridge: always pays.
    assert roofline.fusion_stops_paying(896, (896, 128, 128), H100) is None
    assert _fusion_pays(10**9, 896, (896, 128, 128), H100)
    assert roofline.fusion_stops_paying(4096, (14336,), H100) == 1  # nothing to fuse
    with pytest.raises(ValueError):
        roofline.fusion_stops_paying(4096, (), H100)
