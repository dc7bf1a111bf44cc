"""Latency models: TTFT, TPOT, end-to-end."""

import dataclasses

import pytest

from helpers.counting import hardware, latency, memory, models, roofline

QWEN = models.get("Qwen2.5-7B")
H100 = hardware.get("H100 SXM")


def test_ttft_long_prompt_is_compute_bound_and_tpot_memory_bound():
    assert latency.prefill_time(QWEN, H100, 4096).bound == "compute"
    step = roofline.decode_split(QWEN, H100, 1, 4096)
    assert step["weights"].bound == step["attention"].bound == "memory"
    # Decode at batch 1 costs one read of the weights at 3.35 TB/s, less the embedding
    # table, of which only one row per token is looked up.
    read = memory.weight_bytes(QWEN) - memory.dtype_bytes("bf16") * QWEN.vocab * QWEN.hidden
    assert latency.tpot(QWEN, H100, 1) == pytest.approx(read / 3.35e12, rel=0.001)


def test_scaling_scaling_book_step_time_shape():
    """Doubling the batch at batch 1 barely moves TPOT; the aggregate throughput doubles."""
    one, two = latency.tpot(QWEN, H100, 1024, 1), latency.tpot(QWEN, H100, 1024, 2)
    assert one < two < 1.02 * one


def test_end_to_end_is_ttft_plus_decode_steps():
    total = latency.end_to_end(QWEN, H100, 512, 3)
    expected = (
        latency.ttft(QWEN, H100, 512)
        + latency.decode_step_time(QWEN, H100, 1, 512)  # the first step reads the prompt
        + latency.decode_step_time(QWEN, H100, 1, 513)
    )
    assert total == pytest.approx(expected, rel=1e-12)
    assert latency.end_to_end(QWEN, H100, 512, 1) == latency.ttft(QWEN, H100, 512)
    assert latency.e2e_fixed_tpot(0.2, 0.01, 101) == pytest.approx(1.2)


def test_bad_latency_arguments():
    with pytest.raises(ValueError, match="output_tokens must be a positive int"):
        latency.end_to_end(QWEN, H100, 512, 0)
    with pytest.raises(ValueError, match="tpot_seconds must be >= 0"):
        latency.e2e_fixed_tpot(0.1, -1.0, 3)


def test_roofline_verdict_names_the_ceiling_a_timing_beats():
    """Chapter 4: the matmul ceiling first (no cache explains beating it), then the bandwidth;
    each beaten only by more than the tolerance."""
    args = (768, 768, 768, "fp32")  # 9.06e8 FLOP: 7.2 TFLOP/s in 125 µs, 104 GFLOP/s in 8.7 ms
    assert latency.roofline_verdict(*args, 125e-6, 120e9, 15e9) == "compute"
    assert latency.roofline_verdict(*args, 8.7e-3, 120e9, 15e9) == "ok"
    gemv = (1, 1024, 2048, "fp32")  # 8.4 MB: 28 GB/s in 296 µs, 11 GB/s in 760 µs
    assert latency.roofline_verdict(*gemv, 296e-6, 120e9, 15e9) == "memory"
    assert latency.roofline_verdict(*gemv, 760e-6, 120e9, 15e9) == "ok"
    assert latency.roofline_verdict(1, 4096, 4096, "fp32", 1e-6, 120e9, 15e9) == "compute"
    # 1.105× the bandwidth: beaten at 10%, not at 20%.
    assert latency.roofline_verdict(1, 4096, 4096, "fp32", 4.05e-3, 120e9, 15e9) == "memory"
    assert latency.roofline_verdict(1, 4096, 4096, "fp32", 4.05e-3, 120e9, 15e9, 0.2) == "ok"


