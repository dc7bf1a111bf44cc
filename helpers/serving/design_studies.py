"""Chapter 9 §6 (`09_capstone`): the design problem's readings, each as one call that
returns its record. The search itself is the planner's (``planner.plan_serving``); these
studies read what it found and why.

- ``design_search``: every candidate at the load and at the top of the goodput ladder the
  chips can serve, each rerun on a trace twice as long, the best one's report, its steady
  check, and what the top rate asks of a split pair's prefill chip → ``DesignSearch``;
- ``short_trace_study``: the same search on a short trace, and why it ends elsewhere
  → ``ShortTrace``;
- ``knob_plans`` (chapter 10's knobs: chips per engine, the KV cache's dtype): a decode
  step, the KV room and the plan of each deployment → ``KnobPlans``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from helpers.counting import flops, hardware, models
from helpers.serving.planner import (
    ATTAINMENT_TOLERANCE,
    GOODPUT_TOLERANCE,
    PLAN_LOADS,
    Plan,
    Scenario,
    ServingConfig,
    SteadyCheck,
    check_servable,
    config_goodput,
    config_report,
    plan_serving,
    serve_config,
    steady_check,
)
from helpers.serving.steps import Step

__all__ = ["QUEUE_GROWS", "SloShares", "slo_shares", "CandidateAt", "CandidateRow", "DesignSearch",
           "design_search", "TraceLength", "ShortTrace", "short_trace_study", "KnobPlan",
           "KnobPlans", "knob_plans"]  # fmt: skip

QUEUE_GROWS = 1.5  # a median TTFT or TPOT that grows by half as the trace doubles: a queue grows


class SloShares(NamedTuple):
    """A candidate at one rate, at steady state: the shares of requests meeting the TTFT
    SLO and the TPOT SLO, each on its own, and both; and the median TTFT and TPOT (s): a
    queue for prefill shows in the one, a queue for decode slots (a split pair's decode chip
    at its batch cap) in the other."""

    ttft: float
    tpot: float
    both: float
    median_ttft: float
    median_tpot: float


def slo_shares(scenario: Scenario, config: ServingConfig, rate: float) -> SloShares:
    """``serve_config``'s run of ``config`` at ``rate``, read against the scenario's SLOs."""
    result = serve_config(scenario, config, rate)
    tpot = result.tpot
    return SloShares(float(np.mean(result.ttft <= scenario.ttft_slo)),
                     float(np.mean(np.isnan(tpot) | (tpot <= scenario.tpot_slo))),
                     result.attainment(scenario.ttft_slo, scenario.tpot_slo),
                     float(np.median(result.ttft)), float(np.nanmedian(tpot)))  # fmt: skip


@dataclass(frozen=True)
class CandidateAt:
    """A candidate at one rate on the scenario's trace (``once``) and on one twice as long
    (``again``). ``verdict``: "queue grows" when the median TTFT or TPOT grows by
    ``QUEUE_GROWS`` or more, "unstable" when a share moves more than
    ``planner.ATTAINMENT_TOLERANCE``, else "steady" (the shares hold)."""

    once: SloShares
    again: SloShares

    @property
    def verdict(self) -> str:
        if (self.again.median_ttft > QUEUE_GROWS * self.once.median_ttft
                or self.again.median_tpot > QUEUE_GROWS * self.once.median_tpot):
            return "queue grows"
        if any(abs(b - a) > ATTAINMENT_TOLERANCE
               for a, b in zip(self.once[:3], self.again[:3], strict=True)):  # fmt: skip
            return "unstable"
        return "steady"

    def cells(self, columns: Sequence[str]) -> str:
        """The shares of ``columns`` (fields of ``SloShares``), six characters each, or the
        verdict across them where they do not hold."""
        if self.verdict != "steady":
            return f"{self.verdict:>{6 * len(columns)}}"
        return "".join(f"{getattr(self.once, name):>6.0%}" for name in columns)


@dataclass(frozen=True)
class CandidateRow:
    """One candidate of ``design_search``: at the load and at the top rate, and its goodput
    on the scenario's trace (None: it misses the load) and on one twice as long."""

    config: ServingConfig
    at_load: CandidateAt
    at_top: CandidateAt
    goodput: float | None
    goodput_doubled: float | None

    @property
    def goodput_moves(self) -> bool:
        """The goodput moves more than ``planner.GOODPUT_TOLERANCE`` as the trace doubles."""
        if self.goodput is None or self.goodput_doubled is None:
            return False
        pair = (self.goodput, self.goodput_doubled)
        return abs(pair[1] - pair[0]) > GOODPUT_TOLERANCE * max(pair)


