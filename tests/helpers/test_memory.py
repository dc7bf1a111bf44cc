"""Byte counts: dtypes, weights, KV cache, activation traffic."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.counting import flops, memory, models
from helpers.counting.models import ModelConfig


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
    from helpers.counting import hardware

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


def test_int4_checkpoint_bytes_by_hand():
    """Qwen2.5-7B, group 128: every layer matrix's inputs are whole groups; the embedding
    table and the untied LM head stay bf16, with the biases and norms."""
    cfg = models.get("Qwen2.5-7B")
    shapes = [shape for name, shape in cfg.linear_shapes().items() if name != "lm_head"]
    layer_weights = sum(k * n for k, n in shapes)
    groups = sum(n * k // 128 for k, n in shapes)
    packed = layer_weights // 2 + groups * 2 + groups // 2
    rest = flops.param_count(cfg) - cfg.layers * layer_weights
    assert memory.int4_checkpoint_bytes(cfg) == cfg.layers * packed + 2 * rest
    assert 2 * rest > 2 * 2 * cfg.vocab * cfg.hidden  # both vocabulary matrices, in bf16


def test_int4_checkpoint_bytes_rounds_groups_and_halves_up():
    """One layer: q, k, v, o, gate, up, down of 3 inputs … a group of 2 leaves a short group
    in every column, and 3 × 5 = 15 int4 values take 8 bytes."""
    cfg = ModelConfig(name="odd", model_type="llama", hidden=3, intermediate=5, layers=1,
                      n_q_heads=1, n_kv_heads=1, head_dim=3, vocab=7, tied_embeddings=True,
                      qkv_bias=False)  # fmt: skip
    expected = 0
    for k, n in ((3, 3), (3, 3), (3, 3), (3, 3), (3, 5), (3, 5), (5, 3)):
        groups = n * -(-k // 2)
        expected += -(-k * n // 2) + 2 * groups + -(-groups // 2)
    rest = flops.param_count(cfg) - (4 * 9 + 2 * 15 + 15)
    assert memory.int4_checkpoint_bytes(cfg, 2) == expected + 2 * rest
    with pytest.raises(ValueError, match="group_size must be a positive int"):
        memory.int4_checkpoint_bytes(cfg, 0)


GPT_OSS_20B = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24,
               "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
               "sliding_window": 128,
               "layer_types": ["sliding_attention", "full_attention"] * 12}  # fmt: skip


def test_config_kv_cache_bytes_of_interleaved_windows():
    """gpt-oss-20b: 12 layers keep 128 tokens, 12 keep all; head_dim 64 (not 2880 / 64)."""
    per_layer_token = 2 * 8 * 64 * 2
    for tokens in (0, 100, 128, 8192):
        kept = 12 * min(tokens, 128) + 12 * tokens
        assert memory.config_kv_cache_bytes(GPT_OSS_20B, tokens) == kept * per_layer_token
    assert memory.config_kv_cache_bytes(GPT_OSS_20B, 1000, 3, "fp8") == 3 * (
        12 * 128 + 12 * 1000) * 2 * 8 * 64  # fmt: skip


def test_config_kv_cache_bytes_defaults_as_transformers():
    """No num_key_value_heads: multi-head; no head_dim: hidden / heads; a window that
    use_sliding_window turns off is not used; one set without layer_types slides every layer.
    The presets' configs give the presets' caches."""
    llama1 = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}
    assert memory.config_kv_cache_bytes(llama1, 10) == 10 * 2 * 32 * 32 * 128 * 2
    qwen = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "sliding_window": 131072,
            "use_sliding_window": False}  # fmt: skip
    assert memory.config_kv_cache_bytes(qwen, 200_000) == memory.kv_cache_bytes(
        models.get("Qwen2.5-7B"), 200_000)  # fmt: skip
    mistral = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "sliding_window": 4096}  # fmt: skip
    assert memory.config_kv_cache_bytes(mistral, 9000, 2) == memory.kv_cache_bytes(
        models.get("Mistral-7B-v0.1"), 9000, 2)  # fmt: skip
    with pytest.raises(ValueError, match="layer_types names 2 layers, the model has 24"):
        memory.config_kv_cache_bytes({**GPT_OSS_20B, "layer_types": ["full_attention"] * 2}, 5)
    with pytest.raises(ValueError, match="needs sliding_window"):
        memory.config_kv_cache_bytes({**GPT_OSS_20B, "sliding_window": None}, 5)


def test_longest_context_inverts_the_capacity():
    """The longest context is the last one at which max_concurrent_sequences still fits the
    users; a window that fits makes any length fit; no room gives 0."""
    from helpers.counting import hardware

    h100 = hardware.get("H100 SXM").memory_bytes
    for name, users, weights, cache in (("Qwen2.5-7B", 32, "bf16", "bf16"),
                                        ("Llama-3.1-70B", 4, "int4", "fp8"),
                                        ("Llama-3.1-8B", 300, "bf16", "int8")):  # fmt: skip
        cfg = models.get(name)
        stored = memory.weight_bytes(cfg, weights)
        longest = memory.longest_context(cfg, h100, stored, users, 10**7, cache)
        assert 0 < longest < 10**7
        for context, fits in ((longest, True), (longest + 1, False)):
            got = memory.max_concurrent_sequences(cfg, h100, context, weights,
                                                  kv_dtype=cache)  # fmt: skip
            assert (got >= users) is fits
    mistral = models.get("Mistral-7B-v0.1")
    w = memory.weight_bytes(mistral)
    assert memory.longest_context(mistral, h100, w, 8, 32768) == 32768
    assert memory.longest_context(mistral, h100, w, 1000, 32768) < 4096
    llama70 = models.get("Llama-3.1-70B")
    assert memory.longest_context(llama70, h100, memory.weight_bytes(llama70), 1, 1024) == 0
    qwen = models.get("Qwen2.5-7B")
    assert memory.longest_context(qwen, h100, memory.weight_bytes(qwen), 1, 1000) == 1000


def _searched(sizes: list[int], free: float) -> int:
    """The longest context by brute force: the last c whose cache fits (0 if none does)."""
    return max((c for c, size in enumerate(sizes) if c and size <= free), default=0)


SMALL_CONFIGS = {  # tiny widths, so a few hundred tokens cross every boundary
    "mixed": {"hidden_size": 12, "num_hidden_layers": 5, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 3, "sliding_window": 7,
              "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                              "sliding_attention", "full_attention"]},
    "all sliding": {"hidden_size": 8, "num_hidden_layers": 3, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "head_dim": 5, "sliding_window": 11},
    "no window": {"hidden_size": 9, "num_hidden_layers": 2, "num_attention_heads": 3},
    "window turned off": {"hidden_size": 8, "num_hidden_layers": 3, "num_attention_heads": 4,
                          "num_key_value_heads": 1, "sliding_window": 4,
                          "use_sliding_window": False},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
@pytest.mark.parametrize("dtype", ["int4", "fp8", "bf16", "fp32"])
@pytest.mark.parametrize("users", [1, 3, 7])
def test_config_longest_context_is_the_search_it_replaces(name, dtype, users):
    """The closed form (the cache inverted piece by piece) gives what trying every context
    with config_kv_cache_bytes gives: inside the window, at it, past it, at the limit."""
    config, limit, weights = SMALL_CONFIGS[name], 60, 1000
    sizes = [memory.config_kv_cache_bytes(config, c, users, dtype) for c in range(limit + 1)]
    for free in (*range(-3, 400), *(size + d for size in sizes for d in (-1, 0, 1))):
        memory_bytes = weights + free
        if memory_bytes <= 0:
            continue
        got = memory.config_longest_context(config, memory_bytes, weights, users, limit, dtype)
        assert got == _searched(sizes, free), (free, got)


@pytest.mark.parametrize("dtype", ["int4", "int8", "bf16"])
def test_longest_context_is_the_search_it_replaces(dtype):
    """The preset form sizes caches as kv_cache_bytes does, κ whole per token: a latent
    cache of 5 values a token in int4 takes 3 bytes, not 2.5."""
    latent = ModelConfig(name="odd-latent", model_type="deepseek_v2", hidden=16,
                         intermediate=32, layers=1, n_q_heads=2, n_kv_heads=2, head_dim=8,
                         vocab=50, tied_embeddings=False, qkv_bias=False, kv_lora_rank=3,
                         qk_rope_head_dim=2, qk_nope_head_dim=6, v_head_dim=8)  # fmt: skip
    windowed = dataclasses.replace(models.get("Mistral-7B-v0.1"), sliding_window=9)
    for cfg, users in ((latent, 1), (latent, 4), (windowed, 2), (models.get("Qwen2.5-7B"), 3)):
        sizes = [memory.kv_cache_bytes(cfg, c, users, dtype) if c else 0 for c in range(41)]
        for free in sorted({*range(0, 60), *(s + d for s in sizes for d in (-1, 0, 1))}):
            if free < 0:
                continue
            got = memory.longest_context(cfg, 10**6 + free, 10**6, users, 40, dtype)
            assert got == _searched(sizes, free), (cfg.name, free, got)
    assert memory.kv_bytes_per_token(latent, "int4") == 3


def test_one_implementation_serves_presets_and_configs():
    """A preset and its config.json give the same context, window or none; a mixed model
    gets more than one κ of all its layers would give it, and the closed form answers at
    once however long the limit."""
    from helpers.counting import hardware

    h100 = hardware.get("H100 SXM").memory_bytes
    mistral = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "sliding_window": 4096}  # fmt: skip
    qwen = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "sliding_window": 131072,
            "use_sliding_window": False}  # fmt: skip
    for config, name in ((mistral, "Mistral-7B-v0.1"), (qwen, "Qwen2.5-7B")):
        cfg = models.get(name)
        for users, cache in ((8, "bf16"), (1000, "fp8"), (3, "int4")):
            args = (h100, memory.weight_bytes(cfg), users, 10**7, cache)
            assert memory.config_longest_context(config, *args) == memory.longest_context(
                cfg, *args)  # fmt: skip
    assert memory.config_longest_context(mistral, h100, 10**10, 8, 10**12) == 10**12
    one_kappa = (h100 - 10**10) // (64 * 24 * 2 * 8 * 64 * 2)
    longest = memory.config_longest_context(GPT_OSS_20B, h100, 10**10, 64, 10**12)
    assert longest > 1.9 * one_kappa
    assert memory.config_kv_cache_bytes(GPT_OSS_20B, longest, 64) <= h100 - 10**10
    assert memory.config_kv_cache_bytes(GPT_OSS_20B, longest + 1, 64) > h100 - 10**10


@pytest.mark.parametrize(
    "args, message",
    [((10**9, 0, 0, 100, "bf16"), "users must be a positive int"),
     ((10**9, 0, True, 100, "bf16"), "users must be a positive int"),
     ((10**9, 0, 2, 0, "bf16"), "max_context must be a positive int"),
     ((10**9, 0, 2, 10.0, "bf16"), "max_context must be a positive int"),
     ((0, 0, 2, 100, "bf16"), "memory_bytes must be positive"),
     ((10**9, -1, 2, 100, "bf16"), "weights must be >= 0"),
     ((10**9, 0, 2, 100, "fp6"), "dtype must be one of")],
)  # fmt: skip
def test_longest_context_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        memory.config_longest_context(GPT_OSS_20B, *args)
    with pytest.raises(ValueError, match=message):
        memory.longest_context(models.get("Mistral-7B-v0.1"), *args)


def test_config_longest_context_bad_config():
    args = (10**9, 0, 2, 100)
    with pytest.raises(ValueError, match="layer_types names 2 layers, the model has 24"):
        memory.config_longest_context({**GPT_OSS_20B, "layer_types": ["full_attention"] * 2},
                                      *args)  # fmt: skip
    with pytest.raises(ValueError, match="needs sliding_window"):
        memory.config_longest_context({**GPT_OSS_20B, "sliding_window": None}, *args)
    with pytest.raises(ValueError, match="a layer type must be one of"):
        memory.config_longest_context({**GPT_OSS_20B, "layer_types": ["local"] * 24}, *args)
    with pytest.raises(ValueError, match="sliding_window must be a positive int"):
        memory.config_longest_context({**GPT_OSS_20B, "sliding_window": 0}, *args)
    with pytest.raises(ValueError, match="head_dim must be a positive int"):
        memory.config_longest_context({**GPT_OSS_20B, "head_dim": None, "hidden_size": 32},
                                      *args)  # fmt: skip


def test_kv_dtype_or_is_the_one_default_of_the_cache_dtype():
    """``kv_dtype`` None means the weights' ``dtype``, in every signature that takes both."""
    assert memory.kv_dtype_or("bf16", None) == "bf16"
    assert memory.kv_dtype_or("int4", "fp8") == "fp8"
    with pytest.raises(ValueError, match="fp6"):
        memory.kv_dtype_or("bf16", "fp6")
    qwen, room = models.get("Qwen2.5-7B"), 80e9
    # The weights in dtype, the cache in kv_dtype: int4 weights leave more room than bf16 ones,
    # and an fp8 cache holds twice the tokens of a bf16 one.
    plain = memory.max_concurrent_sequences(qwen, room, 4096)
    assert memory.max_concurrent_sequences(qwen, room, 4096, "int4", kv_dtype="bf16") > plain
    free = room - memory.weight_bytes(qwen)
    assert memory.max_concurrent_sequences(qwen, room, 4096, kv_dtype="fp8") == int(
        free // (memory.kv_bytes_per_token(qwen, "fp8") * 4096))


def test_int4_checkpoint_bytes_is_what_awq_tensors_hold():
    """The tensors AutoAWQ's GEMM format stores for each nn.Linear of the layers (qweight
    [in, out/8] int32, scales [groups, out] fp16, qzeros [groups, out/8] int32), the rest of
    the model in bf16: their nbytes is the count (chapter 2's int4 checkpoint)."""
    import torch

    from helpers.decoder.model import Decoder

    cfg = ModelConfig(name="tiny-tied", model_type="qwen2", hidden=256, intermediate=704,
                      layers=4, n_q_heads=8, n_kv_heads=2, head_dim=32, vocab=1000,
                      tied_embeddings=True, qkv_bias=True)
    model = Decoder(cfg).to(dtype=torch.bfloat16)  # on the CPU: meta would untie the matrix
    linears = [linear for layer in model.layers
               for linear in (*layer.attention.children(), *layer.mlp.children())]
    packed = []
    for linear in linears:
        fan_out, fan_in = linear.weight.shape
        groups = -(-fan_in // 128)
        packed += [torch.empty(fan_in, fan_out // 8, dtype=torch.int32, device="meta"),
                   torch.empty(groups, fan_out, dtype=torch.float16, device="meta"),
                   torch.empty(groups, fan_out // 8, dtype=torch.int32, device="meta")]
    quantized = {id(linear.weight) for linear in linears}
    kept = [p for p in model.parameters() if id(p) not in quantized]
    assert sum(t.nbytes for t in packed + kept) == memory.int4_checkpoint_bytes(cfg, 128)
