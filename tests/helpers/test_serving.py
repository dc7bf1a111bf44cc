"""Serving simulators: schedules worked by hand, the roofline step model, KV memory, spec."""

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import serving
from helpers.counting import hardware, latency, memory, models, roofline
from helpers.serving import KVMemory, LinearSteps, Request, Step, simulate
from helpers.serving.spec import spec_expected_tokens

QWEN = models.get("Qwen2.5-7B")
H100 = hardware.get("H100 SXM")
ROOMY = KVMemory(100_000)


def recorded(model):
    """A step model that also keeps every Step it was asked to time."""
    log = []

    def timed(step):
        log.append(step)
        return model(step)

    return timed, log


def assert_token_times(result):
    """Each request emits its output's tokens, in time order, from its first token to its
    last; the steps' token counts add up to every output token."""
    for times, n, first, last in zip(result.token_times, result.output, result.first_token,
                                     result.finish, strict=True):  # fmt: skip
        assert len(times) == n and times[0] == first and times[-1] == last
        assert (np.diff(times) > 0).all()
    assert result.step_tokens.sum() == result.output.sum()
    assert len(result.itl) == result.output.sum() - len(result.output)


# ------------------------------------------------------------------ schedules by hand


def test_one_request_by_hand():
    # Prompt 4, output 3, step = 1 + 0.1·tokens. Step 0 prefills 4 tokens: 1.4 s, first
    # token at 1.4. Steps 1 and 2 decode one token each: 1.1 s, tokens at 2.5 and 3.6.
    # TTFT 1.4, e2e 3.6, TPOT (3.6 − 1.4)/2 = 1.1.
    result = simulate([Request(0.0, 4, 3)], LinearSteps(1.0, 0.1), ROOMY)
    assert result.ttft == pytest.approx([1.4])
    assert result.e2e == pytest.approx([3.6])
    assert result.tpot == pytest.approx([1.1])
    assert result.steps == 3


def test_continuous_vs_static_by_hand():
    # Each step costs 1 s. A: t = 0, prompt 2, 4 tokens; B: t = 0.5, prompt 2, 2 tokens.
    # Continuous: step 0 [0, 1] prefills A (token 1 at 1). B joins at step 1 [1, 2]: its
    # prefill runs beside A's decode, B's first token at 2 (TTFT 1.5); step 2 ends B at 3
    # (e2e 2.5); step 3 ends A at 4. 6 tokens over 4 s = 1.5 tok/s.
    # Static: A's batch (B had not arrived) runs steps 0-3 to t = 4; only then B's batch:
    # first token at 5 (TTFT 4.5), done at 6 (e2e 5.5). 6 tokens over 6 s = 1 tok/s.
    trace = [Request(0.0, 2, 4), Request(0.5, 2, 2)]
    steps = LinearSteps(1.0, 0.0)
    continuous = simulate(trace, steps, ROOMY, "continuous")
    static = simulate(trace, steps, ROOMY, "static")
    assert continuous.ttft == pytest.approx([1.0, 1.5])
    assert continuous.e2e == pytest.approx([4.0, 2.5])
    assert continuous.throughput == pytest.approx(1.5)
    assert static.ttft == pytest.approx([1.0, 4.5])
    assert static.e2e == pytest.approx([4.0, 5.5])
    assert static.throughput == pytest.approx(1.0)
    assert continuous.tpot == pytest.approx([1.0, 1.0]) and static.tpot == pytest.approx([1, 1])


def test_chunked_prefill_bounds_the_decode_stall_by_hand():
    # Step = 1 + tokens. A: t = 0, prompt 1, 5 tokens; B: t = 2.5, prompt 8, 1 token.
    # Continuous: [0, 2] A's prefill; [2, 4] A decodes (B not there yet); at 4 B's whole
    # prompt rides with A's decode: 1 + 9 = 10 s, to 14 (B's TTFT 11.5); then 2 s steps to
    # 16 and 18. A's gaps between tokens: 2, 10, 2, 2.
    # Chunked, budget 4 (decode first, then 3 prompt tokens): [4, 9] B[0:3], [9, 14] B[3:6]
    # (attending to the 3 cached), [14, 18] B[6:8] + A: gaps 2, 5, 5, 4; B's TTFT 15.5.
    # A's e2e is 18 either way, TPOT (18 − 2)/4 = 4: chunking bounds the stall, not the mean.
    trace = [Request(0.0, 1, 5), Request(2.5, 8, 1)]
    plain, plain_log = recorded(LinearSteps(1.0, 1.0))
    chunked, chunked_log = recorded(LinearSteps(1.0, 1.0))
    one = simulate(trace, plain, ROOMY, "continuous", max_batch=2)
    two = simulate(trace, chunked, ROOMY, "chunked", max_batch=2, token_budget=4)
    assert plain_log == [
        Step(((1, 0),), 0, 0, 1), Step((), 1, 1, 1), Step(((8, 0),), 1, 2, 2),
        Step((), 1, 3, 1), Step((), 1, 4, 1),
    ]  # fmt: skip
    assert chunked_log == [
        Step(((1, 0),), 0, 0, 1), Step((), 1, 1, 1), Step(((3, 0),), 1, 2, 1),
        Step(((3, 3),), 1, 3, 1), Step(((2, 6),), 1, 4, 2),
    ]  # fmt: skip
    assert one.ttft == pytest.approx([2.0, 11.5]) and two.ttft == pytest.approx([2.0, 15.5])
    assert one.e2e[0] == two.e2e[0] == pytest.approx(18.0)
    assert one.tpot[0] == two.tpot[0] == pytest.approx(4.0)
    assert max(map(LinearSteps(1.0, 1.0), plain_log)) == 10
    assert max(map(LinearSteps(1.0, 1.0), chunked_log)) == 5


