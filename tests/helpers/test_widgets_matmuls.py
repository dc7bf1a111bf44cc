"""The chapter 5 sweep explorer without a browser, and the formulas it draws
(``roofline.predicted_time``/``gemm_knee``, ``latency.layer_time``/``prediction_error``)."""

import math

import matplotlib
import pytest

from helpers import latency, roofline, sweep_record, timing
from helpers.flops import matmul_flops
from helpers.memory import linear_bytes
from helpers.roofline import gemm_intensity
from helpers.widgets import matmuls

matplotlib.use("Agg")

PEAK = {"fp32": 1e11, "bf16": 4e11}
BANDWIDTH = 1e10
SHAPES = {"q,o": (448, 448), "k,v": (448, 64), "gate,up": (448, 2368), "down": (2368, 448)}
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)


def _point(dtype, label, m, k, n, slowdown=1.0):
    """A point measured on an ideal roofline device, ``slowdown`` times slower."""
    predicted = roofline.predicted_time(m, k, n, PEAK[dtype], BANDWIDTH, dtype)
    seconds = predicted * slowdown
    flops, nbytes = matmul_flops(m, k, n), linear_bytes(m, k, n, dtype)
    compute = flops / PEAK[dtype] >= nbytes / BANDWIDTH
    return {"dtype": dtype, "shape": label, "count": len(label.split(",")), "m": m, "k": k,
            "n": n, "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
            "median_s": seconds, "achieved_flops": flops / seconds, "predicted_s": predicted,
            "prediction_error": predicted / seconds - 1,
            "bound": "compute" if compute else "memory"}


@pytest.fixture
def results():
    points = [_point(d, label, m, k, n, slowdown=1.25)
              for d in PEAK for label, (k, n) in SHAPES.items() for m in TOKENS]
    return {"device": "cpu", "device_name": "synthetic",
            "ceilings": {"matmul_flops": dict(PEAK), "bandwidth": BANDWIDTH}, "points": points}


def test_predicted_time_is_the_slower_roof():
    m, k, n = 64, 448, 2368
    compute = 2 * m * k * n / PEAK["fp32"]
    memory = 4 * (m * k + k * n + m * n) / BANDWIDTH
    assert roofline.predicted_time(m, k, n, PEAK["fp32"], BANDWIDTH, "fp32") == max(compute,
                                                                                   memory)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "fp8"])
@pytest.mark.parametrize(("k", "n"), [(448, 448), (3584, 18944), (3584, 512), (7, 5)])
@pytest.mark.parametrize("ridge", [0.5, 10.0, 37.3, 295.2, 5000.0])
def test_knee_tokens_is_the_first_m_at_the_ridge(dtype, k, n, ridge):
    knee = roofline.gemm_knee(k, n, ridge * BANDWIDTH / BANDWIDTH, dtype)
    if knee is None:  # the shape's ceiling never reaches the ridge
        assert gemm_intensity(10**9, k, n, dtype) < ridge
        return
    assert type(knee) is int and knee >= 1
    assert gemm_intensity(knee, k, n, dtype) >= ridge * (1 - 1e-12)
    if knee > 1:
        assert gemm_intensity(knee - 1, k, n, dtype) < ridge


def test_knee_tokens_small_m_is_ridge_times_bytes_over_two():
    # m ≪ k, n: intensity ≈ 2m / b, so the knee ≈ ridge · b / 2.
    knee = roofline.gemm_knee(3584, 18944, 100 * BANDWIDTH / BANDWIDTH, "bf16")
    assert 100 <= knee <= 110


def test_layer_time_sums_every_matmul():
    shapes = {"q": (3584, 3584), "k": (3584, 512), "v": (3584, 512)}
    total = latency.layer_time(shapes, 7, 1e12, 1e11, "bf16")
    parts = [roofline.predicted_time(7, k, n, 1e12, 1e11, "bf16") for k, n in shapes.values()]
    assert math.isclose(total, sum(parts))


def test_prediction_error_sign():
    assert latency.prediction_error(1.0, 2.0) == -0.5
    assert latency.prediction_error(3.0, 2.0) == 0.5
    with pytest.raises(ValueError, match="measured must be positive"):
        latency.prediction_error(1.0, 0.0)


def test_predicted_time_refuses_no_ceilings():
    with pytest.raises(ValueError, match="peak and bandwidth must be positive"):
        roofline.predicted_time(1, 8, 8, 0.0, 1e9, "fp32")


