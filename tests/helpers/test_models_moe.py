"""Mixtures of experts and latent attention (chapter 10): the presets against their published
configs, parameter counts against transformers' own models built on the meta device, and
FLOPs and cache bytes against what transformers executes and stores on tiny instances."""

import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from helpers import serving
from helpers.counting import flops, hardware, memory, models, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder.kv_cache import KVCache, PagedKVCache
from helpers.decoder.model import Decoder
from helpers.widgets import flops as flops_widget

# From each model's config.json (docs/sources.md), in the loader's input form.
HF_CONFIGS = {
    "Mixtral-8x7B": {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": False,
                     "num_local_experts": 8, "num_experts_per_tok": 2, "rms_norm_eps": 1e-05,
                     "rope_theta": 1000000.0, "sliding_window": None},
    "Qwen3-30B-A3B": {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                      "num_hidden_layers": 48, "num_attention_heads": 32,
                      "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                      "tie_word_embeddings": False, "attention_bias": False,
                      "decoder_sparse_step": 1, "mlp_only_layers": [],
                      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                      "norm_topk_prob": True, "rms_norm_eps": 1e-06, "rope_scaling": None,
                      "rope_theta": 1000000.0, "sliding_window": None,
                      "use_sliding_window": False},
    "DeepSeek-V3": {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
                    "num_hidden_layers": 61, "num_attention_heads": 128,
                    "num_key_value_heads": 128, "vocab_size": 129280,
                    "tie_word_embeddings": False, "attention_bias": False,
                    "first_k_dense_replace": 3, "moe_layer_freq": 1, "moe_intermediate_size": 2048,
                    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
                    "n_group": 8, "topk_group": 4, "norm_topk_prob": True,
                    "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 1,
                    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "rms_norm_eps": 1e-06,
                    "rope_theta": 10000,
                    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                     "mscale_all_dim": 1.0,
                                     "original_max_position_embeddings": 4096, "type": "yarn"}},
}  # fmt: skip

# The published totals, in billions, as each model's card or report rounds them: (total,
# active, the last digit's unit). Mixtral rounds (46.7B, 12.9B); Qwen3 (3.3B) and DeepSeek
# (37B activated) cut the active count at their last digit, so ours lies in
# [published - unit/2, published + unit).
PUBLISHED = {"Mixtral-8x7B": (46.7, 12.9, 0.1), "Qwen3-30B-A3B": (30.5, 3.3, 0.1),
             "DeepSeek-V3": (671, 37, 1)}  # fmt: skip

HF_CLASSES = {
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
    "deepseek_v3": (transformers.DeepseekV3Config, transformers.DeepseekV3ForCausalLM),
}

# Tiny instances of each architecture: every feature the counts see (GQA, head norms, a
# dense layer before the MoE ones, shared experts, a query latent) at sizes that run in
# milliseconds. Eight experts over 2-3 layers and ~20 tokens: every expert gets tokens.
TINY = {
    "mixtral": {"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 48,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 61, "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 16, "vocab_size": 61, "moe_intermediate_size": 24,
                  "num_experts": 8, "num_experts_per_tok": 3},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 32, "intermediate_size": 80,
                    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
                    "vocab_size": 61, "first_k_dense_replace": 1, "moe_intermediate_size": 16,
                    "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2,
                    "n_group": 2, "topk_group": 1, "kv_lora_rank": 12, "q_lora_rank": 20,
                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6},
}  # fmt: skip
TINY_NO_Q_LATENT = {**TINY["deepseek_v3"], "q_lora_rank": None}


def hf_config(config: dict):
    """transformers' config object for a config.json dict, eager attention and experts (the
    implementations that run each matmul as FlopCounterMode sees it)."""
    config_class, _ = HF_CLASSES[config["model_type"]]
    kwargs = {k: v for k, v in config.items() if k not in ("model_type", "rope_scaling")}
    if config.get("rope_scaling"):
        kwargs["rope_parameters"] = {"rope_theta": config["rope_theta"],
                                     **config["rope_scaling"]}  # fmt: skip
    return config_class(**kwargs, attn_implementation="eager", experts_implementation="eager")


