"""helpers.measuring.sweep_record: a sweep's results record and what is read from it (one layer's
points, the measured ridge, the knee in tokens), on synthetic records of known shape."""

import math
from dataclasses import asdict, replace

import pytest

from helpers.counting import latency, roofline
from helpers.measuring import sweep, sweep_record, timing

PEAK = {"fp32": 1e11, "bf16": 4e11}
BANDWIDTH = 1e10
SHAPES = {"q,o": (448, 448), "k,v": (448, 64), "gate,up": (448, 2368), "down": (2368, 448)}
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)


def _point(dtype, label, m, k, n, slowdown=1.0):
    """A point measured on an ideal roofline device, ``slowdown`` times slower, as the sweep
    records one (``sweep.sweep_point``, then the prediction)."""
    predicted = roofline.matmul_time(m, k, n, PEAK[dtype], BANDWIDTH, dtype)
    measured = timing.Timing.from_samples([predicted.seconds * slowdown], device="cpu", threads=1)
    point = sweep.sweep_point(sweep.LinearShape(tuple(label.split(",")), k, n), m, dtype, 1,
                              measured)  # fmt: skip
    return asdict(replace(point, predicted_s=predicted.seconds, bound=predicted.bound,
                          prediction_error=latency.prediction_error(predicted.seconds,
                                                                    measured.median_s)))


@pytest.fixture
def results():
    points = [_point(d, label, m, k, n, slowdown=1.25)
              for d in PEAK for label, (k, n) in SHAPES.items() for m in TOKENS]
    return {"device": "cpu", "device_name": "synthetic",
            "ceilings": {"matmul_flops": dict(PEAK), "bandwidth": BANDWIDTH}, "points": points}


def test_layer_points_picks_the_shape_and_dtype(results):
    rows = sweep_record.layer_points(results, "o", "bf16")
    assert [r.m for r in rows] == list(TOKENS)
    assert {(r.k, r.n) for r in rows} == {SHAPES["q,o"]}
    decode, prefill = rows[0], rows[-1]
    assert decode.bound == "memory" and prefill.bound == "compute"
    assert math.isclose(decode.median_s, 1.25 * decode.predicted_s)
    assert sweep_record.layer_points(results, "down", "fp32")[0].k == 2368


def test_layer_points_rejects_unknown_layer_and_dtype(results):
    with pytest.raises(ValueError, match="unknown layer"):
        sweep_record.layer_points(results, "lm_head", "fp32")
    with pytest.raises(ValueError, match="fp16"):
        sweep_record.layer_points(results, "q", "fp16")


def test_measured_knee_of_an_ideal_device_is_the_predicted_knee(results):
    # Uniformly slower than the roofline: both achieved roofs drop together, the ridge and
    # the knee do not move.
    rows = sweep_record.layer_points(results, "gate", "fp32")
    predicted = roofline.gemm_knee(448, 2368, PEAK["fp32"] / BANDWIDTH, "fp32")
    assert predicted == 22  # ridge · b / 2 = 20, pushed up by the activations
    assert math.isclose(sweep_record.measured_ridge(rows), PEAK["fp32"] / BANDWIDTH,
                        rel_tol=1e-3)
    assert sweep_record.token_knee(rows) == predicted
    assert sweep_record.token_knee(rows[:1]) is None
    assert sweep_record.measured_ridge(rows[:1]) is None


def test_measured_knee_moves_right_with_per_call_overhead():
    # A fixed cost per call lowers the achieved bandwidth of the one-token point: the flat
    # part of the time curve rises and meets the compute line later.
    def overhead(p, seconds):
        t = p["median_s"] + seconds
        return {**p, "median_s": t, "achieved_flops": p["flops"] / t,
                "achieved_bandwidth": p["bytes"] / t}

    k, n = SHAPES["gate,up"]
    points = [_point("bf16", "gate,up", m, k, n) for m in TOKENS]
    results = {"ceilings": {"matmul_flops": dict(PEAK), "bandwidth": BANDWIDTH},
               "points": [overhead(p, 1e-4) for p in points]}
    rows = sweep_record.layer_points(results, "up", "bf16")
    ridge = PEAK["bf16"] / BANDWIDTH
    assert sweep_record.token_knee(rows) > roofline.gemm_knee(k, n, ridge, "bf16")


def test_mixed_scales_use_the_smallest_m_shape():
    # bench scales prefill-sized GEMMs down on a CPU: the last point is a smaller matrix.
    points = [_point("fp32", "down", m, 2368, 448) for m in (1, 4, 16)]
    points.append({**_point("fp32", "down", 4096, 296, 56), "scale": 8})
    results = {"ceilings": {"matmul_flops": dict(PEAK), "bandwidth": BANDWIDTH},
               "points": points}
    rows = sweep_record.layer_points(results, "down", "fp32")
    assert [r.scale for r in rows] == [1, 1, 1, 8]
    knee = roofline.gemm_knee(2368, 448, PEAK["fp32"] / BANDWIDTH, "fp32")
    assert sweep_record.token_knee(rows) == knee


