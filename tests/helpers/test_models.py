"""Presets against the published configs, and the Hugging Face config loader."""

import pytest

from helpers import models
from helpers.models import ModelConfig

# From each model's config.json (REFERENCES.md), in the loader's input form.
HF_CONFIGS = {
    "Qwen2.5-0.5B": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "Qwen2.5-7B": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                   "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "vocab_size": 152064, "tie_word_embeddings": False},
    "Llama-3.1-8B": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                     "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "Llama-3.1-70B": {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
                      "num_hidden_layers": 80, "num_attention_heads": 64,
                      "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                      "tie_word_embeddings": False},
    "Mistral-7B-v0.1": {"model_type": "mistral", "hidden_size": 4096,
                        "intermediate_size": 14336, "num_hidden_layers": 32,
                        "num_attention_heads": 32, "num_key_value_heads": 8,
                        "vocab_size": 32000, "tie_word_embeddings": False,
                        "sliding_window": 4096},
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