@dataclass(frozen=True)
class DesignSearch:
    """``design_search``'s answer: the search (``plan``), the ladder's ``top`` rate the
    chips can serve and the rungs above it ``refused`` (``planner.check_servable``'s
    reasons), every candidate's row, the best one's ``config_report`` and ``steady_check``
    (None when none meets the SLOs), and the FLOP/s the prompts ask of a split pair's
    prefill engine at the top rate against its peak (``prefill_over_peak``: more than it
    can compute)."""

    scenario: Scenario
    plan: Plan
    top: float
    refused: tuple[str, ...]
    rows: tuple[CandidateRow, ...]
    report: dict[str, float] | None
    steady: SteadyCheck | None
    prefill_flops: float
    prefill_peak: float

    @property
    def prefill_over_peak(self) -> bool:
        return self.prefill_flops > self.prefill_peak

    def table(self) -> str:
        s, plan, top = self.scenario, self.plan, self.top
        lines = [f"{'':<50}{f'at the load ({s.rate:g}/s)':^26}"
                 f"{f'at {top / s.rate:g}x the load':^14}",
                 f"{'candidate':<50}{'both':>6}{'TTFT':>6}{'TPOT':>6}{'goodput':>8}{'TTFT':>8}"
                 f"{'TPOT':>6}"]  # fmt: skip
        for row in self.rows:
            shown = ("" if row.goodput is None else
                     f"{row.goodput:g}->{row.goodput_doubled:g}" if row.goodput_moves else
                     f"{row.goodput:g}")  # fmt: skip
            lines.append(f"{row.config.label():<50}"
                         f"{row.at_load.cells(('both', 'ttft', 'tpot'))}{shown:>8}  "
                         f"{row.at_top.cells(('ttft', 'tpot'))}")  # fmt: skip
        if plan.best is None or self.report is None:
            lines.append(f"\nno candidate meets the SLOs at {s.rate:g} requests/s")
        else:
            r = self.report
            lines += [
                f"\nbest: {plan.best.label()}, goodput {plan.goodput:g} requests/s "
                f"({plan.goodput / s.rate:g}x the load; {plan.per_chip:g} per chip)",
                f"at the load: attainment {r['attainment']:.1%} (standard error "
                f"{r['attainment_se']:.1%}), TTFT p90 {r['ttft_p90'] * 1e3:.1f} ms, TPOT p90 "
                f"{r['tpot_p90'] * 1e3:.2f} ms, {r['throughput']:,.0f} output tokens/s, peak "
                f"batch {r['peak_batch']}",
                str(self.steady),
            ]  # fmt: skip
        lines.append(f"the split pair at {top:g} requests/s: the prompts ask its prefill chip "
                     f"for {self.prefill_flops / 1e12:,.0f} TFLOP/s, "
                     f"{self.prefill_flops / self.prefill_peak:.0%} of its peak "
                     f"{self.prefill_peak / 1e12:,.0f}"
                     + (": more than it can compute, so its queue of prompts grows"
                        if self.prefill_over_peak else ""))  # fmt: skip
        lines += [f"not tried: {why}" for why in self.refused]
        return "\n".join(lines)


def _ladder(scenario: Scenario, loads: Sequence[float]) -> tuple[float, tuple[str, ...]]:
    """The top rung of ``loads`` × the load that the chips can serve, and why each rung
    above it cannot be (``check_servable``). ValueError if not even the lowest can."""
    servable, refused = [], []
    for load in sorted(loads):
        rate = scenario.rate * load
        try:
            check_servable(scenario, rate)
            servable.append(rate)
        except ValueError as error:
            refused.append(str(error))
    if not servable:
        raise ValueError(f"no rate of the ladder can be served: {refused[0]}")
    return servable[-1], tuple(refused)


