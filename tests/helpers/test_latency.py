"""Latency models: TTFT, TPOT, end-to-end."""

import pytest

from helpers import hardware, latency, memory, models, roofline

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
        + latency.decode_step_time(QWEN, H100, 1, 513)
        + latency.decode_step_time(QWEN, H100, 1, 514)
    )
    assert total == pytest.approx(expected, rel=1e-12)
    assert latency.end_to_end(QWEN, H100, 512, 1) == latency.ttft(QWEN, H100, 512)
    assert latency.e2e_fixed_tpot(0.2, 0.01, 101) == pytest.approx(1.2)


def test_bad_latency_arguments():
    with pytest.raises(ValueError, match="output_tokens must be a positive int"):
        latency.end_to_end(QWEN, H100, 512, 0)
    with pytest.raises(ValueError, match="tpot_seconds must be >= 0"):
        latency.e2e_fixed_tpot(0.1, -1.0, 3)
