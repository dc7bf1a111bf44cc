"""Launch overhead (chapter 8): operators counted per step, and the per-operator cost."""

import collections
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from helpers.counting import models
from helpers.decoder import launches
from helpers.decoder.model import random_decoder
from helpers.decoder.paged_step import PagedEntry

QWEN_05B = models.get("Qwen2.5-0.5B")


def test_count_ops_counts_kernels_not_views_or_allocations():
    a, b = torch.randn(4, 4), torch.randn(4, 4)

    def work():
        c = a + 1  # one kernel
        c.view(-1), c.t(), c[1:]  # views: metadata only
        torch.empty(3)  # an allocation, nothing launched
        torch.zeros(2)  # a fill: a kernel
        return torch.mm(c, b)

    assert launches.count_ops(work) == {"aten::add": 1, "aten::zeros": 1, "aten::mm": 1}


def test_count_ops_sees_composites_split_into_their_kernels():
    x, w, bias = torch.randn(3, 8), torch.randn(5, 8), torch.randn(5)
    # F.linear is a transpose (a view) and one GEMM with the bias folded in
    assert launches.count_ops(F.linear, x, w, bias) == {"aten::addmm": 1}
    assert launches.count_ops(F.linear, x, w) == {"aten::mm": 1}


def _decode_entries(batch, context, block_size=16):
    per = -(-(context + 1) // block_size)
    return [PagedEntry(torch.tensor([b + 1]), context, torch.arange(b * per, (b + 1) * per))
            for b in range(batch)], batch * per  # fmt: skip


def test_decoder_step_count_matches_the_profiler():
    cfg = launches.same_ops_config(dataclasses.replace(QWEN_05B, layers=2))
    model = random_decoder(cfg)
    entries, blocks = _decode_entries(2, 20)
    cache = model.new_paged_cache(blocks, 16)
    with torch.no_grad():
        model.forward_paged(entries, cache)
        ours = launches.count_ops(model.forward_paged, entries, cache)
        with profile(activities=[ProfilerActivity.CPU]) as run:
            model.forward_paged(entries, cache)
    seen = collections.Counter(event.name for event in run.events())
    # The profiler also records what an operator calls inside itself: never fewer.
    assert all(seen[name] >= n for name, n in ours.items())
    # Operators that call no other: exactly as many. Seven GEMMs a layer and the LM head.
    for name in ("aten::mm", "aten::addmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                 "aten::mul", "aten::add", "aten::rsqrt", "aten::mean", "aten::index_copy_",
                 "aten::silu", "aten::embedding", "aten::cat", "aten::index"):  # fmt: skip
        assert ours[name] == seen[name], name
    assert ours["aten::mm"] + ours["aten::addmm"] == 7 * cfg.layers + 1
    assert ours["aten::_scaled_dot_product_flash_attention_for_cpu"] == cfg.layers


def test_decode_step_ops_is_affine_in_layers_and_blind_to_widths():
    def ops(layers, width=8):
        cfg = launches.same_ops_config(dataclasses.replace(QWEN_05B, layers=layers), width)
        return launches.decode_step_ops(random_decoder(cfg), batch=3, context=40)

    one, two, three = ops(1), ops(2), ops(3)
    assert three.device - two.device == two.device - one.device > 0
    assert one.plan == two.plan == three.plan  # the plan is built once, for every layer
    assert ops(2, width=16) == two
    assert two.total == two.device + sum(two.plan.values())
    # the full widths of a one-layer Qwen2.5-0.5B dispatch the narrow copy's operators
    full = dataclasses.replace(QWEN_05B, layers=1, vocab=512)
    assert launches.decode_step_ops(random_decoder(full), batch=3, context=40) == one


def test_decode_step_ops_plan_grows_with_the_batch_the_layers_do_not():
    model = random_decoder(launches.same_ops_config(dataclasses.replace(QWEN_05B, layers=2)))
    small, large = (launches.decode_step_ops(model, batch=b, context=30) for b in (1, 6))
    assert small.device == large.device
    assert sum(large.plan.values()) > sum(small.plan.values())


def test_same_ops_config_keeps_structure_and_checks_width():
    narrow = launches.same_ops_config(QWEN_05B, 4)
    for field in ("layers", "n_q_heads", "n_kv_heads", "qkv_bias", "tied_embeddings",
                  "sliding_window", "rope_scaling"):  # fmt: skip
        assert getattr(narrow, field) == getattr(QWEN_05B, field)
    assert (narrow.hidden, narrow.head_dim, narrow.intermediate) == (16, 4, 32)
    for bad in (3, 0, -2, 2.0):
        with pytest.raises(ValueError, match="width"):
            launches.same_ops_config(QWEN_05B, bad)


def test_op_seconds_is_a_per_operator_timing():
    measured = launches.op_seconds("cpu", ops=10, min_run_time=0.01, max_run_time=0.05)
    assert 0 < measured.min_s <= measured.median_s <= measured.max_s
    assert measured.n >= 4 and measured.device == "cpu"
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="ops"):
            launches.op_seconds("cpu", ops=bad)


