"""Tensor parallelism (chapter 10): the ring and roofline arithmetic (helpers.parallel.sharding)
worked by hand, and the sharded decoder (helpers.parallel.distributed) run over two gloo
processes against the unsharded one (helpers.parallel.tp_bench, chapter 10's experiment).
Three launches in all (spawning costs seconds each): one run whose logits and timings several
tests read, one with an injected failure, one timed out."""

import dataclasses
import multiprocessing

import pytest
import torch

from helpers.counting import hardware, latency, memory, models
from helpers.parallel import distributed, sharding, tp_bench
from helpers.parallel.sharding import Link

LLAMA_70B = models.get("Llama-3.1-70B")
H100 = hardware.get("H100 SXM")
NVLINK = sharding.link("NVLink 4")

# Small enough to run in a blink; q/k/v biases and tied embeddings on, so every slice and the
# tie are exercised; 4 query heads on 2 KV heads (GQA) split 2 ways.
TINY = models.ModelConfig(name="tiny", model_type="qwen2", hidden=64, intermediate=96,
                          layers=2, n_q_heads=4, n_kv_heads=2, head_dim=16, vocab=101,
                          tied_embeddings=True, qkv_bias=True)  # fmt: skip


# --- the arithmetic, worked by hand -------------------------------------------------------


def test_shard_config_splits_heads_and_intermediate():
    part = sharding.shard_config(LLAMA_70B, 8)
    assert (part.n_q_heads, part.n_kv_heads, part.intermediate) == (8, 1, 3584)
    assert (part.hidden, part.layers, part.vocab, part.head_dim) == (8192, 80, 128256, 128)
    assert sharding.shard_config(LLAMA_70B, 1) is LLAMA_70B
    assert sharding.degrees(LLAMA_70B, 16) == [1, 2, 4, 8]  # 8 KV heads cap T at 8
    # Past T = 8, vLLM's way: each chip keeps a copy of the one KV head its 4 query heads use.
    part = sharding.shard_config(LLAMA_70B, 16, replicate_kv=True)
    assert (part.n_q_heads, part.n_kv_heads, part.intermediate) == (4, 1, 1792)
    assert sharding.degrees(LLAMA_70B, 64, replicate_kv=True) == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(ValueError, match="n_kv_heads=8 is not divisible by T=16"):
        sharding.shard_config(LLAMA_70B, 16)


@pytest.mark.parametrize(("field", "value"), [("n_kv_heads", 3), ("intermediate", 97)])
def test_shard_config_refuses_indivisible(field, value):
    heads = {"n_q_heads": 6, "n_kv_heads": 3} if field == "n_kv_heads" else {}
    cfg = models.ModelConfig(**{**TINY.__dict__, **heads, field: value})
    with pytest.raises(ValueError, match=f"{field}={value} is not divisible by T=2"):
        sharding.shard_config(cfg, 2)
    with pytest.raises(ValueError, match="not divisible"):  # refused before any process starts
        distributed.run_tensor_parallel(cfg, 2, torch.zeros(1, 2, dtype=torch.long),
                                     torch.zeros(1, 1, dtype=torch.long))  # fmt: skip
    assert multiprocessing.active_children() == []


def test_allreduce_bytes_llama_70b_decode():
    # One token's hidden vector of 8192 bf16 values, twice a layer over 80 layers.
    assert sharding.allreduce_bytes(LLAMA_70B, 1) == 16_384
    assert sharding.step_allreduce_bytes(LLAMA_70B, 1) == 2_621_440
    # Prefill of a batch of 4 prompts of 512 tokens, in fp32.
    assert sharding.allreduce_bytes(LLAMA_70B, 4 * 512, "fp32") == 2048 * 8192 * 4


def test_ring_allreduce_seconds_by_hand():
    # T = 4: each chip sends 2·3/4 = 1.5 of the bytes: 1.5 GB at 100 GB/s is 15 ms,
    # plus 2·3 = 6 hops of 1 µs and 5 µs once.
    assert sharding.ring_allreduce_seconds(1e9, 4, 100e9) == pytest.approx(0.015)
    assert sharding.ring_allreduce_seconds(1e9, 4, 100e9, 1e-6, 5e-6) == pytest.approx(
        0.015 + 11e-6)
    assert sharding.ring_allreduce_seconds(1e9, 1, 100e9, 1e-6, 5e-6) == 0.0
    with pytest.raises(ValueError):
        sharding.ring_allreduce_seconds(1e9, 2, 0.0)