def hf_model(config: dict, device: str = "cpu") -> torch.nn.Module:
    _, model_class = HF_CLASSES[config["model_type"]]
    with torch.device(device):
        return model_class(hf_config(config)).eval()


def expert_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """The routed experts' weight tensors, [experts, …] each, of every MoE layer."""
    return [module.gate_up_proj for module in model.modules() if hasattr(module, "gate_up_proj")
            ] + [module.down_proj for module in model.modules()
                 if hasattr(module, "gate_up_proj")]  # fmt: skip


@pytest.mark.parametrize("name", models.names("moe"))
def test_presets_equal_their_published_config(name):
    loaded = ModelConfig.from_hf_config(HF_CONFIGS[name], name=name)
    preset = models.get(name)
    assert loaded == ModelConfig(**{**preset.__dict__, "source": ""})


def test_names_keep_chapters_1_to_9_on_the_dense_presets():
    dense = ["Qwen2.5-0.5B", "Qwen2.5-7B", "Llama-3.1-8B", "Llama-3.1-70B", "Mistral-7B-v0.1"]
    assert models.names() == models.names("dense") == dense
    assert models.names("moe") == ["Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V3"]
    assert models.names("all") == dense + models.names("moe") == list(models.PRESETS)
    with pytest.raises(ValueError, match="family must be one of 'dense', 'moe', 'all'"):
        models.names("sparse")


@pytest.mark.parametrize("name", models.names("moe"))
def test_param_counts_equal_transformers_on_meta_and_the_published_figures(name):
    cfg, model = models.get(name), hf_model(HF_CONFIGS[name], device="meta")
    total = sum(p.numel() for p in model.parameters())
    assert flops.param_count(cfg) == total
    # A token runs experts_per_token of each layer's routed experts; all else is shared.
    routed = sum(t.numel() for t in expert_tensors(model))
    active = total - routed + routed * cfg.experts_per_token // cfg.n_experts
    assert flops.active_param_count(cfg) == active
    published_total, published_active, unit = PUBLISHED[name]
    for ours, published in ((total, published_total), (active, published_active)):
        assert published - unit / 2 <= ours / 1e9 < published + unit


def test_dense_presets_are_all_active():
    for name in models.names():
        cfg = models.get(name)
        assert flops.active_param_count(cfg) == flops.param_count(cfg)


def counted(fn):
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        result = fn()
    return counter.get_total_flops(), result


@pytest.mark.parametrize("config", [*TINY.values(), TINY_NO_Q_LATENT],
                         ids=[*TINY, "deepseek_v3-no-q-latent"])  # fmt: skip
@pytest.mark.parametrize("batch, prompt", [(1, 7), (3, 5)])
def test_forward_flops_equal_flop_counter_on_transformers(config, batch, prompt):
    """Prefill and two cached decode steps. transformers runs each expert on the tokens
    routed to it, and top-k picks k different experts, so whatever the router picks, the
    experts' matmuls are exactly experts_per_token per token. Its MLA caches the latent and
    rebuilds every key and value from it on each pass: the "expanded" form."""
    torch.manual_seed(0)
    cfg, model = ModelConfig.from_hf_config(config), hf_model(config)
    mla = "expanded" if cfg.is_mla else "absorbed"
    ids = torch.randint(0, cfg.vocab, (batch, prompt))
    total, out = counted(lambda: model(ids, use_cache=True))
    assert total == flops.forward_flops(cfg, prompt, batch=batch, mla=mla).total
    cache, context = out.past_key_values, prompt
    for _ in range(2):
        step = torch.randint(0, cfg.vocab, (batch, 1))
        total, out = counted(lambda s=step, c=cache: model(s, cache=c, use_cache=True))
        expected = flops.forward_flops(cfg, 1, context=context, batch=batch, mla=mla)
        assert total == expected.total
        cache, context = out.past_key_values, context + 1


