"""The chapter 3 roofline explorer's callback: slider values in, points and figure data out."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.counting import (
    flops,
    hardware,
    memory,
    models,
    roofline,  # noqa: E402
)
from helpers.counting.latency import prefill_time  # noqa: E402
from helpers.widgets import roofline as widget  # noqa: E402
from helpers.widgets.roofline import RooflineControls  # noqa: E402

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
    points = widget.roofline_points(
        RooflineControls("Llama-3.1-8B", "A100 80GB SXM", 2048, 8, "bf16"))
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
    small = widget.roofline_points(RooflineControls(batch=256))
    large = widget.roofline_points(RooflineControls(batch=1024))
    assert small["decode: weights"].bound == "memory"
    assert large["decode: weights"].bound == "compute"
    assert large["decode: attention"].bound == "memory"
    assert large["decode: attention"].intensity == pytest.approx(
        small["decode: attention"].intensity, rel=0.01
    )


def test_dtype_and_chip_move_the_points():
    bf16 = widget.roofline_points(RooflineControls(dtype="bf16"))
    fp8 = widget.roofline_points(RooflineControls(dtype="fp8"))
    assert fp8["decode step"].intensity == pytest.approx(2 * bf16["decode step"].intensity)
    h200 = widget.roofline_points(RooflineControls(chip="H200 SXM"))
    assert h200["decode step"].seconds < bf16["decode step"].seconds  # more bandwidth
    assert h200["prefill"].seconds == bf16["prefill"].seconds  # same compute, compute-bound
    with pytest.raises(ValueError, match="no datasheet peak for dtype 'fp8'"):
        widget.roofline_points(RooflineControls(chip="A100 80GB SXM", dtype="fp8"))


def test_table_and_figure():
    text = widget.table(widget.roofline_points())
    lines = text.splitlines()
    assert lines[0].split()[0] == "phase" and len(lines) == 5
    lines = widget.table(widget.roofline_points() | widget.prefill_gemm_points()).splitlines()
    assert lines[-1].split() == ["prefill", "lm_head", "1.0", "3.3", "0.325", "memory"]
    assert lines[1].split() == ["prefill", "684.1", "989.0", "13.727", "compute"]
    view = widget.roofline_view(RooflineControls(prompt_tokens=4096, batch=64))
    fig, ax = plt.subplots()
    widget.draw_roofline(ax, view)
    points = view.points
    assert {t.get_text() for t in ax.texts} >= set(widget.PHASES) | {"prefill lm_head"}
    assert list(points)[4:] == ["prefill q/o", "prefill k/v", "prefill gate/up/down",
                                "prefill lm_head"]
    offsets = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert offsets == [(p.intensity, p.attainable_flops) for p in points.values()]
    assert ax.get_xlim()[0] <= widget.INTENSITY_RANGE[0]
    assert "4096" in ax.get_title()
    plt.close(fig)


def test_show_prints_the_table_or_why_not(capsys):
    widget.show_roofline()
    out = capsys.readouterr().out
    assert out.startswith("phase") and "prefill" in out
    widget.show_roofline(chip="A100 80GB SXM", dtype="fp8")
    assert "A100 80GB SXM has no datasheet peak for dtype 'fp8'" in capsys.readouterr().out
    plt.close("all")


def test_prefill_gemms_add_up_to_the_pass_and_the_lm_head_is_memory_bound():
    """Each matmul on its own: with logits for the last token only, prefill's LM head is a
    one-row-per-prompt GEMM at about `batch` FLOP/B, though the pass averages 684."""
    cfg = models.get("Llama-3.1-8B")
    points = widget.prefill_gemm_points(
        RooflineControls("Llama-3.1-8B", "H100 SXM", 2048, 4, "bf16"))
    by_op = flops.forward_flops(cfg, 2048, batch=4, logits="last").by_op
    traffic = memory.forward_bytes(cfg, 2048, batch=4, logits="last")
    matmuls = [op for op in cfg.linear_shapes()]
    assert sum(p.flops for p in points.values()) == sum(by_op[op] for op in matmuls)
    assert sum(p.bytes_moved for p in points.values()) == sum(traffic[op] for op in matmuls)
    head = points["prefill lm_head"]
    assert head.bound == "memory" and head.intensity == pytest.approx(4, rel=0.01)
    assert head.intensity == roofline.gemm_intensity(4, cfg.hidden, cfg.vocab)
    kv = points["prefill k/v"]
    assert kv.intensity == roofline.gemm_intensity(8192, 4096, 1024)
    for name in ("prefill q/o", "prefill k/v", "prefill gate/up/down"):
        assert points[name].bound == "compute"
    # Qwen2.5-7B's k/v reach 312 FLOP/B at 1024 tokens: below the L40S ridge (419).
    qwen = widget.prefill_gemm_points(RooflineControls("Qwen2.5-7B", "L40S", 1024, 1, "bf16"))
    assert qwen["prefill k/v"].bound == "memory" and qwen["prefill q/o"].bound == "compute"


@pytest.mark.parametrize("controls", [
    RooflineControls(),
    RooflineControls("Llama-3.1-8B", "L40S", 256, 4, "fp8"),
    RooflineControls("Qwen2.5-0.5B", "H200 SXM", 1, 1, "bf16"),
    RooflineControls("Mistral-7B-v0.1", "A100 40GB SXM", 32768, 2, "fp32"),
])
def test_prefill_split_is_the_whole_pass_cut_up_and_never_faster(controls):
    """The parts split the pass's FLOPs and bytes exactly, so the sum of their bounds is at
    least the pass's single bound: the tighter floor for kernels run one after another."""
    parts = roofline.prefill_split(models.get(controls.model), hardware.get(controls.chip),
                                   controls.prompt_tokens, controls.batch, controls.dtype)
    whole = prefill_time(models.get(controls.model), hardware.get(controls.chip),
                         controls.prompt_tokens, controls.batch, controls.dtype)
    assert sum(t.flops for t in parts.values()) == whole.flops
    assert sum(t.bytes_moved for t in parts.values()) == whole.bytes_moved
    # Equal when every part has the pass's bound, up to the rounding of a sum of floats.
    assert sum(t.seconds for t in parts.values()) >= whole.seconds * (1 - 1e-12)


def test_default_prefill_parts_outlast_the_whole_pass():
    # Qwen2.5-7B, 1,024 tokens, H100 SXM: the weight matmuls alone, one at a time, take
    # longer than the whole pass's bound, which hides the LM head's read under the MLP.
    assert widget.parts_line().splitlines() == [
        "prefill, each part on its own roofline: weight matmuls 13.838 ms",
        "  + attention 0.213 + embedding rows 0.002 = 14.053 ms (as one op: 13.727 ms, less than "
        "the weight matmuls alone)"]
    # A one-token prompt: every part memory-bound, so nothing hides and the line says no more.
    assert "alone" not in widget.parts_line(RooflineControls(prompt_tokens=1))
