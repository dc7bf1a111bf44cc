"""FLOP and parameter counts against the published totals and against what torch executes."""

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from helpers.counting import flops, models
from helpers.decoder.model import Decoder

PUBLISHED_PARAMS = {
    "Qwen2.5-0.5B": 494_032_768,
    "Qwen2.5-7B": 7_615_616_512,
    "Llama-3.1-8B": 8_030_261_248,
    "Llama-3.1-70B": 70_553_706_496,
    "Mistral-7B-v0.1": 7_241_732_096,
}


@pytest.mark.parametrize("name", models.names())
def test_param_count_matches_published_total(name):
    assert flops.param_count(models.get(name)) == PUBLISHED_PARAMS[name]


def meta_decoder(name):
    with torch.device("meta"):
        return Decoder(models.get(name))


def counted(fn):
    counter = FlopCounterMode(display=False)
    with counter:
        result = fn()
    return counter.get_total_flops(), result


@pytest.mark.parametrize("name", models.names())
def test_param_count_matches_torch_implementation(name):
    assert sum(p.numel() for p in meta_decoder(name).parameters()) == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", models.names())
@pytest.mark.parametrize("batch, prompt", [(1, 1), (1, 512), (3, 77)])
def test_forward_flops_equal_flop_counter_prefill_and_decode(name, batch, prompt):
    model = meta_decoder(name)
    ids = torch.zeros(batch, prompt, dtype=torch.long, device="meta")
    prefill, (_, cache) = counted(lambda: model(ids))
    assert prefill == flops.forward_flops(models.get(name), prompt, batch=batch).total
    decode, _ = counted(lambda: model(ids[:, :1], cache))
    expected = flops.forward_flops(models.get(name), 1, context=prompt, batch=batch)
    assert decode == expected.total


def test_logits_last_matches_torch():
    model = meta_decoder("Qwen2.5-7B")
    ids = torch.zeros(2, 64, dtype=torch.long, device="meta")
    total, _ = counted(lambda: model(ids, logits="last"))
    cfg = models.get("Qwen2.5-7B")
    assert total == flops.forward_flops(cfg, 64, batch=2, logits="last").total


def test_breakdown_sums_to_total_and_names_each_op():
    result = flops.forward_flops(models.get("Llama-3.1-8B"), 128, context=64, batch=2)
    assert set(result.by_op) == set(flops.OPS)
    assert sum(result.by_op.values()) == result.total


def test_breakdown_per_op_on_known_shapes():
    cfg = models.get("Qwen2.5-7B")
    by_op = flops.forward_flops(cfg, 10).by_op
    assert by_op["q"] == 28 * 2 * 10 * 3584 * 3584
    assert by_op["k"] == by_op["v"] == 28 * 2 * 10 * 3584 * 512
    assert by_op["gate"] == by_op["up"] == by_op["down"] == 28 * 2 * 10 * 3584 * 18944
    assert by_op["attn_scores"] == by_op["attn_values"] == 28 * 2 * 28 * 10 * 10 * 128
    assert by_op["lm_head"] == 2 * 10 * 3584 * 152064


def test_attention_share_worked_numbers():
    """docs/sources.md: attention adds 2.7% of 2N at 1k context and ~86% at 32k. Against the
    matmul FLOPs that really run (the embedding lookup is no matmul) the shares are higher."""
    cfg = models.get("Qwen2.5-7B")
    two_n = 2 * flops.param_count(cfg)
    matmuls = two_n - 2 * cfg.vocab * cfg.hidden  # untied: the LM head stays, the lookup goes
    for context, of_2n, of_matmuls in ((1024, 0.0270, 0.0291), (32768, 0.8636, 0.9301)):
        step = flops.forward_flops(cfg, 1, context=context - 1).by_op
        attention = step["attn_scores"] + step["attn_values"]
        assert attention == 4 * context * cfg.n_q_heads * cfg.head_dim * cfg.layers
        assert attention / two_n == pytest.approx(of_2n, abs=0.0005)
        assert attention / matmuls == pytest.approx(of_matmuls, abs=0.0005)


