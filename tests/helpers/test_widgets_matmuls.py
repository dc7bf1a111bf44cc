"""The chapter 5 sweep explorer without a browser, and the formulas it draws
(``roofline.matmul_time``/``gemm_knee``, ``layer_roofline.layer_time``,
``latency.prediction_error``)."""

import math

import matplotlib
import pytest

from helpers.counting import latency, layer_roofline, models, roofline
from helpers.counting.roofline import gemm_intensity
from helpers.measuring import sweep, sweep_record, timing
from helpers.measuring.ceilings import Ceilings
from helpers.widgets import matmuls

matplotlib.use("Agg")

PEAK = {"fp32": 1e11, "bf16": 4e11}
BANDWIDTH = 1e10
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)


@pytest.fixture
def results():
    """A record made as the sweep makes one (``sweep.sweep_point``, ``sweep.predict``,
    ``sweep_record.results_record``), of a device 1.25x slower than its roofline, for the
    real shapes of Qwen2.5-0.5B scaled by 2."""
    ceilings = Ceilings(
        device="cpu", device_name="synthetic", torch_version="", date="", threads=1,
        matmul_flops=dict(PEAK), matmul_shape={}, bandwidth=BANDWIDTH, bandwidth_method="",
        cache_bytes=2**25, memory_bytes=2**34,
    )  # fmt: skip
    points = []
    for dtype in PEAK:
        for shape in sweep.layer_shapes(models.get("Qwen2.5-0.5B"), 2):
            for m in TOKENS:
                ideal = roofline.matmul_time(m, shape.k, shape.n, PEAK[dtype], BANDWIDTH,
                                             dtype).seconds  # fmt: skip
                slow = timing.Timing.from_samples([1.25 * ideal], device="cpu", threads=1)
                points.append(sweep.predict(sweep.sweep_point(shape, m, dtype, 2, slow), ceilings))
    return sweep_record.results_record(ceilings, points)


def test_matmul_time_is_the_slower_roof():
    m, k, n = 64, 448, 2368
    compute = 2 * m * k * n / PEAK["fp32"]
    memory = 4 * (m * k + k * n + m * n) / BANDWIDTH
    time = roofline.matmul_time(m, k, n, PEAK["fp32"], BANDWIDTH, "fp32")
    assert time.seconds == max(compute, memory) and time.bound == "compute"


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
    total = layer_roofline.layer_time(shapes, 7, 1e12, 1e11, "bf16")
    parts = [roofline.matmul_time(7, k, n, 1e12, 1e11, "bf16").seconds for k, n in shapes.values()]
    assert math.isclose(total, sum(parts))


def test_prediction_error_sign():
    assert latency.prediction_error(1.0, 2.0) == -0.5
    assert latency.prediction_error(3.0, 2.0) == 0.5
    with pytest.raises(ValueError, match="measured must be positive"):
        latency.prediction_error(1.0, 0.0)


def test_matmul_time_refuses_no_ceilings():
    with pytest.raises(ValueError, match="peak and bandwidth must be positive"):
        roofline.matmul_time(1, 8, 8, 0.0, 1e9, "fp32")


def test_table_lists_every_point(results):
    rows = sweep_record.layer_points(results, "k", "fp32")
    text = matmuls.table(rows)
    assert len(text.splitlines()) == 1 + len(TOKENS)
    assert "-20%" in text and "448" in text  # 1.25× slower than predicted: predicted / measured − 1


def test_draw_puts_the_points_on_the_measured_roofline(results):
    import matplotlib.pyplot as plt

    view = matmuls.matmul_view(results, matmuls.MatmulControls("up", "bf16"))
    fig, axes = plt.subplots(1, 2)
    drawn = matmuls.draw_matmuls(axes, view)
    rows = view.rows
    assert drawn.peak_flops == PEAK["bf16"] and drawn.bandwidth == BANDWIDTH
    assert drawn.ridge == PEAK["bf16"] / BANDWIDTH
    assert list(drawn.points) == [f"m={m}" for m in TOKENS]
    assert drawn.points["m=1"] == (rows[0].intensity, rows[0].achieved_flops)
    assert len(fig.axes) == 2
    right = fig.axes[1]
    assert [tuple(line.get_xdata()) for line in right.lines][0] == TOKENS
    plt.close(fig)


def test_show_names_a_missing_dtype(results, capsys):
    import matplotlib.pyplot as plt

    matmuls.show_matmuls(results, layer="q", dtype="fp16")
    assert "no fp16 points" in capsys.readouterr().out
    matmuls.show_matmuls(results, layer="q", dtype="bf16")
    assert "m=1" not in capsys.readouterr().out  # the table, not the figure's labels
    plt.close("all")