def test_step_allreduce_seconds_llama_70b_tp8_nvlink():
    # 6.6 µs + 14 hops × 0.6 µs + 14/8 × 16,384 B / 450 GB/s = 15.0637 µs, 160 times a token.
    one = 6.6e-6 + 14 * 0.6e-6 + 14 / 8 * 16_384 / 450e9
    assert one == pytest.approx(15.0637e-6, rel=1e-5)
    assert sharding.step_allreduce_seconds(LLAMA_70B, NVLINK, 8, 1) == pytest.approx(
        160 * one)


def test_tp_decode_step_by_hand():
    # hidden 4, intermediate 8, 2 heads of 2 (2 KV heads), vocab 10, one layer, bf16, T = 2:
    # each chip's q, k, v and o are 4×2 / 2×4, gate/up/down 4×4, the LM head 4×10 whole.
    cfg = models.ModelConfig(name="toy", model_type="llama", hidden=4, intermediate=8,
                             layers=1, n_q_heads=2, n_kv_heads=2, head_dim=2, vocab=10,
                             tied_embeddings=False, qkv_bias=False)  # fmt: skip
    ideal = Link("ideal", 1e9, 0.0, 0.0, "test")
    parts = sharding.tp_decode_step(cfg, H100, ideal, 2, batch=1, context=0)
    # Weights: 2·(k + kn + n) bytes a matmul of one token: q, k, v, o 28 each, gate, up and
    # down 48 each, the LM head 108, the embedding row 8: 372 B. Attention: q and the output
    # (2 + 2), one cached K and V (2 + 2) read, K and V (2 + 2) written: 12 values, 24 B.
    assert parts["weights"] == pytest.approx(372 / 3.35e12)
    assert parts["attention"] == pytest.approx(24 / 3.35e12)
    # Two all-reduces of 4 bf16 values (8 B), each sending 2·1/2 × 8 B at 1 GB/s.
    assert parts["all_reduce"] == pytest.approx(2 * 8 / 1e9)
    assert sharding.tp_tpot(cfg, H100, ideal, 2, 0) == pytest.approx(sum(parts.values()))


def test_one_chip_is_the_single_chip_roofline():
    assert sharding.tp_tpot(LLAMA_70B, H100, NVLINK, 1, 1024) == pytest.approx(
        latency.tpot(LLAMA_70B, H100, 1024))
    assert sharding.tp_ttft(LLAMA_70B, H100, NVLINK, 1, 512) == pytest.approx(
        latency.ttft(LLAMA_70B, H100, 512))


def test_best_degree_is_where_more_chips_stop_helping():
    free = Link("free", 1e30, 0.0, 0.0, "test")
    slow = Link("slow", 1e6, 1e-3, 0.0, "test")
    # With free all-reduces the weights' read keeps falling: use every chip allowed.
    assert sharding.best_degree(LLAMA_70B, H100, free, 1024, max_ranks=8) == 8
    # With a millisecond a hop, 160 all-reduces a token outweigh any saving.
    assert sharding.best_degree(LLAMA_70B, H100, slow, 1024, max_ranks=8) == 1
    best = sharding.best_degree(LLAMA_70B, H100, NVLINK, 1024, max_ranks=8)
    tpots = {t: sharding.tp_tpot(LLAMA_70B, H100, NVLINK, t, 1024) for t in (1, 2, 4, 8)}
    assert tpots[best] == min(tpots.values())


def test_fit_ring_recovers_a_known_link():
    # T = 2: each rank sends 2·1/2 = 1 × n; 20 µs a call, 1 GB/s.
    sizes = [1e3, 1e4, 1e5, 1e6]
    fitted = sharding.fit_ring(sizes, [20e-6 + n / 1e9 for n in sizes], 2)
    assert fitted.bandwidth == pytest.approx(1e9)
    assert fitted.hop_latency == pytest.approx(10e-6)  # 20 µs over 2(T − 1) = 2 hops
    with pytest.raises(ValueError, match="two distinct sizes"):
        sharding.fit_ring([1e3, 1e3], [1e-5, 2e-5], 2)


# --- the sharded decoder, in this process ---------------------------------------------------


