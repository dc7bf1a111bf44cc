"""Chapter 7's measured decode batch sweep (`07_batching` §2), as one call.

``decode_batch_sweep`` times one decode step of the book's decoder at each batch size (every
sequence with the same cache length, the LM head on the last token only) beside the split
roofline's prediction, and returns a ``DecodeSweep`` record. The record says what section 3
reads from it: the knee (``latency.measured_knee``: t(1) over the largest batch's step per
sequence) and how near it lies to t(1)/s, s the slope of what grows with B, the knee a larger
sweep would read. It never lies above t(1)/s while the steps hold a cost that does not grow
with B; it lies within an eighth of it once the largest batch's step is nearly proportional
to B, so that doubling the batch there nearly doubles the step (``PROPORTIONAL_DOUBLING``).
Given ``extend_to``, the sweep keeps doubling its largest batch until one doubling does or the
next batch would pass ``extend_to``, so that the check is measured, not the sweep's last point
by construction. A sweep can end short of it: the knee is then only a lower bound on t(1)/s.

The record also reads what section 2 prints: aggregate throughput against TPOT from the
smallest batch to the largest (``throughput_gain``, ``tpot_rise``), the batches by throughput
(``by_throughput``), and which way each point of the throughput–latency plot moves from one
batch to the next, measured beside the roofline's (``moves`` → ``SweepMoves``).
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

__all__ = ["PROPORTIONAL_DOUBLING", "MOVE_BAND", "DecodeSweep", "PointMove", "MoveStep",
           "SweepMoves", "point_move", "decode_batch_sweep"]  # fmt: skip

# A doubling that multiplies the step by 1.8 or more: the step nearly proportional to B (exactly
# proportional is 2×). With a cost a per step that does not grow with B, t = a + sB, that holds
# once a <= sB/8, so t(B)/B is within 12.5% of s and the knee t(1)·B/t(B) within an eighth
# below t(1)/s. What grows with B (s) is compute and each sequence's own KV read alike: the
# factor says nothing about which of them it is.
PROPORTIONAL_DOUBLING = 1.8
MOVE_BAND = 0.10  # two factors within 10% of each other: the point moves diagonally


@dataclass(frozen=True)
class PointMove:
    """How a point of the throughput–latency plot (TPOT across, aggregate tokens/s up, both
    axes logarithmic) moves from one batch to a larger one: TPOT's factor and throughput's.
    The larger factor gives the way, ``"diagonal"`` when the two are within ``band``."""

    tpot_rise: float
    rate_rise: float
    band: float = MOVE_BAND

    @property
    def margin(self) -> float:
        """The larger factor over the smaller, less 1."""
        return max(self.tpot_rise, self.rate_rise) / min(self.tpot_rise, self.rate_rise) - 1

    @property
    def way(self) -> str:
        if self.margin <= self.band:
            return "diagonal"
        return "up" if self.rate_rise > self.tpot_rise else "right"


def point_move(seconds: dict[int, float], a: int, b: int, band: float = MOVE_BAND) -> PointMove:
    """The move from batch ``a`` to batch ``b`` of a sweep's ``seconds`` (batch → step):
    TPOT rises by t(b)/t(a), throughput by (b/a)/(t(b)/t(a))."""
    tpot_rise = seconds[b] / seconds[a]
    return PointMove(tpot_rise, b / a / tpot_rise, band)


@dataclass(frozen=True)
class MoveStep:
    """One step between neighbouring batches ``a`` → ``b``, on the roofline and measured."""

    a: int
    b: int
    roofline: PointMove
    measured: PointMove

    @property
    def scored(self) -> bool:
        """Neither move diagonal: the two ways can be compared."""
        return "diagonal" not in (self.roofline.way, self.measured.way)

    @property
    def agrees(self) -> bool:
        return self.roofline.way == self.measured.way


@dataclass(frozen=True)
class SweepMoves:
    """Each step between neighbouring batches of a sweep (``steps``), and what they add up
    to: the scored steps whose measured point moves the roofline's way (``agreeing``), those
    that do not (``astray``), and those not scored (``diagonal``)."""

    steps: tuple[MoveStep, ...]
    band: float

    @property
    def scored(self) -> list[MoveStep]:
        return [step for step in self.steps if step.scored]

    @property
    def astray(self) -> list[MoveStep]:
        return [step for step in self.scored if not step.agrees]

    @property
    def agreeing(self) -> int:
        return len(self.scored) - len(self.astray)

    @property
    def diagonal(self) -> list[MoveStep]:
        return [step for step in self.steps if not step.scored]

    def table(self) -> str:
        """One row a step (the roofline's move and the measured one), then the tally."""
        lines = [f"{'batches':>9}{'roofline: TPOT ×':>18}{'tokens/s ×':>11}{'margin':>8}"
                 f"{'moves':>10}{'measured: TPOT ×':>18}{'tokens/s ×':>11}{'margin':>8}"
                 f"{'moves':>10}"]  # fmt: skip
        for step in self.steps:
            row = f"{step.a:>4} → {step.b:<3}"
            for move in (step.roofline, step.measured):
                row += (f"{move.tpot_rise:>18.2f}{move.rate_rise:>11.2f}{move.margin:>8.1%}"
                        f"{move.way:>10}")  # fmt: skip
            lines.append(row)

        def named(steps: list[MoveStep]) -> str:
            return ", ".join(f"{step.a} → {step.b}" for step in steps)

        lines.append(f"the measured points move the roofline's way in {self.agreeing} of "
                     f"{len(self.scored)} scored steps"
                     + (f"; not at {named(self.astray)}" if self.astray else "")
                     + (f"; diagonal (margin within {self.band:.0%}), not scored: "
                        f"{named(self.diagonal)}" if self.diagonal else ""))  # fmt: skip
        return "\n".join(lines)


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
    def top_proportional(self) -> bool:
        """Whether the largest batch's step is nearly proportional to B: its last doubling
        multiplied the step by at least ``PROPORTIONAL_DOUBLING`` (compute or KV reads alike)."""
        ratio = self.last_doubling
        return ratio is not None and ratio >= PROPORTIONAL_DOUBLING

    @property
    def knee(self) -> float:
        """``latency.measured_knee`` of the sweep: t(1) · B_max / t(B_max), t(1) over the
        largest batch's step per sequence."""
        return latency.measured_knee(self.step_seconds)

    @property
    def knee_is_lower_bound(self) -> bool:
        """True when the last doubling multiplied the step by under ``PROPORTIONAL_DOUBLING``:
        t(B_max) still holds a large part that does not grow with B (the weights' read short
        of B*, fixed costs), so t(B_max) / B_max is well above the slope s of what does, and
        the knee only a lower bound on t(1)/s, the knee a larger sweep would read (it rises
        toward it as larger batches are measured). False: within an eighth below t(1)/s. A
        fixed cost a puts t(1)/s past the two-point knee (t(1) − a)/s
        (``latency.quantized_knee``'s ``"knee"``) by a/s."""
        return not self.top_proportional

    @property
    def tokens_per_s(self) -> dict[int, float]:
        """Aggregate throughput: B tokens a step."""
        return {b: b / seconds for b, seconds in self.step_seconds.items()}

    @property
    def over_roofline(self) -> dict[int, float]:
        """Measured step over the roofline's, per batch."""
        return {b: self.step_seconds[b] / self.predicted[b] for b in self.batches}

    def rises(self, first: int, last: int) -> tuple[float, float]:
        """From batch ``first`` to batch ``last`` (both swept): how many times aggregate
        throughput and TPOT (the step) rose."""
        for batch in (first, last):
            if batch not in self.step_seconds:
                raise ValueError(f"batch {batch} was not swept: {self.batches}")
        seconds = self.step_seconds
        return (last / seconds[last]) / (first / seconds[first]), seconds[last] / seconds[first]

    @property
    def throughput_gain(self) -> float:
        """Aggregate throughput at the largest batch over the smallest's."""
        return self.rises(self.batches[0], self.batches[-1])[0]

    @property
    def tpot_rise(self) -> float:
        """TPOT (the step) at the largest batch over the smallest's."""
        return self.rises(self.batches[0], self.batches[-1])[1]

    @property
    def by_throughput(self) -> list[int]:
        """The batches, highest aggregate throughput first."""
        return sorted(self.batches, key=self.tokens_per_s.get, reverse=True)

    @property
    def runner_up_behind(self) -> float | None:
        """How far the second-highest throughput falls short of the highest, as a share of
        it (None with one batch)."""
        if len(self.batches) < 2:
            return None
        best, second = (self.tokens_per_s[b] for b in self.by_throughput[:2])
        return 1 - second / best

    def moves(self, band: float = MOVE_BAND) -> SweepMoves:
        """Which way each point moves from one measured batch to the next, measured and on
        the roofline (chapter 7 §2's figure: up below the critical batch, right past it)."""
        if not 0 <= band < 1:
            raise ValueError(f"band must be in [0, 1), got {band!r}")
        pairs = zip(self.batches, self.batches[1:], strict=False)
        return SweepMoves(tuple(MoveStep(a, b, point_move(self.predicted, a, b, band),
                                         point_move(self.step_seconds, a, b, band))
                                for a, b in pairs), band)  # fmt: skip


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
    ``PROPORTIONAL_DOUBLING`` and the next batch is at most ``extend_to`` (None: no more).
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
    while (not stopped and extend_to is not None and not record().top_proportional
           and 2 * max(step_seconds) <= extend_to):  # fmt: skip
        stopped = measure(2 * max(step_seconds))
    if not step_seconds:
        raise RuntimeError(f"no batch ran: {stopped}")
    return record(stopped)