def test_a_full_size_compute_bound_point_sets_the_compute_end_before_a_scaled_one():
    # The real gate reached the ceiling at m = 1024; the scaled one at m = 4096 ran at half of
    # it (a smaller GEMM): the knee is read from the real shape's own points.
    k, n = SHAPES["gate,up"]
    points = [_point("bf16", "gate,up", m, k, n) for m in (1, 16, 1024)]
    scaled = _point("bf16", "gate,up", 4096, k // 4, n // 4, slowdown=2.0)
    results = {"ceilings": {"matmul_flops": dict(PEAK), "bandwidth": BANDWIDTH},
               "points": points + [{**scaled, "scale": 4}]}
    rows = sweep_record.layer_points(results, "gate", "bf16")
    assert rows[2].bound == "compute" and sweep_record.compute_end(rows) is rows[2]
    ridge = PEAK["bf16"] / BANDWIDTH
    assert sweep_record.measured_ridge(rows) == pytest.approx(ridge)
    assert sweep_record.token_knee(rows) == roofline.gemm_knee(rows[0].k, rows[0].n, ridge, "bf16")
    # Without the full-size m = 1024 point the scaled one is all there is, and it halves the
    # measured ridge.
    rows = [r for r in rows if r.m != 1024]
    assert sweep_record.compute_end(rows).m == 4096
    assert sweep_record.measured_ridge(rows) == pytest.approx(ridge / 2)
    assert sweep_record.compute_end(rows[:1]) is None


def test_a_compute_bound_smallest_m_is_its_own_compute_end():
    # bf16 on a CPU without bf16 arithmetic: the ridge (0.5 FLOP/B) is under 2/b, so the
    # one-token gate is already compute-bound; every larger m is scaled. Its own point, not the
    # scaled one, is the compute end: the ridge is its own FLOP/s over its own B/s, its
    # intensity, and the knee where the shape reaches it.
    k, n = SHAPES["gate,up"]
    slow = {"fp32": 1e11, "bf16": 5e9}
    first = asdict(replace(sweep.SweepPoint(**_point("bf16", "gate,up", 1, k, n)),
                           bound="compute"))
    scaled = _point("bf16", "gate,up", 64, k // 4, n // 4, slowdown=2.0)
    results = {"ceilings": {"matmul_flops": slow, "bandwidth": BANDWIDTH},
               "points": [first, {**scaled, "scale": 4}]}
    rows = sweep_record.layer_points(results, "gate", "bf16")
    assert sweep_record.compute_end(rows) is rows[0]
    assert sweep_record.measured_ridge(rows) == pytest.approx(rows[0].intensity)
    ridge = sweep_record.measured_ridge(rows)  # its intensity, up to rounding
    assert sweep_record.token_knee(rows) == roofline.gemm_knee(rows[0].k, rows[0].n, ridge, "bf16")


def test_a_compute_bound_smallest_m_bounds_the_ridge_from_above_with_a_later_end():
    # bf16 q,o on that CPU: m = 1 and m = 8 at full size, both compute-bound; the compute end
    # is m = 8. m = 1 streamed below the bandwidth roof, so the compute end's FLOP/s over its
    # B/s is an upper bound on the ridge, and the knee read from it one on the knee (chapter
    # 5's Exercise 3 reads the same).
    k, n = SHAPES["gate,up"]
    slow = {"fp32": 1e11, "bf16": 5e9}
    one, eight = (asdict(replace(sweep.SweepPoint(**_point("bf16", "gate,up", m, k, n)),
                                 bound="compute")) for m in (1, 8))
    results = {"ceilings": {"matmul_flops": slow, "bandwidth": BANDWIDTH}, "points": [one, eight]}
    rows = sweep_record.layer_points(results, "gate", "bf16")
    assert sweep_record.compute_end(rows) is rows[1]
    ridge = rows[1].achieved_flops / rows[0].achieved_bandwidth
    assert sweep_record.measured_ridge(rows) == pytest.approx(ridge)
    assert sweep_record.token_knee(rows) == roofline.gemm_knee(rows[0].k, rows[0].n, ridge, "bf16")


def test_sweep_results_round_trips_dataclasses():
    from helpers.measuring.sweep import SweepPoint

    class FakeCeilings:
        device, device_name, torch_version = "cpu", "x", "2.13"

        def to_dict(self):
            return {"matmul_flops": {"fp32": 1e11}, "bandwidth": 1e10}

    point = SweepPoint(**_point("fp32", "down", 4, 2368, 448))
    results = sweep_record.results_record(FakeCeilings(), [point], model="Qwen2.5-7B", scale=8)
    assert results["scale"] == 8 and results["points"][0]["m"] == 4
    assert sweep_record.layer_points(results, "down", "fp32")[0].m == 4


def test_roofline_results_is_an_ideal_device():
    from helpers.counting import hardware

    ideal = sweep_record.roofline_results("Qwen2.5-7B", "H100 SXM", ("bf16",), tokens=[1, 64, 4096])
    assert ideal["device"] == "roofline" and "not measured" in ideal["device_name"]
    hw = hardware.get("H100 SXM")
    rows = sweep_record.layer_points(ideal, "gate", "bf16")
    assert [r.m for r in rows] == [1, 64, 4096]
    assert all(r.median_s == r.predicted_s for r in rows)
    assert rows[0].bound == "memory" and rows[-1].bound == "compute"
    assert math.isclose(rows[0].achieved_bandwidth, hw.bandwidth)
    assert math.isclose(rows[-1].achieved_flops, hw.peak("bf16"))
    # On an ideal device the measured knee is the predicted one.
    knee = roofline.gemm_knee(3584, 18944, hw.peak("bf16") / hw.bandwidth, "bf16")
    assert sweep_record.token_knee(rows) == knee == 328
