"""Step-time models: what one engine iteration costs (chapters 7-9).

Chapter 3's roofline (``RooflineSteps``), a table of measured step times (``TableSteps``), a
toy linear model for hand-worked examples (``LinearSteps``), or any callable on a ``Step``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from helpers._validate import positive_int
from helpers.flops import attended_keys, forward_flops, matmul_flops
from helpers.hardware import HardwareSpec
from helpers.memory import (
    forward_bytes,
    linear_bytes,
)
from helpers.models import ModelConfig
from helpers.roofline import RooflineTime, roofline_time

# ----------------------------------------------------------------------------- step times


@dataclass(frozen=True)
class Step:
    """What one iteration computes: what a step-time model is asked to time (chapters 7, 8).

    ``prefill``: one (new tokens, cached tokens before them) pair per prompt chunk.
    ``decode``: sequences decoding one token each; ``decode_context``: the sum of their
    cached tokens before this step (attention reads them all). ``heads``: sequences that
    emit a token in this step, which is how many rows the LM head computes.
    """

    prefill: tuple[tuple[int, int], ...]
    decode: int
    decode_context: int
    heads: int

    @property
    def tokens(self) -> int:
        """Tokens the linear layers see: every chunk's tokens plus one per decode."""
        return self.decode + sum(tokens for tokens, _ in self.prefill)


StepModel = Callable[[Step], float]
# A model may also offer ``decode_run(batch, context, steps)``: the seconds of that many
# decode-only steps, the context growing by ``batch`` a step, as an array. The simulator then
# runs each stretch without arrivals, finishes or new blocks in one go.


def _attention_parts(flops: Mapping[str, int]) -> int:
    return flops["attn_scores"] + flops["attn_values"]


def _affine(count: Callable[[int], tuple[int, ...]]) -> tuple[tuple[int, int], ...]:
    """(intercept, slope) of each output of a count that is affine in its argument."""
    one, two = count(1), count(2)
    return tuple((a - (b - a), b - a) for a, b in zip(one, two, strict=True))