def test_reservation_caps_concurrency_where_paging_does_not_by_hand():
    # 10 KV slots, 1 s steps. A: prompt 3, 3 tokens; B: prompt 2, 3 tokens; both at t = 0.
    # Oracle reservation: A takes 3 + 3 = 6, B would need 5 > 4 left, so B waits for A to
    # end at 3: B's tokens at 4, 5, 6. Paged, blocks of 2 (5 blocks): A takes 2 blocks, B 1;
    # step 1 B writes its 3rd token into a new block (3), step 2 A its 5th (5 blocks, full):
    # both run together and end at 3.
    trace = [Request(0.0, 3, 3), Request(0.0, 2, 3)]
    reserve = simulate(trace, LinearSteps(1.0, 0.0), KVMemory(10, "reserve"))
    paged = simulate(trace, LinearSteps(1.0, 0.0), KVMemory(10, "paged", block_size=2))
    assert reserve.ttft == pytest.approx([1.0, 4.0]) and reserve.e2e == pytest.approx([3, 6])
    assert paged.ttft == pytest.approx([1.0, 1.0]) and paged.e2e == pytest.approx([3, 3])
    assert reserve.max_running == 1 and paged.max_running == 2


@pytest.mark.parametrize("prompt, output, reserved", [
    (100, 25, 132),  # the vLLM paper's example: an output of 25 tokens reserves 32
    (100, 32, 132),  # a power of two already: no rounding
    (7, 1, 8),
    (1000, 33, 1064),  # the total, 1033, would round to 2048
])  # fmt: skip
def test_pow2_reservation_rounds_the_output_and_adds_the_prompt(prompt, output, reserved):
    # vLLM (SOSP 2023) sec. 6.1: Orca (Pow2) over-reserves the space for outputs by at most
    # 2x; the prompt's length is known and reserved as it is.
    request = Request(0.0, prompt, output)
    got = KVMemory(4096, "reserve", reservation="pow2").reserved(request)
    assert got == reserved
    assert prompt + output <= got < prompt + 2 * output


def test_preemption_and_recompute_by_hand():
    # 6 slots in blocks of 2 (3 blocks). A and B: prompt 2, 4 tokens, t = 0; 1 s steps.
    # Step 0 prefills both (1 block each; 1 free). Step 1: both hold 2 tokens and need a new
    # block for the 3rd, only 1 is free: B, the latest admitted, is preempted (its block
    # freed, 2 free, A takes 1). B must now recompute prompt + its 1 token = 3 tokens (2
    # blocks) and waits. A: tokens at 2, 3, 4 (step 3 takes the last block); done at 4, its
    # 3 blocks freed. Step 4 re-prefills B's 3 tokens: token 2 at 5; then 6 and 7.
    trace = [Request(0.0, 2, 4), Request(0.0, 2, 4)]
    steps, log = recorded(LinearSteps(1.0, 0.0))
    result = simulate(trace, steps, KVMemory(6, "paged", block_size=2))
    assert result.preemptions == 1
    assert result.ttft == pytest.approx([1.0, 1.0])
    assert result.e2e == pytest.approx([4.0, 7.0])
    assert log[4] == Step(((3, 0),), 0, 0, 1)
    assert [step.decode for step in log] == [0, 1, 1, 1, 0, 1, 1]


def test_prefix_reuse_at_block_granularity_by_hand():
    # Blocks of 4, step = 1 s per token. A: t = 0, prompt 10 whose first 8 are prefix 0;
    # B: t = 5, prompt 9 with the same 8. A prefills 10 tokens, done at 10, and leaves its 2
    # full prefix blocks cached. B then reuses all 8 and prefills 1 token against them:
    # done at 11, TTFT 6 (without the cache: 9 tokens, TTFT 14).
    trace = [Request(0.0, 10, 1, 0, 8), Request(5.0, 9, 1, 0, 8)]
    steps, log = recorded(LinearSteps(0.0, 1.0))
    cached = simulate(trace, steps, KVMemory(1000, block_size=4, prefix_caching=True))
    plain = simulate(trace, LinearSteps(0.0, 1.0), KVMemory(1000, block_size=4))
    assert log[1] == Step(((1, 8),), 0, 0, 1)
    assert cached.ttft == pytest.approx([10.0, 6.0]) and cached.prefix_hit_tokens == 8
    assert plain.ttft == pytest.approx([10.0, 14.0]) and plain.prefix_hit_tokens == 0
    # A prompt that is all prefix still computes its last token: 8 tokens reuse only 4.
    whole = [Request(0.0, 10, 1, 0, 8), Request(5.0, 8, 1, 0, 8)]
    steps, log = recorded(LinearSteps(0.0, 1.0))
    simulate(whole, steps, KVMemory(1000, block_size=4, prefix_caching=True))
    assert log[1] == Step(((4, 4),), 0, 0, 1)