def test_a_moe_token_runs_its_experts_only():
    cfg = models.get("Mixtral-8x7B")
    step = flops.forward_flops(cfg, 1, context=100).by_op
    d, f = cfg.hidden, cfg.expert_intermediate
    assert step["experts"] == cfg.layers * 2 * 3 * 2 * d * f  # two experts of three matrices
    assert step["router"] == cfg.layers * 2 * d * 8
    assert "gate" not in step and "shared_experts" not in step
    deepseek = flops.forward_flops(models.get("DeepSeek-V3"), 4).by_op
    assert deepseek["gate"] == 3 * 2 * 4 * 7168 * 18432  # the three dense layers
    assert deepseek["shared_experts"] == 58 * 3 * 2 * 4 * 7168 * 2048
    assert tuple(deepseek) == flops.op_names(models.get("DeepSeek-V3"))


def test_linear_flops_a_token_are_twice_the_active_weights():
    """Past the embedding lookup (no matmul) and the norms (elementwise), a token's linear
    layers multiply-add each active weight once, whatever the attention (these presets have
    no biases and untied embeddings)."""
    for name in models.names("moe"):
        cfg = models.get(name)
        step = flops.forward_flops(cfg, 1).by_op
        linear = sum(step.values()) - step["attn_scores"] - step["attn_values"]
        norms = cfg.layers * 2 * cfg.hidden + cfg.hidden + cfg.layers * (
            2 * cfg.head_dim if cfg.qk_norm else cfg.kv_lora_rank + cfg.q_lora_rank)
        lookup = cfg.vocab * cfg.hidden
        assert linear == 2 * (flops.active_param_count(cfg) - norms - lookup)


def absorbed_attention(attention, hidden, latent, rot_key, cos, sin):
    """DeepSeek-V2's inference form of MLA, on transformers' weights: kv_b folded into each
    query and each head's output, scores and sums over the cached latent (no mask: one
    decode step sees every key)."""
    h, nope, rope = attention.num_heads, attention.qk_nope_head_dim, attention.qk_rope_head_dim
    v_dim, rank = attention.v_head_dim, attention.kv_lora_rank
    batch, new, _ = hidden.shape
    q = attention.q_b_proj(attention.q_a_layernorm(attention.q_a_proj(hidden)))
    q = q.view(batch, new, h, nope + rope).transpose(1, 2)
    q_nope, q_rot = q.split([nope, rope], dim=-1)
    q_rot, _ = deepseek_rotary(q_rot, q_rot, cos, sin)
    w = attention.kv_b_proj.weight.view(h, nope + v_dim, rank)
    w_k, w_v = w[:, :nope], w[:, nope:]
    q_latent = torch.einsum("bhqn,hnr->bhqr", q_nope, w_k)
    scores = (torch.einsum("bhqr,bkr->bhqk", q_latent, latent)
              + torch.einsum("bhqe,bke->bhqk", q_rot, rot_key)) * attention.scaling  # fmt: skip
    mixed = torch.einsum("bhqk,bkr->bhqr", scores.softmax(-1), latent)
    out = torch.einsum("bhqr,hvr->bhqv", mixed, w_v)
    return attention.o_proj(out.transpose(1, 2).reshape(batch, new, h * v_dim))


def deepseek_rotary(q, k, cos, sin):
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    return ds.apply_rotary_pos_emb_interleave(q, k, cos, sin)


