"""Chapter 8's experiments on the simulator, each one call that returns a record of what it
simulated and the verdict the chapter prints: chunked prefill (a trace under token budgets,
a long prompt's chunks, Sarathi-Serve's capacity), prefix caching (a shared system prompt)
and speculation at large batch. Disaggregation and queueing, which compare pairs of chips
at rising load, are ``disaggregation``'s.

Each runs on one chip's roofline engine (``engine.roofline_engine``: the preset model on the
chip's datasheet ceilings, paged KV memory beside the weights), Qwen2.5-7B on an H100 SXM
unless said otherwise. A verdict read at steady state is checked on a trace twice as long:
one that moves there is not yet one (chapter 9 explains the check).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helpers.counting._validate import positive_int
from helpers.counting.memory import kv_bytes_per_token
from helpers.serving.engine import roofline_engine, simulate
from helpers.serving.spec import spec_largest_batch, verify_costs
from helpers.serving.steps import Step, WorstStall
from helpers.serving.studies import prefix_cache_study
from helpers.serving.trace import poisson_trace

__all__ = ["MODEL", "CHIP", "BudgetRun", "ChunkedTrace", "chunked_trace_study", "ChunkRow",
           "ChunkCosts", "chunk_cost_study", "SarathiRow", "SarathiStudy", "sarathi_study",
           "PrefixRow", "PrefixSharing", "prefix_sharing_study", "SpecRow", "SpecAtBatch",
           "spec_batch_study"]  # fmt: skip

MODEL, CHIP = "Qwen2.5-7B", "H100 SXM"


# ------------------------------------------------------------ chunked prefill: a trace


@dataclass(frozen=True)
class BudgetRun:
    """One policy's run of the trace: whole prompts (``budget`` None) or chunked under a
    token budget; the worst stall (the longest step that carried decodes) and the run's
    ``Result.summary`` figures (s, tokens/s)."""

    budget: int | None
    worst_stall: float
    tpot_p99: float
    ttft_mean: float
    ttft_p99: float
    throughput: float

    @property
    def label(self) -> str:
        return "whole prompts" if self.budget is None else f"chunked {self.budget}"


@dataclass(frozen=True)
class ChunkedTrace:
    """``chunked_trace_study``'s runs, whole prompts first, then each budget in order."""

    runs: tuple[BudgetRun, ...]

    @property
    def stall_shrink(self) -> float:
        """How many times shorter the last budget's worst stall is than whole prompts'."""
        return self.runs[0].worst_stall / self.runs[-1].worst_stall

    def table(self) -> str:
        lines = [f"{'policy':<18}{'worst stall':>12}{'TPOT p99':>10}{'TTFT mean':>11}"
                 f"{'TTFT p99':>10}{'tok/s':>7}"]  # fmt: skip
        for run in self.runs:
            lines.append(f"{run.label:<18}{run.worst_stall * 1e3:>9.1f} ms"
                         f"{run.tpot_p99 * 1e3:>7.2f} ms{run.ttft_mean * 1e3:>8.1f} ms"
                         f"{run.ttft_p99 * 1e3:>7.1f} ms{run.throughput:>7.0f}")  # fmt: skip
        whole, last, middle = self.runs[0], self.runs[-1], self.runs[1:-1]
        p99 = [run.tpot_p99 * 1e3 for run in self.runs]
        line = (f"{whole.label} -> {last.label}: worst stall {self.stall_shrink:.1f}x shorter, "
                f"TPOT p99 {1 - p99[-1] / p99[0]:.0%} lower ({p99[0]:.2f} -> {p99[-1]:.2f} ms)")
        if middle:
            line += (f"; budget{'s' * (len(middle) > 1)} "
                     + " and ".join(str(run.budget) for run in middle)
                     + ": TPOT p99 " + " and ".join(f"{ms:.2f}" for ms in p99[1:-1]) + " ms")
        return "\n".join(lines + [line])