def test_causal_counts_the_unmasked_triangle():
    cfg = models.get("Qwen2.5-0.5B")
    dense = flops.forward_flops(cfg, 100, attention="dense").by_op["attn_scores"]
    causal = flops.forward_flops(cfg, 100, attention="causal").by_op["attn_scores"]
    assert causal * 100 * 100 == dense * (100 * 101 // 2)
    # A single decode step sees every key either way.
    one = [flops.forward_flops(cfg, 1, context=50, attention=a).total for a in ("dense", "causal")]
    assert one[0] == one[1]


@given(
    new=st.integers(1, 4096),
    context=st.integers(0, 8192),
    batch=st.integers(1, 64),
    name=st.sampled_from(models.names()),
)
def test_properties_scaling_and_monotonicity(new, context, batch, name):
    cfg = models.get(name)
    one = flops.forward_flops(cfg, new, context=context)
    assert flops.forward_flops(cfg, new, context=context, batch=batch).total == batch * one.total
    assert flops.forward_flops(cfg, new, context=context + 1).total > one.total
    causal = flops.forward_flops(cfg, new, context=context, attention="causal")
    assert causal.total <= one.total
    last = flops.forward_flops(cfg, new, context=context, logits="last")
    assert last.total <= one.total
    # Linear layers cost 2·(weights) per token; attention only adds.
    non_embedding = flops.param_count(cfg) - cfg.vocab * cfg.hidden * (
        1 if cfg.tied_embeddings else 2
    )
    assert one.total >= 2 * new * non_embedding


@given(m=st.integers(1, 10**4), k=st.integers(1, 10**4), n=st.integers(1, 10**4))
def test_matmul_flops_is_2mkn_and_symmetric(m, k, n):
    assert flops.matmul_flops(m, k, n) == 2 * m * k * n == flops.matmul_flops(n, k, m)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"new_tokens": 0}, "new_tokens must be a positive int"),
        ({"new_tokens": -3}, "new_tokens must be a positive int"),
        ({"new_tokens": 2.0}, "new_tokens must be a positive int"),
        ({"new_tokens": 1, "context": -1}, "context must be an int >= 0"),
        ({"new_tokens": 1, "batch": 0}, "batch must be a positive int"),
        ({"new_tokens": 1, "attention": "flash"}, "attention must be one of 'dense', 'causal'"),
        ({"new_tokens": 1, "logits": "first"}, "logits must be one of 'all', 'last'"),
    ],
)
def test_bad_forward_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        flops.forward_flops(models.get("Qwen2.5-7B"), **kwargs)


@pytest.mark.parametrize("args", [(0, 1, 1), (1, -1, 1), (1, 1, True)])
def test_bad_matmul_sizes(args):
    with pytest.raises(ValueError, match="must be a positive int"):
        flops.matmul_flops(*args)


@pytest.mark.parametrize("name", ["Qwen2.5-7B", "Llama-3.1-8B"])
def test_attention_flops_grow_by_the_per_key_cost(name):
    cfg = models.get(name)
    per_key = flops.attention_flops_per_key(cfg)
    # Scores and values: one multiply-add per element of each, in every query head and layer.
    assert per_key == 4 * cfg.layers * cfg.n_q_heads * cfg.head_dim
    for context in (0, 1, 4095):
        step = flops.forward_flops(cfg, 1, context=context).by_op
        assert flops.attention_flops(step) == per_key * (context + 1)
        weight_matmuls = sum(v for op, v in step.items() if not op.startswith("attn_"))
        assert flops.attention_flops(step) == sum(step.values()) - weight_matmuls


@pytest.mark.parametrize("name", models.names())
def test_attention_crossover_is_the_first_context_where_attention_reaches_the_rest(name):
    cfg = models.get(name)
    crossover = flops.attention_crossover(cfg)
    window = cfg.sliding_window

    def attention_and_rest(context):
        step = flops.forward_flops(cfg, 1, context=context, logits="last").by_op
        keys = context + 1 if window is None else min(context + 1, window)
        attention = flops.attention_flops_per_key(cfg) * keys
        return attention, sum(step.values()) - flops.attention_flops(step)

    if crossover is None:  # the window caps attention below the rest
        attention, rest = attention_and_rest(window)
        assert window is not None and attention < rest
        return
    attention, rest = attention_and_rest(crossover)
    assert attention >= rest
    attention, rest = attention_and_rest(crossover - 1)
    assert attention < rest


def test_attention_crossover_of_a_tie_and_of_a_window():
    # Llama-3.1-8B: the matmuls are exactly 28,628 keys' attention, so the step with
    # 28,627 cached tokens ties, and the tie counts as reached.
    assert flops.attention_crossover(models.get("Llama-3.1-8B")) == 28_627
    assert flops.attention_crossover(models.get("Mistral-7B-v0.1")) is None
    wide = dataclasses.replace(models.get("Mistral-7B-v0.1"), sliding_window=1 << 20)
    assert flops.attention_crossover(wide) == 27_123