def test_absorbed_mla_equals_transformers_attention_and_its_flops():
    """The default "absorbed" count, checked on an implementation of that form: it gives
    transformers' own attention output from the same cached latent, and FlopCounterMode
    counts what forward_flops says for the attention and kv_b."""
    torch.manual_seed(0)
    config = TINY["deepseek_v3"]
    cfg, model = ModelConfig.from_hf_config(config), hf_model(config)
    batch, context = 2, 9
    ids = torch.randint(0, cfg.vocab, (batch, context + 1))
    out = model(ids[:, :context], use_cache=True)
    cache = out.past_key_values
    layer = model.model.layers[0].self_attn
    hidden = torch.randn(batch, 1, cfg.hidden)
    position = torch.full((batch, 1), context)
    cos, sin = model.model.rotary_emb(hidden, position)
    # transformers' own attention for the new token, its latent appended to the cache.
    with torch.no_grad():
        theirs, _ = layer(hidden, (cos, sin), None, cache=cache)
    latent, rot_key = (t[:, 0] for t in (cache.layers[0].keys, cache.layers[0].values))
    total, ours = counted(lambda: absorbed_attention(layer, hidden, latent, rot_key, cos, sin))
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4)
    by_op = flops.forward_flops(cfg, 1, context=context, batch=batch).by_op
    expected = sum(by_op[name] for name in ("q_a", "q_b", "kv_b", "o", "attn_scores",
                                            "attn_values")) // cfg.layers  # fmt: skip
    assert total == expected


@pytest.mark.parametrize("config", TINY.values(), ids=TINY)
def test_kv_bytes_per_token_equal_what_transformers_caches(config):
    """Mixtral and Qwen3 cache each key/value head's K and V; DeepSeek-V3 the latent and the
    shared rotary key, kv_lora_rank + qk_rope_head_dim values a layer."""
    cfg, model = ModelConfig.from_hf_config(config), hf_model(config)
    tokens = 6
    with torch.no_grad():
        cache = model(torch.zeros(1, tokens, dtype=torch.long), use_cache=True).past_key_values
    stored = sum(t.numel() * t.element_size() for layer in cache.layers
                 for t in (layer.keys, layer.values))  # fmt: skip
    assert stored == tokens * memory.kv_bytes_per_token(cfg, "fp32")


def test_deepseek_v3_caches_a_576_wide_latent():
    cfg = models.get("DeepSeek-V3")
    assert memory.kv_width(cfg) == 512 + 64
    assert memory.kv_bytes_per_token(cfg) == 61 * 576 * 2
    assert memory.kv_bytes_per_token(cfg, "fp8") == 61 * 576
    mixtral = models.get("Mixtral-8x7B")
    assert memory.kv_bytes_per_token(mixtral) == 2 * 32 * 8 * 128 * 2


def test_experts_read_grow_with_the_tokens_until_all_are_read():
    cfg = models.get("DeepSeek-V3")
    assert [memory.experts_read(cfg, t) for t in (0, 1, 2, 31, 32, 1000)] == [0, 8, 16, 248,
                                                                              256, 256]  # fmt: skip
    assert memory.experts_read(models.get("Llama-3.1-8B"), 64) == 0
    expert = 3 * cfg.hidden * cfg.expert_intermediate * 2  # bf16 bytes of one expert
    one = memory.forward_bytes(cfg, 1, context=100)["experts"]
    many = memory.forward_bytes(cfg, 1, context=100, batch=64)["experts"]
    assert one == 58 * (8 * expert + 2 * 8 * 3 * (cfg.hidden + cfg.expert_intermediate))
    assert many == 58 * (256 * expert + 2 * 64 * 8 * 3 * (cfg.hidden + cfg.expert_intermediate))