def test_shards_partition_the_weights():
    model = distributed.reference_decoder(TINY)
    shards = [distributed.shard_decoder(model, rank, 2) for rank in range(2)]
    full, halves = model.layers[1], [s.layers[1] for s in shards]
    for name in ("q", "k", "v"):
        glued = torch.cat([getattr(h.attention, name).weight for h in halves])
        assert torch.equal(glued, getattr(full.attention, name).weight)
        glued = torch.cat([getattr(h.attention, name).bias for h in halves])
        assert torch.equal(glued, getattr(full.attention, name).bias)
    glued = torch.cat([h.attention.o.linear.weight for h in halves], dim=1)
    assert torch.equal(glued, full.attention.o.weight)
    glued = torch.cat([h.mlp.down.linear.weight for h in halves], dim=1)
    assert torch.equal(glued, full.mlp.down.weight)
    for shard in shards:  # replicated, and the LM head still tied to the embedding
        assert torch.equal(shard.embed.weight, model.embed.weight)
        assert shard.lm_head.weight is shard.embed.weight
    with pytest.raises(ValueError, match="rank must be in 0 … 1"):
        distributed.shard_decoder(model, 2, 2)


def test_one_rank_shard_is_the_decoder():
    model = distributed.reference_decoder(TINY)
    shard = distributed.shard_decoder(model, 0, 1)
    ids = torch.randint(0, TINY.vocab, (2, 5), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        assert torch.equal(shard(ids)[0], model(ids)[0])


# --- the sharded decoder over two processes -------------------------------------------------


@pytest.fixture(scope="module")
def bench():
    """One launch: T = 2 over gloo, lone all-reduces timed, a prefill and 3 decode steps.
    The largest all-reduce is 64 MiB so that its transfer, not a busy host's scheduling
    delays (pytest's workers share the cores with both ranks), sets the fit's slope."""
    return tp_bench.benchmark(TINY, ranks=2, batch=2, prompt_tokens=7, steps=3, warmup=1,
                            sizes=(1 << 12, 1 << 26), timeout=60)  # fmt: skip


def test_sharded_logits_equal_the_unsharded(bench):
    run = bench.run
    assert (run.ranks, run.backend) == (2, "gloo")
    model = distributed.reference_decoder(TINY)
    with torch.inference_mode():
        logits, cache = model(run.prompt, max_tokens=10)
        steps = []
        for column in range(run.decode.shape[1]):
            out, cache = model(run.decode[:, column : column + 1], cache)
            steps.append(out)
    assert run.logits.shape == (2, 7, TINY.vocab)
    assert run.decode_logits.shape == (2, 3, TINY.vocab)
    # The shards compute the same products; only o's and down's sums over their inputs are
    # split in two and added by the all-reduce: a reordering of float32 sums, which moves a
    # result by about a unit in the last place (these logits are below 2, where an ulp is
    # 2.4e-7; the sums here differ by one ulp). 1e-6 allows four ulps and nothing more: a
    # wrong slice or a missing all-reduce moves the logits by a hundred times that.
    torch.testing.assert_close(run.logits, logits, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(run.decode_logits, torch.cat(steps, dim=1), rtol=1e-6,
                               atol=1e-6)  # fmt: skip
    assert run.logits.abs().max() < 2
    assert not torch.equal(run.logits, torch.zeros_like(run.logits))
    # the record's own comparison, made in benchmark's process on the same ids
    assert bench.logit_gap == max((run.logits - logits).abs().max().item(),
                                  (run.decode_logits - torch.cat(steps, dim=1)).abs().max().item())
    assert bench.logit_scale == logits.abs().max().item()


def test_timings_hold_the_allreduces(bench):
    run = bench.run
    for rank in range(2):
        assert len(run.step_seconds[rank]) == len(run.allreduce_seconds[rank]) == 3
        for step, reduce in zip(run.step_seconds[rank], run.allreduce_seconds[rank],
                                strict=True):  # fmt: skip
            assert 0 < reduce < step  # the all-reduces are timed inside the step
        assert 0 < run.prefill_allreduce_seconds[rank] < run.prefill_seconds[rank]
    calls = run.allreduce_calls
    assert [[len(step) for step in rank] for rank in calls] == [[2 * TINY.layers] * 3] * 2
    assert [[sum(step) for step in rank] for rank in calls] == run.allreduce_seconds
    # The exchange is, call by call, the least time over the ranks: step by step at most
    # rank 0's all-reduce time, so its median is at most rank 0's median too.
    assert 0 < bench.exchange <= bench.allreduce
    assert 0 < bench.exchange_share <= bench.share
    # The sizes asked for, and the decode step's own message (batch 2 × hidden in float32),
    # timed alone and fitted with them.
    assert bench.message == 2 * TINY.hidden * 4
    assert set(run.allreduce_times) == {1 << 12, 1 << 26, bench.message}
    assert bench.lone_allreduce == run.allreduce_times[bench.message] > 0
    assert bench.link.bandwidth > 0 and bench.link.hop_latency >= 0
    assert bench.predicted_allreduce == pytest.approx(
        sharding.step_allreduce_seconds(TINY, bench.link, 2, 2, "fp32"))
    assert bench.predicted_share == pytest.approx(bench.predicted_allreduce / bench.step)
    assert 0 < bench.share < 1 and bench.single_step > 0
    assert multiprocessing.active_children() == []


def test_what_the_lone_calls_bound_worked_by_hand(bench):
    # Lone medians out of size order: the 4 KiB call slower than the 8 KiB one. The message
    # is 1 KiB; a larger message costs no less, so the least call at or above it, 8 KiB's
    # 100 µs, bounds it. With a 1 GB/s ring over T = 2 (2 hops, each moving half the bytes),
    # the message's transfer is 2/2 · 1,024 B / 1e9 B/s = 1.024 µs, so a hop is at most
    # (100 - 1.024) / 2 = 49.488 µs.
    times = {1024: 150e-6, 4096: 120e-6, 8192: 100e-6, 1 << 20: 1.2e-3}
    made = dataclasses.replace(
        bench, message=1024, link=Link("made", 1e9, 10e-6, 0.0, "by hand"),
        run=dataclasses.replace(bench.run, allreduce_times=times))
    assert (made.calls, made.hops) == (2 * TINY.layers, 2)
    assert (made.bound_size, made.bound_call) == (8192, 100e-6)
    assert made.out_of_order == [(1024, 4096), (4096, 8192)]
    assert made.transfer == pytest.approx(1.024e-6)
    assert made.hop_at_most == pytest.approx(49.488e-6)
    assert made.fitted_at_message == pytest.approx(2 * 10e-6 + 1.024e-6)
    assert made.exchange_ratio == pytest.approx(bench.exchange / (2 * TINY.layers * 100e-6))
    report = made.report()
    assert "out of size order" in report and "1,024 B took 150.0 µs, 4,096 B 120.0 µs" in report
    assert "t_hop <= (100 µs - 1.0 µs moving 1,024 B) / 2 = 49 µs" in report
    assert "falls short of a small message" in report  # 21 µs fitted against the bound's 100
    assert made.order_noise == pytest.approx(0.25)  # 150 µs against 120 µs
    # 110 µs fitted against the bound's 100: a 10% miss, within the 25% noise of the medians
    near_fit = dataclasses.replace(made, link=Link("made", 1e9, 54.488e-6, 0.0, "by hand"))
    assert near_fit.fitted_at_message == pytest.approx(110e-6)
    assert ("about meets (within the 25% the out-of-order medians show) a small message"
            in near_fit.report())
    rising = dataclasses.replace(made, run=dataclasses.replace(
        bench.run, allreduce_times={1024: 50e-6, 8192: 60e-6}))
    assert rising.out_of_order == [] and rising.bound_size == 1024
    assert "the medians rise with the size" in rising.report()
    # the ideal speed-up: the weights over one rank's, the tied embedding whole on each
    part = sharding.shard_config(TINY, 2)
    assert bench.ideal == memory.weight_bytes(TINY, "fp32") / memory.weight_bytes(part, "fp32")
    assert 1 < bench.ideal < 2 and bench.speedup == bench.single_step / bench.step
    # The verdict: a speed-up only past both steps' spreads (notches apart and a gap past
    # both IQRs, ``verdicts.slower_beyond_spread``), a slowdown likewise. Nine sharded steps
    # around 11.35 ms with an IQR of 2.1 ms against unsharded ones around 11.36 ms: no verdict.
    def made_steps(sharded, single):
        steps = [list(sharded), *bench.run.step_seconds[1:]]
        run = dataclasses.replace(bench.run, step_seconds=steps)
        return dataclasses.replace(bench, run=run, single_samples=tuple(single))

    wide = [9.5e-3, 9.9e-3, 10.4e-3, 11.0e-3, 11.35e-3, 11.7e-3, 12.5e-3, 13.2e-3, 13.6e-3]
    single = [11.1e-3, 11.15e-3, 11.2e-3, 11.3e-3, 11.36e-3, 11.4e-3, 11.5e-3, 11.6e-3, 11.7e-3]
    near = made_steps(wide, single)
    assert (near.step, near.single_step) == (11.35e-3, 11.36e-3)
    assert near.step_iqr == pytest.approx(2.1e-3) and near.single_step_iqr == pytest.approx(0.3e-3)
    assert near.verdict == "showed no difference beyond the spread"
    assert ("sharding showed no difference beyond the spread here (medians 0.01 ms apart, within "
            "the larger IQR, 2.10 ms): 1.00x") in near.report()
    faster = made_steps([t - 4.35e-3 for t in single], single)
    slower = made_steps([t + 4.65e-3 for t in single], single)
    assert (faster.verdict, slower.verdict) == ("paid", "did not pay")
    assert "sharding paid here (medians 4.35 ms apart, past both IQRs and both notches)" in (
        faster.report())
    # a gap past both IQRs whose notches still overlap (three samples each) is no verdict
    few = made_steps([11.0e-3, 11.35e-3, 13.6e-3], [8.0e-3, 8.5e-3, 8.6e-3])
    assert few.step - few.single_step > max(few.step_iqr, few.single_step_iqr)
    assert few.verdict == "showed no difference beyond the spread"
    assert "past both IQRs, but their notches overlap: too few steps to tell" in few.report()


def test_a_failing_rank_is_reported_and_nothing_is_left():
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(distributed.RankError) as caught:
        distributed.run_tensor_parallel(TINY, 2, ids, ids, fail_rank=1, timeout=60)
    assert list(caught.value.failures) == [1]
    message = str(caught.value)
    assert "rank 1" in message and "Traceback" in message
    assert "RuntimeError: failure injected on rank 1" in message
    # Rank 0 was left waiting for its peer: it was killed and joined, not left hanging.
    assert multiprocessing.active_children() == []


def test_a_silent_rank_times_out_and_is_killed():
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(distributed.RankError, match="no report within 0.2 s") as caught:
        distributed.run_tensor_parallel(TINY, 2, ids, ids, timeout=0.2)  # less than a spawn
    assert list(caught.value.failures) == [0, 1]
    assert multiprocessing.active_children() == []


# --- chapter 10's exercises in plain torch: attention split by heads, a MoE layer ----------


def _attention_inputs(tokens, d, n_q, n_kv, head_dim, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = ((tokens, d), (n_q * head_dim, d), (n_kv * head_dim, d), (n_kv * head_dim, d),
              (d, n_q * head_dim))  # fmt: skip
    return [torch.randn(*shape, generator=generator, dtype=torch.float64) for shape in shapes]


@pytest.mark.parametrize("n_q, n_kv, ranks, held", [
    (4, 2, 2, [[0], [1]]), (8, 2, 4, [[0], [0], [1], [1]]), (12, 4, 2, [[0, 1], [2, 3]]),
    (4, 4, 1, [[0, 1, 2, 3]])])
def test_attention_partials_sum_to_the_layer(n_q, n_kv, ranks, held):
    x, wq, wk, wv, wo = _attention_inputs(5, 16, n_q, n_kv, 4)
    partials, kv = distributed.attention_partials(x, wq, wk, wv, wo, n_q, n_kv, ranks)
    assert kv == held and len(partials) == ranks
    # the whole layer, by torch's own attention with grouped heads and a causal mask
    q = (x @ wq.T).view(5, n_q, 4).transpose(0, 1)
    k, v = ((x @ w.T).view(5, n_kv, 4).transpose(0, 1) for w in (wk, wv))
    out = torch.nn.functional.scaled_dot_product_attention(
        q[None], k[None], v[None], is_causal=True, enable_gqa=n_q != n_kv)[0]
    layer = out.transpose(0, 1).reshape(5, n_q * 4) @ wo.T
    torch.testing.assert_close(sum(partials[1:], partials[0]), layer, rtol=1e-10, atol=1e-10)


def test_moe_layer_by_hand():
    # two experts, each the identity's SwiGLU on a 1-wide model, router picking expert 1
    x = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    router = torch.tensor([[0.0], [1.0]], dtype=torch.float64)  # logits 0 and x
    gate = torch.ones(2, 1, 1, dtype=torch.float64)
    up = torch.tensor([[[1.0]], [[2.0]]], dtype=torch.float64)
    down = torch.ones(2, 1, 1, dtype=torch.float64)
    out, rows = distributed.moe_layer(x, router, gate, up, down, 1)
    assert rows == {1: 2}  # both tokens' largest logit is expert 1's
    silu = torch.nn.functional.silu
    torch.testing.assert_close(out, silu(x) * 2 * x)  # weight 1: the softmax of one logit
    out, rows = distributed.moe_layer(x, router, gate, up, down, 2)
    assert rows == {0: 2, 1: 2}
    weights = torch.softmax(torch.cat([torch.zeros_like(x), x], dim=1), dim=1)
    torch.testing.assert_close(out, weights[:, :1] * silu(x) * x + weights[:, 1:] * silu(x) * 2 * x)