def test_disaggregation_by_hand():
    # 1 s steps on both engines; the link takes 0.5 s per request, one at a time.
    # A: prompt 4, 3 tokens; B: prompt 4, 2 tokens; t = 0. The prefill engine does both in
    # [0, 1] (TTFT 1 each). Link: A [1, 1.5], B [1.5, 2]. Decode engine: A alone in
    # [1.5, 2.5] (token 2); B joins at 2.5; [2.5, 3.5] ends both (e2e 3.5).
    # TPOT: A (3.5 − 1)/2 = 1.25, B (3.5 − 1)/1 = 2.5.
    trace = [Request(0.0, 4, 3), Request(0.0, 4, 2)]
    result = serving.simulate_disaggregated(
        trace, LinearSteps(1.0, 0.0), LinearSteps(1.0, 0.0), ROOMY, ROOMY, lambda n: 0.5
    )
    assert result.ttft == pytest.approx([1.0, 1.0])
    assert result.e2e == pytest.approx([3.5, 3.5])
    assert result.tpot == pytest.approx([1.25, 2.5])
    assert list(result.extra["transfer_seconds"]) == [0.5, 0.5]


def test_pools_of_engines_by_hand():
    # Step = 1 s per token. Colocated: A and B (prompt 2, 2 tokens, t = 0) on one engine
    # share steps of 4 then 2 tokens: done at 6; on two engines each runs alone, 2 + 1 s:
    # done at 3. Disaggregated, prefill 1 s a token, decode 1 s a step, 0.5 s links:
    # one prefill engine does both prompts (8 tokens) by 8, links them A [8, 8.5],
    # B [8.5, 9], and the decode engine ends A at 9.5 and B (joining at 9.5) at 10.5.
    # Two prefill engines (one each, own link): first tokens at 4, both caches there at
    # 4.5, both done at 5.5.
    pair = [Request(0.0, 2, 2), Request(0.0, 2, 2)]
    per_token = LinearSteps(0.0, 1.0)
    assert simulate(pair, per_token, ROOMY).e2e == pytest.approx([6.0, 6.0])
    two = simulate(pair, per_token, ROOMY, engines=2)
    assert two.e2e == pytest.approx([3.0, 3.0]) and len(two.extra["engines"]) == 2
    long_pair = [Request(0.0, 4, 2), Request(0.0, 4, 2)]
    runs = [serving.simulate_disaggregated(long_pair, per_token, LinearSteps(1.0, 0.0), ROOMY,
                                           ROOMY, lambda n: 0.5, prefill_engines=engines)
            for engines in (1, 2)]  # fmt: skip
    assert runs[0].ttft == pytest.approx([8.0, 8.0])
    assert runs[0].e2e == pytest.approx([9.5, 10.5])
    assert runs[1].ttft == pytest.approx([4.0, 4.0])
    assert runs[1].e2e == pytest.approx([5.5, 5.5])
    assert len(runs[1].extra["prefill"]) == 2 and len(runs[1].extra["decode"]) == 1


def test_token_times_itl_and_a_steady_window_by_hand():
    # The continuous run worked above: A's tokens at 1, 2, 3, 4; B's at 2, 3. ITL: A's gaps
    # 1, 1, 1 and B's 1. Steps end at 1, 2, 3, 4 emitting 1, 2, 2, 1 tokens.
    trace = [Request(0.0, 2, 4), Request(0.5, 2, 2)]
    result = simulate(trace, LinearSteps(1.0, 0.0), ROOMY)
    assert [list(times) for times in result.token_times] == [[1, 2, 3, 4], [2, 3]]
    assert list(result.itl) == [1, 1, 1, 1]
    assert list(result.step_ends) == [1, 2, 3, 4] and list(result.step_tokens) == [1, 2, 2, 1]
    # Ten requests 1 s apart, each prompt 1 and 3 tokens, 1 s steps: request k's tokens at
    # k + 1, k + 2, k + 3. A 10% warm-up drops the first and the last: the window runs from
    # request 1's arrival (1 s) to request 8's (8 s), and the steps ending in (1, 8] emitted
    # 2 + 3·6 = 20 tokens: 20 / 7 tokens/s, where the whole run's makespan gives 30 / 12.
    trace = [Request(float(k), 1, 3) for k in range(10)]
    whole = simulate(trace, LinearSteps(1.0, 0.0), ROOMY)
    steady = whole.steady(0.1)
    assert whole.throughput == pytest.approx(30 / 12)
    assert list(steady.arrival) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert steady.window == (1.0, 8.0)
    assert steady.throughput == pytest.approx(20 / 7)
    assert steady.goodput(10.0, 10.0) == pytest.approx(8 / 7)
    assert len(steady.token_times) == 8 and list(steady.token_times[0]) == [2, 3, 4]
    with pytest.raises(ValueError, match="warmup must be in"):
        whole.steady(0.5)


def test_attainment_standard_error_is_by_batch_means():
    # 20 requests in arrival order, the first 10 meeting the SLO and the last 10 not: two
    # batches of 10 have attainments 1 and 0, so SE = std([1, 0], ddof=1) / √2 = 0.5; the
    # binomial formula would say √(0.25 / 20) = 0.11.
    trace = [Request(float(k), 1, 1) for k in range(20)]
    result = simulate(trace, LinearSteps(1.0, 0.0), ROOMY)
    slo = 1.0
    slow = replace(result, first_token=result.first_token + (np.arange(20) >= 10) * 5.0)
    assert slow.attainment(slo, 1.0) == 0.5
    assert slow.attainment_se(slo, 1.0, batches=2) == pytest.approx(0.5)
    assert slow.attainment_se(slo, 1.0, batches=5) == pytest.approx(
        np.std([1, 1, 0.5, 0, 0], ddof=1) / np.sqrt(5))  # groups of 4: the third is split
    with pytest.raises(ValueError, match="too few for 10 batch means"):
        simulate(trace[:5], LinearSteps(1.0, 0.0), ROOMY).attainment_se(slo, 1.0)