@pytest.mark.parametrize("name", models.names("moe"))
def test_what_models_dense_decoders_only_refuses_naming_the_preset(name):
    cfg = models.get(name)
    feature = "mixture of experts and multi-head latent attention" if cfg.is_mla else (
        "mixture of experts is")
    hw = hardware.get("H100 SXM")
    calls = [
        ("helpers.decoder", lambda: Decoder(cfg)),
        ("helpers.decoder's KV cache", lambda: KVCache.allocate(cfg, 1, 8)),
        ("helpers.decoder's paged KV cache", lambda: PagedKVCache.allocate(cfg, 2, 4)),
        ("linear_shapes", cfg.linear_shapes),
        ("batched_decode_intensity", lambda: roofline.batched_decode_intensity(cfg, 8, 1024)),
        ("critical_batch_aggregate", lambda: roofline.critical_batch_aggregate(cfg, hw, 1024)),
        ("the serving simulator's step model", lambda: serving.RooflineSteps(cfg, hw)),
        ("verify_costs", lambda: serving.verify_costs(cfg, hw, 1024)),
        ("attention_share",
         lambda: flops_widget.attention_share(flops_widget.AttentionControls(name))),
    ]
    for what, call in calls:
        with pytest.raises(ValueError, match=f"^{name}: {what}.* models dense decoders only; "
                                             f"its {feature}"):  # fmt: skip
            call()


def test_chapters_1_to_9_counts_run_on_the_new_presets():
    """What applies to any decoder runs: the FLOP and byte counts, the roofline's split of a
    decode step and its prefill time, the KV capacity."""
    hw = hardware.get("H200 SXM")
    for name in models.names("moe"):
        cfg = models.get(name)
        split = roofline.decode_split(cfg, hw, batch=16, context=4096)
        assert split["weights"].seconds > 0 and split["attention"].seconds > 0
        assert memory.weight_bytes(cfg) == 2 * flops.param_count(cfg)
        assert memory.max_concurrent_sequences(cfg, 8 * hw.memory_bytes, 4096) >= 0


@pytest.mark.parametrize(
    "name, change, message",
    [
        ("Qwen3-30B-A3B", {"mlp_only_layers": [0]}, "mlp_only_layers .* is not modelled"),
        ("Qwen3-30B-A3B", {"decoder_sparse_step": 2}, "decoder_sparse_step other than 1"),
        ("Qwen3-30B-A3B", {"use_sliding_window": True},
         "use_sliding_window=true is not supported for qwen3_moe"),
        ("Qwen3-30B-A3B", {"num_experts_per_tok": 200},
         "experts_per_token=200 must be in 1 … n_experts=128"),
        ("Qwen3-30B-A3B", {"num_experts": None}, "missing required field 'num_experts'"),
        ("DeepSeek-V3", {"moe_layer_freq": 2}, "moe_layer_freq other than 1"),
        ("DeepSeek-V3", {"first_k_dense_replace": 61}, "dense_layers=61 leaves no MoE layer"),
        ("DeepSeek-V3", {"kv_lora_rank": None}, "missing required field 'kv_lora_rank'"),
        ("Mixtral-8x7B", {"rope_scaling": {"type": "yarn", "factor": 4.0}},
         "rope_scaling type 'yarn' is not modelled"),
    ],
)
def test_bad_moe_config_raises_naming_the_problem(name, change, message):
    config = {k: v for k, v in {**HF_CONFIGS[name], **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf_config(config)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"experts_per_token": 2}, "experts_per_token, shared_experts and dense_layers need"),
        ({"q_lora_rank": 8}, "q_lora_rank and the rope/no-rope/value head widths need"),
        ({"kv_lora_rank": 8, "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 8},
         "head_dim=128 must be qk_nope_head_dim \\+ qk_rope_head_dim = 12"),
        ({"n_experts": 8, "experts_per_token": 2}, "needs expert_intermediate"),
        ({"n_experts": -1}, "n_experts must be an int >= 0"),
    ],
)
def test_bad_moe_or_mla_fields_raise(fields, message):
    base = models.get("Llama-3.1-8B").__dict__
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**base, **fields})


def test_mla_mode_is_checked():
    with pytest.raises(ValueError, match="mla must be one of 'absorbed', 'expanded'"):
        flops.forward_flops(models.get("DeepSeek-V3"), 1, mla="naive")