class RooflineSteps:
    """Step time on chapter 3's roofline, split as ``latency.decode_step_time`` splits it.

    A step is three parts run one after another, each bounded by max(FLOPs/peak,
    bytes/bandwidth) (``roofline.roofline_time``): the linear layers over all the step's
    tokens (weights read once; the LM head only for the rows that emit a token), the prompt
    chunks' causal attention, and the decodes' attention over their caches. A decode-only
    step equals ``latency.decode_step_time``; a single long prompt equals
    ``latency.prefill_time``. For measured ceilings pass a chip built from chapter 4's
    figures, e.g. ``dataclasses.replace(hw, peak_flops={"bf16": p}, bandwidth=b)``.
    A sliding window is not modelled: the cache is treated as full (chapters 7 and 8).
    """

    def __init__(self, cfg: ModelConfig, hw: HardwareSpec, dtype: str = "bf16") -> None:
        self.cfg, self.hw, self.dtype = cfg, hw, dtype
        # Each count is affine in the tokens of the step, so two calls of the flops and
        # memory functions give its intercept and slope, and a step costs a few products
        # rather than a count over every layer (the simulator times ~10⁵ steps).
        def linears(tokens: int) -> tuple[int, int]:
            ops = forward_flops(cfg, tokens, logits="last").by_op
            traffic = forward_bytes(cfg, tokens, dtype=dtype, logits="last")
            return (sum(ops.values()) - _attention_parts(ops) - ops["lm_head"],
                    sum(traffic.values()) - traffic["attention"] - traffic["lm_head"])

        def head(rows: int) -> tuple[int, int]:
            return (matmul_flops(rows, cfg.hidden, cfg.vocab),
                    linear_bytes(rows, cfg.hidden, cfg.vocab, dtype))  # fmt: skip

        self._linears = _affine(linears)
        self._head = _affine(head)
        # Attention: FLOPs per (query, key) pair, and bytes b0 per new token (Q, output,
        # its K and V written and read) plus b1 per cached token read.
        self._per_key = _attention_parts(forward_flops(cfg, 1).by_op)
        b0 = forward_bytes(cfg, 1, context=0, dtype=dtype)["attention"]
        self._per_token, self._per_cached = b0, forward_bytes(cfg, 1, context=1,
                                                              dtype=dtype)["attention"] - b0
        # roofline_time's two terms, inlined in the per-step calls (the simulator's hot path)
        self._peak, self._bandwidth = hw.peak(dtype), hw.bandwidth

    def _weights(self, tokens: int, heads: int) -> float:
        (f0, fs), (m0, ms) = self._linears
        flops, moved = f0 + fs * tokens, m0 + ms * tokens
        if heads:
            (h0, hs), (g0, gs) = self._head
            flops, moved = flops + h0 + hs * heads, moved + g0 + gs * heads
        return max(flops / self._peak, moved / self._bandwidth)  # ``roofline_time``, inlined

    def _attention(self, keys: int, tokens: int, cached: int) -> float:
        flops = self._per_key * keys
        moved = self._per_token * tokens + self._per_cached * cached
        return max(flops / self._peak, moved / self._bandwidth)

    def __call__(self, step: Step) -> float:
        seconds = self._weights(step.tokens, step.heads)
        if step.prefill:
            keys = sum(attended_keys(tokens, context, "causal") for tokens, context in step.prefill)
            tokens = sum(tokens for tokens, _ in step.prefill)
            cached = sum(context for _, context in step.prefill)
            seconds += self._attention(keys, tokens, cached)
        if step.decode:  # each decode reads its cache and itself: context + batch keys
            seconds += self._attention(step.decode_context + step.decode, step.decode,
                                       step.decode_context)  # fmt: skip
        return seconds

    def request_work(self, prompt: int, output: int) -> tuple[float, float]:
        """The FLOPs a request of ``prompt`` and ``output`` tokens costs however it is
        scheduled, and the bytes no batching shares: its prefill and its output − 1 decodes
        through the linear layers and attention, the LM head once per output token; the
        bytes are its tokens' own KV writes and every decode's read of its own cache (the
        weights, read once per step whatever the batch, are left out: a lower bound).
        Offered per second at a rate, against the chips' peaks, this says whether any
        schedule can serve that rate (``planner.offered_load``)."""
        (_, fs), _ = self._linears
        (_, hs), _ = self._head
        decodes = output - 1
        contexts = decodes * prompt + decodes * (decodes - 1) // 2  # prompt … prompt+o−2
        keys = attended_keys(prompt, 0, "causal") + contexts + decodes
        flops = fs * (prompt + decodes) + hs * output + self._per_key * keys
        moved = self._per_token * (prompt + decodes) + self._per_cached * contexts
        return float(flops), float(moved)

    def decode_run(self, batch: int, context: int, steps: int) -> np.ndarray:
        """``steps`` decode steps at once: attention's FLOPs and bytes are affine in the
        context, so when the first and last steps are bound by the same term every step
        between is too, and its time is affine in the step index."""
        weights = self._weights(batch, batch)

        def attention(total: int) -> RooflineTime:
            flops = self._per_key * (total + batch)
            moved = self._per_token * batch + self._per_cached * total
            return roofline_time(flops, moved, self.hw, self.dtype)

        first, last = attention(context), attention(context + (steps - 1) * batch)
        if first.bound != last.bound:
            return np.array([weights + attention(context + k * batch).seconds
                             for k in range(steps)])  # fmt: skip
        slope = (last.seconds - first.seconds) / (steps - 1) if steps > 1 else 0.0
        return weights + first.seconds + slope * np.arange(steps)


class TableSteps:
    """Step time from measurements (chapters 6 and 7): a decode step of B sequences costs
    ``decode_seconds[B]`` (linear between measured batch sizes), plus ``prefill_per_token``
    seconds for each prompt token in the step (the slope of measured TTFT against prompt
    length). Context length is not in the table: measure at the context you serve."""

    def __init__(self, decode_seconds: Mapping[int, float], prefill_per_token: float) -> None:
        if not decode_seconds:
            raise ValueError("decode_seconds is empty: give at least one measured batch size")
        for batch, seconds in decode_seconds.items():
            positive_int(batch, "a decode_seconds batch size")
            if not seconds > 0:
                raise ValueError(f"decode_seconds[{batch}] must be positive, got {seconds!r}")
        if not prefill_per_token >= 0:
            raise ValueError(f"prefill_per_token must be >= 0, got {prefill_per_token!r}")
        self._batches = sorted(decode_seconds)
        self._seconds = [decode_seconds[b] for b in self._batches]
        self.prefill_per_token = prefill_per_token

    def __call__(self, step: Step) -> float:
        seconds = self.prefill_per_token * (step.tokens - step.decode)
        if step.decode:
            if not self._batches[0] <= step.decode <= self._batches[-1]:
                raise ValueError(
                    f"decode batch {step.decode} is outside the measured batch sizes "
                    f"{self._batches[0]} … {self._batches[-1]}"
                )
            seconds += float(np.interp(step.decode, self._batches, self._seconds))
        return seconds

    def decode_run(self, batch: int, context: int, steps: int) -> np.ndarray:
        """``steps`` decode steps at once: the table does not depend on context."""
        return np.full(steps, self(Step((), batch, context, batch)))


