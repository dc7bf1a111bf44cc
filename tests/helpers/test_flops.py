"""FLOP and parameter counts against the published totals and against what torch executes."""

import dataclasses
import operator

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from helpers.counting import flops, models
from helpers.counting.models import ModelConfig
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


def _decode_attention_and_rest(cfg, layer_types, context):
    """A decode step's attention over the layers, each seeing its own keys, and the rest."""
    step = flops.forward_flops(cfg, 1, context=context, logits="last").by_op
    per_layer_key = flops.attention_flops_per_key(cfg) // cfg.layers
    kinds = layer_types or ["full_attention"] * cfg.layers
    keys = [context + 1 if kind == "full_attention" else min(context + 1, cfg.sliding_window)
            for kind in kinds]  # fmt: skip
    return per_layer_key * sum(keys), sum(step.values()) - flops.attention_flops(step)


GEMMA_3_1B = ModelConfig(name="Gemma-3-1B", model_type="gemma3_text", hidden=1152,
                         intermediate=6912, layers=26, n_q_heads=4, n_kv_heads=1, head_dim=256,
                         vocab=262144, tied_embeddings=True, qkv_bias=False, qk_norm=True,
                         sliding_window=512)  # fmt: skip
EVERY_SIXTH_FULL = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                    for i in range(26)]  # fmt: skip


@pytest.mark.parametrize("window", [1, 7, 15, 16, 17, 300])
@pytest.mark.parametrize("kinds", ["SFS", "FSS", "SSF", "FFS", "SSS", "FFF"])
def test_attention_crossover_with_mixed_layers_is_the_first_context_that_reaches(window, kinds):
    # A tiny model whose full-attention crossover is 16 keys, so a scan over contexts finds it.
    cfg = ModelConfig(name="tiny", model_type="llama", hidden=8, intermediate=8, layers=3,
                      n_q_heads=4, n_kv_heads=2, head_dim=8, vocab=16, tied_embeddings=True,
                      qkv_bias=False, sliding_window=window)  # fmt: skip
    layer_types = [{"S": "sliding_attention", "F": "full_attention"}[k] for k in kinds]
    crossover = flops.attention_crossover(cfg, layer_types)
    reached = next((c for c in range(2_000)
                    if operator.ge(*_decode_attention_and_rest(cfg, layer_types, c))), None)
    assert crossover == reached
    if crossover is None:
        assert "F" not in kinds


def test_gemma_3_1b_crosses_past_its_context():
    crossover = flops.attention_crossover(GEMMA_3_1B, EVERY_SIXTH_FULL)
    assert crossover == 119_223
    attention, rest = _decode_attention_and_rest(GEMMA_3_1B, EVERY_SIXTH_FULL, crossover)
    assert attention >= rest
    attention, rest = _decode_attention_and_rest(GEMMA_3_1B, EVERY_SIXTH_FULL, crossover - 1)
    assert attention < rest
    # Every layer full: the window unused, the crossover of full attention.
    assert flops.attention_crossover(GEMMA_3_1B, ["full_attention"] * 26) == 18_775
    assert flops.attention_crossover(GEMMA_3_1B) is None  # None: every layer slides


@pytest.mark.parametrize("layer_types, message", [
    ("sliding_attention", "must be a list"),
    (["full_attention"] * 25, "names 25 layers, the model has 26"),
    (["full_attention"] * 25 + ["local"], "a layer type"),
])  # fmt: skip
def test_attention_crossover_rejects_bad_layer_types(layer_types, message):
    with pytest.raises(ValueError, match=message):
        flops.attention_crossover(GEMMA_3_1B, layer_types)


def test_a_sliding_layer_needs_a_window():
    no_window = dataclasses.replace(GEMMA_3_1B, sliding_window=None)
    with pytest.raises(ValueError, match="needs sliding_window"):
        flops.attention_crossover(no_window, EVERY_SIXTH_FULL)
