"""A decoder layer's matmuls on the roofline (chapter 5): summed, the best fix, carried to
the real shape."""

import pytest

from helpers.counting import hardware, layer_roofline, memory, models, roofline

QWEN = models.get("Qwen2.5-7B")
H100 = hardware.get("H100 SXM")
SHAPES = {name: kn for name, kn in QWEN.linear_shapes().items() if name != "lm_head"}


def test_full_size_time_keeps_the_timed_share_of_the_roofline():
    real, timed = (3584, 18944), (896, 296)  # the gate at scale 16 (bench.scaled)
    # Both compute-bound at m = 4096 on a CPU-like device: the FLOPs ratio, s² = 256.
    assert layer_roofline.full_size_time(4096, timed, real, 0.01, 120e9, 15e9, "fp32") == (
        pytest.approx(0.01 * 256)
    )
    # Both memory-bound on an H100 at m = 64: the bytes ratio, not the FLOPs ratio.
    kv, small = (3584, 512), (1792, 256)
    ratio = memory.linear_bytes(64, *kv, "bf16") / memory.linear_bytes(64, *small, "bf16")
    assert layer_roofline.full_size_time(64, small, kv, 2e-6, 989e12, 3.35e12, "bf16") == (
        pytest.approx(2e-6 * ratio)
    )
    assert ratio != pytest.approx(4, rel=0.05)
    # The same shape timed: the measurement itself.
    assert layer_roofline.full_size_time(7, real, real, 0.02, 120e9, 15e9, "fp32") == 0.02


def test_full_size_time_refuses_a_change_of_bound():
    # The timed gate sits below its knee, the real one above theirs: no estimate.
    ridge = 989e12 / 3.35e12
    timed, real = (896, 1184), (3584, 18944)  # the gate at scale 8
    m = roofline.gemm_knee(*real, ridge, "bf16")
    assert m < roofline.gemm_knee(*timed, ridge, "bf16")
    assert layer_roofline.full_size_time(m, timed, real, 1e-5, 989e12, 3.35e12, "bf16") is None
    # At scale 16 the timed gate never reaches the ridge: memory-bound at any m.
    assert roofline.gemm_knee(896, 296, ridge, "bf16") is None
    assert layer_roofline.full_size_time(4096, (896, 296), real, 1e-5, 989e12, 3.35e12,
                                         "bf16") is None
    with pytest.raises(ValueError):
        layer_roofline.full_size_time(1, real, real, 0.0, 1e9, 1e9)


def test_layer_check_adds_each_matmul_at_its_own_bound():
    """At 400 tokens on an H100 the k, v projections are memory-bound and the rest
    compute-bound: the layer's roofline time is the sum of the seven, more than the roofline
    of its total FLOPs and bytes."""
    m, peak, bandwidth = 400, H100.peak("bf16"), H100.bandwidth
    floors = _floors(m, peak, bandwidth, "bf16")
    assert floors["k"].bound == "memory" and floors["gate"].bound == "compute"
    seconds = {name: floor.seconds / 0.9 for name, floor in floors.items()}
    check = layer_roofline.layer_check(SHAPES, m, seconds, peak, bandwidth, "bf16")
    predicted = sum(floor.seconds for floor in floors.values())
    assert check["predicted"] == pytest.approx(predicted)
    assert check["predicted"] > max(sum(f.flops for f in floors.values()) / peak,
                                    sum(f.bytes_moved for f in floors.values()) / bandwidth)
    assert check["error"] == pytest.approx(0.9 * sum(seconds.values()) / sum(seconds.values())
                                           - 1)
    with pytest.raises(ValueError, match="each matmul"):
        layer_roofline.layer_check(SHAPES, m, {"q": 1.0}, peak, bandwidth)


def _floors(m, peak, bandwidth, dtype):
    return {name: roofline.bound_time(2 * m * k * n, memory.linear_bytes(m, k, n, dtype),
                                      peak, bandwidth) for name, (k, n) in SHAPES.items()}