@dataclass(frozen=True)
class LinearSteps:
    """A toy step time for hand-worked examples: ``fixed`` + ``per_token`` · tokens in the
    step + ``per_context`` · cached tokens the decodes read (chapter 7's exercises)."""

    fixed: float
    per_token: float
    per_context: float = 0.0

    def __call__(self, step: Step) -> float:
        return self.fixed + self.per_token * step.tokens + self.per_context * step.decode_context

    def decode_run(self, batch: int, context: int, steps: int) -> np.ndarray:
        """``steps`` decode steps at once (the context grows by ``batch`` a step)."""
        contexts = context + batch * np.arange(steps)
        return self.fixed + self.per_token * batch + self.per_context * contexts


FEATURES = ("step", "token", "head", "chunk", "decode_key", "prefill_key")


def step_features(prefill: Sequence[tuple[int, int]], decode: int, decode_context: int,
                  heads: int) -> tuple[float, ...]:  # fmt: skip
    """What a measured step's time is fitted on (``FittedSteps``): 1 (a fixed cost: launches,
    the framework), the tokens the linear layers see, the LM-head rows, the prompt chunks
    (each its own attention call), the keys the decodes attend to (their cached tokens and
    their own), and the keys the chunks attend to (causal, after their cached tokens)."""
    tokens = decode + sum(new for new, _ in prefill)
    prefill_keys = sum(attended_keys(new, before, "causal") for new, before in prefill)
    return (1.0, float(tokens), float(heads), float(len(prefill)),
            float(decode_context + decode), float(prefill_keys))  # fmt: skip


class FittedSteps:
    """A step-time model fitted to steps measured on a device (chapter 8's fidelity check;
    Vidur, Agrawal et al. MLSys 2024, profiles operators and fits them the same way):
    seconds = Σ coefficient × ``step_features``, the coefficients non-negative least
    squares on the measured steps. ``fit`` takes (Step, seconds) pairs."""

    def __init__(self, coefficients: Sequence[float]) -> None:
        if len(coefficients) != len(FEATURES) or min(coefficients) < 0:
            raise ValueError(f"need {len(FEATURES)} non-negative coefficients for {FEATURES}, "
                             f"got {coefficients!r}")  # fmt: skip
        self.coefficients = np.asarray(coefficients, dtype=float)

    @classmethod
    def fit(cls, measured: Sequence[tuple[Step, float]]) -> FittedSteps:
        """Least squares on relative error (each row divided by its time, so a 1 ms step
        counts as much as a 100 ms one), with coefficients kept ≥ 0: a feature whose
        coefficient comes out negative is dropped and the rest refitted."""
        if len(measured) < len(FEATURES):
            raise ValueError(f"fit needs at least {len(FEATURES)} measured steps, got "
                             f"{len(measured)}")  # fmt: skip
        x = np.array([step_features(s.prefill, s.decode, s.decode_context, s.heads)
                      for s, _ in measured])  # fmt: skip
        y = np.array([seconds for _, seconds in measured], dtype=float)
        if not (y > 0).all():
            raise ValueError("every measured step time must be positive")
        active = list(range(len(FEATURES)))
        while True:
            rows = x[:, active] / y[:, None]
            solution, *_ = np.linalg.lstsq(rows, np.ones(len(y)), rcond=None)
            if (solution >= 0).all():
                break
            del active[int(np.argmin(solution))]
        coefficients = np.zeros(len(FEATURES))
        coefficients[active] = solution
        return cls(coefficients)

    def __call__(self, step: Step) -> float:
        return float(self.coefficients @ step_features(step.prefill, step.decode,
                                                       step.decode_context, step.heads))

    def decode_run(self, batch: int, context: int, steps: int) -> np.ndarray:
        """``steps`` decode steps at once: affine in the context, which grows by ``batch``."""
        c = self.coefficients
        fixed = c[0] + c[1] * batch + c[2] * batch + c[4] * (context + batch)
        return fixed + c[4] * batch * np.arange(steps)
