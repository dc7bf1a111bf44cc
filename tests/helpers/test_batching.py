"""Chapter 7's formulas: a sweep's numbers, a scheduler step, KV footprints, and weight-only
quantization's critical batch and memory cap (latency, serving, roofline, memory)."""

import math

import pytest

from helpers import serving
from helpers.counting import hardware, latency, memory, models, roofline

H100 = hardware.get("H100 SXM")


def test_sweep_summary_by_hand():
    s = latency.sweep_summary({1: 0.01, 4: 0.0125, 16: 0.04, 32: 0.1}, tpot_slo=0.05)
    assert s["tpot"] == {1: 0.01, 4: 0.0125, 16: 0.04, 32: 0.1}
    assert s["throughput"][4] == pytest.approx(320.0)
    assert s["best_batch"] == 16  # 400 tok/s; 32 breaks the SLO
    assert latency.sweep_summary({2: 1.0}, 0.5)["best_batch"] is None
    # a dip: the largest batch under the SLO is not the best
    assert latency.sweep_summary({1: 0.01, 8: 0.02, 16: 0.045}, 1.0)["best_batch"] == 8


def test_measured_knee_is_the_roofline_crossing():
    # step = max(10 ms, B · 0.5 ms): critical batch 20
    sweep = {b: max(0.01, b * 0.0005) for b in (1, 2, 4, 8, 16, 32, 64)}
    assert latency.measured_knee(sweep) == pytest.approx(20.0)
    with pytest.raises(ValueError, match="batch 1"):
        latency.measured_knee({2: 0.1, 4: 0.2})


def test_schedule_step_by_hand():
    step = serving.schedule_step([(0, 16), (1, 5)], [(2, 17), (3, 40), (4, 1)], 5, 8, 16)
    # request 0 needs a block to decode (16 cached); 2 takes 2 blocks; 3 needs 3 of 2: stop
    assert step == {"decode": [0, 1], "preempted": [], "prefill": [2], "free_blocks": 2}
    capped = serving.schedule_step([(0, 3), (1, 3)], [(2, 1), (3, 1)], 10, 3, 16)
    assert capped["prefill"] == [2]
    idle = serving.schedule_step([], [(7, 32)], 2, 4, 16)
    assert idle == {"decode": [], "preempted": [], "prefill": [7], "free_blocks": 0}
    # Both decodes need a block and one is free: the latest admitted (1, 2 full blocks) goes
    # back to the queue with its blocks, request 0 takes one, and nobody is admitted.
    short = serving.schedule_step([(0, 16), (1, 32)], [(2, 1)], 1, 4, 16)
    assert short == {"decode": [0], "preempted": [1], "prefill": [], "free_blocks": 2}
    # Preempting one that needed no block frees its blocks but not the need: two go.
    two = serving.schedule_step([(0, 16), (1, 16), (2, 5)], [], 0, 4, 16)
    assert two == {"decode": [0], "preempted": [2, 1], "prefill": [], "free_blocks": 1}


def test_schedule_step_agrees_with_the_simulators_preemption():
    """The simulator's scheduler (``Scheduler.grow``) preempts the same sequences from the
    same state: three decodes run until their growing caches outgrow 12 blocks, and the step
    where that happens is also worked by hand."""
    from helpers.serving import KVMemory, Request
    from helpers.serving.scheduler import Scheduler

    trace = [Request(0.0, 4, 40) for _ in range(3)]
    sch = Scheduler(trace, KVMemory(12 * 4, block_size=4), "continuous", 8, None, "both")
    for i in range(3):
        sch.arrive(i)
    for _ in range(100):
        scheduled = sch.admit(0.0)
        running = [(i, sch.cached(i)) for i in sch.decoding]
        free, before = sch.blocks.free, sch.preemptions
        sch.grow()
        if sch.preemptions > before:
            break
        sch.complete(scheduled, 0.0, 1e-3)
    else:
        raise AssertionError("no preemption in 100 steps")
    by_hand = serving.schedule_step(running, [], free, 8, 4)
    assert by_hand["decode"] == list(sch.decoding)
    assert by_hand["preempted"] == [i for i, _ in reversed(running) if i not in sch.decoding]
    assert by_hand["free_blocks"] == sch.blocks.free

def test_kv_footprint_by_hand():
    f = memory.kv_footprint([(10, 7), (1, 1), (16, 1)], block_size=16, max_seq_len=64)
    assert f["tokens"] == 16 + 1 + 16
    assert f["paged_slots"] == 48 and f["reserved_slots"] == 192
    assert f["paged_share"] == pytest.approx(33 / 48)
    with pytest.raises(ValueError, match="max_seq_len"):
        memory.kv_footprint([(60, 10)], 16, 64)


@pytest.mark.parametrize("name", ["Qwen2.5-7B", "Llama-3.1-8B", "Qwen2.5-0.5B"])
def test_weight_only_equals_plain_when_dtypes_agree(name):
    cfg = models.get(name)
    plain = roofline.decode_split(cfg, H100, 8, 1024)
    same = roofline.decode_split_weight_only(cfg, H100, 8, 1024, "bf16")
    assert same["weights"].seconds == pytest.approx(plain["weights"].seconds)
    assert same["attention"] == plain["attention"]
    assert roofline.critical_batch_weight_only(cfg, H100, "bf16") == \
        roofline.critical_batch_split(cfg, H100)
    assert memory.max_concurrent_sequences(cfg, H100.memory_bytes, 4096, kv_dtype="bf16") \
        == memory.max_concurrent_sequences(cfg, H100.memory_bytes, 4096)


def test_weight_only_moves_the_critical_batch_and_the_cap():
    cfg = models.get("Llama-3.1-8B")
    bf16 = roofline.critical_batch_weight_only(cfg, H100, "bf16")
    int8 = roofline.critical_batch_weight_only(cfg, H100, "int8")
    int4 = roofline.critical_batch_weight_only(cfg, H100, "int4")
    assert int8 == pytest.approx(bf16 / 2, rel=0.02) and int4 == pytest.approx(bf16 / 4, rel=0.03)
    caps = [memory.max_concurrent_sequences(cfg, H100.memory_bytes, 4096, w, kv_dtype="bf16")
            for w in ("bf16", "int8", "int4")]
    assert caps[0] < caps[1] < caps[2]
    kappa = memory.kv_bytes_per_token(cfg) * 4096
    free = H100.memory_bytes - math.ceil(cfg_params(cfg) / 2)
    assert caps[2] == int(free // kappa)
    # a 70B model does not fit one H100 in bf16, does in int4
    big = models.get("Llama-3.1-70B")
    assert memory.max_concurrent_sequences(big, H100.memory_bytes, 4096) == 0
    assert memory.max_concurrent_sequences(big, H100.memory_bytes, 4096, "int4",
                                           kv_dtype="bf16") > 0  # fmt: skip
    assert memory.max_concurrent_sequences(cfg, H100.memory_bytes, 4096, "int4", kv_dtype="bf16",
                                           reserve_bytes=H100.memory_bytes) == 0


def cfg_params(cfg):
    from helpers.counting.flops import param_count

    return param_count(cfg)