def test_roofline_verdict_scales_the_peak_to_more_threads_only():
    """A thread adds at most its share of FLOP/s: 165 GFLOP/s beats a 120 GFLOP/s peak
    measured on 4 threads, not the 240 it allows 8; on fewer threads the peak stays whole."""
    args = (768, 768, 768, "fp32", 5.5e-3, 120e9, 15e9)  # 165 GFLOP/s
    assert latency.roofline_verdict(*args) == "compute"
    assert latency.roofline_verdict(*args, threads=4, ceiling_threads=4) == "compute"
    assert latency.roofline_verdict(*args, threads=8, ceiling_threads=4) == "ok"
    fast = (768, 768, 768, "fp32", 3e-3, 120e9, 15e9)  # 302 GFLOP/s
    assert latency.roofline_verdict(*fast, threads=8, ceiling_threads=4) == "compute"
    assert latency.roofline_verdict(*fast, threads=16, ceiling_threads=4) == "ok"
    near = (768, 768, 768, "fp32", 7.2e-3, 120e9, 15e9)  # 126 GFLOP/s, within 10% of 120
    assert latency.roofline_verdict(*near, threads=2, ceiling_threads=8) == "ok"
    with pytest.raises(ValueError, match="threads must be > 0"):
        latency.roofline_verdict(*args, ceiling_threads=0)


def test_roofline_verdict_gives_none_above_a_lower_bound():
    """A ceiling timed under load is a lower bound: beating it settles nothing, not beating it
    is ok, and the next ceiling is read: a beaten sound bandwidth still says "memory"."""
    matmul = (768, 768, 768, "fp32", 6e-3, 120e9, 15e9)  # 151 GFLOP/s, 3.5 GB/s
    assert latency.roofline_verdict(*matmul, peak_is_lower_bound=True) == "unknown"
    assert latency.roofline_verdict(*matmul, bandwidth_is_lower_bound=True) == "compute"
    gemv = (1, 1024, 2048, "fp32", 296e-6, 120e9, 15e9)  # 28 GB/s, 14 GFLOP/s
    assert latency.roofline_verdict(*gemv, peak_is_lower_bound=True) == "memory"
    assert latency.roofline_verdict(*gemv, bandwidth_is_lower_bound=True) == "unknown"
    slow = (1, 1024, 2048, "fp32", 760e-6, 120e9, 15e9)
    assert latency.roofline_verdict(*slow, peak_is_lower_bound=True,
                                    bandwidth_is_lower_bound=True) == "ok"
    both = (1, 4096, 4096, "fp32", 1e-6, 120e9, 15e9)  # beats both ceilings
    assert latency.roofline_verdict(*both, bandwidth_is_lower_bound=True) == "compute"
    assert latency.roofline_verdict(*both, peak_is_lower_bound=True) == "memory"
    assert latency.roofline_verdict(*both, peak_is_lower_bound=True,
                                    bandwidth_is_lower_bound=True) == "unknown"


def test_roofline_verdict_holds_a_bandwidth_to_the_threads_it_was_measured_on():
    """More threads may stream faster: a bandwidth measured on fewer threads settles nothing
    when beaten; on as many or fewer it does. 1×4096×4096 fp32 (67.1 MB) in 2.24 ms is
    30 GB/s, twice a 15 GB/s ceiling, and 15 GFLOP/s, far under any peak."""
    gemv = (1, 4096, 4096, "fp32", 2.24e-3, 120e9, 15e9)
    assert latency.roofline_verdict(*gemv, threads=8, ceiling_threads=1) == "unknown"
    assert latency.roofline_verdict(*gemv, threads=2, ceiling_threads=2) == "memory"
    assert latency.roofline_verdict(*gemv, threads=1, ceiling_threads=8) == "memory"


