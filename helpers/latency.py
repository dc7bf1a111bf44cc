"""Latency models: TTFT, TPOT and end-to-end time (chapters 6 and 7).

Each phase is estimated on the roofline: prefill of the prompt gives the time to first token
(TTFT); one decode step gives the time per output token (TPOT); a request that generates n
tokens takes about TTFT + (n − 1)·TPOT, because the first token comes out of prefill.
These are lower bounds: real kernels reach a fraction of peak (chapter 4 measures it).
"""

from __future__ import annotations

from helpers._validate import positive_int
from helpers.flops import forward_flops
from helpers.hardware import HardwareSpec
from helpers.memory import forward_bytes
from helpers.models import ModelConfig
from helpers.roofline import RooflineTime, decode_split, roofline_time

__all__ = ["prefill_time", "ttft", "decode_step_time", "tpot", "end_to_end", "e2e_fixed_tpot"]


def prefill_time(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, batch: int = 1, dtype: str = "bf16"
) -> RooflineTime:
    """Roofline time of prefilling ``batch`` prompts: causal attention (a good kernel skips
    the masked half), logits for the last token only, as a server runs it."""
    flops = forward_flops(cfg, prompt_tokens, batch=batch, attention="causal", logits="last")
    bytes_moved = forward_bytes(cfg, prompt_tokens, batch=batch, dtype=dtype, logits="last")
    return roofline_time(flops.total, sum(bytes_moved.values()), hw, dtype)


def ttft(
    cfg: ModelConfig, hw: HardwareSpec, prompt_tokens: int, batch: int = 1, dtype: str = "bf16"
) -> float:
    """Time to first token, in seconds: the prefill time (queueing and sampling left out)."""
    return prefill_time(cfg, hw, prompt_tokens, batch, dtype).seconds


def decode_step_time(
    cfg: ModelConfig, hw: HardwareSpec, batch: int, context: int, dtype: str = "bf16"
) -> float:
    """Seconds for one decode step of ``batch`` sequences with ``context`` cached tokens.

    The split model: the weight matmuls and attention are each bounded on their own and their
    times add (they run one after the other), so a large batch cannot hide attention's
    memory traffic behind the weights' compute (chapters 3 and 7).
    """
    parts = decode_split(cfg, hw, batch, context, dtype)
    return parts["weights"].seconds + parts["attention"].seconds


def tpot(
    cfg: ModelConfig, hw: HardwareSpec, context: int, batch: int = 1, dtype: str = "bf16"
) -> float:
    """Time per output token for one sequence in a batch of ``batch``: one decode step."""
    return decode_step_time(cfg, hw, batch, context, dtype)


def end_to_end(
    cfg: ModelConfig,
    hw: HardwareSpec,
    prompt_tokens: int,
    output_tokens: int,
    batch: int = 1,
    dtype: str = "bf16",
) -> float:
    """TTFT + the decode steps for tokens 2 … n, each at its own context length.

    With a fixed TPOT this is TTFT + (n − 1)·TPOT; here TPOT grows as the cache grows.
    """
    positive_int(prompt_tokens, "prompt_tokens")
    positive_int(output_tokens, "output_tokens")
    total = ttft(cfg, hw, prompt_tokens, batch, dtype)
    for step in range(1, output_tokens):
        total += decode_step_time(cfg, hw, batch, prompt_tokens + step, dtype)
    return total


def e2e_fixed_tpot(ttft_seconds: float, tpot_seconds: float, output_tokens: int) -> float:
    """The simple model: e2e = TTFT + (n − 1)·TPOT (chapter 6)."""
    positive_int(output_tokens, "output_tokens")
    for value, name in ((ttft_seconds, "ttft_seconds"), (tpot_seconds, "tpot_seconds")):
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
    return ttft_seconds + (output_tokens - 1) * tpot_seconds
