"""Chapter 8's experiments on pairs of chips at rising load, each one call that returns a
record of what it simulated and the verdict the chapter prints: prefill/decode
disaggregation (DistServe, Splitwise) against colocated pairs, whole-prompt or chunked
(their goodputs, and their engines at one rate), and the queueing that ends every goodput
(M/D/1 against the simulator, a batching pair's utilization).

Every pair is two H100 SXMs running Qwen2.5-7B (``engine.roofline_engine``), serving the
same trace (``pd_trace``); ``pd_run`` simulates one and is cached, as several tables read
the same runs. A figure read at steady state is checked on a trace twice as long: one that
moves there is not yet one (chapter 9 explains the check).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from helpers.counting._validate import positive_int
from helpers.serving.engine import roofline_engine, simulate, simulate_disaggregated
from helpers.serving.kv import kv_transfer_seconds
from helpers.serving.metrics import Result, max_rate_under_slo
from helpers.serving.optimisations import CHIP, MODEL
from helpers.serving.steps import Step
from helpers.serving.studies import kv_handoff_study
from helpers.serving.trace import poisson_trace

__all__ = ["PD_KINDS", "PD_BUDGET", "pd_trace", "pd_run", "pd_inside", "queue_grows",
           "pd_cell", "Disaggregation", "disaggregation_study", "PDLoad", "PDEngines",
           "pd_engines_study", "md1_wait", "MD1Row", "MD1Study", "md1_study",
           "UtilizationRow", "Utilization", "utilization_study"]  # fmt: skip


# ------------------------------------------------------------------- disaggregation

PD_KINDS = {"colocated": "whole", "chunked": "chunked", "split": "split"}
"""The pairs of chips compared (their short labels): colocated with whole prompts, colocated
with chunked prefill, and split into a prefill and a decode engine."""

PD_BUDGET = 512  # the chunked pair's token budget: section 2's, decodes included


def pd_trace(rate: float, n: int, prompt_mean: int = 1024, max_prompt: int = 16384):
    """The trace every pair serves: ``n`` Poisson requests at ``rate``/s, geometric prompts
    of ``prompt_mean`` capped at ``max_prompt``, outputs of mean 256 capped at 2,048."""
    return poisson_trace(n, rate, prompt_mean, 256, seed=4, max_prompt=max_prompt,
                         max_output=2048)  # fmt: skip


@functools.lru_cache(maxsize=128)
def pd_run(kind: str, rate: float, n: int = 3000, prompt_mean: int = 1024,
           max_prompt: int = 16384, token_budget: int = PD_BUDGET,
           link_bytes_per_s: float = 50e9, model: str = MODEL,
           chip: str = CHIP) -> Result:  # fmt: skip
    """Two chips at ``rate`` requests/s at steady state (``Result.steady``), as ``kind``
    (``PD_KINDS``): colocated, requests dealt round-robin, prompts whole (``"colocated"``)
    or chunked under ``token_budget`` (``"chunked"``); or ``"split"``, one prefill and one
    decode engine, each prompt's KV cache sent whole after its prefill over a link of
    ``link_bytes_per_s`` (``kv_transfer_seconds``), the prefill engine batching up to
    ``max_prompt`` prompt tokens a step (whole prompts; every prompt fits one). Cached:
    the chapter reads the same runs in several tables."""
    steps, memory = roofline_engine(model, chip)
    trace = pd_trace(rate, n, prompt_mean, max_prompt)
    if kind == "colocated":
        return simulate(trace, steps, memory, engines=2).steady()
    if kind == "chunked":
        return simulate(trace, steps, memory, "chunked", token_budget=token_budget,
                        engines=2).steady()  # fmt: skip
    if kind != "split":
        raise ValueError(f"kind must be one of {', '.join(PD_KINDS)}, got {kind!r}")

    def link(tokens: int) -> float:
        return kv_transfer_seconds(steps.cfg, tokens, link_bytes_per_s)

    return simulate_disaggregated(trace, steps, steps, memory, memory, link,
                                  prefill_budget=max_prompt).steady()  # fmt: skip


def pd_inside(kind: str, rate: float, n: int = 3000) -> float:
    """Requests inside the pair at once, by Little's law: the arrival rate times the mean
    time a request spends inside."""
    return rate * float(np.mean(pd_run(kind, rate, n).e2e))


def queue_grows(kind: str, rate: float, n: int = 3000) -> bool:
    """The doubling check on load: more than 10% more requests inside on a trace twice as
    long means no steady state yet, the engines at or past their capacity."""
    return pd_inside(kind, rate, 2 * n) > 1.1 * pd_inside(kind, rate, n)


def pd_cell(kind: str, rate: float, slo: tuple[float, float], n: int = 3000) -> str:
    """The share meeting ``slo`` (TTFT, TPOT) where doubling the trace moves it by at most 2
    points; where it moves more, only its side of 90%, if both traces agree on that;
    "queue grows" where ``queue_grows``."""
    if queue_grows(kind, rate, n):
        return "queue grows"
    short, long = (pd_run(kind, rate, m).attainment(*slo) for m in (n, 2 * n))
    if abs(long - short) <= 0.02:
        return f"{short:.0%}"
    if (short >= 0.9) == (long >= 0.9):
        return ">= 90%" if short >= 0.9 else "< 90%"
    return "unsettled"


@dataclass(frozen=True)
class Disaggregation:
    """``disaggregation_study``'s table (``cells[(rate, kind, slo name)]``) and goodputs
    (``goodputs[n][(kind, slo name)]``, requests/s for the pair) on traces of ``short``,
    ``requests`` and twice as many requests."""

    rates: tuple[float, ...]
    slos: dict[str, tuple[float, float]]
    requests: int
    short: int
    token_budget: int
    cells: dict[tuple[float, str, str], str]
    goodputs: dict[int, dict[tuple[str, str], float]]

    def goodput(self, kind: str, slo: str, n: int | None = None) -> float:
        return self.goodputs[n or self.requests][(kind, slo)]

    def best(self, slo: str) -> list[str]:
        """The kinds with the highest goodput under ``slo`` (ties all named)."""
        rates = {kind: self.goodput(kind, slo) for kind in PD_KINDS}
        return [kind for kind, rate in rates.items() if rate == max(rates.values())]

    def report(self) -> str:
        lines = [f"{'rate/s':>7}" + "".join(f"{f'{label}, {name}':>16}"
                                            for label in PD_KINDS.values() for name in self.slos)]
        for rate in self.rates:
            lines.append(f"{rate:>7}" + "".join(f"{self.cells[(rate, kind, name)]:>16}"
                                                for kind in PD_KINDS for name in self.slos))
        lines.append(f"key: whole, chunked: colocated, prompts whole or in chunks of "
                     f"{self.token_budget}; split: disaggregated. A share that moves by over 2 "
                     f"points on {2 * self.requests:,} requests shows only its side of 90% (the "
                     "goodput's threshold); 'queue grows': over 10% more requests inside there, "
                     "the engines at or past capacity, no steady state")  # fmt: skip
        for name, slo in self.slos.items():
            rates = {kind: self.goodput(kind, name) for kind in PD_KINDS}
            ratios = [f"{rates['split'] / rates[kind]:.2f}x" if rates[kind] else "unbounded"
                      for kind in ("colocated", "chunked")]
            lines.append(f"goodput, TPOT <= {slo[1] * 1e3:g} ms for 90%: " + ", ".join(
                f"{PD_KINDS[kind]} {r:g}" for kind, r in rates.items())
                + " req/s for the pair (per chip, half that); "
                f"split / whole {ratios[0]}, split / chunked {ratios[1]}; highest: "
                + " and ".join(PD_KINDS[kind] for kind in self.best(name)))
        for n in (self.short, 2 * self.requests):  # what a short trace said, and the check
            lines.append(f"on {n:,} requests a trace, goodputs (req/s): " + "; ".join(
                f"{name} " + ", ".join(f"{PD_KINDS[kind]} {self.goodput(kind, name, n):g}"
                                       for kind in PD_KINDS) for name in self.slos))
        return "\n".join(lines)


def disaggregation_study(rates: Sequence[float] = (40, 50, 60, 70, 80, 90),
                         slos: Mapping[str, tuple[float, float]] | None = None,
                         requests: int = 3000, short: int = 300) -> Disaggregation:
    """When disaggregation pays (chapter 8; DistServe, Splitwise): each pair of ``PD_KINDS``
    at each of ``rates`` (``pd_run``), the share of requests meeting each of ``slos`` (name:
    (TTFT, TPOT) s; default a 0.5 s TTFT and a loose 10 ms or tight 7.5 ms TPOT) read by
    ``pd_cell`` with the doubling check, and each pair's goodput (``max_rate_under_slo``, 90%
    meeting) on traces of ``short``, ``requests`` and twice as many requests."""
    positive_int(requests, "requests")
    positive_int(short, "short")
    slos = dict(slos or {"loose": (0.5, 0.010), "tight": (0.5, 0.0075)})
    rates = tuple(rates)
    cells = {(rate, kind, name): pd_cell(kind, rate, slo, requests)
             for rate in rates for kind in PD_KINDS for name, slo in slos.items()}
    goodputs = {n: {(kind, name): max_rate_under_slo(lambda rate, k=kind, m=n: pd_run(k, rate, m),
                                                     rates, *slo)
                    for kind in PD_KINDS for name, slo in slos.items()}
                for n in (requests, short, 2 * requests)}  # fmt: skip
    return Disaggregation(rates, slos, requests, short, PD_BUDGET, cells, goodputs)


@dataclass(frozen=True)
class PDLoad:
    """Each pair (``PD_KINDS``) on one trace length: its median TPOT, the sequences one of
    its decode engines holds at once (Little's law on the decode phase), and a decode-only
    step at that batch (s)."""

    n: int
    tpot: dict[str, float]
    batch: dict[str, float]
    alone: dict[str, float]

    def excess(self, kind: str) -> float:
        """The median TPOT over the decode-only step: what prefill work adds."""
        return self.tpot[kind] - self.alone[kind]


@dataclass(frozen=True)
class PDEngines:
    """``pd_engines_study``'s record: one 1,024-token prompt's prefill, a batch-32 decode
    step and the prompt's KV transfer (s); each trace length's ``PDLoad``; how busy the split
    pair's prefill and decode engines and the whole-prompt pair's two engines are."""

    rate: float
    prefill_s: float
    decode_step_s: float
    transfer_s: float
    loads: tuple[PDLoad, ...]
    split_busy: tuple[float, float]
    colocated_busy: tuple[float, ...]

    def report(self) -> str:
        lines = [f"at {self.rate} requests/s:",
                 f"  prefill of a 1,024-token prompt: {self.prefill_s * 1e3:.1f} ms;"
                 f" a decode step at batch 32: {self.decode_step_s * 1e3:.2f} ms;"
                 f" KV transfer: {self.transfer_s * 1e3:.2f} ms"]  # fmt: skip
        for load in self.loads:
            tpot, batch, alone = load.tpot, load.batch, load.alone
            lines.append(
                f"  median TPOT on {load.n:,} requests: whole-prompt colocated "
                f"{tpot['colocated'] * 1e3:.2f} ms, disaggregated {tpot['split'] * 1e3:.2f} ms "
                f"(TPOT difference {(tpot['colocated'] - tpot['split']) * 1e3:.2f} ms); decoding "
                f"at once: about {batch['colocated']:.0f} an engine and {batch['split']:.0f}, "
                f"whose decode-only steps take {alone['colocated'] * 1e3:.2f} and "
                f"{alone['split'] * 1e3:.2f} ms; over that step, median TPOT "
                f"+{load.excess('colocated') * 1e3:.2f} ms whole, "
                f"+{load.excess('split') * 1e3:.2f} ms disaggregated")
            lines.append(f"    chunked colocated: median TPOT {tpot['chunked'] * 1e3:.2f} ms, "
                         f"about {batch['chunked']:.0f} decoding an engine, "
                         f"+{load.excess('chunked') * 1e3:.2f} ms over its decode-only step")
        front, back = self.split_busy
        lines.append(f"  the prefill engine is busy {front:.0%} of its run, the decode engine "
                     f"{back:.0%}")
        lines.append("  the two whole-prompt colocated engines are busy "
                     + " and ".join(f"{share:.0%}" for share in self.colocated_busy)
                     + " of theirs")
        return "\n".join(lines)


def pd_engines_study(rate: float, requests: int = 3000) -> PDEngines:
    """The pairs' engines at one ``rate`` (chapter 8: at the whole-prompt pair's goodput),
    on ``pd_run``'s traces of ``requests`` and twice as many (a difference moves most under
    doubling): each pair's median TPOT; by Little's law on the decode phase, the sequences
    decoding at once on one decode engine (the rate over the decode engines, times the mean
    time from first token to last); and a decode-only step at that batch, each sequence at
    the trace's mean prompt plus half its mean output cached: the TPOT that engine would
    have with no prefill beside it. Then how busy the engines were, on the first trace."""
    positive_int(requests, "requests")
    steps, _ = roofline_engine(MODEL, CHIP)
    handoff = kv_handoff_study(MODEL, CHIP, 1024, 50e9, 32)
    loads = []
    for n in (requests, 2 * requests):
        runs = {kind: pd_run(kind, rate, n) for kind in PD_KINDS}
        tpot = {kind: float(np.nanmedian(run.tpot)) for kind, run in runs.items()}
        batch = {kind: rate / (1 if kind == "split" else 2) * float(np.mean(run.e2e - run.ttft))
                 for kind, run in runs.items()}  # fmt: skip
        context = float(np.mean([r.prompt + r.output / 2 for r in pd_trace(rate, n)]))
        alone = {kind: steps(Step((), round(b), round(b * context), round(b)))
                 for kind, b in batch.items()}  # fmt: skip
        loads.append(PDLoad(n, tpot, batch, alone))
    split = pd_run("split", rate, requests)
    front, back = split.extra["prefill"][0], split.extra["decode"][0]
    colocated = pd_run("colocated", rate, requests).extra["engines"]
    return PDEngines(rate, handoff["prefill_s"], handoff["decode_step_s"],
                     handoff["transfer_s"], tuple(loads),
                     (front.busy_seconds / front.makespan, back.busy_seconds / back.makespan),
                     tuple(e.busy_seconds / e.makespan for e in colocated))  # fmt: skip


# ------------------------------------------------------------------------- queueing


def md1_wait(rho: float, service_s: float) -> float:
    """M/D/1's mean wait before service (Pollaczek–Khinchine with zero service variance):
    ρ·t_s / (2(1 − ρ)) for Poisson arrivals at utilization ``rho`` < 1 and a fixed service
    time ``service_s``."""
    if not 0 <= rho < 1:
        raise ValueError(f"rho must be a utilization in [0, 1), got {rho!r}")
    return rho * service_s / (2 * (1 - rho))


@dataclass(frozen=True)
class MD1Row:
    """One utilization: the simulated mean wait and M/D/1's (s), the mean number inside
    sampled over the steady window and λW (Little's law), and the engine's busy share."""

    rho: float
    wait_s: float
    formula_s: float
    inside: float
    little: float
    busy: float


@dataclass(frozen=True)
class MD1Study:
    """``md1_study``'s service time and rows."""

    prompt: int
    service_s: float
    rows: tuple[MD1Row, ...]

    def table(self) -> str:
        lines = [f"one {self.prompt}-token prefill: t_s = {self.service_s * 1e3:.2f} ms",
                 f"{'rho':>5}{'simulated wait ms':>19}{'M/D/1 ms':>10}{'inside':>9}"
                 f"{'lambda W':>10}{'busy':>7}"]  # fmt: skip
        for row in self.rows:
            lines.append(f"{row.rho:>5}{row.wait_s * 1e3:>19.2f}{row.formula_s * 1e3:>10.2f}"
                         f"{row.inside:>9.3f}{row.little:>10.3f}{row.busy:>7.0%}")
        return "\n".join(lines)


def md1_study(rhos: Sequence[float] = (0.3, 0.5, 0.7, 0.8, 0.9), prompt: int = 512,
              n: int = 8000, samples: int = 5000) -> MD1Study:
    """An engine as an M/D/1 queue (chapter 8): one ``prompt``-token prefill at a time
    (``max_batch=1``), one output token a request, so each request's service is that
    prefill, t_s. At each utilization ρ, ``n`` Poisson requests at ρ/t_s (fixed lengths,
    seed 6); the mean wait at steady state (TTFT − t_s) against ``md1_wait``, and the number
    inside sampled at ``samples`` instants of the steady window against the arrival rate
    there times the mean time inside (Little's law)."""
    positive_int(prompt, "prompt")
    positive_int(samples, "samples")
    steps, memory = roofline_engine(MODEL, CHIP)
    service = steps(Step(((prompt, 0),), 0, 0, 1))
    rows = []
    for rho in rhos:
        formula = md1_wait(rho, service)
        trace = poisson_trace(n, rho / service, prompt, 1, seed=6, lengths="fixed")
        run = simulate(trace, steps, memory, max_batch=1)
        steady = run.steady()
        start, end = steady.window
        instants = np.linspace(start, end, samples)
        inside = ((run.arrival[:, None] <= instants) & (run.finish[:, None] > instants)).sum(0)
        arrived = (run.arrival >= start) & (run.arrival <= end)
        little = arrived.sum() / (end - start) * float(np.mean(run.e2e[arrived]))
        rows.append(MD1Row(rho, float(np.mean(steady.ttft)) - service, formula,
                           float(inside.mean()), float(little),
                           run.busy_seconds / run.makespan))  # fmt: skip
    return MD1Study(prompt, service, tuple(rows))


@dataclass(frozen=True)
class UtilizationRow:
    """One rate: the share of the pair's peak FLOP/s its work needs, and TTFT's p50 and p90
    (s) on the trace, which ``state`` says whether to read: ``"steady"``, ``"not steady"``
    (doubling moves one by over 10%) or ``"queue grows"`` (``queue_grows``)."""

    rate: float
    of_peak: float
    ttft_p50: float
    ttft_p90: float
    inside: float
    state: str


@dataclass(frozen=True)
class Utilization:
    """``utilization_study``'s rows."""

    rows: tuple[UtilizationRow, ...]

    def table(self) -> str:
        lines = [f"{'rate/s':>7}{'of peak FLOP/s':>16}{'TTFT p50 ms':>13}{'TTFT p90 ms':>13}"
                 f"{'requests inside':>17}"]  # fmt: skip
        for row in self.rows:
            figures = {"queue grows": f"{'queue grows: no steady state':>43}",
                       "not steady": f"{'not steady: doubling moves TTFT > 10%':>43}"}.get(
                row.state, f"{row.ttft_p50 * 1e3:>13.1f}{row.ttft_p90 * 1e3:>13.1f}"
                           f"{row.inside:>17.0f}")  # fmt: skip
            lines.append(f"{row.rate:>7}{row.of_peak:>16.0%}{figures}")
        return "\n".join(lines)


def utilization_study(rates: Sequence[float] = (40, 50, 60, 70, 80, 90), kind: str = "colocated",
                      requests: int = 3000) -> Utilization:  # fmt: skip
    """A batching pair's utilization (chapter 8): at each of ``rates``, the FLOP/s its
    requests need (the trace's mean ``RooflineSteps.request_work`` times the rate) over the
    two chips' peak, and ``pd_run``'s TTFT p50 and p90 for ``kind``, checked by doubling
    the trace (each within 10%) and by ``queue_grows``; Little's law's requests inside."""
    positive_int(requests, "requests")
    steps, _ = roofline_engine(MODEL, CHIP)
    peak = 2 * steps.hw.peak(steps.dtype)  # the pair's FLOP/s
    rows = []
    for rate in rates:
        work = np.mean([steps.request_work(r.prompt, r.output)[0]
                        for r in pd_trace(rate, requests)])  # fmt: skip
        runs = [pd_run(kind, rate, n) for n in (requests, 2 * requests)]
        p50, p90 = ([np.percentile(run.ttft, q) for run in runs] for q in (50, 90))
        if queue_grows(kind, rate, requests):
            state = "queue grows"
        elif max(p50) > 1.1 * min(p50) or max(p90) > 1.1 * min(p90):
            state = "not steady"
        else:
            state = "steady"
        rows.append(UtilizationRow(rate, rate * work / peak, float(p50[0]), float(p90[0]),
                                   pd_inside(kind, rate, requests), state))  # fmt: skip
    return Utilization(tuple(rows))