def chunked_trace_study(budgets: Sequence[int] = (2048, 1024, 512), n: int = 400,
                        rate: float = 3.0, model: str = MODEL,
                        chip: str = CHIP) -> ChunkedTrace:  # fmt: skip
    """A whole trace under Sarathi-Serve's rule (chapter 8): ``n`` Poisson requests at
    ``rate``/s (geometric prompts of mean 2,048 tokens capped at 16,384, outputs of mean 256
    capped at 2,048, seed 1), served with whole prompts (continuous batching) and chunked
    under each of ``budgets``. A ``WorstStall`` wraps the step model to record the longest
    step that carried decodes; the other figures are the whole run's (no steady window)."""
    if not budgets:
        raise ValueError("budgets must name at least one token budget")
    for budget in budgets:
        positive_int(budget, "budgets")
    steps, memory = roofline_engine(model, chip)
    trace = poisson_trace(n, rate, 2048, 256, seed=1, max_prompt=16384, max_output=2048)
    runs = []
    for budget in (None, *budgets):
        recorder = WorstStall(steps)
        policy = "continuous" if budget is None else "chunked"
        summary = simulate(trace, recorder, memory, policy, token_budget=budget).summary()
        runs.append(BudgetRun(budget, recorder.worst, summary["tpot_p99"], summary["ttft_mean"],
                              summary["ttft_p99"], summary["throughput"]))  # fmt: skip
    return ChunkedTrace(tuple(runs))


# ------------------------------------------------------- chunked prefill: one prompt


@dataclass(frozen=True)
class ChunkRow:
    """One chunk size: the passes, the KV bytes the chunks read back, and the prefill's
    linear-layer and attention seconds summed over its passes."""

    chunk: int
    passes: int
    reread_bytes: int
    linear_s: float
    attention_s: float


@dataclass(frozen=True)
class ChunkCosts:
    """``chunk_cost_study``'s rows, the prompt in one pass, and the smallest chunk read
    against the ridge: one chunk's linear layers alone (``small_linear_s``) against the
    weights' read (one token's linear layers) and its share of the whole pass's compute."""

    prompt: int
    rows: tuple[ChunkRow, ...]
    whole_linear_s: float
    whole_attention_s: float
    whole_s: float
    ridge: float
    weights_read_s: float
    small_linear_s: float
    small_compute_s: float
    bandwidth: float
    tolerance: float

    @property
    def small(self) -> ChunkRow:
        return min(self.rows, key=lambda row: row.chunk)

    @property
    def weight_bound(self) -> bool:
        """The smallest chunk's linear layers outlast their compute: bound by the weights'
        read and the activations' traffic, left of the ridge."""
        return self.small_linear_s > self.small_compute_s

    @property
    def attention_unchanged(self) -> bool:
        """The smallest chunk's attention is within ``tolerance`` of one pass's."""
        return abs(self.small.attention_s / self.whole_attention_s - 1) < self.tolerance

    def table(self) -> str:
        lines = [f"{'chunk':>6}{'passes':>8}{'KV re-read':>12}{'linear':>11}{'attention':>12}"
                 f"{'prefill alone':>15}{'vs whole':>10}"]  # fmt: skip
        for row in self.rows:
            total = row.linear_s + row.attention_s
            lines.append(f"{row.chunk:>6}{row.passes:>8}{row.reread_bytes / 1e9:>9.2f} GB"
                         f"{row.linear_s * 1e3:>8.1f} ms{row.attention_s * 1e3:>9.2f} ms"
                         f"{total * 1e3:>12.1f} ms{total / self.whole_s:>9.2f}x")  # fmt: skip
        small = self.small
        lines.append(
            f"ridge {self.ridge:.0f} FLOPs/byte: a chunk of {small.chunk}'s linear layers take "
            f"{self.small_linear_s * 1e3:.2f} ms, against about {self.small_compute_s * 1e3:.2f} "
            "ms of compute: "
            + (f"reading the weights {self.weights_read_s * 1e3:.2f} ms, then the activations' "
               f"traffic {(self.small_linear_s - self.weights_read_s) * 1e3:.2f} ms"
               if self.weight_bound else "compute-bound"))  # fmt: skip
        lines.append(
            f"chunks of {small.chunk} against one pass: linear layers {small.linear_s * 1e3:.1f} "
            f"vs {self.whole_linear_s * 1e3:.1f} ms, attention {small.attention_s * 1e3:.2f} vs "
            f"{self.whole_attention_s * 1e3:.2f} ms "
            f"({'unchanged' if self.attention_unchanged else 'changed'}: its "
            f"{small.reread_bytes / 1e9:.2f} GB of KV re-read take "
            f"{small.reread_bytes / self.bandwidth * 1e3:.1f} ms at full bandwidth)")
        return "\n".join(lines)