def test_layer_points_picks_the_shape_and_dtype(results):
    rows = sweep_record.layer_points(results, "o", "bf16")
    assert [r.m for r in rows] == list(TOKENS)
    assert {(r.k, r.n) for r in rows} == {SHAPES["q,o"]}
    decode, prefill = rows[0], rows[-1]
    assert decode.bound == "memory" and prefill.bound == "compute"
    assert math.isclose(decode.seconds, 1.25 * decode.predicted_s)
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
        return {**p, "median_s": t, "achieved_flops": p["flops"] / t}

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


def test_table_lists_every_point(results):
    rows = sweep_record.layer_points(results, "k", "fp32")
    text = matmuls.table(rows)
    assert len(text.splitlines()) == 1 + len(TOKENS)
    assert "-20%" in text and "448" in text  # 1.25× slower than predicted: predicted / measured − 1


def test_draw_puts_the_points_on_the_measured_roofline(results):
    import matplotlib.pyplot as plt

    fig, drawn, rows = matmuls.draw(results, "up", "bf16")
    assert drawn.peak_flops == PEAK["bf16"] and drawn.bandwidth == BANDWIDTH
    assert drawn.ridge == PEAK["bf16"] / BANDWIDTH
    assert list(drawn.points) == [f"m={m}" for m in TOKENS]
    assert drawn.points["m=1"] == (rows[0].intensity, rows[0].achieved_flops)
    assert len(fig.axes) == 2
    right = fig.axes[1]
    assert [tuple(line.get_xdata()) for line in right.lines][0] == TOKENS
    plt.close(fig)


def test_sweep_results_round_trips_dataclasses():
    from helpers.sweep import SweepPoint

    class FakeCeilings:
        device, device_name, torch_version = "cpu", "x", "2.13"

        def to_dict(self):
            return {"matmul_flops": {"fp32": 1e11}, "bandwidth": 1e10}

    p = _point("fp32", "down", 4, 2368, 448)
    point = SweepPoint(**{**{f: 0 for f in SweepPoint.__dataclass_fields__}, **p,
                          "iqr_s": 0.0, "min_s": 0.0, "max_s": 0.0, "samples": 5,
                          "achieved_bandwidth": 1.0})  # fmt: skip
    results = sweep_record.results_record(FakeCeilings(), [point], model="Qwen2.5-7B", scale=8)
    assert results["scale"] == 8 and results["points"][0]["m"] == 4
    assert sweep_record.layer_points(results, "down", "fp32")[0].m == 4


def test_timing_threads_leaves_busy_cores_alone():
    assert timing.timing_threads(2, None) == 2
    assert timing.timing_threads(2, 0.2) == 2
    assert timing.timing_threads(2, 1.1) == 1
    assert timing.timing_threads(2, 3.7) == 1
    assert timing.timing_threads(16, 2.0) == 14
    with pytest.raises(ValueError):
        timing.timing_threads(0, 0.0)


def test_roofline_results_is_an_ideal_device():
    from helpers import hardware

    ideal = sweep_record.roofline_results("Qwen2.5-7B", "H100 SXM", ("bf16",), tokens=[1, 64, 4096])
    assert ideal["device"] == "roofline" and "not measured" in ideal["device_name"]
    hw = hardware.get("H100 SXM")
    rows = sweep_record.layer_points(ideal, "gate", "bf16")
    assert [r.m for r in rows] == [1, 64, 4096]
    assert all(r.seconds == r.predicted_s for r in rows)
    assert rows[0].bound == "memory" and rows[-1].bound == "compute"
    assert math.isclose(rows[0].achieved_bandwidth, hw.bandwidth)
    assert math.isclose(rows[-1].achieved_flops, hw.peak("bf16"))
    # On an ideal device the measured knee is the predicted one.
    knee = roofline.gemm_knee(3584, 18944, hw.peak("bf16") / hw.bandwidth, "bf16")
    assert sweep_record.token_knee(rows) == knee == 328


def test_show_names_a_missing_dtype(results, capsys):
    import matplotlib.pyplot as plt

    matmuls.show(results, "q", "fp16")
    assert "no fp16 points" in capsys.readouterr().out
    matmuls.show(results, "q", "bf16")
    assert "m=1" not in capsys.readouterr().out  # the table, not the figure's labels
    plt.close("all")
