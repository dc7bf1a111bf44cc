"""Byte counts: dtypes, weights, KV cache, activation traffic."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import flops, memory, models
from helpers.models import ModelConfig


def test_dtype_bytes():
    assert [memory.dtype_bytes(d) for d in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")] == [
        4, 2, 2, 1, 1, 0.5
    ]  # fmt: skip


def test_unknown_dtype_names_it():
    with pytest.raises(ValueError, match="dtype must be one of .* got 'fp64'"):
        memory.dtype_bytes("fp64")
    with pytest.raises(ValueError, match="got 'float16'"):
        memory.weight_bytes(models.get("Qwen2.5-7B"), "float16")


@pytest.mark.parametrize(
    "name, kappa",
    [("Qwen2.5-7B", 57_344), ("Llama-3.1-8B", 131_072), ("Llama-3.1-70B", 327_680),
     ("Qwen2.5-0.5B", 12_288)],
)  # fmt: skip
def test_kv_bytes_per_token_worked_numbers(name, kappa):
    assert memory.kv_bytes_per_token(models.get(name)) == kappa


def test_kv_cache_llama2_13b_worked_number():
    llama2 = ModelConfig(name="Llama-2-13B", model_type="llama", hidden=5120, intermediate=13824,
                         layers=40, n_q_heads=40, n_kv_heads=40, head_dim=128, vocab=32000,
                         tied_embeddings=False, qkv_bias=False)  # fmt: skip
    assert memory.kv_cache_bytes(llama2, 8192) == 6_710_886_400


def test_sliding_window_caps_the_cache():
    mistral = models.get("Mistral-7B-v0.1")
    assert memory.kv_cache_bytes(mistral, 4096) == memory.kv_cache_bytes(mistral, 32768)
    assert memory.kv_cache_bytes(mistral, 4095) < memory.kv_cache_bytes(mistral, 4096)


def test_weight_bytes_per_dtype():
    cfg = models.get("Qwen2.5-7B")
    n = flops.param_count(cfg)
    assert memory.weight_bytes(cfg, "bf16") == 2 * n
    assert memory.weight_bytes(cfg, "fp32") == 4 * n
    assert memory.weight_bytes(cfg, "int4") == n // 2
    odd = models.get("Qwen2.5-0.5B")
    assert memory.weight_bytes(odd, "int4") == (flops.param_count(odd) + 1) // 2


def test_linear_bytes_and_forward_bytes():
    assert memory.linear_bytes(1024, 3584, 18944) == 2 * (1024 * 3584 + 3584 * 18944 + 1024 * 18944)
    cfg = models.get("Qwen2.5-7B")
    traffic = memory.forward_bytes(cfg, 1, context=1023)
    # Decode at batch 1 reads (almost) every weight once: weights dominate, the KV cache follows.
    weights_read = sum(v for k, v in traffic.items() if k not in ("attention", "embedding"))
    assert weights_read == pytest.approx(memory.weight_bytes(cfg) - 2 * cfg.vocab * cfg.hidden,
                                         rel=1e-3)  # fmt: skip
    kv = memory.kv_cache_bytes(cfg, 1024)
    assert (
        traffic["attention"]
        == kv + cfg.layers * 2 * 2 * cfg.q_dim + cfg.layers * 2 * 2 * cfg.kv_dim
    )


@given(tokens=st.integers(0, 10**6), batch=st.integers(1, 512))
def test_kv_cache_is_linear_in_tokens_and_batch(tokens, batch):
    cfg = models.get("Llama-3.1-8B")
    assert memory.kv_cache_bytes(cfg, tokens, batch) == batch * tokens * 131_072


@pytest.mark.parametrize("args", [(-1, 1), (5, 0), (5, 2.5)])
def test_bad_sizes(args):
    with pytest.raises(ValueError, match="must be"):
        memory.kv_cache_bytes(models.get("Qwen2.5-7B"), *args)


def test_max_concurrent_sequences_worked_number():
    """docs/sources.md: Qwen2.5-7B bf16 on H200 (141 GiB) at S = 1024: 2,318 sequences, 2,307
    with the 143,771 MiB CUDA sees, and 2,141 if "141 GB" is misread as decimal."""
    from helpers import hardware

    h200 = hardware.get("H200 SXM")
    fits = memory.max_concurrent_sequences(models.get("Qwen2.5-7B"), h200.memory_bytes, 1024)
    assert fits == 2318
    qwen = models.get("Qwen2.5-7B")
    assert memory.max_concurrent_sequences(qwen, h200.visible_memory_bytes, 1024) == 2307
    assert memory.max_concurrent_sequences(qwen, 141e9, 1024) == 2141
    llama70 = models.get("Llama-3.1-70B")
    assert memory.max_concurrent_sequences(llama70, 80 * 2**30, 1024) == 0
    # 141.1e9 B of bf16 weights fit in an H200's 141 GiB, not in 141e9 B.
    assert memory.max_concurrent_sequences(llama70, h200.memory_bytes, 1024) == 30
    assert memory.max_concurrent_sequences(llama70, 141e9, 1024) == 0
    with pytest.raises(ValueError, match="memory_bytes must be positive"):
        memory.max_concurrent_sequences(models.get("Qwen2.5-7B"), 0, 1024)