def chunk_cost_study(prompt: int = 8192, chunks: Sequence[int] = (8192, 2048, 1024, 512, 256),
                     model: str = MODEL, chip: str = CHIP,
                     tolerance: float = 0.01) -> ChunkCosts:  # fmt: skip
    """What chunking costs one prompt of ``prompt`` tokens alone (chapter 8): for each of
    ``chunks``, its passes (chunk j after the j·C tokens before it; only the last emits a
    token, one LM-head row), the KV bytes they read back (κ per token before each chunk,
    ``memory.kv_bytes_per_token``), and ``RooflineSteps.parts``' linear and attention
    seconds summed over the passes. The smallest chunk is read against the chip's ridge:
    one chunk's linear layers, the weights' read alone (one token), and its share of the
    whole pass's linear compute; attention is "unchanged" within ``tolerance``."""
    positive_int(prompt, "prompt")
    if not chunks:
        raise ValueError("chunks must name at least one chunk size")
    for chunk in chunks:
        positive_int(chunk, "chunks")
    steps, _ = roofline_engine(model, chip)
    kappa = kv_bytes_per_token(steps.cfg, steps.kv_dtype)
    whole = steps.parts(Step(((prompt, 0),), 0, 0, 1))
    rows = []
    for chunk in chunks:
        pieces = [(min(chunk, prompt - start), start) for start in range(0, prompt, chunk)]
        parts = [steps.parts(Step((piece,), 0, 0, int(i == len(pieces) - 1)))
                 for i, piece in enumerate(pieces)]  # fmt: skip
        linear, attention = (sum(part[key] for part in parts) for key in ("linear", "attention"))
        rows.append(ChunkRow(chunk, len(pieces), kappa * sum(before for _, before in pieces),
                             linear, attention))  # fmt: skip
    small = min(chunks)
    return ChunkCosts(prompt, tuple(rows), whole["linear"], whole["attention"],
                      sum(whole.values()), steps.hw.ridge(steps.dtype),
                      steps.parts(Step(((1, 0),), 0, 0, 0))["linear"],
                      steps.parts(Step(((small, 0),), 0, 0, 0))["linear"],
                      whole["linear"] * small / prompt, steps.hw.bandwidth,
                      tolerance)  # fmt: skip


# ------------------------------------------------------ chunked prefill: Sarathi-Serve


@dataclass(frozen=True)
class SarathiRow:
    """One policy at one rate: the P99 ITL and P99 TTFT (s) and whether both meet their
    SLOs, on the trace and on one twice as long (each pair: (trace, doubled))."""

    label: str
    rate: float
    itl_p99: tuple[float, float]
    ttft_p99: tuple[float, float]
    meets: tuple[bool, bool]

    @property
    def met(self) -> bool:
        return self.meets[0]


@dataclass(frozen=True)
class SarathiStudy:
    """``sarathi_study``'s rows, a chunk's step alone, and each policy's capacity bracket."""

    rows: tuple[SarathiRow, ...]
    requests: int
    chunk_step_s: float
    token_budget: int

    @property
    def settled(self) -> bool:
        """The doubling check: every row gives one verdict on both traces."""
        return all(row.meets[0] == row.meets[1] for row in self.rows)

    def capacity(self, label: str) -> tuple[float | None, float | None]:
        """The highest rate that met the SLOs below the first that did not, and that one
        (None where the rates tried show none)."""
        met, missed = None, None
        for row in (row for row in self.rows if row.label == label):
            if not row.met:
                missed = row.rate
                break
            met = row.rate
        return met, missed

    def table(self) -> str:
        lines = [f"{'policy':<15}{'rate/s':>7}{'ITL p99 ms':>16}{'TTFT p99 ms':>18}{'SLO met':>9}"]
        for row in self.rows:
            (i0, i1), (t0, t1) = row.itl_p99, row.ttft_p99
            lines.append(f"{row.label:<15}{row.rate:>7}{i0 * 1e3:>8.1f} ({i1 * 1e3:.1f})"
                         f"{t0 * 1e3:>10.0f} ({t1 * 1e3:.0f}){'yes' if row.met else 'no':>9}")
        lines.append(f"(in brackets: the same on {2 * self.requests:,} requests); a "
                     f"{self.token_budget}-token chunk's step alone: "
                     f"{self.chunk_step_s * 1e3:.1f} ms")  # fmt: skip
        labels = list(dict.fromkeys(row.label for row in self.rows))
        (whole_met, whole_missed), (chunk_met, _) = (self.capacity(x) for x in labels[:2])

        def bracket(label: str) -> str:
            met, missed = self.capacity(label)
            if met is not None and missed is not None:
                return f"between {met} and {missed}"
            return f"at least {met}" if missed is None else f"below {missed}"

        ratio = (f"above {chunk_met / whole_missed:.1f}x"
                 if chunk_met is not None and whole_missed else "not bracketed by these rates")
        lines.append(f"capacity: {labels[0]} {bracket(labels[0])} requests/s, {labels[1]} "
                     f"{bracket(labels[1])}: chunked / whole {ratio} (Sarathi-Serve: 2.6x for "
                     "Mistral-7B on one A100)")  # fmt: skip
        return "\n".join(lines)


