"""Chapter 9's follow-up questions (`09_capstone` §1–3, §5), each as one call that returns
its record.

- ``greedy_check`` (§1, measured): one verifying pass over γ guesses on section 1's decoder
  against the γ + 1 serial steps it stands for, through ``spec.greedy_verify`` → ``GreedyCheck``;
- ``spec_by_batch`` (§1, roofline): speculation's TPOT and speedup at each batch, its best γ
  (``spec.spec_tpot``) → ``SpecByBatch``;
- ``retrieval_diagnosis`` (§2, simulated): a retrieval workload's slow first token set beside
  each request's own prefill, and three fixes → ``RetrievalDiagnosis``;
- ``interview_claims`` (§5): the interview answer claim by claim, the third claim's shares
  simulated here (``phase_shares``), the others on the roofline
  (``helpers.counting.interview``) → ``interview.Claims``.

§6's design problem has its own module, ``helpers.serving.design_studies``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from helpers.counting import memory
from helpers.counting._validate import non_negative_int, positive_int
from helpers.counting.hardware import HardwareSpec
from helpers.counting.interview import (
    Claims,
    PhaseShares,
    batching_claim,
    decode_claim,
    prefill_claim,
    short_name,
    ttft_tpot_claim,
)
from helpers.counting.models import ModelConfig
from helpers.decoder.chain_times import ChainDecoder, medians_in_turn
from helpers.serving.engine import simulate
from helpers.serving.kv import KVMemory, kv_capacity_tokens
from helpers.serving.spec import greedy_verify, spec_tpot
from helpers.serving.steps import PhaseShare, RooflineSteps, Step
from helpers.serving.trace import Request, poisson_trace

__all__ = ["VerifyCase", "GreedyCheck", "greedy_check", "SpecRow", "SpecByBatch",
           "spec_by_batch", "prefill_alone", "Fix", "RetrievalDiagnosis",
           "retrieval_diagnosis", "phase_shares", "interview_claims"]  # fmt: skip


def _ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 6 -> "6th", 11 -> "11th"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# ------------------------------------------------------------ §1: a pass checks γ links


class VerifyCase(NamedTuple):
    """One verifying pass: how many tokens it lets the stream emit, how many of them are
    confirmed guesses, and whether they are the tokens serial greedy decoding produced."""

    label: str
    emitted: int
    confirmed: int
    same: bool


@dataclass(frozen=True)
class GreedyCheck:
    """``greedy_check``'s answer: each case's pass, and the pass over γ + 1 tokens timed
    against the γ + 1 serial decode steps it stands for (medians of ``rounds``, in turn).
    ``within_bound``: the steps take at most γ + 1 times the pass, as a pass costs at least
    one step; False says the timings are noise."""

    model: str
    device: str
    gamma: int
    rounds: int
    cases: tuple[VerifyCase, ...]
    verify_s: float
    steps_s: float

    @property
    def ratio(self) -> float:
        return self.steps_s / self.verify_s

    @property
    def within_bound(self) -> bool:
        return self.ratio <= self.gamma + 1

    @property
    def all_same(self) -> bool:
        return all(case.same for case in self.cases)

    def report(self) -> str:
        n = self.gamma + 1
        lines = [f"{c.label}: one pass emits {c.emitted} tokens, {c.confirmed} of them guesses, "
                 f"{'the same' if c.same else 'NOT the same'} as serial greedy decoding"
                 for c in self.cases]  # fmt: skip
        lines.append(f"the pass over {n} tokens: {self.verify_s * 1e3:.2f} ms; {n} serial decode "
                     f"steps: {self.steps_s * 1e3:.2f} ms ({self.ratio:.1f}x the pass)")
        lines.append(f"at most {n}x, as a pass costs at least one step: " + (
            "yes" if self.within_bound else
            "NO: the pass timed faster than one step, so these timings are noise"))  # fmt: skip
        return "\n".join(lines)


def greedy_check(setting: ChainDecoder, gamma: int = 8, wrong: int = 5) -> GreedyCheck:
    """Chapter 9 §1: speculative decoding checks γ links of the chain in one pass, exactly.
    On ``setting``'s decoder (``chain_times.chain_decoder``), serial greedy decoding gives
    the prompt's next γ + 2 tokens; one pass over the first of them and γ guesses (every
    guess right, then guess number ``wrong`` + 1 wrong), after the prompt's cache, is read by
    ``spec.greedy_verify``: which tokens it lets the stream emit, and whether they are the
    serial ones (in bf16 a near-tie can round the other way). Then the pass over those
    γ + 1 tokens (the wrong guess's) is timed against the γ + 1 decode steps, each feeding
    the next, that it stands for (``chain_times.medians_in_turn``, ``setting.rounds``).
    ValueError unless 0 <= ``wrong`` < ``gamma``."""
    import torch

    positive_int(gamma, "gamma")
    non_negative_int(wrong, "wrong")
    if wrong >= gamma:
        raise ValueError(f"wrong must name one of the {gamma} guesses (0 … {gamma - 1}), "
                         f"got {wrong}")  # fmt: skip
    model, prompt = setting.model, setting.prompt
    cases = []
    with torch.no_grad():
        truth = model.generate(prompt, gamma + 2)  # the prefill's token, then a step a token
        _, prefix = model(prompt, logits="last", max_tokens=setting.tokens + gamma + 1)
        for label, at in (("every guess right", None), (f"the {_ordinal(wrong + 1)} guess wrong",
                                                        wrong)):  # fmt: skip
            drafts = truth[:, 1 : gamma + 1].clone()
            if at is not None:
                drafts[:, at] = (drafts[:, at] + 1) % setting.cfg.vocab
            checked, _ = model(torch.cat([truth[:, :1], drafts], dim=1), prefix, logits="all")
            emitted, confirmed = greedy_verify(checked, drafts, torch.tensor([gamma]))
            same = emitted[0] == truth[0, 1 : 1 + len(emitted[0])].tolist()
            cases.append(VerifyCase(label, len(emitted[0]), confirmed, same))
    ids = torch.cat([truth[:, :1], drafts], dim=1)

    def serial_steps() -> torch.Tensor:  # the γ + 1 decode steps the pass stands for
        token, cache = truth[:, :1], prefix
        for _ in range(gamma + 1):
            logits, cache = model(token, cache, logits="last")
            token = logits[:, -1:].argmax(-1)
        return token

    verify_s, steps_s = medians_in_turn([lambda: model(ids, prefix, logits="all"), serial_steps],
                                        setting.rounds, setting.device)  # fmt: skip
    return GreedyCheck(setting.cfg.name, setting.device, gamma, setting.rounds, tuple(cases),
                       verify_s, steps_s)  # fmt: skip


class SpecRow(NamedTuple):
    """One batch of ``spec_by_batch``: plain TPOT, the best γ, its TPOT, and whether that
    many sequences fit beside both models."""

    batch: int
    plain: float
    gamma: int
    spec: float
    fits: bool

    @property
    def speedup(self) -> float:
        return self.plain / self.spec


@dataclass(frozen=True)
class SpecByBatch:
    """``spec_by_batch``'s rows, and how many sequences of ``context`` tokens fit on the
    chip beside both models' weights, each with both caches."""

    chip: str
    context: int
    rows: tuple[SpecRow, ...]
    pair_fits: int

    def speedup(self, batch: int) -> float:
        """The speedup at ``batch``, one of the rows'; KeyError otherwise."""
        return {row.batch: row.speedup for row in self.rows}[batch]

    def table(self) -> str:
        lines = [f"{'batch':>6}{'plain TPOT ms':>15}{'best gamma':>12}{'spec TPOT ms':>14}"
                 f"{'speedup':>9}{'fits':>6}"]
        for r in self.rows:
            lines.append(f"{r.batch:>6}{r.plain * 1e3:>15.2f}{r.gamma:>12}{r.spec * 1e3:>14.2f}"
                         f"{r.speedup:>8.2f}x{'yes' if r.fits else 'no':>6}")
        first, fitting = self.rows[0], [r for r in self.rows if r.fits] or list(self.rows)
        lines.append(f"{self.pair_fits} sequences of {self.context:,} tokens fit on the "
                     f"{self.chip} beside both models (weights and caches)")
        lines.append(f"speedup at batch {first.batch}: {first.speedup:.2f}x; at batch "
                     f"{fitting[-1].batch}: {fitting[-1].speedup:.2f}x")
        return "\n".join(lines)


def spec_by_batch(target: ModelConfig, draft: ModelConfig, hw: HardwareSpec,
                  context: int = 2048, alpha: float = 0.8,
                  batches: Sequence[int] = (1, 8, 32, 128, 512),
                  gammas: Sequence[int] = range(1, 9),
                  dtype: str = "bf16") -> SpecByBatch:  # fmt: skip
    """Chapter 9 §1 on the roofline step model: at each batch, plain decoding's TPOT
    against speculative decoding's at the best γ of ``gammas`` (``spec.spec_tpot``: γ draft
    steps and one target pass over γ + 1 tokens a sequence, over the tokens a pass yields
    at acceptance rate ``alpha``), and whether the batch fits on ``hw`` beside both models'
    weights with both caches at ``context`` tokens. The table's last line reads the speedup
    at the first batch and at the largest that fits."""
    positive_int(context, "context")
    if not batches or not gammas:
        raise ValueError("batches and gammas must each hold at least one value")
    room = hw.memory_bytes - memory.weight_bytes(target, dtype) - memory.weight_bytes(draft,
                                                                                       dtype)
    per_sequence = context * (memory.kv_bytes_per_token(target, dtype)
                              + memory.kv_bytes_per_token(draft, dtype))  # fmt: skip
    pair_fits = max(0, int(room // per_sequence))
    rows = []
    for batch in batches:
        def tpot(gamma: int, batch: int = batch) -> float:
            return spec_tpot(target, draft, hw, batch, context, alpha, gamma, dtype)

        gamma = min(gammas, key=tpot)
        rows.append(SpecRow(batch, tpot(0), gamma, tpot(gamma), batch <= pair_fits))
    return SpecByBatch(short_name(hw), context, tuple(rows), pair_fits)


# ------------------------------------------------------ §2: a slow first token, diagnosed


def prefill_alone(steps: RooflineSteps, trace: Sequence[Request]) -> np.ndarray:
    """Each request's prefill on an idle engine, its whole prompt in one step and nothing
    cached (seconds): what its TTFT would be with no queue and no other work."""
    return np.array([steps(Step(((r.prompt, 0),), 0, 0, 1)) for r in trace])


class Fix(NamedTuple):
    """One row of ``retrieval_diagnosis``: the median prompt, TTFT p50, the median prefill
    alone (no cache, ``prefill_alone``), TPOT p50 and p99 (seconds)."""

    name: str
    prompt: float
    ttft: float
    own: float
    tpot: float
    tpot_p99: float


@dataclass(frozen=True)
class RetrievalDiagnosis:
    """``retrieval_diagnosis``'s rows, "as sent" first. ``prefill_share``: the prefill alone
    over the median TTFT as sent; ``cause``: "the prompt" when that is at least half,
    else "a queue"."""

    fixes: tuple[Fix, ...]

    @property
    def as_sent(self) -> Fix:
        return self.fixes[0]

    @property
    def prefill_share(self) -> float:
        return self.as_sent.own / self.as_sent.ttft

    @property
    def cause(self) -> str:
        return "the prompt" if self.prefill_share >= 0.5 else "a queue"

    def ttft_ratio(self, name: str) -> float:
        """A fix's median TTFT over the one as sent."""
        return {f.name: f.ttft for f in self.fixes}[name] / self.as_sent.ttft

    def table(self) -> str:
        # Medians, and labelled so: with geometric lengths the median prompt is below the means
        lines = [f"{'':<22}{'prompt p50':>11}{'TTFT p50':>10}"
                 f"{'prefill alone p50, no cache':>29}{'TPOT p50':>10}{'TPOT p99':>10}"]
        for f in self.fixes:
            lines.append(f"{f.name:<22}{f.prompt:>11.0f}{f.ttft * 1e3:>7.1f} ms"
                         f"{f.own * 1e3:>26.1f} ms{f.tpot * 1e3:>7.2f} ms"
                         f"{f.tpot_p99 * 1e3:>7.2f} ms")
        sent = self.as_sent
        lines.append(f"{sent.name}: the prefill alone is {self.prefill_share:.0%} of the median "
                     f"TTFT, and the median TTFT is {sent.ttft / sent.tpot:.0f} decode steps' "
                     "worth of streaming")
        lines += [f"{f.name}: median TTFT {self.ttft_ratio(f.name):.2f}x as sent"
                  for f in self.fixes[1:]]
        return "\n".join(lines)


def retrieval_diagnosis(cfg: ModelConfig, hw: HardwareSpec, document: int = 6144,
                        trimmed: int = 1536, requests: int = 200, rate: float = 2.0,
                        question: int = 1024, output: int = 256, chunk: int = 512,
                        seed: int = 9) -> RetrievalDiagnosis:  # fmt: skip
    """Chapter 9 §2, "the first token is slow but streaming is fast": a retrieval-style
    workload on one engine of ``cfg`` on ``hw`` (roofline steps, paged KV memory beside the
    weights): every prompt a ``document``-token document all requests share, then a question
    of ~``question`` tokens, outputs of ~``output`` (each capped at 4x its mean), ``requests``
    arriving at ``rate`` a second. Each run's median TTFT is set beside its requests' median
    prefill alone (``prefill_alone``): if that is most of the TTFT the time goes to the
    prompt, not a queue. Then three fixes, each simulated: trim the document to ``trimmed``
    tokens, prefix caching (the shared document's KV blocks reused) and chunked prefill of
    ``chunk`` tokens (continuous batching otherwise)."""
    steps = RooflineSteps(cfg, hw)
    capacity = kv_capacity_tokens(cfg, hw.memory_bytes)
    paged = KVMemory(capacity)

    def trace(shared: int) -> list[Request]:
        return poisson_trace(requests, rate, question, output, seed=seed,
                             max_prompt=4 * question, max_output=4 * output,
                             shared_prefix=shared, shared_fraction=1.0)  # fmt: skip

    long_trace, short_trace = trace(document), trace(trimmed)
    runs = {
        "as sent": (long_trace, paged, "continuous", None),
        "trim the prompt": (short_trace, paged, "continuous", None),
        "prefix caching": (long_trace, KVMemory(capacity, prefix_caching=True), "continuous",
                           None),
        f"chunked prefill {chunk}": (long_trace, paged, "chunked", chunk),
    }  # fmt: skip
    fixes = []
    for name, (served, kv, policy, budget) in runs.items():
        result = simulate(served, steps, kv, policy, token_budget=budget)
        fixes.append(Fix(name, float(np.median([r.prompt for r in served])),
                         float(np.median(result.ttft)),
                         float(np.median(prefill_alone(steps, served))),
                         float(np.nanmedian(result.tpot)),
                         float(np.nanpercentile(result.tpot, 99))))  # fmt: skip
    return RetrievalDiagnosis(tuple(fixes))


# -------------------------------------------------------------- §5: the claims, checked


def phase_shares(steps: RooflineSteps, kv: KVMemory, rate: float, prompt_mean: int,
                 output_mean: int = 256, requests: int = 1000,
                 seed: int = 5) -> PhaseShares:  # fmt: skip
    """Claim 3's numbers, simulated: ``requests`` at ``rate`` a second (prompts ~
    ``prompt_mean``, outputs ~``output_mean``, each capped at 4x its mean) under continuous
    batching on ``steps`` and ``kv``. The median prefill alone (``prefill_alone``) over the
    median TTFT, both over the steady-state requests (``Result.steady``), as in §2; and the
    share of decoding streams' waiting that is decode work (``steps.PhaseShare``, over the
    whole run)."""
    trace = poisson_trace(requests, rate, prompt_mean, output_mean, seed=seed,
                          max_prompt=4 * prompt_mean, max_output=4 * output_mean)  # fmt: skip
    share = PhaseShare(steps)
    result = simulate(trace, share, kv)
    kept = np.isin(result.arrival, result.steady().arrival)
    return PhaseShares(rate, requests,
                       float(np.median(prefill_alone(steps, trace)[kept])
                             / np.median(result.ttft[kept])),
                       share.decode_wait / share.total_wait)  # fmt: skip


def interview_claims(cfg: ModelConfig, hw: HardwareSpec, batching_cfg: ModelConfig,
                     rates: tuple[float, float] = (2.0, 30.0), prompt_mean: int = 1024,
                     output_mean: int = 256, requests: int = 1000,
                     short_prompt: int = 64) -> Claims:  # fmt: skip
    """Chapter 9 §5: the common interview answer beside the book, claim by claim, in bf16.
    Claims 1 and 2 (prefill's and decode's intensities) for ``cfg`` on ``hw``, and claim 4
    (batching) for ``batching_cfg``, on the roofline (``counting.interview``). Claim 3, "TTFT
    is dominated by prefill, TPOT by decode", simulated on one engine of ``cfg`` (roofline
    steps, paged KV memory beside the weights): ``phase_shares`` at a light and a heavy rate
    of ``rates``, the heavy one on a trace twice as long too, and a ``short_prompt``-token
    prompt's prefill in decode steps at that context."""
    light_rate, heavy_rate = rates
    steps = RooflineSteps(cfg, hw)
    paged = KVMemory(kv_capacity_tokens(cfg, hw.memory_bytes))
    light, heavy, longer = (phase_shares(steps, paged, rate, prompt_mean, output_mean, n)
                            for rate, n in ((light_rate, requests), (heavy_rate, requests),
                                            (heavy_rate, 2 * requests)))  # fmt: skip
    short = (steps(Step(((short_prompt, 0),), 0, 0, 1))
             / steps(Step((), 1, short_prompt, 1)))  # fmt: skip
    return Claims((prefill_claim(cfg, hw), decode_claim(cfg, hw),
                   ttft_tpot_claim(light, heavy, longer, short_prompt, short, hw, prompt_mean,
                                   output_mean),
                   batching_claim(batching_cfg, hw)))  # fmt: skip
