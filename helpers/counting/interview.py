"""Chapter 9 (`09_capstone`): the interview answer's follow-ups and claims, on the roofline.

§4 asks which upgrade a workload buys: ``upgrade_study`` sets twice the FLOP/s against twice
the bandwidth for a few workloads, end to end (``latency.upgrade_speedups``,
``latency.flops_to_match``) → ``UpgradeStudy``. §5 sets the common interview answer beside
the book, claim by claim: ``prefill_claim``, ``decode_claim`` and ``batching_claim`` compute
theirs on the roofline; the third claim's numbers come from the simulator
(``helpers.serving.capstone.interview_claims`` runs it and gathers all four), and
``ttft_tpot_claim`` words them. Each claim is a ``Claim``: what the answer says, what the
book found, and a verdict computed from the numbers by one rule (``claim_verdict``).
``pass_intensity`` is a whole forward pass's FLOPs over its bytes, activations included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from helpers.counting import flops, latency, memory, roofline
from helpers.counting._validate import positive_int
from helpers.counting.hardware import HardwareSpec
from helpers.counting.models import ModelConfig

__all__ = ["UPGRADE_WORKLOADS", "pass_intensity", "Upgrade", "UpgradeStudy", "upgrade_study",
           "HOLDS", "CAVEAT", "FAILS", "claim_verdict", "Claim", "Claims", "short_name",
           "shortest_compute_bound_prompt", "prefill_claim", "decode_claim", "PhaseShares",
           "ttft_tpot_claim", "batching_claim"]  # fmt: skip

# (label, prompt tokens, output tokens, requests served together): chapter 9 §4's workloads
UPGRADE_WORKLOADS = (("chat, one stream", 512, 512, 1),
                     ("chat, batched", 512, 512, 64),
                     ("retrieval", 4096, 128, 16),
                     ("summaries", 8192, 64, 4),
                     ("short prompts, batched", 128, 256, 512))  # fmt: skip


def pass_intensity(cfg: ModelConfig, tokens: int, context: int = 0, batch: int = 1,
                   dtype: str = "bf16", attention: str = "causal") -> float:  # fmt: skip
    """FLOPs over bytes of one whole forward pass of ``tokens`` new tokens a sequence after
    ``context`` cached ones, activations included, logits for the last token only
    (chapters 1–3: ``flops.forward_flops`` over ``memory.forward_bytes``). ``attention``:
    ``"causal"`` counts the scores a good kernel computes, ``"dense"`` every score of the
    square, as a masked matmul computes them."""
    ops = flops.forward_flops(cfg, tokens, context=context, batch=batch, attention=attention,
                              logits="last").total  # fmt: skip
    return ops / sum(memory.forward_bytes(cfg, tokens, context=context, batch=batch,
                                          dtype=dtype, logits="last").values())  # fmt: skip


# -------------------------------------------------------------- §4: which upgrade to buy


class Upgrade(NamedTuple):
    """One workload of ``upgrade_study``: its share of time in prefill, the run's speedup
    from ``factor`` times the FLOP/s and from ``factor`` times the bandwidth, and the factor
    of FLOP/s that matches the faster bandwidth (None: none can)."""

    label: str
    prompt: int
    output: int
    batch: int
    prefill_share: float
    flops: float
    bandwidth: float
    flops_to_match: float | None

    @property
    def buy(self) -> str:
        """The upgrade that gains more: "FLOPs" or "bandwidth"."""
        return "FLOPs" if self.flops > self.bandwidth else "bandwidth"


@dataclass(frozen=True)
class UpgradeStudy:
    """``upgrade_study``'s rows on ``model`` and ``chip``, and the critical batch of the
    weight matmuls (``roofline.critical_batch_split``), where batched decode turns
    compute-bound."""

    model: str
    chip: str
    factor: float
    rows: tuple[Upgrade, ...]
    critical_batch: int | None

    def table(self) -> str:
        """A row a workload: its prompt and output tokens, the streams served together, the
        share of the run's time in prefill, the two speedups, which to buy, and the match."""
        x = f"{self.factor:g}x"
        lines = [f"{'workload':<24}{'prompt':>7}{'output':>7}{'streams':>8}{'prefill share':>14}"
                 f"{f'{x} FLOPs':>10}{f'{x} bandwidth':>14}  buy"
                 f"{f'FLOPs to match {x} bandwidth':>29}"]
        for r in self.rows:
            match = "none" if r.flops_to_match is None else f"{r.flops_to_match:.2f}x"
            lines.append(f"{r.label:<24}{r.prompt:>7,}{r.output:>7,}{r.batch:>8,}"
                         f"{r.prefill_share:>14.0%}{r.flops:>9.2f}x{r.bandwidth:>13.2f}x"
                         f"  {r.buy:<9}{match:>23}")
        lines.append(f"critical batch of the weight matmuls: {self.critical_batch}")
        return "\n".join(lines)


