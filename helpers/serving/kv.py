"""KV cache memory of an engine: capacity, allocators, and the cost of moving a cache."""

from __future__ import annotations

from dataclasses import dataclass

from helpers.counting._validate import one_of, positive_int
from helpers.counting.memory import (
    kv_cache_bytes,
    max_concurrent_sequences,
)
from helpers.counting.models import ModelConfig
from helpers.serving.trace import Request

ALLOCATORS = ("paged", "reserve")
RESERVATIONS = ("max", "pow2", "oracle")

# ----------------------------------------------------------------------------- KV memory


@dataclass(frozen=True)
class KVMemory:
    """KV cache memory of one engine, counted in token slots (chapter 7).

    ``allocator="paged"``: blocks of ``block_size`` tokens, taken as a sequence grows
    (vLLM's PagedAttention); ``prefix_caching`` lets requests with the same prefix id share
    its full blocks. ``allocator="reserve"``: a slot per request for its whole life, sized by
    ``reservation``: ``"max"`` (``max_seq_len`` tokens), ``"pow2"`` (the prompt plus the output
    rounded up to a power of two: the vLLM paper's sec. 6.1 over-reserves "the space for
    outputs by at most 2×", an output of 25 tokens getting 32) or ``"oracle"`` (prompt +
    output exactly): Orca (Max), Orca (Pow2) and Orca (Oracle) in the vLLM paper.
    ``capacity_tokens``: e.g. ``kv_capacity_tokens``.
    """

    capacity_tokens: int
    allocator: str = "paged"
    block_size: int = 16
    reservation: str = "oracle"
    max_seq_len: int | None = None
    prefix_caching: bool = False

    def __post_init__(self) -> None:
        positive_int(self.capacity_tokens, "capacity_tokens")
        one_of(self.allocator, ALLOCATORS, "allocator")
        positive_int(self.block_size, "block_size")
        one_of(self.reservation, RESERVATIONS, "reservation")
        if self.max_seq_len is not None:
            positive_int(self.max_seq_len, "max_seq_len")
        if self.allocator == "reserve" and self.reservation == "max" and not self.max_seq_len:
            raise ValueError("reservation 'max' needs max_seq_len")
        if self.prefix_caching and self.allocator != "paged":
            raise ValueError("prefix_caching needs the paged allocator (it shares blocks)")

    @property
    def blocks(self) -> int:
        """Blocks the paged allocator has: whole blocks only."""
        return self.capacity_tokens // self.block_size

    def reserved(self, request: Request) -> int:
        """Slots a reservation allocator sets aside for ``request``."""
        if self.reservation == "max":
            return self.max_seq_len
        if self.reservation == "pow2":  # only the output is unknown: only it is rounded up
            return request.prompt + (1 << (request.output - 1).bit_length())
        return request.prompt + request.output


def kv_capacity_tokens(cfg: ModelConfig, memory_bytes: float, dtype: str = "bf16",
                       kv_dtype: str | None = None) -> int:
    """KV token slots beside the weights: ``memory.max_concurrent_sequences`` at context 1,
    i.e. ⌊(memory − weights) / κ⌋, before activations and the framework's reserve (ch. 7);
    the weights in ``dtype``, the cache in ``kv_dtype`` (default ``dtype``; chapter 10)."""
    return max_concurrent_sequences(cfg, memory_bytes, 1, dtype, kv_dtype=kv_dtype)


def kv_transfer_seconds(
    cfg: ModelConfig,
    tokens: int,
    link_bandwidth: float,
    dtype: str = "bf16",
    latency: float = 0.0,
) -> float:
    """Seconds to move a prompt's KV cache from a prefill to a decode engine (chapter 8):
    ``memory.kv_cache_bytes`` / link bandwidth (B/s), plus a fixed ``latency``.
    Qwen2.5-7B, 1,024 tokens, bf16: 58.7 MB, 1.17 ms at 50 GB/s (DistServe, Splitwise)."""
    if not link_bandwidth > 0:
        raise ValueError(f"link_bandwidth must be positive, got {link_bandwidth!r}")
    if not latency >= 0:
        raise ValueError(f"latency must be >= 0, got {latency!r}")
    return kv_cache_bytes(cfg, tokens, dtype=dtype) / link_bandwidth + latency
