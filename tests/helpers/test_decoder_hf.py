"""helpers.decoder against transformers' Qwen2, Mistral and Llama given the same weights.

Each model is built from a config dict with random weights (nothing is downloaded); ours and
theirs run the same prompt, then ≥ 6 cached decode steps, in fp32. "Equal" means the largest
logit difference is within 1e-4 of the largest logit: a relative error on the logits' scale.
"""

import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from helpers.counting import flops
from helpers.counting.models import ModelConfig
from helpers.decoder.kv_cache import KVCache
from helpers.decoder.masks import left_pad
from helpers.decoder.model import Decoder, random_decoder

REL = 1e-4
DECODE_STEPS = 6

QWEN2 = {  # tied, q/k/v biases, Qwen2.5's θ = 1e6 and ε = 1e-6
    "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 101,
    "tie_word_embeddings": True, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
}
MISTRAL = {  # untied, GQA, ε = 1e-5, a 4-token window shorter than the 11-token sequence
    "model_type": "mistral", "hidden_size": 64, "intermediate_size": 112,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
    "vocab_size": 97, "tie_word_embeddings": False, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5, "sliding_window": 4,
}
LLAMA = {  # multi-head attention, explicit head_dim, Llama-3.1's rope_scaling with its bands
    # moved inside this head_dim's wavelengths (6 … 20,000 tokens) so that they matter
    "model_type": "llama", "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
    "num_attention_heads": 3, "num_key_value_heads": 3, "head_dim": 16, "vocab_size": 89,
    "tie_word_embeddings": False, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
}  # fmt: skip
CONFIGS = {"qwen2-tied-bias": QWEN2, "mistral-gqa-window": MISTRAL, "llama-mha-scaled": LLAMA}
HF_CLASSES = {"qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
              "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
              "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}  # fmt: skip


def ours_from(config: dict, seed: int = 0) -> Decoder:
    """Our decoder with random weights everywhere, norms and biases included. Embeddings
    are small (std 0.02, transformers' init), so that ε is not negligible beside the
    activations' mean square, as in trained models' first layers."""
    torch.manual_seed(seed)
    model = Decoder(ModelConfig.from_hf_config(config)).eval()
    with torch.no_grad():
        model.embed.weight.normal_(0.0, 0.02)
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.2 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.copy_(0.5 * torch.randn_like(param))
    return model


def theirs_from(config: dict, ours: Decoder) -> torch.nn.Module:
    """transformers' model of the same config, holding a copy of our weights."""
    config_class, model_class = HF_CLASSES[config["model_type"]]
    hf_config = config_class(**{k: v for k, v in config.items() if k != "model_type"},
                             attn_implementation="eager")  # fmt: skip
    theirs = model_class(hf_config).eval()
    pairs = [(theirs.model.embed_tokens, ours.embed), (theirs.model.norm, ours.norm),
             (theirs.lm_head, ours.lm_head)]  # fmt: skip
    for hf_layer, layer in zip(theirs.model.layers, ours.layers, strict=True):
        attn, mlp = hf_layer.self_attn, hf_layer.mlp
        pairs += [(hf_layer.input_layernorm, layer.attention_norm),
                  (hf_layer.post_attention_layernorm, layer.mlp_norm),
                  (attn.q_proj, layer.attention.q), (attn.k_proj, layer.attention.k),
                  (attn.v_proj, layer.attention.v), (attn.o_proj, layer.attention.o),
                  (mlp.gate_proj, layer.mlp.gate), (mlp.up_proj, layer.mlp.up),
                  (mlp.down_proj, layer.mlp.down)]  # fmt: skip
    with torch.no_grad():
        for hf_module, module in pairs:
            hf_params, params = dict(hf_module.named_parameters()), dict(module.named_parameters())
            assert hf_params.keys() == params.keys(), (hf_module, hf_params.keys(), params.keys())
            for key, value in params.items():
                hf_params[key].copy_(value)
    if config["tie_word_embeddings"]:
        assert theirs.lm_head.weight.data_ptr() == theirs.model.embed_tokens.weight.data_ptr()
    return theirs


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def run_both(config: dict, ours: Decoder, prompt: int = 5, batch: int = 2):
    """Prefill then DECODE_STEPS cached steps in both: (our logits, their logits) per step."""
    theirs = theirs_from(config, ours)
    ids = torch.randint(0, config["vocab_size"], (batch, prompt + DECODE_STEPS))
    pairs = []
    with torch.no_grad():
        logits, cache = ours(ids[:, :prompt], max_tokens=ids.shape[1])
        out = theirs(input_ids=ids[:, :prompt], use_cache=True)
        pairs.append((logits, out.logits))
        past = out.past_key_values
        for t in range(prompt, ids.shape[1]):
            logits, cache = ours(ids[:, t : t + 1], cache)
            out = theirs(input_ids=ids[:, t : t + 1], cache=past, use_cache=True)
            past = out.past_key_values
            pairs.append((logits, out.logits))
    return pairs


@pytest.mark.parametrize("name", CONFIGS)
def test_prefill_and_cached_decode_match_transformers(name):
    pairs = run_both(CONFIGS[name], ours_from(CONFIGS[name]))
    assert len(pairs) == 1 + DECODE_STEPS
    for step, (ours, theirs) in enumerate(pairs):
        assert ours.shape == theirs.shape
        error = relative_error(ours, theirs)
        assert error < REL, f"{name}, step {step}: relative error {error:.2e}"


@pytest.mark.parametrize(
    "name, wrong",
    [
        ("qwen2-tied-bias", {"rope_theta": 10000.0}),
        ("mistral-gqa-window", {"rms_norm_eps": 1e-6}),
        ("mistral-gqa-window", {"sliding_window": None}),
        ("llama-mha-scaled", {"rope_scaling": None}),
    ],
)
def test_the_comparison_sees_a_wrong_theta_eps_window_or_scaling(name, wrong):
    """Each config value matters: our model built without it disagrees with transformers."""
    config = CONFIGS[name]
    right = ours_from(config)
    mistaken = Decoder(ModelConfig.from_hf_config({**config, **wrong})).eval()
    mistaken.load_state_dict(right.state_dict())
    pairs = run_both(config, mistaken)
    assert max(relative_error(ours, theirs) for ours, theirs in pairs) > 100 * REL


def test_greedy_generation_matches_a_transformers_greedy_loop():
    config = MISTRAL
    ours = ours_from(config, seed=3)
    theirs = theirs_from(config, ours)
    prompt = torch.randint(0, config["vocab_size"], (2, 6))
    tokens = ours.generate(prompt, 8)
    with torch.no_grad():
        ids = prompt
        for _ in range(8):  # full recompute each step: no cache on their side
            ids = torch.cat((ids, theirs(input_ids=ids).logits[:, -1:].argmax(-1)), dim=1)
    assert tokens.dtype == torch.long and tokens.shape == (2, 8)
    assert torch.equal(tokens, ids[:, 6:])


@pytest.mark.parametrize("name", ["qwen2-tied-bias", "mistral-gqa-window"])
def test_batched_ragged_prompts_equal_each_prompt_alone(name):
    config = CONFIGS[name]
    ours = ours_from(config, seed=1)
    theirs = theirs_from(config, ours)
    prompts = [torch.randint(0, config["vocab_size"], (n,)).tolist() for n in (5, 2, 7)]
    ids, lengths = left_pad(prompts, pad_id=0)
    assert ids.shape == (3, 7) and lengths.tolist() == [5, 2, 7]
    tokens = ours.generate(ids, DECODE_STEPS, lengths=lengths)
    with torch.no_grad():
        logits, cache = ours(ids, logits="last", lengths=lengths)
        nxt = torch.randint(0, config["vocab_size"], (3, 1))
        step, _ = ours(nxt, cache, logits="last")
        for row, prompt in enumerate(prompts):
            alone = torch.tensor([prompt])
            hf = theirs(input_ids=alone, use_cache=True)
            assert relative_error(logits[row], hf.logits[0, -1:]) < REL
            hf_step = theirs(input_ids=nxt[row : row + 1], cache=hf.past_key_values)
            assert relative_error(step[row], hf_step.logits[0]) < REL
            assert torch.equal(tokens[row], ours.generate(alone, DECODE_STEPS)[0])


def test_cache_is_preallocated_and_written_in_place():
    ours = ours_from(QWEN2)
    ids = torch.randint(0, QWEN2["vocab_size"], (2, 12))
    cache = ours.new_cache(2, 12)
    pointers = [k.data_ptr() for k in cache.keys]
    with torch.no_grad():
        full, _ = ours(ids)
        _, cache = ours(ids[:, :4], cache)
        for t in range(4, 12):
            before = cache
            logits, cache = ours(ids[:, t : t + 1], cache)
            assert before.tokens == t and cache.tokens == t + 1  # the old handle is unchanged
    assert [k.data_ptr() for k in cache.keys] == pointers and cache.capacity == 12
    assert cache[0][0].shape == (2, 2, 12, 16)
    assert relative_error(logits[:, -1], full[:, -1]) < REL


def test_full_cache_grows_by_doubling_and_legacy_lists_are_accepted():
    ours = ours_from(QWEN2)
    ids = torch.randint(0, QWEN2["vocab_size"], (1, 9))
    with torch.no_grad():
        full, _ = ours(ids)
        _, cache = ours(ids[:, :5])  # capacity 5: the first decode step reallocates
        assert cache.capacity == 5
        _, grown = ours(ids[:, 5:6], cache)
        assert grown.capacity == 10 and cache.tokens == 5 and grown.tokens == 6
        legacy = [(k.clone(), v.clone()) for k, v in grown]  # the pre-KVCache format
        logits, after = ours(ids[:, 6:9], legacy)
    assert isinstance(after, KVCache) and after.tokens == 9
    assert relative_error(logits, full[:, 6:9]) < REL


def test_sliding_window_decode_reads_only_the_window():
    """On meta: a decode step past the window costs what a step with window − 1 cached
    tokens costs, and no more; below the window it grows with the context."""
    cfg = ModelConfig.from_hf_config({**MISTRAL, "sliding_window": 16})
    with torch.device("meta"):
        model = Decoder(cfg)
    ids = torch.zeros(1, 1, dtype=torch.long, device="meta")

    def step_flops(context: int) -> int:
        cache = KVCache.allocate(cfg, 1, context + 1, device="meta")
        cache.tokens = context
        counter = FlopCounterMode(display=False)
        with counter:
            model(ids, cache)
        return counter.get_total_flops()

    assert step_flops(10) == flops.forward_flops(cfg, 1, context=10).total
    capped = flops.forward_flops(cfg, 1, context=15).total
    assert step_flops(15) == step_flops(40) == step_flops(1000) == capped


def test_bf16_runs_and_stays_near_fp32():
    ours = ours_from(LLAMA)
    ids = torch.randint(0, LLAMA["vocab_size"], (2, 10))
    with torch.no_grad():
        reference, _ = ours(ids)
        half = ours.to(torch.bfloat16)
        logits, cache = half(ids[:, :7], max_tokens=10)
        steps = [logits]
        for t in range(7, 10):
            logits, cache = half(ids[:, t : t + 1], cache)
            steps.append(logits)
    got = torch.cat(steps, dim=1)
    assert got.dtype == torch.bfloat16 and cache.keys[0].dtype == torch.bfloat16
    assert relative_error(got.float(), reference) < 3e-2  # bf16 keeps ~3 significant digits


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m(torch.zeros(2, 3)), "ids must be a torch.long tensor"),
        (lambda m: m(torch.zeros(3, dtype=torch.long)), r"ids must be .* got torch.int64 \(3,\)"),
        (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), "ids has no tokens"),
        (lambda m: m(torch.zeros(2, 3, dtype=torch.long), lengths=torch.tensor([3, 4])),
         r"lengths must hold 2 prompt lengths in 1 … 3"),
        (lambda m: m(torch.zeros(2, 1, dtype=torch.long), m.new_cache(3, 4)),
         "ids have batch 2"),
        (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), 0),
         "new_tokens must be a positive int, got 0"),
        (lambda m: m.new_cache(1, 0), "capacity must be a positive int, got 0"),
        (lambda m: m(torch.zeros(1, 1, dtype=torch.long), logits="first"),
         "logits must be 'all' or 'last'"),
        (lambda m: left_pad([[1, 2], []]), "no empty prompt"),
        (lambda m: Decoder(ModelConfig.from_hf_config({**QWEN2, "head_dim": 15})),
         "head_dim=15 must be even for RoPE"),
    ],
)
def test_bad_input_raises_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call(ours_from(QWEN2))


def test_random_decoder_is_random_tied_and_on_the_asked_dtype():
    cfg = ModelConfig.from_hf_config(QWEN2)
    model = random_decoder(cfg, dtype=torch.bfloat16, scale=0.1)
    assert model.lm_head.weight is model.embed.weight and not model.training
    weight = model.layers[0].mlp.up.weight
    assert weight.dtype == torch.bfloat16 and weight.abs().max() <= 0.1
    assert (weight != 0).float().mean() > 0.99 and weight.std() > 0.05  # not zeros
    assert torch.equal(model.norm.weight, torch.ones_like(model.norm.weight))
    assert sum(p.numel() for p in model.parameters()) == flops.param_count(cfg)
    with pytest.raises(ValueError, match="scale must be > 0"):
        random_decoder(cfg, scale=0)