def test_goodput_and_attainment():
    # From the static run worked above: TTFT 1 and 4.5, TPOT 1 and 1, makespan 6 s.
    trace = [Request(0.0, 2, 4), Request(0.5, 2, 2)]
    static = simulate(trace, LinearSteps(1.0, 0.0), ROOMY, "static")
    assert static.attainment(ttft_slo=2.0, tpot_slo=1.0) == 0.5
    assert static.goodput(ttft_slo=2.0, tpot_slo=1.0) == pytest.approx(1 / 6)
    assert static.attainment(ttft_slo=5.0, tpot_slo=0.5) == 0.0
    one_token = simulate([Request(0.0, 2, 1)], LinearSteps(1.0, 0.0), ROOMY)
    assert math.isnan(one_token.tpot[0]) and one_token.attainment(1.0, 0.0) == 1.0


def test_max_rate_under_slo_is_where_attainment_drops():
    # 16-token prompts, 8 output tokens, step = 10 ms + 1 ms per token: one engine serves
    # about 40 requests/s; past that queues grow and TTFT breaks a 100 ms SLO.
    def run_at(rate):
        trace = serving.poisson_trace(300, rate, 16, 8, seed=2, lengths="fixed")
        return simulate(trace, LinearSteps(0.01, 0.001), ROOMY)

    rates = [5.0, 10.0, 20.0, 40.0, 80.0, 160.0]
    best = serving.max_rate_under_slo(run_at, rates, ttft_slo=0.1, tpot_slo=0.05)
    assert best in rates[:-1]
    assert run_at(best).attainment(0.1, 0.05) >= 0.9
    assert run_at(rates[rates.index(best) + 1]).attainment(0.1, 0.05) < 0.9
    assert serving.max_rate_under_slo(run_at, rates, ttft_slo=0.001, tpot_slo=0.05) == 0.0
    with pytest.raises(ValueError, match="rates must be a non-empty increasing sequence"):
        serving.max_rate_under_slo(run_at, [2.0, 1.0], 0.1, 0.05)


# ------------------------------------------------------------------ step-time models


def test_roofline_decode_step_matches_latency_decode_step_time():
    model = serving.RooflineSteps(QWEN, H100)
    for batch, context in ((1, 1), (8, 1024), (256, 4000)):
        step = Step((), batch, batch * context, batch)
        assert model(step) == pytest.approx(
            latency.decode_step_time(QWEN, H100, batch, context), rel=1e-12
        )


def test_roofline_long_prompt_matches_latency_prefill_time():
    # Both parts of a 4096-token prefill are compute-bound, so split or not, it is F/peak.
    model = serving.RooflineSteps(QWEN, H100)
    expected = latency.prefill_time(QWEN, H100, 4096)
    assert expected.bound == "compute"
    assert model(Step(((4096, 0),), 0, 0, 1)) == pytest.approx(expected.seconds, rel=1e-12)


def test_roofline_mixed_step_is_the_sum_of_its_three_parts():
    # Counted directly: the linears over 300 + 200 + 5 tokens with the LM head on 6 rows
    # (5 decodes, 1 completed prompt); the two chunks' causal attention; the decodes'
    # attention at context 1000 each. Each part on the roofline; the times add.
    from helpers.counting.flops import forward_flops, matmul_flops

    def attn(ops):
        return ops["attn_scores"] + ops["attn_values"]

    ops = forward_flops(QWEN, 505, logits="last").by_op
    traffic = memory.forward_bytes(QWEN, 505, logits="last")
    linear_flops = sum(ops.values()) - attn(ops) - ops["lm_head"] + matmul_flops(6, 3584, 152064)
    linear_bytes = (sum(traffic.values()) - traffic["attention"] - traffic["lm_head"]
                    + memory.linear_bytes(6, 3584, 152064))  # fmt: skip
    chunk_flops = sum(attn(forward_flops(QWEN, t, context=c, attention="causal").by_op)
                      for t, c in ((300, 0), (200, 700)))  # fmt: skip
    chunk_bytes = sum(memory.forward_bytes(QWEN, t, context=c)["attention"]
                      for t, c in ((300, 0), (200, 700)))  # fmt: skip
    decode_flops = attn(forward_flops(QWEN, 1, context=1000, batch=5).by_op)
    decode_bytes = memory.forward_bytes(QWEN, 1, context=1000, batch=5)["attention"]
    expected = sum(
        roofline.roofline_time(f, m, H100).seconds
        for f, m in ((linear_flops, linear_bytes), (chunk_flops, chunk_bytes),
                     (decode_flops, decode_bytes))
    )  # fmt: skip
    step = Step(((300, 0), (200, 700)), 5, 5000, 6)
    assert serving.RooflineSteps(QWEN, H100)(step) == pytest.approx(expected, rel=1e-12)
    # its parts: the linear layers' term alone, attention the two others, nothing else here
    parts = serving.RooflineSteps(QWEN, H100).parts(step)
    linear = roofline.roofline_time(linear_flops, linear_bytes, H100).seconds
    assert parts["linear"] == pytest.approx(linear, rel=1e-12)
    assert parts["attention"] == pytest.approx(expected - linear, rel=1e-12)
    assert parts["other"] == 0.0
    launched = serving.RooflineSteps(QWEN, H100, step_overhead_s=1e-3)
    assert sum(launched.parts(step).values()) == pytest.approx(launched(step), rel=1e-12)


