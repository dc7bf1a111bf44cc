"""Chapter 10's formulas, with hand-worked numbers: the experts a batch reads (checked by
sampling a router), a MoE decode step's bytes and critical batch, KV bytes and capacity
across attention kinds and KV dtypes, decode attention's intensity, pipeline parallelism's
bubble, tensor parallelism's capacity, and what a token costs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helpers.counting import flops, hardware, latency, memory, models, roofline
from helpers.parallel import cost
from helpers.parallel import sharding as tp

H100 = hardware.get("H100 SXM")
LLAMA = models.get("Llama-3.1-8B")
MIXTRAL = models.get("Mixtral-8x7B")
QWEN_MOE = models.get("Qwen3-30B-A3B")
DEEPSEEK = models.get("DeepSeek-V3")
NVLINK = tp.link("NVLink 4")


# --- the experts a batch touches -------------------------------------------------------


def test_expected_experts_by_hand():
    # Mixtral: E = 8, k = 2. One token reads 2; two read 8(1 - (6/8)^2) = 3.5, not 4.
    assert memory.expected_experts(MIXTRAL, 1) == pytest.approx(2.0)
    assert memory.expected_experts(MIXTRAL, 2) == pytest.approx(3.5)
    assert memory.expected_experts(MIXTRAL, 4) == pytest.approx(8 * (1 - 0.75**4))
    # Qwen3-30B-A3B: E = 128, k = 8; 16 tokens reach 128(1 - (15/16)^16) = 82.42, not 128.
    assert memory.expected_experts(QWEN_MOE, 16) == pytest.approx(82.42, abs=0.01)
    assert memory.experts_read(QWEN_MOE, 16) == 128  # the balanced bound min(E, Bk)
    assert memory.expected_experts(QWEN_MOE, 0) == 0.0
    assert memory.expected_experts(LLAMA, 64) == 0.0  # dense: no routed experts


def test_expected_experts_with_a_skewed_router_by_hand():
    four = dataclasses.replace(MIXTRAL, n_experts=4, experts_per_token=1)
    # expert 0 takes 70% of the tokens: two tokens read 0.91 + 3 · 0.19 = 1.48 experts.
    assert memory.expected_experts(four, 2, [0.7, 0.1, 0.1, 0.1]) == pytest.approx(1.48)
    uniform = [0.25] * 4
    assert memory.expected_experts(four, 5, uniform) == pytest.approx(
        memory.expected_experts(four, 5))
    for bad in ([0.5, 0.5], [0.7, 0.7, 0.1, 0.1], [1.5, -0.5, 0.0, 0.0]):
        with pytest.raises(ValueError, match="load"):
            memory.expected_experts(four, 2, bad)


def _sampled_experts(n_experts, k, tokens, trials, rng, load=None):
    """Distinct experts B tokens reach, a router sampled ``trials`` times: each token picks
    k distinct experts, uniformly (the k smallest of E random keys) or, for k = 1, by load."""
    counts = []
    for _ in range(trials):
        if load is None:
            picks = np.argsort(rng.random((tokens, n_experts)), axis=1)[:, :k]
        else:
            picks = rng.choice(n_experts, size=(tokens, 1), p=load)
        counts.append(len(np.unique(picks)))
    return np.mean(counts), np.std(counts) / np.sqrt(trials)


@pytest.mark.parametrize("cfg, tokens", [(MIXTRAL, 1), (MIXTRAL, 3), (QWEN_MOE, 8),
                                         (QWEN_MOE, 64), (DEEPSEEK, 32)])  # fmt: skip
def test_expected_experts_equal_a_sampled_router(cfg, tokens):
    rng = np.random.default_rng(tokens)
    mean, error = _sampled_experts(cfg.n_experts, cfg.experts_per_token, tokens, 2000, rng)
    expected = memory.expected_experts(cfg, tokens)
    assert abs(mean - expected) <= 4 * error + 1e-9, (mean, expected, error)


def test_expected_experts_with_load_equal_a_sampled_router():
    rng = np.random.default_rng(0)
    load = np.array([0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05])
    cfg = dataclasses.replace(MIXTRAL, experts_per_token=1)
    mean, error = _sampled_experts(8, 1, 6, 4000, rng, load)
    assert abs(mean - memory.expected_experts(cfg, 6, load)) <= 4 * error


# --- a MoE decode step's bytes and its critical batch -----------------------------------


def test_moe_step_reads_the_expected_experts():
    f, d = MIXTRAL.expert_intermediate, MIXTRAL.hidden
    balanced = memory.forward_bytes(MIXTRAL, 1, 100, batch=2, logits="last")
    expected = memory.forward_bytes(MIXTRAL, 1, 100, batch=2, logits="last",
                                    experts=memory.expected_experts(MIXTRAL, 2))  # fmt: skip
    # 4 experts a layer under min(E, Bk), 3.5 in expectation: half an expert's 3·d·f bf16
    # weights less in each of the 32 layers, and nothing else changes.
    assert balanced["experts"] - expected["experts"] == 32 * round(0.5 * 3 * d * f * 2)
    assert {k: v for k, v in balanced.items() if k != "experts"} == {
        k: v for k, v in expected.items() if k != "experts"}
    with pytest.raises(ValueError, match="experts"):
        memory.forward_bytes(MIXTRAL, 1, experts=9)


@pytest.mark.parametrize("cfg", [MIXTRAL, DEEPSEEK])
def test_moe_critical_batch_is_total_over_active_times_the_dense_one(cfg):
    dense = roofline.critical_batch_moe(cfg, H100, routing="dense")
    uniform = roofline.critical_batch_moe(cfg, H100)
    ratio = flops.param_count(cfg) / flops.active_param_count(cfg)
    # by B* every expert is read: bytes follow all the weights, FLOPs the active ones
    assert uniform == pytest.approx(dense * ratio, rel=0.05)
    assert memory.expected_experts(cfg, uniform) > 0.999 * cfg.n_experts
    assert roofline.critical_batch_moe(cfg, H100, routing="balanced") <= uniform
    # a dense model of the same active size sits near the dense models' B* (about the ridge)
    assert dense == pytest.approx(roofline.critical_batch_split(LLAMA, H100), rel=0.25)


def test_moe_critical_batch_refuses_a_dense_model_and_a_bad_routing():
    with pytest.raises(ValueError, match="mixture of experts"):
        roofline.critical_batch_moe(LLAMA, H100)
    with pytest.raises(ValueError, match="routing"):
        roofline.critical_batch_moe(MIXTRAL, H100, routing="random")


# --- KV bytes and capacity: attention kinds and KV dtypes --------------------------------


def test_kv_bytes_per_token_across_attention_kinds():
    mha = dataclasses.replace(LLAMA, n_kv_heads=32)
    mqa = dataclasses.replace(LLAMA, n_kv_heads=1)
    # 2 (K, V) · 32 layers · kv heads · 128 · 2 bytes
    assert memory.kv_bytes_per_token(mha) == 524_288
    assert memory.kv_bytes_per_token(LLAMA) == 131_072  # GQA, 8 KV heads
    assert memory.kv_bytes_per_token(mqa) == 16_384
    assert memory.kv_bytes_per_token(LLAMA, "fp8") == memory.kv_bytes_per_token(LLAMA, "int8")
    assert memory.kv_bytes_per_token(LLAMA, "fp8") == 65_536
    # MLA: 61 layers · (512 + 64) values, whatever the 128 heads
    assert memory.kv_bytes_per_token(DEEPSEEK) == 61 * 576 * 2 == 70_272
    assert memory.kv_bytes_per_token(DEEPSEEK, "fp8") == 35_136
    # a sliding window caps the tokens kept, not the bytes a token holds
    mistral = models.get("Mistral-7B-v0.1")
    assert memory.kv_cache_bytes(mistral, 32_768) == 4096 * 131_072


def test_llama_8b_at_4k_on_an_h100_fits_130_sequences_in_bf16_and_260_in_fp8():
    weights = memory.weight_bytes(LLAMA)
    assert weights == 16_060_522_496
    free = 80 * 2**30 - weights
    assert memory.max_concurrent_sequences(LLAMA, H100.memory_bytes, 4096) == (
        free // (131_072 * 4096)) == 130  # fmt: skip
    for kv in ("fp8", "int8"):
        assert memory.max_concurrent_sequences(LLAMA, H100.memory_bytes, 4096,
                                               kv_dtype=kv) == 260  # fmt: skip


def test_forward_bytes_count_an_fp8_cache_at_its_size():
    same = memory.forward_bytes(LLAMA, 1, 4096, logits="last")
    assert memory.forward_bytes(LLAMA, 1, 4096, logits="last", kv_dtype="bf16") == same
    fp8 = memory.forward_bytes(LLAMA, 1, 4096, logits="last", kv_dtype="fp8")
    # per layer: q and output 2 · 4096 values in bf16; 4097 cached tokens read and one
    # written, 2 · 1024 values each, in fp8
    assert fp8["attention"] == 32 * (2 * 4096 * 2 + (4097 + 1) * 2048 * 1)
    assert same["attention"] == 32 * (2 * 4096 + (4097 + 1) * 2048) * 2
    assert {k: v for k, v in fp8.items() if k != "attention"} == {
        k: v for k, v in same.items() if k != "attention"}
    split = roofline.decode_split(LLAMA, H100, 1, 4096, kv_dtype="fp8")
    assert split["attention"].bytes_moved == fp8["attention"]


def test_decode_attention_intensity_by_hand():
    # FLOPs per key 4 · 32 layers · 32 heads · 128 = 524,288 over 131,072 B: the group, 4
    assert roofline.decode_attention_intensity(LLAMA) == pytest.approx(4.0)
    assert roofline.decode_attention_intensity(LLAMA, "fp8") == pytest.approx(8.0)
    assert roofline.decode_attention_intensity(
        dataclasses.replace(LLAMA, n_kv_heads=32)) == pytest.approx(1.0)
    # MLA absorbed: 2 · 128 heads · (576 + 512) per layer over 576 · 2 bytes = 241.8 FLOP/B
    assert roofline.decode_attention_intensity(DEEPSEEK) == pytest.approx(278_528 / 1152)
    assert 240 < roofline.decode_attention_intensity(DEEPSEEK) < H100.ridge() < 300


# --- tensor parallelism's capacity, pipeline parallelism -------------------------------


def test_tp_max_sequences_is_one_chips_share():
    assert tp.tp_max_sequences(LLAMA, H100, 1, 4096) == 130
    shard = tp.shard_config(LLAMA, 2)
    free = 80 * 2**30 - memory.weight_bytes(shard)
    assert tp.tp_max_sequences(LLAMA, H100, 2, 4096) == free // (65_536 * 4096) == 286
    assert tp.tp_max_sequences(LLAMA, H100, 2, 4096, kv_dtype="fp8") == free // (32_768 * 4096)
    # Llama-3.1-70B does not fit on one H100 in bf16; two hold 19 sequences of 4k
    assert tp.tp_max_sequences(models.get("Llama-3.1-70B"), H100, 1, 4096) == 0


def test_tp_tpot_with_an_fp8_cache_reads_half_the_kv():
    bf16 = tp.tp_decode_step(LLAMA, H100, NVLINK, 2, 8, 8192)
    fp8 = tp.tp_decode_step(LLAMA, H100, NVLINK, 2, 8, 8192, kv_dtype="fp8")
    assert fp8["weights"] == bf16["weights"] and fp8["all_reduce"] == bf16["all_reduce"]
    assert fp8["attention"] == pytest.approx(bf16["attention"] / 2, rel=0.01)


def test_pipeline_bubble_by_hand():
    assert tp.pipeline_bubble(4, 1) == 0.75  # one micro-batch keeps one of four stages busy
    assert tp.pipeline_bubble(4, 2) == 0.5
    assert tp.pipeline_bubble(4, 4) == tp.pipeline_bubble(4, 8) == 0.0
    assert tp.pipeline_bubble(4, 4, "prefill") == pytest.approx(3 / 7)  # GPipe's (P-1)/(m+P-1)
    assert tp.pipeline_bubble(1, 1, "prefill") == 0.0
    with pytest.raises(ValueError, match="phase"):
        tp.pipeline_bubble(2, 2, "train")


def test_pp_decode_by_hand():
    one = tp.pp_decode(LLAMA, H100, NVLINK, 1, 16, 1, 4096)
    assert one["tpot"] == pytest.approx(latency.decode_step_time(LLAMA, H100, 16, 4096))
    assert one["bubble"] == 0.0
    four = tp.pp_decode(LLAMA, H100, NVLINK, 4, 16, 4, 4096)
    send = NVLINK.base_latency + 4 * 4096 * 2 / NVLINK.bandwidth
    assert four["tpot"] == pytest.approx(latency.decode_step_time(LLAMA, H100, 4, 4096)
                                         + 4 * send)  # fmt: skip
    # a pipeline never beats one chip's TPOT for one stream: latency is tensor parallelism's
    single = tp.pp_decode(LLAMA, H100, NVLINK, 4, 1, 1, 4096)
    assert single["tpot"] > latency.decode_step_time(LLAMA, H100, 1, 4096)
    assert single["bubble"] == 0.75
    assert tp.tp_tpot(LLAMA, H100, NVLINK, 4, 4096) < latency.decode_step_time(LLAMA, H100, 1,
                                                                                4096)
    with pytest.raises(ValueError, match="divide"):
        tp.pp_decode(LLAMA, H100, NVLINK, 3, 16, 4, 4096)


# --- what a token costs -------------------------------------------------------------------


def test_dollars_per_million_by_hand():
    # 8 chips at $2 an hour make $16/3600 per second; 1,000 tokens/s: $4.44 per million
    assert cost.dollars_per_million(2.0, 8, 1000.0) == pytest.approx(16 / 3600 / 1000 * 1e6)
    for bad in (0, -1.0, True):
        with pytest.raises(ValueError, match="price"):
            cost.dollars_per_million(bad, 1, 1.0)


def test_token_costs_are_linear_in_the_price_and_output_costs_more():
    costs = {price: cost.token_costs(LLAMA, H100, NVLINK, 1, price, batch=64, context=4096,
                                     prompt_tokens=2048)
             for price in (1.0, 3.0)}  # fmt: skip
    assert costs[3.0]["input"] == pytest.approx(3 * costs[1.0]["input"])
    assert costs[3.0]["ratio"] == pytest.approx(costs[1.0]["ratio"])
    prefill = tp.tp_ttft(LLAMA, H100, NVLINK, 1, 2048)
    assert costs[1.0]["input"] == pytest.approx(1 / 3600 / (2048 / prefill) * 1e6)
    step = tp.tp_tpot(LLAMA, H100, NVLINK, 1, 4096, 64)
    assert costs[1.0]["output"] == pytest.approx(1 / 3600 / (64 / step) * 1e6)
    assert costs[1.0]["ratio"] > 5


@pytest.mark.parametrize("slo, kv", [(0.02, None), (0.05, None), (0.02, "fp8")])
def test_cheapest_degree_equals_a_search_of_every_batch(slo, kv):
    best = cost.cheapest_degree(LLAMA, H100, NVLINK, 4096, slo, 2.0, 4, kv_dtype=kv)
    found = []
    for ranks in tp.degrees(LLAMA, 4):
        cap = tp.tp_max_sequences(LLAMA, H100, ranks, 4096, kv_dtype=kv)
        ok = [b for b in range(1, cap + 1)
              if tp.tp_tpot(LLAMA, H100, NVLINK, ranks, 4096, b, kv_dtype=kv) <= slo]
        if ok:
            b = max(ok)
            rate = b / tp.tp_tpot(LLAMA, H100, NVLINK, ranks, 4096, b, kv_dtype=kv)
            found.append((cost.dollars_per_million(2.0, ranks, rate), ranks, b))
    price, ranks, batch = min(found)
    assert (best["ranks"], best["batch"]) == (ranks, batch)
    assert best["dollars_per_million"] == pytest.approx(price)
    assert best["tpot"] <= slo


def test_cheapest_degree_none_when_nothing_meets_the_slo():
    assert cost.cheapest_degree(LLAMA, H100, NVLINK, 4096, 1e-4, 2.0) is None
    seventy = models.get("Llama-3.1-70B")
    # it does not fit on one chip, so at least two
    assert cost.cheapest_degree(seventy, H100, NVLINK, 4096, 0.05, 2.0)["ranks"] >= 2


# --- one chip's attention with the heads split; the hop latency past which T stops paying --


def test_attention_per_chip_gqa_shrinks_to_n_kv_then_copies():
    llama70 = models.get("Llama-3.1-70B")  # 64 query heads, 8 key/value heads, 80 layers
    for t in (1, 2, 4, 8):
        chip = tp.attention_per_chip(llama70, t)
        assert chip["kv_bytes_per_token"] == memory.kv_bytes_per_token(llama70) // t
        assert chip["intensity"] == pytest.approx(8.0)  # the group, whatever T
    for t in (16, 32):  # past n_kv: one copied head, n_q/T query heads reading it
        chip = tp.attention_per_chip(llama70, t)
        assert chip["kv_bytes_per_token"] == 2 * 80 * 128 * 2
        assert chip["intensity"] == pytest.approx(64 / t)


def test_attention_per_chip_needs_t_to_divide_n_kv_or_be_a_multiple_of_it():
    qwen7 = models.get("Qwen2.5-7B")  # 28 query heads, 4 key/value heads
    assert tp.attention_per_chip(qwen7, 2)["kv_bytes_per_token"] == memory.kv_bytes_per_token(
        qwen7) // 2
    with pytest.raises(ValueError, match="n_kv_heads=4 is not divisible by T=7"):
        tp.attention_per_chip(qwen7, 7)  # 7 divides 28, yet neither divides nor is a multiple of 4


def test_attention_per_chip_mla_keeps_the_latent_and_divides_the_intensity():
    ds = models.get("DeepSeek-V3")
    whole = roofline.decode_attention_intensity(ds)
    for t in (1, 2, 8, 32):
        chip = tp.attention_per_chip(ds, t, "fp8")
        assert chip["kv_bytes_per_token"] == memory.kv_bytes_per_token(ds, "fp8")
        assert chip["intensity"] == pytest.approx(2 * whole / t)  # fp8: half the bytes
    with pytest.raises(ValueError, match="does not divide"):
        tp.attention_per_chip(ds, 3)


@pytest.mark.parametrize("low, high, batch", [(1, 2, 1), (2, 4, 1), (4, 8, 1), (2, 8, 64)])
def test_break_even_hop_latency_makes_the_two_tpots_equal(low, high, batch):
    llama70, h100, nvlink = models.get("Llama-3.1-70B"), hardware.get("H100 SXM"), tp.link(
        "NVLink 4")
    hop = tp.break_even_hop_latency(llama70, h100, nvlink, 4096, batch, low, high)
    assert hop > 0
    at = dataclasses.replace(nvlink, hop_latency=hop)
    assert tp.tp_tpot(llama70, h100, at, high, 4096, batch) == pytest.approx(
        tp.tp_tpot(llama70, h100, at, low, 4096, batch), rel=1e-9)
    slower = dataclasses.replace(nvlink, hop_latency=1.01 * hop)
    assert tp.tp_tpot(llama70, h100, slower, high, 4096, batch) > tp.tp_tpot(
        llama70, h100, slower, low, 4096, batch)


def test_break_even_hop_latency_is_zero_where_the_wider_group_never_pays():
    small, h100 = models.get("Qwen2.5-0.5B"), hardware.get("H100 SXM")
    assert tp.break_even_hop_latency(small, h100, tp.link("NVLink 4"), 512, 1, 1, 2) == 0.0
    with pytest.raises(ValueError, match="low < high"):
        tp.break_even_hop_latency(small, h100, tp.link("NVLink 4"), 512, 1, 2, 2)