def test_phase_speedups_on_the_roofline():
    # A long prefill is compute-bound, a batch-1 decode step memory-bound: each gains the
    # whole factor from its own ceiling and nothing from the other.
    gains = latency.phase_speedups(QWEN, H100, 4096, 1024, 1, 2.0)
    assert gains["prefill"] == pytest.approx({"flops": 2.0, "bandwidth": 1.0})
    assert gains["decode"] == pytest.approx({"flops": 1.0, "bandwidth": 2.0})
    # A short prompt sits below the ridge: bandwidth helps it, FLOPs do not.
    short = latency.phase_speedups(QWEN, H100, 32, 1024, 1, 3.0)["prefill"]
    assert short["bandwidth"] > 1.5 and short["flops"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="factor"):
        latency.phase_speedups(QWEN, H100, 64, 64, 1, 0.0)


def _upgraded(hw, factor):
    return {"flops": dataclasses.replace(hw, peak_flops={k: v * factor
                                                         for k, v in hw.peak_flops.items()}),
            "bandwidth": dataclasses.replace(hw, bandwidth=hw.bandwidth * factor)}  # fmt: skip


@pytest.mark.parametrize("prompt, output, batch, factor, dtype", [
    (1024, 256, 1, 2.0, "bf16"), (1024, 256, 64, 2.0, "bf16"), (128, 512, 256, 4.0, "fp8"),
    (8192, 16, 8, 1.5, "bf16"), (7, 1, 3, 3.0, "bf16")])  # fmt: skip
def test_upgrade_speedups_match_the_whole_run_on_the_faster_chip(prompt, output, batch, factor,
                                                                 dtype):
    # Amdahl over the parts equals timing the whole run again on the upgraded chip.
    gains = latency.upgrade_speedups(QWEN, H100, prompt, output, batch, factor, dtype)
    before = latency.end_to_end(QWEN, H100, prompt, output, batch, dtype)
    for name, chip in _upgraded(H100, factor).items():
        after = latency.end_to_end(QWEN, chip, prompt, output, batch, dtype)
        assert gains[name] == pytest.approx(before / after, rel=1e-12)
    assert gains["prefill_share"] == pytest.approx(
        latency.ttft(QWEN, H100, prompt, batch, dtype) / before, rel=1e-12)


def test_upgrade_speedups_follow_amdahl():
    # One output token: prefill alone, a long prompt compute-bound, so FLOPs give it all.
    alone = latency.upgrade_speedups(QWEN, H100, 4096, 1, 1, 2.0)
    assert alone == pytest.approx({"prefill_share": 1.0, "flops": 2.0, "bandwidth": 1.0})
    # Long outputs at batch 1: decode dominates, and bandwidth's gain nears the factor.
    chat = latency.upgrade_speedups(QWEN, H100, 1024, 1024, 1, 2.0)
    assert chat["prefill_share"] < 0.01 and 1.95 < chat["bandwidth"] < 2.0
    # No upgrade gains more than its factor, nor less than nothing.
    mixed = latency.upgrade_speedups(QWEN, H100, 1024, 256, 64, 8.0)
    assert all(1.0 <= mixed[name] < 8.0 for name in ("flops", "bandwidth"))
    with pytest.raises(ValueError, match="factor"):
        latency.upgrade_speedups(QWEN, H100, 64, 64, 1, -1.0)


# Chapter 7: the knee of a quantized model, from an unquantized sweep.
_FIXED_COST_SWEEP = {1: 0.0025, 8: 0.0025, 64: 0.0037, 128: 0.0069}  # 2 ms read + 0.5 ms a step


def test_quantized_knee_lowers_only_the_floor():
    knees = latency.quantized_knee(_FIXED_COST_SWEEP, 10**9, 1e12, "bf16", "int4")
    assert knees == pytest.approx({"knee": 40.0, "quantized_knee": 10.0})
    # the floor is all weight read above the fixed cost: the knee falls by the byte ratio
    int8 = latency.quantized_knee(_FIXED_COST_SWEEP, 10**9, 1e12, "bf16", "int8")
    assert int8["quantized_knee"] == pytest.approx(20.0)
    same = latency.quantized_knee(_FIXED_COST_SWEEP, 10**9, 1e12, "bf16", "bf16")
    assert same["quantized_knee"] == same["knee"]