def upgrade_study(cfg: ModelConfig, hw: HardwareSpec,
                  workloads: Sequence[tuple[str, int, int, int]] = UPGRADE_WORKLOADS,
                  factor: float = 2.0, dtype: str = "bf16") -> UpgradeStudy:  # fmt: skip
    """Chapter 9 §4: for each workload (label, prompt tokens, output tokens, requests served
    together), the run's speedup end to end on a chip ``factor`` times ``hw`` in FLOP/s or in
    bandwidth (``latency.upgrade_speedups``: Amdahl's law over the roofline's parts), which
    of the two to buy, and the factor of FLOP/s that serves the run as fast as ``factor``
    times the bandwidth (``latency.flops_to_match``). ValueError for no workloads."""
    if not workloads:
        raise ValueError("workloads must hold at least one (label, prompt, output, batch)")
    rows = []
    for label, prompt, output, batch in workloads:
        gain = latency.upgrade_speedups(cfg, hw, prompt, output, batch, factor, dtype)
        match = latency.flops_to_match(cfg, hw, prompt, output, batch, factor, dtype)
        rows.append(Upgrade(label, prompt, output, batch, gain["prefill_share"], gain["flops"],
                            gain["bandwidth"], match))  # fmt: skip
    return UpgradeStudy(cfg.name, hw.name, factor, tuple(rows),
                        roofline.critical_batch_split(cfg, hw, dtype))  # fmt: skip


# ---------------------------------------------------------- §5: the short answer, corrected

HOLDS, CAVEAT, FAILS = "holds", "holds with a caveat", "fails"


def claim_verdict(core: bool, caveats: Sequence[bool]) -> str:
    """Chapter 9 §5's rule: ``"fails"`` when the claim's core is wrong, ``"holds with a
    caveat"`` when the core is right but a case the book computed contradicts the claim's
    generality (any of ``caveats``), else ``"holds"``."""
    return FAILS if not core else (CAVEAT if any(caveats) else HOLDS)


@dataclass(frozen=True)
class Claim:
    """One claim of the interview answer: what it ``said`` in numbers, what the book
    ``found``, whether its ``core`` holds and which ``caveats`` (cases against its
    generality) the book's numbers raise; ``verdict`` by ``claim_verdict``."""

    claim: str
    said: str
    found: str
    core: bool
    caveats: tuple[bool, ...]

    @property
    def verdict(self) -> str:
        return claim_verdict(self.core, self.caveats)


@dataclass(frozen=True)
class Claims:
    """The interview answer, claim by claim (chapter 9 §5)."""

    claims: tuple[Claim, ...]

    @property
    def verdicts(self) -> tuple[str, ...]:
        return tuple(c.verdict for c in self.claims)

    def report(self) -> str:
        return "\n".join(f"{number}. {c.claim}\n   interview answer: {c.said}\n"
                         f"   the book found:   {c.found}\n   verdict:          {c.verdict}\n"
                         for number, c in enumerate(self.claims, 1))  # fmt: skip


def _k(tokens: int) -> str:
    """1024 -> "1k", 32768 -> "32k"; other counts as they are."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else f"{tokens:,}"


def short_name(hw: HardwareSpec) -> str:
    """The chip as chapter 9's prose names it: "H100" for "H100 SXM"."""
    return hw.name.split()[0]


def shortest_compute_bound_prompt(cfg: ModelConfig, hw: HardwareSpec, dtype: str = "bf16",
                                  longest: int = 1 << 16) -> int | None:  # fmt: skip
    """The shortest prompt whose prefill is compute-bound on the roofline
    (``latency.prefill_time``; shorter ones are memory-bound), found by bisection up to
    ``longest`` tokens; None if even that one is memory-bound (chapter 9 §4)."""
    return roofline.first_batch(
        lambda tokens: latency.prefill_time(cfg, hw, tokens, dtype=dtype).bound == "compute",
        longest)  # fmt: skip