def design_search(scenario: Scenario, candidates: Sequence[ServingConfig] | None = None,
                  loads: Sequence[float] = PLAN_LOADS) -> DesignSearch:  # fmt: skip
    """Chapter 9 §6, the design problem read: the reference search (``plan_serving`` over
    ``candidates``, default ``plan_candidates()``, on the ladder ``loads``), then each
    candidate's SLO shares at the load and at the top rung the chips can serve, each on the
    scenario's trace and on one twice as long (``CandidateAt``: the queue grows, or the
    shares move), and each goodput that met the load again on the doubled trace
    (``config_goodput``). For the best: ``config_report`` and ``steady_check``. And the
    split pair's prefill engine at the top rate: the FLOP/s its prompts' prefills need
    (``flops.forward_flops``, causal, at that rate) against its peak (its ``tp`` chips)."""
    top, refused = _ladder(scenario, loads)
    plan = plan_serving(scenario, candidates, loads)
    doubled = replace(scenario, requests=2 * scenario.requests)

    def at(config: ServingConfig, rate: float) -> CandidateAt:
        return CandidateAt(slo_shares(scenario, config, rate), slo_shares(doubled, config, rate))

    rows = []
    for config in plan.attainment:
        goodput = plan.goodputs.get(config)
        again = None if goodput is None else config_goodput(doubled, config, loads)
        rows.append(CandidateRow(config, at(config, scenario.rate), at(config, top), goodput,
                                 again))  # fmt: skip
    best = plan.best
    cfg = models.get(scenario.model)
    prompts = [flops.forward_flops(cfg, r.prompt, attention="causal", logits="last").total
               for r in scenario.trace(top)]  # fmt: skip
    return DesignSearch(
        scenario, plan, top, refused, tuple(rows),
        None if best is None else config_report(scenario, best),
        None if best is None else steady_check(scenario, best, loads),
        float(top * np.mean(prompts)),
        scenario.tp * hardware.get(scenario.chip).peak(scenario.dtype))  # fmt: skip


class TraceLength(NamedTuple):
    """``short_trace_study`` at the top rate on a trace of ``requests``: the short trace's
    choice's attainment and its busiest engine's sequences, and the steady search's
    choice's attainment."""

    requests: int
    short_share: float
    busiest: int
    best_share: float


@dataclass(frozen=True)
class ShortTrace:
    """``short_trace_study``'s answer: the search on ``requests`` requests (its choice
    ``short_best``, goodput, how many candidates tied there), that choice's goodput at
    steady state, when the short trace's requests have all arrived at the ``top`` rate and
    a request's mean lifetime there, and the two choices on longer traces. ``misleads``:
    the short trace chose otherwise than the steady search ``best``."""

    rate: float
    top: float
    requests: int
    short_best: ServingConfig
    short_goodput: float
    tied: int
    candidates: int
    steady_goodput: float
    last_arrival: float
    mean_lifetime: float
    best: ServingConfig
    rows: tuple[TraceLength, ...]

    @property
    def misleads(self) -> bool:
        return self.short_best != self.best

    def report(self) -> str:
        x, short = f"{self.top / self.rate:g}x", self.short_best.label()
        lines = [
            f"on {self.requests} requests the search picks {short}: goodput "
            f"{self.short_goodput:g} requests/s ({self.short_goodput / self.rate:g}x the load), "
            f"with {self.tied} of {self.candidates} candidates tied there; at steady state "
            f"that configuration's goodput is {self.steady_goodput:g}",
            f"at {x} the load, {self.requests} requests arrive in {self.last_arrival:.2f} s; "
            f"with {short} a request's mean lifetime there is {self.mean_lifetime:.2f} s",
        ]  # fmt: skip
        lines += [f"{r.requests:>5} requests at {x} the load: with {short} attainment "
                  f"{r.short_share:.0%}, busiest engine {r.busiest} sequences (cap "
                  f"{self.short_best.max_batch}); with {self.best.label()} {r.best_share:.0%}"
                  for r in self.rows]  # fmt: skip
        return "\n".join(lines)


