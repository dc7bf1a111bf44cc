"""Chapter 7's measured decode batch sweep (`07_batching` §2), as one call.

``decode_batch_sweep`` times one decode step of the book's decoder at each batch size (every
sequence with the same cache length, the LM head on the last token only) beside the split
roofline's prediction, and returns a ``DecodeSweep`` record. The record says what section 3
reads from it: the knee (``latency.measured_knee``) and whether it is a measurement, which
needs the largest batch to be compute-bound: doubling the batch there nearly doubles the step.
Given ``extend_to``, the sweep keeps doubling its largest batch until one doubling does
(``COMPUTE_BOUND_DOUBLING``) or the next batch would pass ``extend_to``, so that the check is
measured, not the sweep's last point by construction.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from helpers.counting import latency, roofline
from helpers.counting.hardware import HardwareSpec
from helpers.counting.models import ModelConfig
from helpers.decoder.kv_cache import KVCache
from helpers.decoder.model import Decoder
from helpers.measuring import timing

__all__ = ["COMPUTE_BOUND_DOUBLING", "DecodeSweep", "decode_batch_sweep"]

# A doubling that multiplies the step by 1.8 or more: compute-bound (proportional is 2×). With a
# fixed cost a per step, t = a + sB, that holds once a <= sB/8, so t(B)/B is within 12.5% of s.
COMPUTE_BOUND_DOUBLING = 1.8


@dataclass(frozen=True)
class DecodeSweep:
    """A measured decode batch sweep: median seconds of one step (``step_seconds``) and the
    split roofline's seconds with the ceilings given (``predicted``: weights plus attention),
    batch size → seconds; ``threads``: torch's CPU threads while timing."""

    model: str
    dtype: str
    context: int
    threads: int
    step_seconds: dict[int, float]
    predicted: dict[int, float]
    step_iqr: dict[int, float] = field(default_factory=dict)
    stopped: str = ""  # why the sweep ended early (a batch out of memory), or ""

    @property
    def batches(self) -> list[int]:
        return latency.check_sweep(self.step_seconds)

    @property
    def last_doubling(self) -> float | None:
        """t(B_max) / t(B_max / 2), or None when B_max / 2 was not measured."""
        top = self.batches[-1]
        if top % 2 or top // 2 not in self.step_seconds:
            return None
        return self.step_seconds[top] / self.step_seconds[top // 2]

    @property
    def top_compute_bound(self) -> bool:
        """Whether the largest batch's step is compute's: its last doubling multiplied the
        step by at least ``COMPUTE_BOUND_DOUBLING``."""
        ratio = self.last_doubling
        return ratio is not None and ratio >= COMPUTE_BOUND_DOUBLING

    @property
    def knee(self) -> float:
        """``latency.measured_knee`` of the sweep: t(1) · B_max / t(B_max)."""
        return latency.measured_knee(self.step_seconds)

    @property
    def knee_is_lower_bound(self) -> bool:
        """True when the largest batch is not compute-bound: t(B_max) / B_max still holds the
        weights' read, a line steeper than compute's, so the true knee lies further out."""
        return not self.top_compute_bound


def decode_batch_sweep(
    model: Decoder,
    batches: Sequence[int],
    context: int,
    hw: HardwareSpec,
    dtype: str,
    device: str = "cpu",
    *,
    extend_to: int | None = None,
    min_run_time: float = 0.05,
    max_run_time: float = 0.2,
    stop_when_out_of_memory: bool = False,
) -> DecodeSweep:
    """Time one decode step of ``model`` at each batch size (chapter 7 §2).

    Each batch gets a random cache of ``context`` tokens a sequence (never zeros) and one
    random token a sequence; the step runs the LM head on the last token only and is timed
    as in chapter 4 (``timing.time_callable``, one warm-up call). ``predicted`` is
    ``roofline.decode_split``'s weights plus attention on ``hw`` (``dtype``: the model's).
    ``extend_to``: keep doubling the largest batch while its last doubling stays under
    ``COMPUTE_BOUND_DOUBLING`` and the next batch is at most ``extend_to`` (None: no more).
    ``stop_when_out_of_memory``: a batch that runs out of device memory ends the sweep, the
    record saying so in ``stopped`` (the GPU reference sweeps up to the memory's cap); a sweep
    whose first batch does not fit raises RuntimeError.
    Call it under ``torch.no_grad()`` or with grad disabled, as for any inference."""
    cfg: ModelConfig = model.cfg
    if not batches or any(not isinstance(b, int) or b < 1 for b in batches):
        raise ValueError(f"batches must be positive ints, at least one; got {list(batches)}")
    step_seconds: dict[int, float] = {}
    predicted: dict[int, float] = {}
    step_iqr: dict[int, float] = {}

    def decode_step(tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        return model(tokens, cache, logits="last")

    def record(stopped: str = "") -> DecodeSweep:
        return DecodeSweep(cfg.name, dtype, context, torch.get_num_threads(),
                           dict(sorted(step_seconds.items())), dict(sorted(predicted.items())),
                           dict(sorted(step_iqr.items())), stopped)  # fmt: skip

    def measure(batch: int) -> str:
        """Times ``batch``; returns why the sweep must stop there ("" to go on)."""
        try:
            empty = model.new_cache(batch=batch, max_tokens=context + 1)
            for buffer in empty.keys + empty.values:
                buffer.uniform_(-1, 1)
            cache = KVCache(empty.keys, empty.values, tokens=context)
            tokens = torch.randint(0, cfg.vocab, (batch, 1), device=device)
            runs = {"min_run_time": min_run_time, "max_run_time": max_run_time}
            timed = timing.time_callable(decode_step, [(tokens, cache)], device, warmup=1,
                                         **runs)  # fmt: skip
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as error:
            # torch's CPU allocator reports running out of memory as a RuntimeError
            out_of_memory = (isinstance(error, (torch.OutOfMemoryError, MemoryError))
                             or "can't allocate memory" in str(error))  # fmt: skip
            if not (stop_when_out_of_memory and out_of_memory):
                raise
            return f"batch {batch:,} ran out of memory ({str(error).splitlines()[0][:120]})"
        finally:
            empty = cache = tokens = None  # free the batch's cache before the next one
            gc.collect()
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
        step_seconds[batch], step_iqr[batch] = timed.median_s, timed.iqr_s
        split = roofline.decode_split(cfg, hw, batch, context, dtype)
        predicted[batch] = split["weights"].seconds + split["attention"].seconds
        return ""

    for batch in sorted(set(batches)):
        stopped = measure(batch)
        if stopped:
            break
    while (not stopped and extend_to is not None and not record().top_compute_bound
           and 2 * max(step_seconds) <= extend_to):  # fmt: skip
        stopped = measure(2 * max(step_seconds))
    if not step_seconds:
        raise RuntimeError(f"no batch ran: {stopped}")
    return record(stopped)