def test_roofline_chunking_costs_only_below_the_ridge():
    # A 4096-token prompt in chunks: each chunk re-reads the weights and the earlier chunks'
    # KV. While a chunk stays compute-bound (1024 tokens on an H100, ridge 295) that traffic
    # hides under the FLOPs, which chunking does not change (causal keys sum the same), so
    # the total is the same; at 128 tokens the weights' reads rule and it costs over 2x.
    model = serving.RooflineSteps(QWEN, H100)

    def chunked(size):
        return sum(model(Step(((size, k),), 0, 0, int(k + size == 4096)))
                   for k in range(0, 4096, size))  # fmt: skip

    whole = model(Step(((4096, 0),), 0, 0, 1))
    assert chunked(1024) == pytest.approx(whole, rel=1e-9)
    assert chunked(128) > 2 * whole
    # A decode riding in a prefill's step costs more than the decode alone.
    assert model(Step(((16, 0),), 64, 64 * 1000, 65)) > model(Step((), 64, 64 * 1000, 64))


def test_table_steps_interpolate_measurements():
    table = serving.TableSteps({1: 0.010, 8: 0.012, 64: 0.020}, prefill_per_token=1e-4)
    assert table(Step((), 1, 100, 1)) == pytest.approx(0.010)
    assert table(Step((), 36, 100, 36)) == pytest.approx(0.016)
    assert table(Step(((100, 0),), 8, 0, 9)) == pytest.approx(0.012 + 0.01)
    with pytest.raises(ValueError, match="decode batch 65 is outside the measured"):
        table(Step((), 65, 0, 65))
    with pytest.raises(ValueError, match="decode_seconds is empty"):
        serving.TableSteps({}, 0.0)


def test_kv_capacity_and_transfer_worked_numbers():
    # Qwen2.5-7B, 1024 prompt tokens: 57,344 B · 1024 = 58.7 MB, 1.17 ms at 50 GB/s.
    assert memory.kv_cache_bytes(QWEN, 1024) == 58_720_256
    assert serving.kv_transfer_seconds(QWEN, 1024, 50e9) == pytest.approx(1.174e-3, rel=1e-3)
    assert serving.kv_transfer_seconds(QWEN, 1024, 50e9, latency=1e-3) == pytest.approx(
        2.174e-3, rel=1e-3
    )
    free = H100.memory_bytes - memory.weight_bytes(QWEN)
    assert serving.kv_capacity_tokens(QWEN, H100.memory_bytes) == int(free // 57_344)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "trace, message",
    [
        ([Request(0.0, -3, 2)], "request 0: prompt length must be a positive int, got -3"),
        ([Request(0.0, 3, 0)], "request 0: output length must be a positive int, got 0"),
        ([Request(1.0, 3, 2), Request(0.5, 3, 2)], "arrivals are not sorted: request 1"),
        ([Request(-1.0, 3, 2)], "request 0: arrival must be >= 0"),
        ([Request(0.0, 3, 2, 0, 5)], "prefix_tokens=5 is longer than its prompt of 3"),
        ([Request(0.0, 3, 2, None, 2)], "prefix_tokens=2 needs a prefix_id"),
        ([], "the trace is empty"),
    ],
)
def test_bad_traces_name_the_problem(trace, message):
    with pytest.raises(ValueError, match=message):
        simulate(trace, LinearSteps(1.0, 0.0), ROOMY)


def test_requests_and_policies_that_cannot_run_are_refused():
    steps = LinearSteps(1.0, 0.0)
    with pytest.raises(ValueError, match="request 1 cannot fit in KV memory: it needs blocks"):
        simulate([Request(0.0, 4, 2), Request(0.0, 60, 10)], steps, KVMemory(64))
    with pytest.raises(ValueError, match="a 'max' reservation of 2048 tokens, the capacity"):
        simulate([Request(0.0, 4, 2)], steps, KVMemory(1000, "reserve", reservation="max",
                                                        max_seq_len=2048))  # fmt: skip
    with pytest.raises(ValueError, match="over max_seq_len=8"):
        simulate([Request(0.0, 4, 5)], steps, KVMemory(1000, "reserve", reservation="max",
                                                        max_seq_len=8))  # fmt: skip
    with pytest.raises(ValueError, match="policy 'chunked' needs a token_budget"):
        simulate([Request(0.0, 4, 2)], steps, ROOMY, "chunked")
    with pytest.raises(ValueError, match="token_budget=8 must exceed max_batch=8"):
        simulate([Request(0.0, 4, 2)], steps, ROOMY, "chunked", max_batch=8, token_budget=8)
    with pytest.raises(ValueError, match="policy must be one of"):
        simulate([Request(0.0, 4, 2)], steps, ROOMY, "fifo")
    with pytest.raises(ValueError, match="the step model returned 0.0 s"):
        simulate([Request(0.0, 4, 2)], LinearSteps(0.0, 0.0), ROOMY)
    with pytest.raises(ValueError, match="prefix_caching needs the paged allocator"):
        KVMemory(100, "reserve", prefix_caching=True)
    with pytest.raises(ValueError, match="reservation 'max' needs max_seq_len"):
        KVMemory(100, "reserve", reservation="max")


# -------------------------------------------------------------------------- properties

requests = st.lists(
    st.tuples(st.floats(0, 5), st.integers(1, 40), st.integers(1, 30), st.booleans()),
    min_size=1, max_size=25,
)  # fmt: skip


def as_trace(rows):
    rows = sorted(rows, key=lambda row: row[0])
    return [Request(a, p, o, 0 if shared and p >= 8 else None, 8 if shared and p >= 8 else 0)
            for a, p, o, shared in rows]  # fmt: skip