def short_trace_study(scenario: Scenario, requests: int = 100,
                      lengths: Sequence[int] = (100, 1000, 2000),
                      loads: Sequence[float] = PLAN_LOADS) -> ShortTrace:  # fmt: skip
    """Chapter 9 §6, "what a short trace says": the reference search on ``requests``
    requests instead of the scenario's, its choice's goodput at steady state (the
    scenario's search), and why they differ: at the top rung the chips can serve, when the
    short trace's last request arrives against a request's mean lifetime under its choice
    (all arrive within about one lifetime, so the engines never fill), then both choices'
    attainment at that rate on traces of ``lengths`` requests, with the short choice's
    busiest engine against its batch cap. ValueError if either search finds no candidate."""
    top, _ = _ladder(scenario, loads)
    plan = plan_serving(scenario, loads=loads)
    short = replace(scenario, requests=requests)
    on_short = plan_serving(short, loads=loads)
    if on_short.best is None or plan.best is None:
        raise ValueError(f"no candidate meets the SLOs at {scenario.rate:g} requests/s on "
                         f"{requests if on_short.best is None else scenario.requests} requests")
    tied = [c for c, rate in on_short.goodputs.items() if rate == on_short.goodput]
    on_top = serve_config(short, on_short.best, top)
    rows = []
    for n in lengths:
        longer = replace(scenario, requests=n)
        runs = [serve_config(longer, config, top) for config in (on_short.best, plan.best)]
        shares = [r.attainment(scenario.ttft_slo, scenario.tpot_slo) for r in runs]
        rows.append(TraceLength(n, shares[0], runs[0].max_running, shares[1]))
    return ShortTrace(scenario.rate, top, requests, on_short.best, on_short.goodput, len(tied),
                      len(on_short.attainment), plan.goodputs.get(on_short.best, 0.0),
                      short.trace(top)[-1].arrival, float(np.mean(on_top.e2e)), plan.best,
                      tuple(rows))  # fmt: skip


class KnobPlan(NamedTuple):
    """One deployment of ``knob_plans``: a decode step of the batch at the mix's mean
    context, the KV tokens those sequences hold against an engine's KV room, and the
    search's plan."""

    scenario: Scenario
    step_s: float
    need: int
    capacity: int
    plan: Plan

    @property
    def fits(self) -> bool:
        return self.need <= self.capacity


@dataclass(frozen=True)
class KnobPlans:
    """``knob_plans``' deployments, by knob."""

    batch: int
    knobs: tuple[tuple[str, tuple[KnobPlan, ...]], ...]

    def report(self) -> str:
        lines = []
        for knob, rows in self.knobs:
            lines.append(f"{knob}:")
            for row in rows:
                s, plan = row.scenario, row.plan
                best = ("no candidate meets the SLOs at this load" if plan.best is None else
                        f"{plan.best.label()}; goodput {plan.goodput:g} requests/s, "
                        f"{plan.per_chip:g} per chip")  # fmt: skip
                over = "" if row.fits else ", more than the engine has"
                lines.append(f"  {s.all_chips} x {s.chip}, TP={s.tp}, KV {s.kv_dtype or s.dtype}: "
                             f"decode step of {self.batch} sequences {row.step_s * 1e3:.2f} ms "
                             f"(TPOT SLO {s.tpot_slo * 1e3:g} ms; their KV {row.need:,} "
                             f"tokens{over}), KV room {row.capacity:,} tokens an engine -> "
                             f"{best}")  # fmt: skip
        return "\n".join(lines)


def knob_plans(pairs: Mapping[str, Sequence[Scenario]], loads: Sequence[float] = PLAN_LOADS,
               batch: int = 32) -> KnobPlans:  # fmt: skip
    """Chapter 10's two knobs in chapter 9's planner: for each deployment of each knob (the
    same deployment with one or more chips per engine, a bf16 or an fp8 KV cache), one
    engine's decode step of ``batch`` sequences at the mix's mean context (prompt plus half
    the output) on its step model, the KV tokens they hold against the engine's room
    (``Scenario.engine``), and the reference search on the ladder ``loads``
    (``plan_serving``). ValueError for a knob with no deployment."""
    knobs = []
    for knob, scenarios in pairs.items():
        if not scenarios:
            raise ValueError(f"knob {knob!r} has no deployment to plan")
        rows = []
        for s in scenarios:
            steps, kv = s.engine()
            context = round(s.prompt_mean + s.output_mean // 2)
            step = steps(Step((), batch, batch * context, batch))
            rows.append(KnobPlan(s, step, batch * context, kv.capacity_tokens,
                                 plan_serving(s, loads=loads)))  # fmt: skip
        knobs.append((knob, tuple(rows)))
    return KnobPlans(batch, tuple(knobs))
