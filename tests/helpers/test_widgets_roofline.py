"""The chapter 3 roofline explorer's callback: slider values in, points and figure data out."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers import hardware, models, roofline  # noqa: E402
from helpers.latency import prefill_time  # noqa: E402
from helpers.widgets import roofline as widget  # noqa: E402

QWEN = models.get("Qwen2.5-7B")
H100 = hardware.get("H100 SXM")


def test_default_view_prefill_compute_bound_decode_memory_bound():
    points = widget.roofline_points()
    assert list(points) == list(widget.PHASES)
    assert points["prefill"].bound == "compute"
    assert points["prefill"].intensity == pytest.approx(684.11, abs=0.01)
    assert points["prefill"].attainable_flops == H100.peak("bf16")
    for phase in ("decode step", "decode: weights", "decode: attention"):
        assert points[phase].bound == "memory"
    assert points["decode step"].intensity == pytest.approx(1.024, abs=0.001)
    # Attention under GQA: FLOPs follow the 28 q heads, bytes the 4 kv heads: ≈ group size 7.
    assert points["decode: attention"].intensity == pytest.approx(QWEN.group_size, rel=0.01)


def test_points_agree_with_the_library():
    points = widget.roofline_points("Llama-3.1-8B", "A100 80GB SXM", 2048, 8, "bf16")
    a100 = hardware.get("A100 80GB SXM")
    llama = models.get("Llama-3.1-8B")
    assert points["prefill"].seconds == prefill_time(llama, a100, 2048, 8).seconds
    split = roofline.decode_split(llama, a100, 8, 2048)
    assert points["decode: weights"].seconds == split["weights"].seconds
    assert points["decode: attention"].seconds == split["attention"].seconds
    step = points["decode step"]
    assert step.flops == points["decode: weights"].flops + points["decode: attention"].flops
    assert step.bytes_moved == (
        points["decode: weights"].bytes_moved + points["decode: attention"].bytes_moved
    )
    for p in points.values():
        assert p.intensity == p.flops / p.bytes_moved
        assert p.attainable_flops == pytest.approx(min(a100.peak("bf16"), p.intensity * 2.039e12))


def test_batch_moves_decode_weights_across_the_ridge_but_not_attention():
    small = widget.roofline_points(batch=256)
    large = widget.roofline_points(batch=1024)
    assert small["decode: weights"].bound == "memory"
    assert large["decode: weights"].bound == "compute"
    assert large["decode: attention"].bound == "memory"
    assert large["decode: attention"].intensity == pytest.approx(
        small["decode: attention"].intensity, rel=0.01
    )


def test_dtype_and_chip_move_the_points():
    bf16 = widget.roofline_points(dtype="bf16")
    fp8 = widget.roofline_points(dtype="fp8")
    assert fp8["decode step"].intensity == pytest.approx(2 * bf16["decode step"].intensity)
    h200 = widget.roofline_points(chip="H200 SXM")
    assert h200["decode step"].seconds < bf16["decode step"].seconds  # more bandwidth
    assert h200["prefill"].seconds == bf16["prefill"].seconds  # same compute, compute-bound
    with pytest.raises(ValueError, match="no datasheet peak for dtype 'fp8'"):
        widget.roofline_points(chip="A100 80GB SXM", dtype="fp8")


def test_table_and_figure():
    text = widget.table(widget.roofline_points())
    lines = text.splitlines()
    assert lines[0].split()[0] == "phase" and len(lines) == 5
    assert lines[1].split() == ["prefill", "684.1", "989.0", "13.727", "compute"]
    fig, points = widget.draw(prompt_tokens=4096, batch=64)
    ax = fig.axes[0]
    assert {t.get_text() for t in ax.texts} >= set(widget.PHASES)
    offsets = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert offsets == [(p.intensity, p.attainable_flops) for p in points.values()]
    assert ax.get_xlim()[0] <= widget.INTENSITY_RANGE[0]
    assert "4096" in ax.get_title()
    plt.close(fig)


def test_show_prints_the_table_or_why_not(capsys):
    widget.show()
    out = capsys.readouterr().out
    assert out.startswith("phase") and "prefill" in out
    widget.show(chip="A100 80GB SXM", dtype="fp8")
    assert "A100 80GB SXM has no datasheet peak for dtype 'fp8'" in capsys.readouterr().out
    plt.close("all")