def test_quantized_knee_ignores_a_fixed_cost_and_order():
    plain = {b: max(0.002, 5e-5 * b) for b in (1, 8, 64, 128)}
    shifted = {b: plain[b] + 0.001 for b in reversed(list(plain))}
    assert latency.quantized_knee(shifted, 10**9, 1e12, "bf16", "int4") == pytest.approx(
        latency.quantized_knee(plain, 10**9, 1e12, "bf16", "int4"))


def test_quantized_knee_on_the_roofline_matches_the_quantized_sweep():
    """Predicted from the bf16 sweep, the int4 knee is the int4 sweep's own (same line)."""
    cfg, hw = models.get("Llama-3.1-8B"), hardware.get("H100 SXM")
    read = sum(k * n * (1 if name == "lm_head" else cfg.layers)  # what a step reads
            for name, (k, n) in cfg.linear_shapes().items())

    def sweep(dtype):
        return {b: sum(p.seconds for p in roofline.decode_split_weight_only(
            cfg, hw, b, 512, dtype).values()) for b in (1, 16, 512, 1024)}

    guess = latency.quantized_knee(sweep("bf16"), read, hw.bandwidth, "bf16", "int4")
    own = latency.quantized_knee(sweep("int4"), read, hw.bandwidth, "int4", "int4")["knee"]
    assert guess["quantized_knee"] == pytest.approx(own, rel=1e-9)
    ratio = memory.dtype_bytes("int4") / memory.dtype_bytes("bf16")
    # batch 1's KV read stays in the floor, so the knee falls by less than the bytes
    assert ratio < guess["quantized_knee"] / guess["knee"] < 1


