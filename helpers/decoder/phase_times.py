"""Chapter 6's timings of the whole decoder (`06_ttft_tpot` §4-6), each as one call.

``ttft_against_prompt`` times prefill at each prompt length (TTFT) beside the roofline on the
measured ceilings, with each step's model FLOP/s utilization (MFU) and how each step up in
length grew against the roofline's growth. ``tpot_against_context`` times one decode step at
each context (TPOT), streams the bandwidth again beside each step and keeps the best stream
as the ceiling, and reads model bandwidth utilization (MBU) and TPOT's growth against the
bytes'. ``matmuls_alone`` times a decode step's weight matmuls without the rest of the step.
Each returns a frozen record holding what was measured, the verdicts the chapter prints, and
a ``report()`` that prints them.

Every step reads the one copy of the weights. Where they are less than twice the last-level
cache (a large server cache can hold a 4-layer model whole), the cache is flushed before each
timed step (``weights_flush``), so that each step reads its weights from memory, as a real
model's steps do; ``unflushed_note`` says so of runs that cannot flush, such as a served
request whose steps follow each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from helpers.counting import flops, latency, memory, roofline
from helpers.counting._validate import positive_int
from helpers.counting.models import ModelConfig
from helpers.counting.roofline import RooflineTime
from helpers.decoder.kv_cache import KVCache
from helpers.decoder.model import Decoder
from helpers.measuring import ceilings, machine, timing
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.timing import CacheDefeat

__all__ = ["FAR", "pace_reading",
           "PrefillRow", "PrefillStep", "PrefillCurve", "DecodeRow", "DecodeCurve",
           "MatmulsAlone", "weights_flush_plan", "weights_flush", "unflushed_note",
           "within_spread", "ttft_against_prompt", "tpot_against_context", "weight_matrices",
           "matmuls_alone", "decode_step_at"]  # fmt: skip

FAR = 1.5  # a step's growth more than 1.5× away from the roofline's, either way, is "far"

RAISED = 1.01  # a bandwidth ceiling more than 1% above the one before it was raised


def _increasing(values: Sequence[int], name: str) -> list[int]:
    values = list(values)
    if not values or any(type(v) is not int or v < 1 for v in values) or values != sorted(
            set(values)):  # fmt: skip
        raise ValueError(f"{name} must be positive ints in increasing order, at least one; "
                         f"got {values}")  # fmt: skip
    return values


def weights_flush_plan(cfg: ModelConfig, dtype: str, cache_bytes: int) -> CacheDefeat:
    """How a timed step keeps the last-level cache from serving its weights: one copy of
    them (``max_copies=1``), so ``"flush"`` where they are under ``COPIES_FACTOR`` × the cache
    and ``"rotate"`` (nothing to do) where they are past it (``timing.plan_cache_defeat``)."""
    return timing.plan_cache_defeat(memory.weight_bytes(cfg, dtype), cache_bytes, max_copies=1)


def weights_flush(
    cfg: ModelConfig, dtype: str, cache_bytes: int, device: str
) -> torch.Tensor | None:
    """The buffer ``timing.time_callable`` streams before each timed step where
    ``weights_flush_plan`` says flush, else None."""
    plan = weights_flush_plan(cfg, dtype, cache_bytes)
    return timing.flush_buffer(device, plan.flush_bytes) if plan.method == "flush" else None


def unflushed_note(cfg: ModelConfig, dtype: str, cache_bytes: int) -> str:
    """What a served run must say where the curves' steps were flushed and its own could not
    be (its steps follow each other): part of each weight read may hit the cache. "" where
    the weights are past the cache and nothing was flushed."""
    if weights_flush_plan(cfg, dtype, cache_bytes).method != "flush":
        return ""
    return (f"unlike the curves' steps, these ran without a cache flush: the weights "
            f"({memory.weight_bytes(cfg, dtype) / 1e6:,.0f} MB) are under twice the last-level "
            f"cache ({cache_bytes / 1e6:,.0f} MB), so part of each read may hit the cache")


def within_spread(a: float, b: float, spread: float) -> bool:
    """Whether two timings' difference is no larger than ``spread`` (the sum of their IQRs):
    no difference shown (chapter 6's rule for a growth and for a split against plain)."""
    return abs(a - b) <= spread


# ----------------------------------------------------------------------- TTFT (§4)


class PrefillRow(NamedTuple):
    """One prompt length: median TTFT (s), the FLOPs a prefill must do, the roofline's TTFT
    on the measured ceilings (s), and MFU (last, as the chapter unpacks a row)."""

    prompt: int
    seconds: float
    flops: float
    roofline: float
    mfu: float


def pace_reading(pace: float) -> str:
    """A measured growth over the roofline's (its pace), in words: within ``FAR`` of it, or
    beyond, above or below."""
    where = (f"within {FAR:g}× of it" if 1 / FAR <= pace <= FAR
             else f"more than {FAR:g}× {'above' if pace > 1 else 'below'} it")  # fmt: skip
    return f"{pace:.2f} of the roofline's pace, {where}"


@dataclass(frozen=True)
class PrefillStep:
    """One step up in prompt length: how TTFT grew, measured and on the roofline."""

    shorter: PrefillRow
    longer: PrefillRow

    @property
    def measured_growth(self) -> float:
        return self.longer.seconds / self.shorter.seconds

    @property
    def roofline_growth(self) -> float:
        return self.longer.roofline / self.shorter.roofline

    @property
    def pace(self) -> float:
        """The measured growth over the roofline's: 1 keeps the roofline's pace."""
        return self.measured_growth / self.roofline_growth

    @property
    def far(self) -> bool:
        """A pace more than ``FAR`` away from the roofline's, either way."""
        return not 1 / FAR <= self.pace <= FAR

    @property
    def inverted(self) -> bool:
        """More work in less time: the timings vary more than the step between them."""
        return self.longer.seconds < self.shorter.seconds

    @property
    def costlier(self) -> int | None:
        """Where the pace is far (and not inverted), the prompt whose timing holds more of
        the cost the roofline does not count: the longer one above its pace, else the
        shorter; None otherwise."""
        if self.inverted or not self.far:
            return None
        return self.longer.prompt if self.pace > 1 else self.shorter.prompt

    @property
    def rate_fell(self) -> bool:
        """Far above the roofline's pace with a lower FLOP rate on the larger matmuls:
        something outside the model slowed that timing."""
        return (self.far and self.pace > 1 and self.longer.flops / self.longer.seconds
                < self.shorter.flops / self.shorter.seconds)  # fmt: skip

    def lines(self) -> list[str]:
        s0, s1, t0, t1 = (self.shorter.prompt, self.longer.prompt, self.shorter.seconds,
                          self.longer.seconds)  # fmt: skip
        r0, r1, w0, w1 = (self.shorter.roofline, self.longer.roofline, self.shorter.flops,
                          self.longer.flops)  # fmt: skip
        out = [f"{s0} → {s1} tokens ({s1 / s0:.0f}× the tokens): TTFT {t1 / t0:.2f}×, roofline "
               f"{r1 / r0:.2f}×: {pace_reading(self.pace)}"]
        if self.inverted:
            out.append(f"  the {s1}-token prompt took less time than the {s0}-token one: these "
                       f"timings vary more than the step between them; rerun to compare")
        elif self.costlier is not None:
            out.append(f"  measured/roofline {t0 / r0:.2f} at {s0} tokens, {t1 / r1:.2f} at "
                       f"{s1}: the {self.costlier}-token prefill paid more of what the roofline "
                       f"leaves out")
        if self.rate_fell:
            out.append(f"  and its FLOP rate fell ({w0 / t0 / 1e9:.0f} → {w1 / t1 / 1e9:.0f} "
                       f"GFLOP/s), though its matmuls are larger: something outside the model "
                       f"slowed that timing (other work on the machine, or activations "
                       f"outgrowing a cache); rerun to tell")
        return out


@dataclass(frozen=True)
class PrefillCurve:
    """What ``ttft_against_prompt`` measured: one row a prompt length, in increasing order;
    ``spread``, prompt length → the timing's IQR (s); ``shortest_bound``, the roofline's bound
    of the shortest prefill; ``flushed``, whether the cache was flushed before each step."""

    model: str
    dtype: str
    rows: tuple[PrefillRow, ...]
    spread: dict[int, float]
    shortest_bound: str
    flushed: bool

    @property
    def curve(self) -> dict[int, float]:
        """Prompt length → median TTFT (s): what ``latency.predict_e2e`` reads."""
        return {row.prompt: row.seconds for row in self.rows}

    @property
    def steps(self) -> tuple[PrefillStep, ...]:
        return tuple(PrefillStep(a, b) for a, b in zip(self.rows, self.rows[1:], strict=False))

    @property
    def growth(self) -> float:
        """TTFT at the longest prompt over TTFT at the shortest, measured."""
        return self.rows[-1].seconds / self.rows[0].seconds

    @property
    def roofline_growth(self) -> float:
        return self.rows[-1].roofline / self.rows[0].roofline

    def report(self) -> str:
        """The table, each step's growth against the roofline's, and the whole range's."""
        lines = [f"{'prompt':>7}{'TTFT ms':>10}{'GFLOP':>8}{'GFLOP/s':>9}{'MFU':>7}"
                 f"{'roofline ms':>13}{'measured/roofline':>19}"]
        for prompt, seconds, work, predicted, mfu in self.rows:
            lines.append(f"{prompt:>7}{seconds * 1e3:>10.1f}{work / 1e9:>8.1f}"
                         f"{work / seconds / 1e9:>9.1f}{mfu:>7.0%}{predicted * 1e3:>13.1f}"
                         f"{seconds / predicted:>19.2f}")
        for step in self.steps:
            lines += step.lines()
        first, last = self.rows[0].prompt, self.rows[-1].prompt
        lines.append(f"TTFT({last}) / TTFT({first}): measured {self.growth:.1f}, roofline "
                     f"{self.roofline_growth:.1f}, for {last // first}× the tokens; on the "
                     f"roofline the {first}-token prefill is {self.shortest_bound}-bound")
        pace = self.growth / self.roofline_growth  # the whole range, read as one step is
        lines.append(f"  over the whole range: {pace_reading(pace)}")
        return "\n".join(lines)


def ttft_against_prompt(
    model: Decoder,
    prompts: Sequence[int],
    measured: Ceilings,
    dtype: str,
    device: str = "cpu",
    *,
    run_time: float = 1.0,
    flush: bool = True,
    progress: bool = False,
) -> PrefillCurve:
    """Time ``model(prompt, logits="last")``, a prefill as a server runs it, at each prompt
    length (chapter 6 §4), on two random prompts a length, one warm-up call, timed as in
    chapter 4 (``timing.time_callable``, 0.1 to 0.6 s × ``run_time``), the cache flushed
    before each step where ``weights_flush_plan`` says so (and ``flush``). Each length's
    FLOPs are ``flops.forward_flops`` (causal attention, LM head on the last token), its
    roofline ``latency.ttft`` on ``measured``'s ceilings in ``dtype`` (the model's), its MFU
    against ``measured``'s matmul ceiling. ValueError unless ``prompts`` are increasing
    positive ints."""
    from tqdm.auto import tqdm

    prompts = _increasing(prompts, "prompts")
    cfg: ModelConfig = model.cfg
    hw, peak = measured.as_hardware_spec(), measured.peak(dtype)
    buffer = weights_flush(cfg, dtype, measured.cache_bytes, device) if flush else None

    def prefill(ids: torch.Tensor) -> torch.Tensor:
        return model(ids, logits="last")

    rows, spread = [], {}
    with torch.no_grad():
        for prompt in tqdm(prompts, desc="prefill, per prompt length", disable=not progress):
            inputs = [(torch.randint(0, cfg.vocab, (1, prompt), device=device),)
                      for _ in range(2)]  # fmt: skip
            timed = timing.time_callable(prefill, inputs, device, warmup=1,
                                         min_run_time=0.1 * run_time,
                                         max_run_time=0.6 * run_time, flush=buffer)  # fmt: skip
            work = flops.forward_flops(cfg, prompt, attention="causal", logits="last").total
            rows.append(PrefillRow(prompt, timed.median_s, work,
                                   latency.ttft(cfg, hw, prompt, dtype=dtype),
                                   latency.flops_utilization(work, timed.median_s, peak)))
            spread[prompt] = timed.iqr_s
    shortest = latency.prefill_time(cfg, hw, prompts[0], dtype=dtype)
    return PrefillCurve(cfg.name, dtype, tuple(rows), spread, shortest.bound,
                        buffer is not None)  # fmt: skip


# ----------------------------------------------------------------------- TPOT (§5)


class DecodeRow(NamedTuple):
    """One context: median TPOT (s), the bytes a step must move (``memory.forward_bytes``),
    the roofline's TPOT on the run's best ceilings (s), and MBU (last, as the chapter unpacks
    a row)."""

    context: int
    seconds: float
    bytes_moved: float
    roofline: float
    mbu: float


@dataclass(frozen=True)
class DecodeCurve:
    """What ``tpot_against_context`` measured: one row a context, in increasing order, and
    ``spread``, context → the timing's IQR (s). ``measured``: the ceilings with the best of
    ``earlier_bandwidth`` and ``streams`` as the bandwidth, which every row's roofline and MBU
    use; ``attention``: decode attention on the roofline at the longest context;
    ``prefill``: the shortest prefill's (prompt, measured TTFT, the roofline's TTFT on the
    earlier ceilings, the roofline at the best), or None where no prefill curve was given."""

    model: str
    dtype: str
    rows: tuple[DecodeRow, ...]
    spread: dict[int, float]
    measured: Ceilings
    earlier_bandwidth: float
    streams: tuple[float, ...]
    kv_bytes_per_token: int
    weights_bytes: int
    attention: RooflineTime
    prefill: tuple[int, float, float, RooflineTime] | None = None

    @property
    def curve(self) -> dict[int, float]:
        """Context → median TPOT (s): what ``latency.predict_e2e`` reads."""
        return {row.context: row.seconds for row in self.rows}

    @property
    def raised(self) -> bool:
        """Whether the streams beside the steps raised the bandwidth ceiling by over 1%."""
        return self.measured.bandwidth > RAISED * self.earlier_bandwidth

    @property
    def grown_s(self) -> float:
        """TPOT at the longest context minus at the shortest (s)."""
        return self.rows[-1].seconds - self.rows[0].seconds

    @property
    def by_bytes_s(self) -> float:
        """The bytes' growth at the shortest context's rate (s): the growth if a cache byte
        cost what a weight byte does."""
        first, last = self.rows[0], self.rows[-1]
        return first.seconds * (last.bytes_moved / first.bytes_moved - 1)

    @property
    def growth_spread_s(self) -> float:
        """The two timings' spread: the IQRs of the shortest and longest contexts' TPOT."""
        return self.spread[self.rows[0].context] + self.spread[self.rows[-1].context]

    @property
    def growth_verdict(self) -> str:
        """``"within"`` the spread of the bytes' growth, else ``"more"`` or ``"less"``."""
        if within_spread(self.grown_s, self.by_bytes_s, self.growth_spread_s):
            return "within"
        return "more" if self.grown_s > self.by_bytes_s else "less"

    @property
    def fell(self) -> bool:
        """Whether TPOT fell from the shortest context to the longest by more than the spread:
        a fall within it is no fall shown."""
        return self.grown_s < -self.growth_spread_s

    @property
    def above_ceiling(self) -> list[int]:
        """Contexts whose MBU passed 100%: the ceiling was measured under heavier load."""
        return [row.context for row in self.rows if row.mbu > 1]

    def report(self) -> str:
        bw, earlier = self.measured.bandwidth, self.earlier_bandwidth
        lines = [f"bandwidth ceiling, best of section 3's streams and {len(self.streams)} more: "
                 f"{bw / 1e9:.1f} GB/s"]
        if self.raised and self.prefill is not None:
            prompt, _, before, now = self.prefill
            lines.append(f"  {bw / earlier - 1:.0%} above section 3's {earlier / 1e9:.1f} GB/s: "
                         f"at this ceiling the {prompt}-token prefill's roofline is "
                         f"{now.seconds * 1e3:.1f} ms, not section 4's {before * 1e3:.1f} ms")
        lines.append(f"KV cache: {self.kv_bytes_per_token:,} B per token; it would equal the "
                     f"weights at {self.weights_bytes / self.kv_bytes_per_token:,.0f} tokens of "
                     f"context")
        lines.append(f"{'context':>8}{'TPOT ms':>9}{'spread ms':>10}{'MB moved':>10}{'GB/s':>7}"
                     f"{'MBU':>6}{'roofline ms':>13}{'measured/roofline':>19}")
        for context, seconds, moved, predicted, mbu in self.rows:
            lines.append(f"{context:>8}{seconds * 1e3:>9.2f}{self.spread[context] * 1e3:>10.2f}"
                         f"{moved / 1e6:>10.1f}{moved / seconds / 1e9:>7.1f}"
                         f"{mbu:>6.0%}{predicted * 1e3:>13.2f}{seconds / predicted:>19.2f}")
        first, last = self.rows[0], self.rows[-1]
        lines.append(f"TPOT grows {last.seconds / first.seconds - 1:+.0%} from context "
                     f"{first.context} to {last.context}; the bytes grow "
                     f"{last.bytes_moved / first.bytes_moved - 1:+.0%}, the roofline's time "
                     f"{last.roofline / first.roofline - 1:+.0%}")
        attention = self.attention
        lines.append(f"  on the roofline, decode attention is {attention.bound}-bound here "
                     f"({attention.flops / attention.bytes_moved:.1f} FLOP/B, ridge "
                     f"{self.measured.ridge(self.dtype):.1f}): the roofline's TPOT grows with "
                     + ("the cache's bytes" if attention.bound == "memory" else
                        "attention's FLOPs at the FLOP ceiling, faster than its bytes at the "
                        "bandwidth"))
        verdict = {"within": "within the spread of the bytes' growth: no difference shown",
                   "more": "more than the bytes' growth, beyond the spread",
                   "less": "less than the bytes' growth, beyond the spread"}[self.growth_verdict]
        if self.growth_verdict == "less" and self.fell:
            # More bytes cannot take less time on a steady machine.
            verdict += (": TPOT fell by more than its spread while the bytes grew, so the "
                        "contexts met different moments of a machine whose speed drifts, and "
                        "this curve prices no cache byte")
        elif self.growth_verdict == "less" and within_spread(self.grown_s, 0.0,
                                                             self.growth_spread_s):
            verdict += (": TPOT did not grow beyond its spread while the bytes grew, so here a "
                        f"cache byte cost less time than a byte at context {first.context}'s "
                        "rate, too little for this curve to price")
        lines.append(f"in ms: TPOT grows {self.grown_s * 1e3:+.2f}, the bytes at context "
                     f"{first.context}'s rate {self.by_bytes_s * 1e3:+.2f}, spread (the two ends' "
                     f"IQRs summed) {self.growth_spread_s * 1e3:.2f}: {verdict}")
        if self.above_ceiling:
            lines.append(f"MBU above 100% at contexts {self.above_ceiling}: the bandwidth "
                         f"ceiling was measured under heavier load than these steps; rerun the "
                         f"notebook on a quieter machine")
        if self.prefill is not None:
            prompt, measured_s, _, short = self.prefill
            lines.append(f"the shortest prefill ({prompt} tokens) takes "
                         f"{measured_s / first.seconds:.1f}× one decode step; the roofline "
                         f"{short.seconds / first.roofline:.1f}×, {short.bound}-bound (its "
                         f"FLOPs take {short.compute_seconds * 1e3:.1f} of "
                         f"{short.seconds * 1e3:.1f} ms)")
        return "\n".join(lines)


def tpot_against_context(
    model: Decoder,
    contexts: Sequence[int],
    measured: Ceilings,
    dtype: str,
    device: str = "cpu",
    *,
    prefill: PrefillCurve | None = None,
    run_time: float = 1.0,
    stream_bytes: int | None = None,
    flush: bool = True,
    progress: bool = False,
) -> DecodeCurve:
    """Time one decode step of ``model`` (one token, batch 1, LM head on the last token) at
    each context (chapter 6 §5): a step's cost does not depend on what the cache holds, so
    each context's cache is ``context`` slots of random values and the same step is timed
    from there again and again (two warm-up calls, 0.2 to 0.8 s × ``run_time``), flushed as
    ``ttft_against_prompt`` flushes. Other processes change the stream rate from second to
    second, so the bandwidth is streamed again beside each step (``ceilings.measure_bandwidth``
    over ``stream_bytes``) and the best of those and ``measured``'s is the ceiling that every
    row's roofline (``latency.tpot``) and MBU (``memory.forward_bytes`` over it) use.
    ``prefill``: the TTFT curve of the same model, for the report's lines on the shortest
    prefill. ValueError unless ``contexts`` are increasing positive ints."""
    from tqdm.auto import tqdm

    contexts = _increasing(contexts, "contexts")
    cfg: ModelConfig = model.cfg
    buffer = weights_flush(cfg, dtype, measured.cache_bytes, device) if flush else None
    timed, streams = {}, []
    with torch.no_grad():
        for context in tqdm(contexts, desc="decode, per context", disable=not progress):
            timed[context] = timing.time_callable(
                *decode_step_at(model, context, device), device, warmup=2,
                min_run_time=0.2 * run_time, max_run_time=0.8 * run_time, flush=buffer)
            streams.append(ceilings.measure_bandwidth(device, True, stream_bytes))
    best = ceilings.with_best_bandwidth(measured, streams)
    hw = best.as_hardware_spec()
    rows = []
    for context, t in timed.items():
        moved = sum(memory.forward_bytes(cfg, 1, context=context, dtype=dtype,
                                         logits="last").values())  # fmt: skip
        rows.append(DecodeRow(context, t.median_s, moved,
                              latency.tpot(cfg, hw, context, dtype=dtype),
                              latency.bandwidth_utilization(moved, t.median_s,
                                                            best.bandwidth)))  # fmt: skip
    # The roofline bounds attention on its own (chapter 3): its bound decides what the
    # roofline's TPOT grows with, the cache's bytes or attention's FLOPs.
    attention = roofline.decode_split(cfg, hw, 1, contexts[-1], dtype)["attention"]
    short = None
    if prefill is not None:
        first = prefill.rows[0]
        short = (first.prompt, first.seconds, first.roofline,
                 latency.prefill_time(cfg, hw, first.prompt, dtype=dtype))  # fmt: skip
    return DecodeCurve(cfg.name, dtype, tuple(rows), {c: t.iqr_s for c, t in timed.items()},
                       best, measured.bandwidth, tuple(streams),
                       memory.kv_bytes_per_token(cfg, dtype), memory.weight_bytes(cfg, dtype),
                       attention, short)  # fmt: skip


def decode_step_at(model: Decoder, context: int, device: str):
    """One decode step of ``model`` at ``context`` cached tokens, as ``time_callable`` takes
    it: (the step, its one input set). The cache holds random values (never zeros, which
    some kernels run faster on); a step's cost does not depend on what it holds."""
    token = torch.randint(0, model.cfg.vocab, (1, 1), device=device)
    empty = model.new_cache(batch=1, max_tokens=context + 1)
    for buffer in empty.keys + empty.values:
        buffer.uniform_(-1, 1)
    cache = KVCache(empty.keys, empty.values, tokens=context)

    def decode_step(cache: KVCache) -> torch.Tensor:
        return model(token, cache, logits="last")

    return decode_step, [(cache,)]


# ------------------------------------------------------------- matmuls alone (§6)


def weight_matrices(model: Decoder) -> list[torch.nn.Linear]:
    """The weight matmuls of a decode step in the order it runs them: each layer's q, k, v,
    o, gate, up and down projections, then the LM head."""
    found = []
    for layer in model.layers:
        attention, mlp = layer.attention, layer.mlp
        found += [attention.q, attention.k, attention.v, attention.o, mlp.gate, mlp.up,
                  mlp.down]  # fmt: skip
    return [*found, model.lm_head]


@dataclass(frozen=True)
class MatmulsAlone:
    """A decode step's weight matmuls timed alone (``median_s``, ``iqr_s``) against the whole
    step's median (``step_s``, at ``context`` cached tokens): ``count`` matmuls reading
    ``weight_bytes``."""

    count: int
    weight_bytes: int
    median_s: float
    iqr_s: float
    step_s: float
    context: int

    @property
    def rest_s(self) -> float:
        """The step's time beyond its matmuls: norms, RoPE, attention, the cache write,
        per-operation overhead (negative: the step is its matmuls, within the noise)."""
        return self.step_s - self.median_s

    @property
    def rest_share(self) -> float:
        return 1 - self.median_s / self.step_s

    def report(self) -> str:
        return "\n".join([
            f"{self.count} matmuls alone: {self.median_s * 1e3:.2f} ms "
            f"({self.weight_bytes / self.median_s / 1e9:.1f} GB/s over their "
            f"{self.weight_bytes / 1e6:,.0f} MB)",
            f"whole decode step at context {self.context}: {self.step_s * 1e3:.2f} ms",
            f"the rest (norms, RoPE, attention, cache write, per-op overhead): "
            f"{self.rest_s * 1e3:.2f} ms = {self.rest_share:.0%} of the step"])


def matmuls_alone(
    model: Decoder,
    context: int,
    measured: Ceilings,
    dtype: str,
    device: str = "cpu",
    *,
    run_time: float = 1.0,
    flush: bool = True,
    rounds: int = 3,
) -> MatmulsAlone:
    """Time a decode step's weight matmuls alone (chapter 6 §6) against the whole step at
    ``context`` cached tokens: ``weight_matrices(model)`` in order, each ``F.linear`` on one
    random token, with the model's own weights. The two are timed in turn, ``rounds`` rounds
    of each (``time_callable``, flushed as the step is, ``weights_flush``), and each keeps the
    middle of its rounds' medians: a machine whose speed drifts between two separate timings
    would otherwise put the drift into the difference. ValueError unless ``rounds`` is a
    positive int."""
    positive_int(rounds, "rounds")  # before any tensor is built
    cfg: ModelConfig = model.cfg
    linears = weight_matrices(model)
    x_in = {k: timing.random_tensor((1, k), machine.torch_dtype(dtype), device)
            for k in {m.in_features for m in linears}}  # fmt: skip

    def run() -> None:
        for linear in linears:
            F.linear(x_in[linear.in_features], linear.weight, linear.bias)

    step = decode_step_at(model, context, device)
    buffer = weights_flush(cfg, dtype, measured.cache_bytes, device) if flush else None
    with torch.no_grad():
        timed, whole = timing.time_in_turn(
            [(run, [()]), step], device, rounds=rounds, min_run_time=0.2 * run_time / rounds,
            max_run_time=0.8 * run_time / rounds, flush=buffer)
    step_s = whole.median_s
    matrix_bytes = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    return MatmulsAlone(len(linears), matrix_bytes, timed.median_s, timed.iqr_s, step_s,
                        context)  # fmt: skip