memories = st.sampled_from([
    KVMemory(80, "paged", block_size=4),
    KVMemory(80, "paged", block_size=4, prefix_caching=True),
    KVMemory(300, "paged", block_size=16, prefix_caching=True),
    KVMemory(80, "reserve", reservation="oracle"),
    KVMemory(256, "reserve", reservation="pow2"),
    KVMemory(200, "reserve", reservation="max", max_seq_len=72),
])  # fmt: skip
policies = st.sampled_from([("static", None), ("continuous", None), ("continuous", 32),
                            ("chunked", 16)])  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(requests, memories, policies, st.integers(1, 6))
def test_every_request_finishes_in_order_of_events(rows, kv, policy, max_batch):
    trace = as_trace(rows)
    name, budget = policy
    budget = budget and max(budget, max_batch + 1)
    steps = LinearSteps(0.01, 0.001, 1e-5)
    result = simulate(trace, steps, kv, name, max_batch=max_batch, token_budget=budget)
    assert np.isfinite(result.finish).all()
    assert (result.ttft > 0).all()
    assert (result.ttft <= result.e2e).all()
    assert ((result.tpot >= 0) | np.isnan(result.tpot)).all()
    assert (np.isnan(result.tpot) == (result.output == 1)).all()
    assert result.max_running <= max_batch
    assert 0 <= result.kv_token_share <= result.kv_allocated_share <= 1
    assert result.extra == {"held_at_end": 0, "stored_at_end": 0}  # no memory leaked
    assert_token_times(result)
    again = simulate(trace, steps, kv, name, max_batch=max_batch, token_budget=budget)
    assert (again.finish == result.finish).all() and again.steps == result.steps