def test_best_fix_sums_the_time_lost_over_the_matmuls_sharing_a_shape():
    """A fix serves a shape: q and o, each losing less than down, together lose more; the
    matmul furthest below its roof (k) and the slowest (gate, up) are not the fix."""
    m, peak, bandwidth = 400, H100.peak("bf16"), H100.bandwidth
    floors = _floors(m, peak, bandwidth, "bf16")
    assert floors["down"].seconds > floors["q"].seconds
    lost = {"q": 0.6 * floors["down"].seconds, "o": 0.6 * floors["down"].seconds,
            "down": floors["down"].seconds, "k": 4 * floors["k"].seconds}
    seconds = {name: floor.seconds + lost.get(name, 0.0) for name, floor in floors.items()}
    fix = layer_roofline.best_fix(SHAPES, m, seconds, peak, bandwidth, "bf16")
    total = sum(seconds.values())
    assert fix == {"names": ("q", "o"), "roof": "compute",
                   "speedup": pytest.approx(total / (total - lost["q"] - lost["o"]))}
    # k alone at a fifth of its roof, with v: the lowest share, but little time
    assert min(floors, key=lambda name: floors[name].seconds / seconds[name]) == "k"
    # down losing more than q and o together: the fix moves to down, a compute-bound shape
    more = {**seconds, "down": seconds["down"] + 0.3 * floors["down"].seconds}
    assert layer_roofline.best_fix(SHAPES, m, more, peak, bandwidth, "bf16")["names"] == (
        "down",)
    # a matmul faster than its roofline (a ceiling set too low) loses nothing to a fix
    fast = {**seconds, "q": floors["q"].seconds / 2, "o": floors["o"].seconds / 2,
            "down": floors["down"].seconds}
    fix = layer_roofline.best_fix(SHAPES, m, fast, peak, bandwidth, "bf16")
    total = sum(fast.values())
    assert fix["names"] == ("k", "v") and fix["roof"] == "memory"
    assert fix["speedup"] == pytest.approx(total / (total - lost["k"]))
    # every matmul on its roof: a tie at no saving, the first shape named, no speedup
    on_roof = {name: floor.seconds for name, floor in floors.items()}
    assert layer_roofline.best_fix(SHAPES, m, on_roof, peak, bandwidth, "bf16") == {
        "names": ("q", "o"), "roof": "compute", "speedup": 1.0}
    with pytest.raises(ValueError, match="each matmul"):
        layer_roofline.best_fix(SHAPES, m, {"q": 1.0}, peak, bandwidth)


def test_carried_time_scales_only_the_ceiling_that_bound_the_timed_point():
    # The gate at scale 8 on an H100 at m = 400: the timed shape memory-bound at 50% of the
    # bandwidth, the real one compute-bound. The share says the kernel streams at half the
    # bandwidth; the compute ceiling is taken whole: a floor, max(F/P, M/(β/2)), not the ratio.
    timed, real, m = (896, 1184), (3584, 18944), 400
    roof = roofline.matmul_time(m, *timed, 989e12, 3.35e12, "bf16")
    assert roof.bound == "memory"
    carried = layer_roofline.carried_time(m, timed, real, 2 * roof.seconds, 989e12, 3.35e12,
                                          "bf16")
    floor = max(2 * m * 3584 * 18944 / 989e12,
                memory.linear_bytes(m, *real, "bf16") / (3.35e12 / 2))
    assert carried == pytest.approx(floor)
    ratio = 2 * roof.seconds * roofline.matmul_time(m, *real, 989e12, 3.35e12, "bf16").seconds \
        / roof.seconds
    assert carried < ratio  # the ratio of roofline times would charge the compute the share
    assert layer_roofline.full_size_time(m, timed, real, 2 * roof.seconds, 989e12, 3.35e12,
                                         "bf16") is None
    # one bound: the ratio, and full_size_time's estimate
    carried = layer_roofline.carried_time(4096, timed, real, 0.01, 120e9, 15e9, "fp32")
    assert carried == pytest.approx(0.01 * 64)  # scale 8: the FLOPs ratio, s² = 64
    assert carried == layer_roofline.full_size_time(4096, timed, real, 0.01, 120e9, 15e9, "fp32")