def test_quantized_knee_holds_only_past_the_critical_batch():
    """The caller's promise: the two largest batches compute-bound in their weights."""
    cfg, hw = models.get("Qwen2.5-0.5B"), hardware.get("L4")
    read = sum(k * n * (1 if name == "lm_head" else cfg.layers)
               for name, (k, n) in cfg.linear_shapes().items())
    star = roofline.critical_batch_weight_only(cfg, hw, "bf16")

    def knees(batches):
        def sweep(dtype):
            return {b: sum(p.seconds for p in roofline.decode_split_weight_only(
                cfg, hw, b, 256, dtype).values()) for b in batches}
        own = latency.quantized_knee(sweep("int4"), read, hw.bandwidth, "int4", "int4")["knee"]
        guess = latency.quantized_knee(sweep("bf16"), read, hw.bandwidth, "bf16", "int4")
        return guess["quantized_knee"], own

    predicted, own = knees([1, 64, star, 2 * star])
    assert predicted == pytest.approx(own, rel=1e-9)
    predicted, own = knees([1, 64, star // 4, star // 2])  # the line holds a weight read
    assert predicted < 0.5 * own


def test_quantized_knee_rounds_int4_up_and_clamps():
    sweep = {1: 20.0, 4: 20.0, 40: 24.0, 80: 44.0}  # 7 weights at 1 B/s, 4 s a step
    assert latency.quantized_knee(sweep, 7, 1.0, "bf16", "int4")["quantized_knee"] == 12.0
    compute_bound = {1: 0.004, 8: 0.007, 16: 0.011}
    assert latency.quantized_knee(compute_bound, 10**9, 1e12, "bf16", "int4") == {
        "knee": pytest.approx(2.0), "quantized_knee": 0.0}


@pytest.mark.parametrize("sweep, why", [
    ({1: 0.01, 2: 0.02}, "at least 3"),
    ({1: 0.01, 2: 0.02, 4: 0.02}, "do not grow"),
])
def test_quantized_knee_rejects_sweeps_without_two_ends(sweep, why):
    with pytest.raises(ValueError, match=why):
        latency.quantized_knee(sweep, 10**9, 1e12, "bf16", "int4")


def test_quantized_knee_rejects_a_bandwidth_too_low_for_the_sweep():
    with pytest.raises(ValueError, match="bandwidth"):
        latency.quantized_knee(_FIXED_COST_SWEEP, 10**9, 1e11, "bf16", "int4")


def test_check_sweep_is_the_one_check_of_a_measured_sweep():
    assert latency.check_sweep({8: 0.02, 1: 0.01, 4: 0.015}) == [1, 4, 8]
    with pytest.raises(ValueError, match="step_seconds is empty"):
        latency.sweep_summary({}, 0.1)
    with pytest.raises(ValueError, match=r"step_seconds\[4\] must be positive"):
        latency.measured_knee({1: 0.01, 4: 0.0})
    with pytest.raises(ValueError, match="a decode_seconds batch size"):
        latency.check_sweep({0: 0.01}, "decode_seconds")


# --- the FLOP/s that match a bandwidth upgrade; the batch a load sets (chapter 9) ---------


@pytest.mark.parametrize("prompt, output, batch, factor", [
    (4096, 128, 16, 2.0), (8192, 64, 4, 1.43), (128, 256, 512, 2.0), (256, 64, 350, 8.0)])
def test_flops_to_match_gives_the_bandwidth_upgrades_speedup(prompt, output, batch, factor):
    match = latency.flops_to_match(QWEN, H100, prompt, output, batch, factor)
    gains = latency.upgrade_speedups(QWEN, H100, prompt, output, batch, factor)
    assert match is not None and match >= 1.0
    assert latency.upgrade_speedups(QWEN, H100, prompt, output, batch, match)["flops"] == \
        pytest.approx(gains["bandwidth"], rel=1e-9)
    # and no less FLOP/s would do
    assert latency.upgrade_speedups(QWEN, H100, prompt, output, batch, match * 0.999)[
        "flops"] < gains["bandwidth"]


def test_flops_to_match_none_when_the_memory_time_alone_is_longer():
    # one chat stream is memory-bound throughout: FLOP/s never shorten it
    assert latency.flops_to_match(QWEN, H100, 512, 512, 1, 2.0) is None
    # a prefill alone, compute-bound: more bandwidth buys nothing, so nothing is needed
    assert latency.flops_to_match(QWEN, H100, 8192, 1, 8, 2.0) == 1.0
    with pytest.raises(ValueError, match="bandwidth_factor"):
        latency.flops_to_match(QWEN, H100, 512, 512, 1, 0.0)


def _first_batch_that_keeps_up(cfg, hw, context, rate, steps):
    cap = memory.max_concurrent_sequences(cfg, hw.memory_bytes, context)
    for batch in range(1, cap + 1):
        step = latency.decode_step_time(cfg, hw, batch, context)
        if batch >= rate * steps * step:
            return {"batch": batch, "tpot": step}
    return None


@pytest.mark.parametrize("rate", [0.1, 1.0, 5.0, 10.0, 15.0, 19.0, 20.0])
def test_batch_at_load_is_the_first_batch_that_keeps_up(rate):
    llama8 = models.get("Llama-3.1-8B")
    assert latency.batch_at_load(llama8, H100, 4096, rate, 255) == \
        _first_batch_that_keeps_up(llama8, H100, 4096, rate, 255)


def test_batch_at_load_obeys_littles_law():
    held = latency.batch_at_load(QWEN, H100, 1024, 40.0, 255)
    # the batch is the load times the time each sequence stays, rounded up to a whole one
    assert held["batch"] - 1 < 40.0 * 255 * held["tpot"] <= held["batch"]
    assert latency.batch_at_load(QWEN, H100, 1024, 1e-3, 255) == {
        "batch": 1, "tpot": latency.decode_step_time(QWEN, H100, 1, 1024)}
    assert latency.batch_at_load(models.get("Llama-3.1-70B"), hardware.get("L40S"), 1024, 0.1,
                                 100) is None  # the weights do not fit  # fmt: skip