@settings(max_examples=100, deadline=None)
@given(requests, st.sampled_from([1, 4, 16]), st.sampled_from(["continuous", "static"]))
def test_paged_allocates_less_than_max_reservation_for_the_same_tokens(rows, block, policy):
    # With memory for everyone, both allocators run the same schedule, so they hold the same
    # real tokens; each step a paged sequence has under one block unused, a max reservation
    # (its length + a block at least) more, so paging allocates strictly less of the memory.
    trace = [Request(a, p, o) for a, p, o, _ in sorted(rows, key=lambda row: row[0])]
    longest = max(r.prompt + r.output for r in trace)
    steps = LinearSteps(0.01, 0.001)
    paged = simulate(trace, steps, KVMemory(100_000, block_size=block), policy)
    reserve = simulate(trace, steps, KVMemory(100_000, "reserve", reservation="max",
                                              max_seq_len=longest + block), policy)  # fmt: skip
    assert (paged.finish == reserve.finish).all()
    assert paged.kv_token_share == pytest.approx(reserve.kv_token_share, rel=1e-12)
    assert paged.kv_allocated_share < reserve.kv_allocated_share
    if block == 1:
        assert paged.kv_token_share == pytest.approx(paged.kv_allocated_share, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(requests, st.floats(0.0, 0.3), st.integers(1, 3), st.integers(1, 3))
def test_disaggregation_conserves_requests(rows, link, prefill_engines, decode_engines):
    trace = as_trace(rows)
    kv = KVMemory(200, block_size=4)
    result = serving.simulate_disaggregated(
        trace, LinearSteps(0.02, 0.001), LinearSteps(0.01, 0.0, 1e-5), kv, kv,
        lambda tokens: link * tokens / 40, prefill_budget=64, max_batch=4,
        prefill_engines=prefill_engines, decode_engines=decode_engines,
    )
    assert np.isfinite(result.finish).all()
    assert (result.ttft > 0).all() and (result.ttft <= result.e2e).all()
    for engine in result.extra["prefill"] + result.extra["decode"]:
        assert (engine.extra["held_at_end"], engine.extra["stored_at_end"]) == (0, 0)
    assert_token_times(result)
    decodes = result.output > 1
    # A decode cannot start before the cache has crossed the link.
    assert (result.finish[decodes] - result.first_token[decodes]
            >= result.extra["transfer_seconds"][decodes]).all()  # fmt: skip


# ------------------------------------------------------------------- traces, vLLM, spec


def test_poisson_trace_is_seeded_and_stated():
    one = serving.poisson_trace(4000, 10.0, 100, 50, seed=3, max_prompt=300)
    assert one == serving.poisson_trace(4000, 10.0, 100, 50, seed=3, max_prompt=300)
    assert one != serving.poisson_trace(4000, 10.0, 100, 50, seed=4, max_prompt=300)
    serving.check_trace(one)
    assert one[0].arrival == 0.0
    assert one[-1].arrival / 3999 == pytest.approx(0.1, rel=0.05)  # mean gap 1/rate
    prompts = np.array([r.prompt for r in one])
    assert prompts.max() == 300 and prompts.min() >= 1
    assert np.mean([r.output for r in one]) == pytest.approx(50, rel=0.05)
    fixed = serving.poisson_trace(10, 1.0, 7, 3, lengths="fixed", shared_prefix=5,
                                  shared_fraction=1.0)  # fmt: skip
    assert {(r.prompt, r.output, r.prefix_id, r.prefix_tokens) for r in fixed} == {(12, 3, 0, 5)}
    with pytest.raises(ValueError, match="rate must be positive"):
        serving.poisson_trace(10, 0.0, 7, 3)


def test_prefix_cache_saves_more_ttft_as_the_hit_rate_rises():
    # A share of requests starts with one 2048-token system prompt: the cache saves nothing
    # when none do, and more TTFT the more do.
    model = serving.RooflineSteps(QWEN, H100)
    saved = []
    for share in (0.0, 0.5, 1.0):
        trace = serving.poisson_trace(200, 4.0, 64, 16, seed=1, shared_prefix=2048,
                                      shared_fraction=share)  # fmt: skip
        plain = simulate(trace, model, KVMemory(200_000)).ttft.mean()
        cached = simulate(trace, model, KVMemory(200_000, prefix_caching=True)).ttft.mean()
        saved.append(plain - cached)
    assert saved[0] == 0.0 and 0 < saved[1] < saved[2]


@pytest.mark.parametrize("alpha, gamma", [(0.8, 4), (0.5, 3), (0.95, 8), (0.3, 1)])
def test_spec_monte_carlo_agrees_with_the_formula(alpha, gamma):
    p, q = serving.random_draft_pair(50, alpha, seed=gamma)
    run = serving.spec_monte_carlo(p, q, gamma, trials=200_000, seed=1)
    assert run["alpha"] == pytest.approx(alpha, abs=1e-9)
    expected = spec_expected_tokens(alpha, gamma)
    assert run["tokens_per_pass"] == pytest.approx(expected, rel=0.01)
    assert run["accepted_rate"] == pytest.approx(alpha, abs=0.005)
    # Rejection sampling keeps the target's distribution: total variation near zero.
    assert 0.5 * np.abs(run["first_token_distribution"] - p).sum() < 0.01


def test_spec_monte_carlo_edges_and_bad_input():
    p, q = serving.random_draft_pair(20, 0.6)
    assert serving.spec_monte_carlo(p, q, 0, trials=1000)["tokens_per_pass"] == 1.0
    assert serving.spec_monte_carlo(p, p, 3, trials=1000)["tokens_per_pass"] == 4.0
    with pytest.raises(ValueError, match="p and q must be vectors of one shape"):
        serving.spec_monte_carlo(p, q[:5], 2)
    with pytest.raises(ValueError, match="q must be a probability distribution"):
        serving.spec_monte_carlo(p, q * 2, 2)
    with pytest.raises(ValueError, match="alpha must be in"):
        serving.random_draft_pair(20, 0.0)


@settings(max_examples=100, deadline=None)
@given(requests, memories, policies)
def test_decode_stretches_run_in_one_go_give_the_same_schedule(rows, kv, policy):
    # LinearSteps has decode_run, so the engine jumps over decode-only stretches; a plain
    # function wrapping it has not, so every step is taken one at a time.
    trace = as_trace(rows)
    model = LinearSteps(0.01, 0.001, 1e-5)
    fast = simulate(trace, model, kv, policy[0], max_batch=4, token_budget=policy[1])
    slow = simulate(trace, lambda step: model(step), kv, policy[0], max_batch=4,
                    token_budget=policy[1])  # fmt: skip
    assert fast.finish == pytest.approx(slow.finish, rel=1e-9)
    assert fast.first_token == pytest.approx(slow.first_token, rel=1e-9)
    assert (fast.steps, fast.preemptions) == (slow.steps, slow.preemptions)
    assert fast.kv_token_share == pytest.approx(slow.kv_token_share, rel=1e-9)
    assert fast.kv_allocated_share == pytest.approx(slow.kv_allocated_share, rel=1e-9)


def test_roofline_decode_run_matches_single_steps():
    model = serving.RooflineSteps(QWEN, H100)
    for batch, context, steps in ((1, 10, 1), (4, 4000, 50), (300, 300 * 2000, 7)):
        run = model.decode_run(batch, context, steps)
        one_by_one = [model(Step((), batch, context + k * batch, batch)) for k in range(steps)]
        assert run == pytest.approx(one_by_one, rel=1e-12)
    table = serving.TableSteps({1: 0.01, 8: 0.02}, 0.0)
    assert list(table.decode_run(4, 100, 3)) == [table(Step((), 4, 100, 4))] * 3


def test_a_request_preempted_on_a_decode_engine_recomputes_and_keeps_its_tokens():
    # A and B: prompt 4, 9 output tokens, t = 0; 1 s steps, a free link. The prefill engine
    # emits both first tokens at 1. The decode engine has 4 blocks of 4: each cache (4
    # tokens, 1 block) takes a 2nd block for token 2 (all 4 used), and at 8 cached tokens
    # (t = 5, both at token 5) needs a 3rd: B, the later admitted, is preempted (2 blocks
    # freed, A takes 1). A ends at 9 (token 9), freeing 3 blocks. B recomputes its prompt and
    # its 5 tokens, 9 tokens in [9, 10] (its token 6), then decodes 7, 8, 9: done at 13. The
    # decode engine emits 8 tokens per request, 16 in all. With a free link this is the
    # colocated engine's schedule on the same memory, which recomputes the same way.
    trace = [Request(0.0, 4, 9), Request(0.0, 4, 9)]
    one_second = LinearSteps(1.0, 0.0)
    decode, log = recorded(one_second)
    split = serving.simulate_disaggregated(trace, one_second, decode,
                                           KVMemory(64, block_size=4),
                                           KVMemory(16, block_size=4), lambda n: 0.0)  # fmt: skip
    assert split.preemptions == 1
    assert sum(step.heads for step in log) == 16
    assert [step.prefill for step in log if step.prefill] == [((9, 0),)]
    assert split.ttft == pytest.approx([1.0, 1.0])
    assert split.e2e == pytest.approx([9.0, 13.0])
    colocated = simulate(trace, one_second, KVMemory(16, block_size=4))
    assert colocated.preemptions == 1
    assert colocated.e2e == pytest.approx([9.0, 13.0])


def test_fitted_steps_recover_a_known_step_model_and_run_decodes_alike():
    # Step times made by a known model (50 µs a head, no per-chunk cost, 0.1 µs a decode key,
    # 0.02 µs a prompt key, 0.4 ms for a step that decodes at all, and linear layers that cost
    # 2 ms for 1 token, 4 ms for 2 and 3.8 for 3, as a kernel change does, then 3 ms for 4 and
    # 20 µs a token more ... ) are fitted back: the same time on every step.
    knots = serving.steps.token_knots(256)
    assert knots[:17] == (*range(1, 17), 24) and knots[-1] == 256
    layers = [2e-3, 4e-3, 3.8e-3] + [3e-3 + 2e-5 * t for t in knots[3:]]
    truth = serving.steps.FittedSteps([0.0, 5e-5, 0.0, 1e-7, 2e-8, 4e-4] + layers, knots)
    shapes = [Step((), b, b * c, b) for b in range(1, 17) for c in (10, 300)]
    shapes += [Step(((p, k),), 0, 0, 1) for p in (8, 24, 32, 48, 64, 96, 128, 192, 256)
               for k in (0, 100)]
    shapes += [Step(((96, 0),), 8, 800, 9), Step(((32, 64),), 4, 1200, 4)]
    fitted = serving.steps.FittedSteps.fit([(s, truth(s)) for s in shapes])
    assert fitted.knots == knots
    assert [fitted(s) for s in shapes] == pytest.approx([truth(s) for s in shapes], rel=1e-6)
    # Between knots the linear layers' time is interpolated; past the last, extrapolated.
    assert fitted(Step((), 3, 30, 3)) == pytest.approx(truth(Step((), 3, 30, 3)), rel=1e-6)
    assert fitted(Step(((36, 0),), 0, 0, 1)) == pytest.approx(truth(Step(((36, 0),), 0, 0, 1)),
                                                              rel=1e-6)
    assert fitted(Step(((300, 0),), 0, 0, 1)) > fitted(Step(((256, 0),), 0, 0, 1))
    run = fitted.decode_run(6, 600, 5)
    assert run == pytest.approx([fitted(Step((), 6, 600 + 6 * k, 6)) for k in range(5)])
    assert fitted.with_step_cost(1e-3)(shapes[0]) == pytest.approx(fitted(shapes[0]) + 1e-3)
    both = fitted.with_step_cost(1e-3, 2e-4)(Step((), 5, 50, 5))
    assert both == pytest.approx(fitted(Step((), 5, 50, 5)) + 1e-3 + 5 * 2e-4)
    slower = fitted.with_step_cost(1e-3).scaled(1.05)
    assert [slower(s) for s in shapes] == pytest.approx([1.05 * (fitted(s) + 1e-3) for s in shapes])
    with pytest.raises(ValueError, match="factor must be positive"):
        fitted.scaled(0.0)
    with pytest.raises(ValueError, match="measured steps"):
        serving.steps.FittedSteps.fit([(shapes[0], 1.0)])
    with pytest.raises(ValueError, match="non-negative coefficients"):
        serving.steps.FittedSteps([1.0, -1.0, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="knots"):
        serving.steps.FittedSteps([0.0] * 8, (1, 4, 2))


def test_spec_tpot_on_the_roofline():
    qwen, half, h100 = models.get("Qwen2.5-7B"), models.get("Qwen2.5-0.5B"), hardware.get(
        "H100 SXM")
    plain = serving.RooflineSteps(qwen, h100)(Step((), 8, 8 * 2048, 8))
    assert serving.spec_tpot(qwen, half, h100, 8, 2048, 0.8, 0) == pytest.approx(plain)
    # gamma 4 at alpha 0.8: 4 draft steps and a 5-token verify yield 3.3616 tokens a pass.
    draft = serving.RooflineSteps(half, h100)(Step((), 1, 1024, 1))
    verify = serving.RooflineSteps(qwen, h100)(Step(((5, 1024),), 0, 0, 5))
    assert serving.spec_tpot(qwen, half, h100, 1, 1024, 0.8, 4) == pytest.approx(
        (4 * draft + verify) / 3.3616, rel=1e-4)
    # At batch 1 the verify pass costs about a decode step: speculation pays.
    assert serving.spec_tpot(qwen, half, h100, 1, 2048, 0.8, 4) < 0.5 * serving.spec_tpot(
        qwen, half, h100, 1, 2048, 0.8, 0)
    with pytest.raises(ValueError, match="gamma"):
        serving.spec_tpot(qwen, half, h100, 1, 2048, 0.8, -1)


def test_a_knot_no_measured_step_touches_is_left_out_not_fitted_at_zero():
    # Decode batches 1, 2, 4, 8 and 16 only: knots 3, 5-7 and 9-15 have no step of their own;
    # a 3-token step is read between the knots at 2 and 4, not towards a knot fitted at 0.
    shapes = [Step((), b, b * c, b) for b in (1, 2, 4, 8, 16) for c in (10, 300)]
    shapes += [Step(((p, 0),), 0, 0, 1) for p in (24, 32, 64)]
    truth = serving.steps.LinearSteps(fixed=2e-3, per_token=1e-4, per_context=1e-7)
    fitted = serving.steps.FittedSteps.fit([(s, truth(s)) for s in shapes])
    assert fitted.knots == (1, 2, 4, 8, 16, 24, 32, 64)
    three = Step((), 3, 90, 3)
    assert fitted(three) == pytest.approx(truth(three), rel=0.05)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0, allow_subnormal=False), max_size=600))
def test_a_stretch_is_summed_as_numpy_sums_its_array(values):
    """The decode stretch's totals are added on plain floats in numpy's pairwise order, so
    they equal the array code's to the last bit (the notebooks' figures must not move)."""
    from helpers.serving.scheduler import _array_sum

    assert _array_sum(values) == float(np.sum(np.array(values, dtype=float)))