def sarathi_study(whole_rates: Sequence[float] = (3, 4), chunked_rates: Sequence[float] = (8,),
                  token_budget: int = 512, requests: int = 2000, itl_slo: float = 0.050,
                  ttft_slo: float = 2.0, model: str = "Mistral-7B-v0.1",
                  chip: str = "A100 80GB SXM") -> SarathiStudy:  # fmt: skip
    """Sarathi-Serve's capacity comparison on the simulator (chapter 8): Poisson traces of
    ``requests`` (prompts of mean 1,024 capped at 8,192, outputs of mean 256 capped at
    2,048, seed 2) at each rate, whole prompts (continuous batching) at ``whole_rates`` and
    chunked under ``token_budget`` at ``chunked_rates``, each at steady state
    (``Result.steady``). A rate meets the SLO where the P99 ITL is at most ``itl_slo`` and
    the P99 TTFT at most ``ttft_slo``; each verdict is taken on a trace twice as long too
    (``SarathiStudy.settled``: the two agree)."""
    positive_int(token_budget, "token_budget")
    positive_int(requests, "requests")
    steps, memory = roofline_engine(model, chip)
    rows = []
    for label, policy, budget, rates in (("whole prompts", "continuous", None, whole_rates),
                                         (f"chunked {token_budget}", "chunked", token_budget,
                                          chunked_rates)):  # fmt: skip
        for rate in rates:
            runs = [simulate(poisson_trace(n, rate, 1024, 256, seed=2, max_prompt=8192,
                                           max_output=2048),
                             steps, memory, policy, token_budget=budget).steady()
                    for n in (requests, 2 * requests)]  # fmt: skip
            itl = tuple(run.percentiles((99,))["itl_p99"] for run in runs)
            ttft = tuple(float(np.percentile(run.ttft, 99)) for run in runs)
            meets = tuple(i <= itl_slo and t <= ttft_slo for i, t in zip(itl, ttft, strict=True))
            rows.append(SarathiRow(label, rate, itl, ttft, meets))
    chunk_step = steps(Step(((token_budget, 0),), 0, 0, 1))
    return SarathiStudy(tuple(rows), requests, chunk_step, token_budget)


# -------------------------------------------------------------------- prefix caching


@dataclass(frozen=True)
class PrefixRow:
    """One share of requests starting with the shared prompt: the hit rate and the mean
    and p99 TTFT, each (no cache, cache)."""

    share: float
    hit_rate: float
    ttft_mean: tuple[float, float]
    ttft_p99: tuple[float, float]

    @property
    def saved(self) -> tuple[float, float]:
        """The share of the mean and of the p99 TTFT the cache saves."""
        return (1 - self.ttft_mean[1] / self.ttft_mean[0],
                1 - self.ttft_p99[1] / self.ttft_p99[0])  # fmt: skip