def _interview_terms(cfg: ModelConfig, dtype: str) -> tuple[int, float, int]:
    """N, b and κ of the interview answer's formulas."""
    return flops.param_count(cfg), memory.dtype_bytes(dtype), memory.kv_bytes_per_token(cfg, dtype)


def prefill_claim(cfg: ModelConfig, hw: HardwareSpec, prompt: int = 1024,
                  dtype: str = "bf16") -> Claim:  # fmt: skip
    """Claim 1, "prefill is compute-bound, intensity ~2S/b": the answer's 2NS/(Nb + κS) at
    ``prompt`` tokens against the whole pass with activations, each weight GEMM and the LM
    head on the last token, and the shortest compute-bound prompt. Its core holds if the
    pass reaches the ridge; caveats: the LM head below it, short prompts below it, the
    formula more than 20% off."""
    positive_int(prompt, "prompt")
    said = roofline.interview_prefill_intensity(*_interview_terms(cfg, dtype), prompt)
    whole = pass_intensity(cfg, prompt, dtype=dtype)
    gemms = {name: roofline.gemm_intensity(prompt, k, n, dtype)
             for name, (k, n) in cfg.linear_shapes().items() if name != "lm_head"}  # fmt: skip
    head = roofline.gemm_intensity(1, cfg.hidden, cfg.vocab, dtype)
    short = shortest_compute_bound_prompt(cfg, hw, dtype)
    ridge = roofline.ridge_point(hw, dtype)
    return Claim(
        "prefill is compute-bound, intensity ~2S/b", f"{said:,.0f} FLOP/B at S = {prompt:,}",
        f"{whole:,.0f} FLOP/B with activations; per GEMM {min(gemms.values()):,.0f} "
        f"({min(gemms, key=gemms.get)}_proj) to {max(gemms.values()):,.0f}; the LM head on the "
        f"last token {head:.2f}; compute-bound only from S = {short} (ridge {ridge:.0f})",
        whole >= ridge, (head < ridge, short is None or short > 1, abs(whole / said - 1) > 0.2))


def decode_claim(cfg: ModelConfig, hw: HardwareSpec, contexts: tuple[int, int] = (1024, 32768),
                 batch: int = 64, dtype: str = "bf16") -> Claim:  # fmt: skip
    """Claim 2, "decode is ~1 FLOP/B": the answer's 2N/(Nb + κc) at a
    short and a long context against a batch-1 step with activations at both, attention's
    and (at ``batch``) the weight matmuls' intensities on their own
    (``roofline.decode_split``), and the KV cache's share of the bytes when as many
    sequences of the long context as fit are held. Core: batch 1 within 25% of 1 FLOP/B;
    caveats: the long context above 1.25, attention above 2, the batch's weights above 2,
    the cache over half the bytes."""
    short, long = contexts
    terms = _interview_terms(cfg, dtype)
    said = [roofline.interview_decode_intensity(*terms, c) for c in contexts]
    one, one_long = (pass_intensity(cfg, 1, context=c, dtype=dtype) for c in contexts)
    split = {b: {name: t.flops / t.bytes_moved
                 for name, t in roofline.decode_split(cfg, hw, b, short, dtype).items()}
             for b in (1, batch)}  # fmt: skip
    fits = memory.max_concurrent_sequences(cfg, hw.memory_bytes, long, dtype)
    kv = memory.kv_cache_bytes(cfg, long, batch=fits, dtype=dtype)  # as many as fit
    kv_share = kv / (kv + memory.weight_bytes(cfg, dtype))
    return Claim(
        f"decode is ~1 FLOP/B in {dtype}",
        f"{said[0]:.3f} at {_k(short)}, {said[1]:.3f} at {_k(long)}",
        f"{one:.3f} at batch 1 counted op by op (the embedding a lookup, not a matmul or a "
        f"whole-table read; activations and attention's FLOPs, not in 2N, added) and "
        f"{one_long:.2f} at {_k(long)} (attention's FLOPs grow with the cache); "
        f"attention {split[1]['attention']:.2f} (GQA group {cfg.group_size}); weight matmuls at "
        f"batch {batch} "
        f"{split[batch]['weights']:.1f}; at {_k(long)}, the {fits} sequences that fit an "
        f"{short_name(hw)} make the KV cache {kv_share:.0%} of the bytes ({kv / 2**30:.0f} GiB)",
        abs(one - 1) < 0.25, (one_long > 1.25, split[1]["attention"] > 2,
                              split[batch]["weights"] > 2, kv_share > 0.5))  # fmt: skip


