"""Step-time models: what one engine iteration costs (chapters 7-9).

Chapter 3's roofline (``RooflineSteps``), a table of measured step times (``TableSteps``), a
toy linear model for hand-worked examples (``LinearSteps``), or any callable on a ``Step``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from helpers.counting.flops import (
    attended_keys,
    attention_flops,
    attention_flops_per_key,
    forward_flops,
    matmul_flops,
)
from helpers.counting.hardware import HardwareSpec
from helpers.counting.latency import check_sweep
from helpers.counting.memory import (
    forward_bytes,
    kv_dtype_or,
    linear_bytes,
)
from helpers.counting.models import ModelConfig
from helpers.parallel.sharding import Link, shard_config, step_allreduce_seconds

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


_INDICES = np.arange(256.0)  # 0, 1, 2, … : a stretch's step indices, made once


def _step_indices(steps: int) -> np.ndarray:
    """``np.arange(steps)`` as floats (the same products with a float), without making
    it anew for every stretch the simulator times (an allocation costs as much as the
    arithmetic on a stretch of ~20 steps)."""
    return _INDICES[:steps] if 0 <= steps <= len(_INDICES) else np.arange(float(steps))


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
    ``step_overhead_s``: seconds added once to every step, whatever it carries, for what the
    roofline does not count: the fixed cost of launching each of the step's kernels
    (chapter 8: kernels per step × seconds per kernel, ``helpers.decoder.launches``). Default 0.

    ``tp``: an engine of T chips under Megatron's split (chapter 10): each step costs one
    chip's share (``tensor_parallel.shard_config``: 1/T of the heads, KV heads and MLP width;
    embeddings and LM head whole) on the roofline, plus the step's 2 · layers all-reduces of
    its [tokens × hidden] activations over ``link`` (``tensor_parallel.step_allreduce_seconds``),
    after the parts above. A decode-only step then equals ``tensor_parallel.tp_decode_step``'s
    parts summed. ``kv_dtype``: the KV cache's dtype (default ``dtype``, the weights'; fp8
    or int8 stores it narrower).
    """

    def __init__(self, cfg: ModelConfig, hw: HardwareSpec, dtype: str = "bf16",
                 step_overhead_s: float = 0.0, *, tp: int = 1, link: Link | None = None,
                 kv_dtype: str | None = None) -> None:  # fmt: skip
        # A MoE's expert bytes are not affine in the step's tokens
        # (helpers.counting.memory.experts_read).
        cfg.require_dense("the serving simulator's step model")
        shard = shard_config(cfg, tp)  # refuses a T that does not split the heads evenly
        if tp > 1 and not isinstance(link, Link):
            raise ValueError(f"tp={tp} needs the link its all-reduces cross (a "
                             f"tensor_parallel.Link), got {link!r}")  # fmt: skip
        self.cfg, self.hw, self.dtype = cfg, hw, dtype
        self.tp, self.link, self.kv_dtype = tp, link, kv_dtype_or(dtype, kv_dtype)
        self.shard = shard  # what one chip of the engine holds
        if (isinstance(step_overhead_s, bool) or not isinstance(step_overhead_s, (int, float))
                or not 0 <= step_overhead_s < math.inf):
            raise ValueError(f"step_overhead_s must be a finite number of seconds >= 0, "
                             f"got {step_overhead_s!r}")  # fmt: skip
        self.step_overhead_s = float(step_overhead_s)
        # Each count is affine in the tokens of the step, so two calls of the flops and
        # memory functions give its intercept and slope, and a step costs a few products
        # rather than a count over every layer (the simulator times ~10⁵ steps).
        def linears(tokens: int) -> tuple[int, int]:
            ops = forward_flops(shard, tokens, logits="last").by_op
            traffic = forward_bytes(shard, tokens, dtype=dtype, logits="last")
            return (sum(ops.values()) - attention_flops(ops) - ops["lm_head"],
                    sum(traffic.values()) - traffic["attention"] - traffic["lm_head"])

        def head(rows: int) -> tuple[int, int]:
            return (matmul_flops(rows, cfg.hidden, cfg.vocab),
                    linear_bytes(rows, cfg.hidden, cfg.vocab, dtype))  # fmt: skip

        self._linears = _affine(linears)
        self._head = _affine(head)
        # The all-reduces' seconds: affine in the step's tokens too (a latency, then bytes).
        (self._reduce,) = _affine(lambda tokens: (
            step_allreduce_seconds(cfg, link, tp, tokens, dtype) if tp > 1 else 0.0,))
        # Attention: FLOPs per (query, key) pair, and bytes b0 per new token (Q, output,
        # its K and V written and read) plus b1 per cached token read, on one chip's heads.
        self._per_key = attention_flops_per_key(shard)
        kv = self.kv_dtype
        b0 = forward_bytes(shard, 1, context=0, dtype=dtype, kv_dtype=kv)["attention"]
        self._per_token = b0
        self._per_cached = forward_bytes(shard, 1, context=1, dtype=dtype,
                                         kv_dtype=kv)["attention"] - b0  # fmt: skip
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

    def _all_reduces(self, tokens: int) -> float:
        r0, rs = self._reduce  # both 0 on one chip
        return r0 + rs * tokens

    def parts(self, step: Step) -> dict[str, float]:
        """The step's seconds by part, as ``__call__`` sums them: ``"linear"`` (the linear
        layers and LM head, the weights read once), ``"attention"`` (the prompt chunks' and
        the decodes') and ``"other"`` (``step_overhead_s`` and the all-reduces). Chapter 8
        splits a chunked prefill's slowdown with it; the simulator calls ``__call__``."""
        attention = 0.0
        if step.prefill:
            keys = sum(attended_keys(tokens, context, "causal") for tokens, context in step.prefill)
            attention += self._attention(keys, sum(tokens for tokens, _ in step.prefill),
                                         sum(context for _, context in step.prefill))  # fmt: skip
        if step.decode:
            attention += self._attention(step.decode_context + step.decode, step.decode,
                                         step.decode_context)  # fmt: skip
        return {"linear": self._weights(step.tokens, step.heads), "attention": attention,
                "other": self.step_overhead_s + self._all_reduces(step.tokens)}  # fmt: skip

    def __call__(self, step: Step) -> float:
        prefill, decode = step.prefill, step.decode
        keys = new = cached = 0  # the chunks' counts, in one pass (the simulator's hot path)
        for tokens, context in prefill:
            keys += attended_keys(tokens, context, "causal")
            new += tokens
            cached += context
        tokens = decode + new  # ``step.tokens``
        seconds = self.step_overhead_s + self._weights(tokens, step.heads)
        seconds += self._all_reduces(tokens)
        if prefill:
            seconds += self._attention(keys, new, cached)
        if decode:  # each decode reads its cache and itself: context + batch keys
            seconds += self._attention(step.decode_context + decode, decode,
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
        weights = self.step_overhead_s + self._weights(batch, batch) + self._all_reduces(batch)
        per_key, per_token, per_cached = self._per_key, self._per_token, self._per_cached
        peak, bandwidth = self._peak, self._bandwidth

        def attention(total: int) -> tuple[float, bool]:
            # ``roofline_time``'s seconds and whether compute bounds them, inlined (a tie
            # goes to compute): the simulator asks for a stretch ~10⁴ times a plan
            compute = per_key * (total + batch) / peak
            memory = (per_token * batch + per_cached * total) / bandwidth
            return max(compute, memory), compute >= memory

        (first, bound), (last, last_bound) = attention(context), attention(
            context + (steps - 1) * batch)
        if bound != last_bound:
            return np.array([weights + attention(context + k * batch)[0]
                             for k in range(steps)])  # fmt: skip
        slope = (last - first) / (steps - 1) if steps > 1 else 0.0
        return weights + first + slope * _step_indices(steps)


class TableSteps:
    """Step time from measurements (chapters 6 and 7): a decode step of B sequences costs
    ``decode_seconds[B]`` (linear between measured batch sizes), plus ``prefill_per_token``
    seconds for each prompt token in the step (the slope of measured TTFT against prompt
    length). Context length is not in the table: measure at the context you serve."""

    def __init__(self, decode_seconds: Mapping[int, float], prefill_per_token: float) -> None:
        self._batches = check_sweep(decode_seconds, "decode_seconds")
        if not prefill_per_token >= 0:
            raise ValueError(f"prefill_per_token must be >= 0, got {prefill_per_token!r}")
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


FEATURES = ("step", "head", "chunk", "decode_key", "prefill_key", "decoding")


DENSE_KNOTS = 16
"""Every token count up to this one is a knot of its own (``token_knots``): a decode step's
rows are its batch, and below about 16 rows a CPU's matmul library changes kernel with the
row count (on chapter 8's machine 2 and 3 rows take longer than 4 or 6), so no line between
two knots would hold."""


def token_knots(largest: int) -> tuple[int, ...]:
    """Where the linear layers' cost is fitted (``FittedSteps``): every token count 1 …
    ``DENSE_KNOTS`` (or up to ``largest``, if smaller), then 24, 32, 48, 64, 96, …
    (alternately ×1.5 and ×4/3) up to the first at or above ``largest``."""
    positive = max(int(largest), 1)
    knots = list(range(1, min(positive, DENSE_KNOTS) + 1))
    while knots[-1] < positive:
        last = knots[-1]
        knots.append(last * 3 // 2 if last & (last - 1) == 0 else last * 4 // 3)
    return tuple(knots)


def token_weights(tokens: int, knots: Sequence[int]) -> np.ndarray:
    """Interpolation weights of ``tokens`` on ``knots``: the two knots around it share it
    linearly; past the last knot, the last segment's line carries on."""
    weights = np.zeros(len(knots))
    if len(knots) == 1:
        weights[0] = tokens / knots[0]
        return weights
    k = min(int(np.searchsorted(knots, tokens, "left")), len(knots) - 1)
    k = max(k, 1)
    low, high = knots[k - 1], knots[k]
    share = (tokens - low) / (high - low)
    weights[k - 1], weights[k] = 1 - share, share
    return weights


def step_features(prefill: Sequence[tuple[int, int]], decode: int, decode_context: int,
                  heads: int, knots: Sequence[int] = (1,)) -> np.ndarray:  # fmt: skip
    """What a measured step's time is fitted on (``FittedSteps``): 1 (a constant per step),
    the LM-head rows, the prompt chunks (each its own attention call), the keys the decodes
    attend to (their cached tokens and their own), the keys the chunks attend to (causal,
    after their cached tokens), whether the step decodes at all (the decodes' batched
    attention calls and their plan, which a step of prompt chunks alone does not pay), and
    the tokens the linear layers see, as weights on the ``knots`` (``token_weights``)."""
    tokens = decode + sum(new for new, _ in prefill)
    prefill_keys = sum(attended_keys(new, before, "causal") for new, before in prefill)
    fixed = (1.0, float(heads), float(len(prefill)), float(decode_context + decode),
             float(prefill_keys), float(decode > 0))  # fmt: skip
    return np.concatenate([fixed, token_weights(tokens, knots)])


class FittedSteps:
    """A step-time model fitted to steps measured on a device (chapter 8's fidelity check;
    Vidur, Agrawal et al. MLSys 2024, profiles operators and fits them the same way):
    seconds = Σ coefficient × ``step_features``. The linear layers' time is fitted at each
    of ``knots`` token counts (``token_knots``: every count up to 16) and interpolated
    between them, not assumed linear in the tokens: on a CPU a matmul of 2 rows can take
    longer than one of 8 (another kernel), which a straight line misses by tens of percent.
    ``fit`` takes (Step, seconds) pairs; the per-step constant (``step``) is left at 0 by the
    fit (the knots hold the fixed cost) for a caller to add a cost the profile did not see,
    such as an engine's own overhead."""

    def __init__(self, coefficients: Sequence[float], knots: Sequence[int] = (1,)) -> None:
        knots = tuple(int(k) for k in knots)
        if not knots or knots[0] < 1 or list(knots) != sorted(set(knots)):
            raise ValueError(f"knots must be increasing positive token counts, got {knots!r}")
        if len(coefficients) != len(FEATURES) + len(knots) or min(coefficients) < 0:
            raise ValueError(f"need {len(FEATURES) + len(knots)} non-negative coefficients "
                             f"for {FEATURES} and {len(knots)} knots, got {coefficients!r}")
        self.coefficients = np.asarray(coefficients, dtype=float)
        self.knots = knots

    @classmethod
    def fit(cls, measured: Sequence[tuple[Step, float]]) -> FittedSteps:
        """Least squares on relative error (each row divided by its time, so a 1 ms step
        counts as much as a 100 ms one), with coefficients kept ≥ 0: a feature whose
        coefficient comes out negative is dropped and the rest refitted. The knots run up to
        the largest step measured, and only those a measured step touches are kept: a knot
        between two measured ones with no step of its own would be fitted at 0, and a step
        there interpolated towards it."""
        if not measured:
            raise ValueError("fit needs measured steps, got none")
        knots = token_knots(max(s.tokens for s, _ in measured))
        touched = np.any([token_weights(s.tokens, knots) != 0 for s, _ in measured], axis=0)
        knots = tuple(k for k, used in zip(knots, touched, strict=True) if used)
        width = len(FEATURES) + len(knots)
        if len(measured) < width - 1:
            raise ValueError(f"fit needs at least {width - 1} measured steps for {len(knots)} "
                             f"knots, got {len(measured)}")  # fmt: skip
        x = np.array([step_features(s.prefill, s.decode, s.decode_context, s.heads, knots)
                      for s, _ in measured])  # fmt: skip
        y = np.array([seconds for _, seconds in measured], dtype=float)
        if not (y > 0).all():
            raise ValueError("every measured step time must be positive")
        used = x.any(axis=0)  # a knot no step reaches, a chunk cost with no chunks: not fitted
        used[FEATURES.index("step")] = False  # the per-step constant: the knots hold it
        active = [k for k in range(width) if used[k]]
        while True:
            rows = x[:, active] / y[:, None]
            solution, *_ = np.linalg.lstsq(rows, np.ones(len(y)), rcond=None)
            if (solution >= 0).all():
                break
            del active[int(np.argmin(solution))]
        coefficients = np.zeros(width)
        coefficients[active] = solution
        return cls(coefficients, knots)

    def with_step_cost(self, seconds: float, per_head: float = 0.0) -> FittedSteps:
        """The same model with ``seconds`` more in every step, and ``per_head`` more for
        each sequence that emits a token in it (an engine's own time around a forward)."""
        extra = np.zeros(len(self.coefficients))
        extra[FEATURES.index("step")] = seconds
        extra[FEATURES.index("head")] = per_head
        return FittedSteps(self.coefficients + extra, self.knots)

    def scaled(self, factor: float) -> FittedSteps:
        """The same model with every step ``factor`` times as long."""
        if not factor > 0:
            raise ValueError(f"factor must be positive, got {factor!r}")
        return FittedSteps(self.coefficients * factor, self.knots)

    def __call__(self, step: Step) -> float:
        return float(self.coefficients @ step_features(step.prefill, step.decode,
                                                       step.decode_context, step.heads,
                                                       self.knots))  # fmt: skip

    def decode_run(self, batch: int, context: int, steps: int) -> np.ndarray:
        """``steps`` decode steps at once: the batch's tokens are the same each step, and the
        keys grow by ``batch`` a step, so the time is affine in the step index."""
        first = self(Step((), batch, context, batch))
        per_key = self.coefficients[FEATURES.index("decode_key")]
        return first + per_key * batch * np.arange(steps)


# ----------------------------------------------------------------- watching a run's steps


class WorstStall:
    """A step model that times steps with ``model`` and remembers the longest step that
    carried decodes (``worst``, seconds): the longest a decoding stream waited between two
    tokens because its step also did other work (chapter 8's chunked prefill)."""

    def __init__(self, model: Callable[[Step], float]) -> None:
        self.model, self.worst = model, 0.0

    def __call__(self, step: Step) -> float:
        seconds = self.model(step)
        if step.decode:
            self.worst = max(self.worst, seconds)
        return seconds

    def decode_run(self, batch: int, context: int, count: int) -> np.ndarray:
        """Decode-only stretches, timed at once by the wrapped model (the engine asks)."""
        seconds = self.model.decode_run(batch, context, count)
        self.worst = max(self.worst, float(np.max(seconds)))
        return seconds


class PhaseShare:
    """A step model that splits decoding streams' waiting into the decode work of their
    steps and the rest (the prefill work that shared those steps: chapter 8's stalls).

    For each step with decodes, ``total_wait`` grows by the step's time per decoding stream
    and ``decode_wait`` by the time the same decodes take alone; ``decode_wait /
    total_wait`` is the share of TPOT that decode work explains (chapter 9)."""

    def __init__(self, model: Callable[[Step], float]) -> None:
        self.model, self.decode_wait, self.total_wait = model, 0.0, 0.0

    def __call__(self, step: Step) -> float:
        seconds = self.model(step)
        if step.decode:
            alone = self.model(Step((), step.decode, step.decode_context, step.decode))
            self.decode_wait += alone * step.decode
            self.total_wait += seconds * step.decode
        return seconds

    def decode_run(self, batch: int, context: int, count: int) -> np.ndarray:
        """Decode-only stretches: all of their time is decode work."""
        seconds = self.model.decode_run(batch, context, count)
        self.decode_wait += float(np.sum(seconds)) * batch
        self.total_wait += float(np.sum(seconds)) * batch
        return seconds