def test_decode_step_ops_rejects_bad_input():
    model = random_decoder(launches.same_ops_config(dataclasses.replace(QWEN_05B, layers=1)))
    for kwargs in ({"batch": 0}, {"context": -1}, {"block_size": 0}):
        with pytest.raises(ValueError):
            launches.decode_step_ops(model, **kwargs)


# ------------------------------------------------------- chapter 8's launch experiment


@pytest.fixture(scope="module")
def measured_step():
    """One launch_overhead record (it measures this CPU's roofline: a couple of seconds)."""
    from helpers.serving import LinearSteps

    model = random_decoder(launches.same_ops_config(dataclasses.replace(QWEN_05B, layers=2)))
    fitted = LinearSteps(fixed=1e-3, per_token=2e-5, per_context=3e-8)
    return model, fitted, launches.launch_overhead(model, batch=3, context=40, fitted=fitted)


def test_launch_overhead_counts_times_and_sets_the_roofline_beside_them(measured_step):
    from helpers.counting.latency import decode_step_time
    from helpers.serving import RooflineSteps, Step

    model, fitted, overhead = measured_step
    assert overhead.cfg == model.cfg and (overhead.batch, overhead.context) == (3, 40)
    assert overhead.ops == launches.decode_step_ops(model, batch=3, context=40)
    assert overhead.launch_s == overhead.ops.total * overhead.per_op.median_s > 0
    assert overhead.dtype == "fp32" and overhead.chip.peak("fp32") > 0
    assert overhead.per_op.device == "cpu"
    step = Step((), 3, 3 * 40, 3)
    assert overhead.roofline_s == decode_step_time(model.cfg, overhead.chip, 3, 40, "fp32")
    # the serving simulator's roofline step model gives the same decode step
    assert overhead.roofline_s == pytest.approx(
        RooflineSteps(model.cfg, overhead.chip, "fp32")(step), rel=1e-12)
    assert overhead.fitted_s == pytest.approx(fitted(step), rel=1e-12)
    lines = overhead.report().split("\n")
    assert len(lines) == 3 and lines[0].startswith("a decode step of 3 sequences, 40 tokens")
    assert lines[2].endswith(f"its fitted time {overhead.fitted_s * 1e3:.2f} ms")
    plain = dataclasses.replace(overhead, fitted_s=None)
    assert "fitted" not in plain.report()


def test_launch_overhead_refuses_bad_input_before_measuring():
    model = random_decoder(launches.same_ops_config(dataclasses.replace(QWEN_05B, layers=1)))
    for kwargs, name in (({"batch": 0, "context": 8}, "batch"),
                         ({"batch": 1, "context": -1}, "context")):  # fmt: skip
        with pytest.raises(ValueError, match=name):
            launches.launch_overhead(model, **kwargs)
    with pytest.raises(ValueError, match="no roofline dtype"):
        launches.launch_overhead(model.to(torch.float64), batch=1, context=8)