class PhaseShares(NamedTuple):
    """A simulated run of claim 3 (``helpers.serving.capstone.phase_shares``): at ``rate``
    requests/s over ``requests``, the median prefill alone over the median TTFT at steady
    state, and the share of decoding streams' waiting that is decode work."""

    rate: float
    requests: int
    prefill_of_ttft: float
    decode_of_tpot: float


def ttft_tpot_claim(light: PhaseShares, heavy: PhaseShares, longer: PhaseShares,
                    short_prompt: int, short_prefill_steps: float, hw: HardwareSpec,
                    prompt_mean: int, output_mean: int) -> Claim:  # fmt: skip
    """Claim 3, "TTFT is dominated by prefill, TPOT by decode", worded from the simulator's
    numbers: a ``light`` and a ``heavy`` load, the heavy one on a ``longer`` trace, and a
    ``short_prompt``'s prefill in decode steps. Core: at the light load the prefill is over
    half the median TTFT and decode work over half of TPOT; caveats: under the heavy load
    (either trace) the prefill under half of TTFT, or decode work under 90% of TPOT."""
    return Claim(
        "TTFT is dominated by prefill, TPOT by decode",
        "prefill ~ all of TTFT; decode ~ all of TPOT",
        f"one {short_name(hw)}, continuous batching, prompts ~{_k(prompt_mean)}, outputs "
        f"~{output_mean}, {light.requests:,} requests: at {light.rate:g} req/s the prefill "
        f"alone is {light.prefill_of_ttft:.0%} of the median TTFT (steady state) and decode "
        f"work {light.decode_of_tpot:.0%} of TPOT (the whole run); at {heavy.rate:g} req/s "
        f"{heavy.prefill_of_ttft:.0%} and {heavy.decode_of_tpot:.0%} (on "
        f"{longer.requests:,} requests {longer.prefill_of_ttft:.0%} and "
        f"{longer.decode_of_tpot:.0%}; the rest: queueing, and prefills sharing the decodes' "
        f"steps); a {short_prompt}-token prompt's prefill costs {short_prefill_steps:.2f} "
        "decode steps, so its TTFT on an idle server, still all prefill, is about one TPOT",
        light.prefill_of_ttft > 0.5 and light.decode_of_tpot > 0.5,
        (heavy.prefill_of_ttft < 0.5, longer.prefill_of_ttft < 0.5, heavy.decode_of_tpot < 0.9,
         longer.decode_of_tpot < 0.9))  # fmt: skip


def batching_claim(cfg: ModelConfig, hw: HardwareSpec, context: int = 4096, batch: int = 64,
                   dtype: str = "bf16") -> Claim:  # fmt: skip
    """Claim 4, "batching multiplies decode throughput, not one stream's speed":
    a decode step of ``batch`` sequences at ``context`` against one
    (``latency.decode_step_time``), and the memory's cap on the batch
    (``memory.max_concurrent_sequences``) against the critical batch
    (``roofline.critical_batch_split``). Core: over 10x the tokens/s; caveats: TPOT up more
    than 1.5x, the memory capping the batch below the critical batch."""
    positive_int(batch, "batch")
    tpot_1 = latency.decode_step_time(cfg, hw, 1, context, dtype)
    tpot_b = latency.decode_step_time(cfg, hw, batch, context, dtype)
    gain = batch * tpot_1 / tpot_b
    fits = memory.max_concurrent_sequences(cfg, hw.memory_bytes, context, dtype)
    critical = roofline.critical_batch_split(cfg, hw, dtype)
    capped = critical is None or fits < critical
    return Claim(
        "batching multiplies decode throughput, not one stream's speed",
        "throughput up ~B-fold, TPOT about flat",
        f"{cfg.name} at {_k(context)}: batch {batch} gives {gain:.0f}x the tokens/s of batch 1 "
        f"while each request's TPOT rises {tpot_b / tpot_1:.2f}x; memory caps the batch at "
        f"{fits}, {'below' if capped else 'not below'} the critical batch {critical}",
        gain > 10, (tpot_b / tpot_1 > 1.5, capped))  # fmt: skip
