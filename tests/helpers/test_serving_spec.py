"""Speculation at large batch: the largest batch at which verifying gamma drafts still pays."""

import pytest

from helpers import hardware, memory, models, serving


def _costs(kv_bytes=0.0, attention_flops=0.0):
    # Unit peak and bandwidth: a pass over k queries at batch B takes max(kB, 100) for the
    # linear layers plus max(k B attention_flops, B kv_bytes) for attention.
    return {"weight_bytes": 100.0, "linear_flops": 1.0, "kv_bytes": kv_bytes,
            "attention_flops": attention_flops, "peak": 1.0, "bandwidth": 1.0}


def test_worked_by_hand():
    # gamma 1, alpha 0.5: 1.5 tokens a pass; free drafts. Without a cache, max(2B, 100) / 1.5
    # < max(B, 100) holds up to B = 74 (2B / 1.5 < 100).
    assert serving.spec_largest_batch(_costs(), 0.5, 1, 0.0, 500) == 74
    # A cache of 1 byte a sequence, read once for both queries: (2B + B) / 1.5 < 100 + B
    # holds up to B = 99, and past B = 100 both sides are 2B: never strictly lower.
    assert serving.spec_largest_batch(_costs(kv_bytes=1.0), 0.5, 1, 0.0, 500) == 99
    # The cap binds, and a draft that costs a whole step (c = 1) never pays at gamma 1.
    assert serving.spec_largest_batch(_costs(), 0.5, 1, 0.0, 30) == 30
    assert serving.spec_largest_batch(_costs(), 0.5, 1, 1.0, 500) == 0


def test_no_draft_never_pays_and_a_perfect_draft_always_does():
    costs = serving.verify_costs(models.get("Qwen2.5-7B"), hardware.get("H100 SXM"), 512)
    assert serving.spec_largest_batch(costs, 0.9, 0, 0.0, 256) == 0  # equal, not lower
    assert serving.spec_largest_batch(costs, 1.0, 3, 0.0, 256) == 256


def test_a_longer_context_keeps_speculation_paying_at_larger_batches():
    qwen, h100 = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
    largest = [serving.spec_largest_batch(serving.verify_costs(qwen, h100, context), 0.7, 4,
                                          0.05, 4096) for context in (128, 512, 2048)]
    assert 1 < largest[0] <= largest[1] <= largest[2]
    assert largest[0] < 4096 and largest[2] == 4096


def test_verify_costs_from_the_formulas():
    qwen, h100 = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
    costs = serving.verify_costs(qwen, h100, 1000)
    assert costs["weight_bytes"] == memory.weight_bytes(qwen)
    assert costs["kv_bytes"] == 1000 * memory.kv_bytes_per_token(qwen)
    assert costs["attention_flops"] == 4 * 28 * 28 * 128 * 1000
    assert costs["peak"] == h100.peak("bf16") and costs["bandwidth"] == h100.bandwidth
    with pytest.raises(ValueError):
        serving.spec_largest_batch(costs, 0.8, 2, 0.05, 0)
