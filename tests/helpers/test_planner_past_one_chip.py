"""Chapter 9's planner with chapter 10's knobs: chips per engine (tensor parallelism) and the
KV cache's dtype, in the step model, the engine, the scenario and the planner explorer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from helpers import serving
from helpers.counting import hardware, memory, models
from helpers.parallel import sharding
from helpers.serving import RooflineSteps, Scenario, ServingConfig, Step
from helpers.widgets import planner as planner_widget

NVLINK = sharding.link("NVLink 4")
H100 = hardware.get("H100 SXM")


def test_one_chip_and_the_weights_dtype_are_the_step_model_of_chapters_7_to_9():
    cfg = models.get("Qwen2.5-7B")
    plain, explicit = RooflineSteps(cfg, H100), RooflineSteps(cfg, H100, tp=1, kv_dtype="bf16")
    for step in (Step((), 32, 32 * 1500, 32), Step(((512, 0), (300, 200)), 4, 4000, 6)):
        assert explicit(step) == plain(step)
    assert (explicit.decode_run(8, 8000, 5) == plain.decode_run(8, 8000, 5)).all()


@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.parametrize("batch, context", [(1, 4096), (32, 2048)])
def test_a_sharded_decode_step_is_chapter_10s_tp_decode_step(ranks, batch, context):
    """One chip's share on the roofline plus the step's all-reduces: the same sum as
    ``sharding.tp_decode_step``, which chapter 10 prints."""
    cfg = models.get("Llama-3.1-70B")
    steps = RooflineSteps(cfg, H100, tp=ranks, link=NVLINK)
    parts = sharding.tp_decode_step(cfg, H100, NVLINK, ranks, batch, context)
    assert steps(Step((), batch, batch * context, batch)) == pytest.approx(sum(parts.values()),
                                                                          rel=1e-12)
    run = steps.decode_run(batch, batch * context, 3)
    assert run[0] == pytest.approx(sum(parts.values()), rel=1e-12)
    # the all-reduces are a real part of the step: without them it is one shard's roofline
    shard_only = sum(parts.values()) - parts["all_reduce"]
    assert parts["all_reduce"] > 0 and run[0] > shard_only


def test_a_prefill_step_pays_its_all_reduces_of_every_prompt_token():
    cfg = models.get("Llama-3.1-70B")
    steps = RooflineSteps(cfg, H100, tp=4, link=NVLINK)
    prompt = Step(((2048, 0),), 0, 0, 1)
    reduce = sharding.step_allreduce_seconds(cfg, NVLINK, 4, 2048)
    without = RooflineSteps(sharding.shard_config(cfg, 4), H100)(prompt)
    assert steps(prompt) == pytest.approx(without + reduce, rel=1e-12)


def test_bad_degrees_and_links_are_refused_by_name():
    cfg = models.get("Qwen2.5-7B")
    with pytest.raises(ValueError, match="needs the link"):
        RooflineSteps(cfg, H100, tp=2)
    with pytest.raises(ValueError, match="n_q_heads=28 is not divisible by T=3"):
        RooflineSteps(cfg, H100, tp=3, link=NVLINK)
    with pytest.raises(ValueError, match="ranks"):
        RooflineSteps(cfg, H100, tp=0, link=NVLINK)


def test_an_fp8_cache_doubles_the_engine_s_token_slots():
    _, bf16 = serving.roofline_engine("Qwen2.5-7B", "H100 SXM")
    _, fp8 = serving.roofline_engine("Qwen2.5-7B", "H100 SXM", "bf16", 1, "fp8")
    free = H100.memory_bytes - memory.weight_bytes(models.get("Qwen2.5-7B"), "bf16")
    kappa = memory.kv_bytes_per_token(models.get("Qwen2.5-7B"), "bf16")
    assert bf16.capacity_tokens == int(free // kappa)
    assert fp8.capacity_tokens == int(free // (kappa / 2))
    assert abs(fp8.capacity_tokens - 2 * bf16.capacity_tokens) <= 1


def test_a_model_too_big_for_one_chip_is_refused_there_and_served_by_several():
    with pytest.raises(ValueError, match="does not fit in one H100 SXM's memory.*tp"):
        serving.roofline_engine("Llama-3.1-70B", "H100 SXM")
    cfg = models.get("Llama-3.1-70B")
    _, kv = serving.roofline_engine("Llama-3.1-70B", "H100 SXM", "bf16", 2)
    shard = sharding.shard_config(cfg, 2)
    room = H100.memory_bytes - memory.weight_bytes(shard, "bf16")
    assert kv.capacity_tokens == int(room // memory.kv_bytes_per_token(shard, "bf16")) > 0


@pytest.mark.parametrize("field, value, message", [
    ("tp", 0, "tp must be an int >= 1"), ("tp", True, "tp must be an int >= 1"),
    ("tp", 3, "not divisible by T=3"), ("kv_dtype", "fp7", "dtype must be one of"),
    ("tp_link", "carrier pigeon", "unknown link"),
])  # fmt: skip
def test_a_scenario_names_a_bad_knob(field, value, message):
    with pytest.raises(ValueError, match=message):
        Scenario(**{field: value})


def test_the_planner_counts_every_chip_of_every_engine():
    tight = Scenario(rate=20.0, tpot_slo=0.004)
    two = replace(tight, tp=2)
    assert (tight.all_chips, two.all_chips) == (2, 4)
    one_chip, sharded = serving.plan_serving(tight), serving.plan_serving(two)
    # a 32-sequence decode step of one H100 is longer than the SLO, of two shorter
    step = Step((), 32, 32 * (1024 + 128), 32)
    assert tight.engine()[0](step) > 0.004 > two.engine()[0](step)
    assert one_chip.best is None and sharded.best is not None
    assert sharded.per_chip == sharded.goodput / 4
    # the load each chip is offered: the shard's work on its own peaks
    flops_one = serving.planner.offered_load(tight)["flops"]
    flops_two = serving.planner.offered_load(two)["flops"]
    assert flops_one / 2 < flops_two < flops_one  # the LM head is whole on every chip


def test_a_sharded_fp8_scenario_is_at_steady_state():
    scenario = Scenario(rate=20.0, tpot_slo=0.004, tp=2, kv_dtype="fp8")
    check = serving.planner.steady_check(scenario, ServingConfig(64, 512))
    assert check.holds, str(check)


def test_the_explorer_plans_with_both_knobs():
    view = planner_widget.planner_view(planner_widget.PlannerControls(
        "Qwen2.5-7B", "H100 SXM", "bf16", 500.0, 4.0, 20.0, 1024, 256, 2, "fp8"))
    assert (view.scenario.tp, view.scenario.kv_dtype) == (2, "fp8")
    table = view.table()
    assert "2 engines of 2 x H100 SXM (TP=2)" in table and "KV cache fp8" in table
    assert f"{view.goodput / 4:g} per chip (4 chips)" in table
    with pytest.raises(ValueError, match="does not fit"):
        planner_widget.planner_view(planner_widget.PlannerControls("Llama-3.1-70B", tp=1))


def test_the_explorers_controls_agree_on_the_kv_dtype():
    # One declaration of the knobs: the view and the callback plan the same deployment.
    controls = planner_widget.PlannerControls()
    assert controls.kv_dtype == controls.dtype
    assert controls.scenario() == Scenario(rate=controls.rate)


def test_a_kv_dtype_equal_to_the_weights_is_the_default_deployment():
    spelt_out = Scenario(rate=20.0, kv_dtype="bf16")
    assert spelt_out == Scenario(rate=20.0) and spelt_out.kv_dtype is None
    assert Scenario(rate=20.0, kv_dtype="fp8").kv_dtype == "fp8"
    assert "KV cache" not in planner_widget.planner_view(planner_widget.PlannerControls(
        "Qwen2.5-7B", "H100 SXM", "bf16", 500.0, 10.0, 20.0, 1024, 256, 1, "bf16")).table()