@dataclass(frozen=True)
class PrefixSharing:
    """``prefix_sharing_study``'s rows, and per share above 0 whether the p99 saves more,
    less or about the same as the mean (a tie within ``tie``)."""

    rows: tuple[PrefixRow, ...]
    tie: float

    @property
    def verdicts(self) -> dict[float, str]:
        found = {}
        for row in self.rows:
            if row.share:
                mean, p99 = row.saved
                found[row.share] = ("more" if p99 - mean > self.tie else
                                    "less" if mean - p99 > self.tie else "about the same")
        return found

    def table(self) -> str:
        lines = [f"{'sharing':>8}{'hit rate':>10}{'TTFT mean: none':>17}{'cache':>8}{'saved':>8}"
                 f"{'TTFT p99: none':>16}{'cache':>8}{'saved':>8}"]  # fmt: skip
        for row in self.rows:
            (none, cache), (none99, cache99), (mean, p99) = row.ttft_mean, row.ttft_p99, row.saved
            lines.append(f"{row.share:>8.0%}{row.hit_rate:>10.0%}{none * 1e3:>14.1f} ms"
                         f"{cache * 1e3:>5.1f} ms{mean:>8.0%}{none99 * 1e3:>13.1f} ms"
                         f"{cache99 * 1e3:>5.1f} ms{p99:>8.0%}")  # fmt: skip
        lines.append("the p99 saves, against the mean: " + ", ".join(
            f"{verdict} at {share:.0%}" for share, verdict in self.verdicts.items())
            + f" (ties within {self.tie * 100:g} points)")
        return "\n".join(lines)


def prefix_sharing_study(shares: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
                         shared_prefix: int = 2048, tie: float = 0.02) -> PrefixSharing:
    """What a prefix cache saves as more requests share a system prompt (chapter 8):
    ``studies.prefix_cache_study`` (300 requests at 8/s, a ``shared_prefix``-token start
    for each share of them) at each of ``shares``, without and with the cache."""
    if not shares or not all(0 <= share <= 1 for share in shares):
        raise ValueError(f"shares must be shares of requests in [0, 1], got {shares!r}")
    rows = []
    for share in shares:
        study = prefix_cache_study(share, shared_prefix)
        rows.append(PrefixRow(share, study["hit_rate"], study["ttft_mean"], study["ttft_p99"]))
    return PrefixSharing(tuple(rows), tie)


# ---------------------------------------------------------- speculation at large batch


@dataclass(frozen=True)
class SpecRow:
    """One context: the batches whose caches fit, and the largest at which speculation
    lowers TPOT (``spec_largest_batch``)."""

    context: int
    fits: int
    largest: int

    @property
    def pays_everywhere(self) -> bool:
        return self.largest == self.fits


@dataclass(frozen=True)
class SpecAtBatch:
    """``spec_batch_study``'s rows, and the shortest context searched from which
    speculation pays at every batch that fits (``every``; None if none searched does)."""

    rows: tuple[SpecRow, ...]
    every: int | None
    step: int

    def table(self) -> str:
        lines = [f"{'context':>8}{'batches that fit':>18}{'speculation pays up to':>24}"]
        for row in self.rows:
            verdict = "every batch that fits" if row.pays_everywhere else f"batch {row.largest}"
            lines.append(f"{row.context:>8,}{row.fits:>18,}{verdict:>24}")
        lines.append(f"speculation pays at every batch that fits from about {self.every:,} "
                     f"tokens of context (searched in steps of {self.step})"
                     if self.every is not None else
                     "speculation pays at every batch that fits at no context searched")
        return "\n".join(lines)


def spec_batch_study(alpha: float = 0.8, gamma: int = 4, r: float = 0.05,
                     contexts: Sequence[int] = (128, 256, 512, 1024, 2048, 8192),
                     search: tuple[int, int, int] = (512, 1024, 8), model: str = MODEL,
                     chip: str = CHIP) -> SpecAtBatch:  # fmt: skip
    """Speculation at large batch (chapter 8): at each of ``contexts``, the batches whose
    caches fit beside the weights (the engine's KV capacity over the context) and the
    largest of them at which speculation (acceptance ``alpha``, ``gamma`` drafts, a draft
    step ``r`` times the target's) lowers TPOT, on ``verify_costs``' roofline. Then the
    first context of ``search`` (start, stop, step: both ends included) at which it pays at
    every batch that fits."""
    steps, memory = roofline_engine(model, chip)

    def row(context: int) -> SpecRow:
        positive_int(context, "context")
        fits = memory.capacity_tokens // context
        largest = spec_largest_batch(verify_costs(steps.cfg, steps.hw, context, steps.dtype),
                                     alpha, gamma, r, fits)  # fmt: skip
        return SpecRow(context, fits, largest)

    start, stop, step = search
    positive_int(step, "search step")
    every = next((c for c in range(start, stop + 1, step) if row(c).pays_everywhere), None)
    return SpecAtBatch(tuple(row(context) for context in contexts), every, step)
