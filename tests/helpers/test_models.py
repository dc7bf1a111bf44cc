"""Presets against the published configs, and the Hugging Face config loader."""

import pytest

from helpers.counting import models
from helpers.counting.models import ModelConfig, RopeScaling

LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}

# From each model's config.json (docs/sources.md), in the loader's input form.
HF_CONFIGS = {
    "Qwen2.5-0.5B": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
                     "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
                     "use_sliding_window": False},
    "Qwen2.5-7B": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                   "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "vocab_size": 152064, "tie_word_embeddings": False,
                   "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
                   "use_sliding_window": False},
    "Llama-3.1-8B": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                     "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
                     "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": LLAMA31_ROPE},
    "Llama-3.1-70B": {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
                      "num_hidden_layers": 80, "num_attention_heads": 64,
                      "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                      "tie_word_embeddings": False, "rms_norm_eps": 1e-05,
                      "rope_theta": 500000.0, "rope_scaling": LLAMA31_ROPE},
    "Mistral-7B-v0.1": {"model_type": "mistral", "hidden_size": 4096,
                        "intermediate_size": 14336, "num_hidden_layers": 32,
                        "num_attention_heads": 32, "num_key_value_heads": 8,
                        "vocab_size": 32000, "tie_word_embeddings": False,
                        "sliding_window": 4096, "rms_norm_eps": 1e-05,
                        "rope_theta": 10000.0},
}  # fmt: skip


@pytest.mark.parametrize("name", models.names())
def test_presets_equal_their_published_config(name):
    loaded = ModelConfig.from_hf_config(HF_CONFIGS[name], name=name)
    preset = models.get(name)
    assert loaded == ModelConfig(**{**preset.__dict__, "source": ""})


def test_preset_table_values():
    qwen = models.get("Qwen2.5-7B")
    assert (qwen.head_dim, qwen.group_size, qwen.q_dim, qwen.kv_dim) == (128, 7, 3584, 512)
    assert models.get("Qwen2.5-0.5B").head_dim == 64
    assert models.get("Mistral-7B-v0.1").sliding_window == 4096
    assert models.get("Llama-3.1-8B").sliding_window is None
    assert set(models.names()) == set(HF_CONFIGS)


def test_explicit_head_dim_wins_over_hidden_over_heads():
    config = {**HF_CONFIGS["Llama-3.1-8B"], "head_dim": 256}
    assert ModelConfig.from_hf_config(config).head_dim == 256


def test_missing_kv_heads_means_multi_head_attention():
    config = {k: v for k, v in HF_CONFIGS["Llama-3.1-8B"].items() if k != "num_key_value_heads"}
    assert ModelConfig.from_hf_config(config).n_kv_heads == 32


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown model 'GPT-5'.*Qwen2.5-7B"):
        models.get("GPT-5")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "gpt2"}, "unknown model_type 'gpt2'"),
        ({"model_type": None}, "unknown model_type None"),
        ({"hidden_size": None}, "missing required field 'hidden_size'"),
        ({"vocab_size": None}, "missing required field 'vocab_size'"),
        ({"intermediate_size": None}, "missing required field 'intermediate_size'"),
        ({"num_hidden_layers": None}, "missing required field 'num_hidden_layers'"),
        ({"num_attention_heads": None}, "missing required field 'num_attention_heads'"),
        ({"num_key_value_heads": 3}, "n_kv_heads=3 does not divide n_q_heads=28"),
        ({"hidden_size": 3585}, "hidden_size=3585 is not divisible by num_attention_heads=28"),
        ({"num_hidden_layers": 0}, "layers must be a positive int"),
        ({"intermediate_size": -5}, "intermediate must be a positive int"),
        ({"vocab_size": 1.5}, "vocab must be a positive int"),
        ({"attention_bias": True}, "attention_bias=true is not supported"),
    ],
)
def test_bad_config_raises_naming_the_problem(change, message):
    config = {**HF_CONFIGS["Qwen2.5-7B"], **change}
    config = {k: v for k, v in config.items() if v is not None or k == "model_type"}
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf_config(config)


def test_config_must_be_a_mapping():
    with pytest.raises(ValueError, match="config must be a dict, got list"):
        ModelConfig.from_hf_config([1, 2])


def test_rope_and_norm_values_are_read_and_default_as_transformers():
    llama = ModelConfig.from_hf_config(HF_CONFIGS["Llama-3.1-8B"])
    assert (llama.rope_theta, llama.rms_norm_eps) == (500000.0, 1e-5)
    assert llama.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)
    assert llama.rope_scaling.to_hf() == LLAMA31_ROPE
    bare = {k: v for k, v in HF_CONFIGS["Mistral-7B-v0.1"].items()
            if k not in ("rope_theta", "rms_norm_eps")}  # fmt: skip
    cfg = ModelConfig.from_hf_config(bare)
    assert (cfg.rope_theta, cfg.rms_norm_eps, cfg.rope_scaling) == (10000.0, 1e-6, None)
    # transformers 5 writes the base and the scaling into rope_parameters.
    v5 = {k: v for k, v in HF_CONFIGS["Llama-3.1-8B"].items() if k not in ("rope_theta",
                                                                        "rope_scaling")}
    v5["rope_parameters"] = {**LLAMA31_ROPE, "rope_theta": 500000.0}
    assert ModelConfig.from_hf_config(v5) == llama
    plain = {**HF_CONFIGS["Qwen2.5-7B"], "rope_scaling": {"rope_type": "default"}}
    assert ModelConfig.from_hf_config(plain).rope_scaling is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rope_theta": 0}, "rope_theta must be a positive number, got 0"),
        ({"rms_norm_eps": -1e-6}, "rms_norm_eps must be a positive number"),
        ({"rope_theta": "1e6"}, "rope_theta must be a positive number, got '1e6'"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
         "rope_scaling type 'yarn' is not modelled"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
         "llama3 rope_scaling is missing 'low_freq_factor'"),
        ({"rope_scaling": {**LLAMA31_ROPE, "factor": -2.0}}, "factor must be a positive number"),
        ({"rope_scaling": {**LLAMA31_ROPE, "high_freq_factor": 0.5}},
         "high_freq_factor=0.5 must exceed low_freq_factor=1.0"),
        ({"rope_scaling": [8.0]}, "rope_scaling must be a dict or None, got list"),
    ],
)
def test_bad_rope_or_norm_values_raise_naming_the_problem(change, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf_config({**HF_CONFIGS["Llama-3.1-8B"], **change})


def test_qwen2_sliding_window_is_refused_not_ignored():
    with pytest.raises(ValueError, match="use_sliding_window=true is not supported for qwen2"):
        ModelConfig.from_hf_config({**HF_CONFIGS["Qwen2.5-7B"], "use_sliding_window": True})
