"""What a run measured: per-request latencies and the serving metrics built on them, and the
metrics of one streamed request read from its token times (chapter 6).

TPOT has one convention here, vLLM's benchmark's: (e2e − TTFT)/(n − 1), NaN for a one-token
output, which has no decode step (``tpot_from``); statistics over requests leave those out."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

WARMUP = 0.1  # share of requests, by arrival, dropped at each end of a steady-state window
BATCHES = 10  # batch means for a standard error: consecutive groups of measured requests


class TokenTimes(Sequence):
    """Each request's token emission times (s), computed when asked: request i emitted at
    the ends of the steps in its ``ranges`` (inclusive step ranges of one engine whose step
    ends are ``ends``), after the times in its ``before`` (tokens from another engine, e.g.
    the first token from a prefill engine). Engines build it; ``Result.itl`` reads it."""

    def __init__(self, parts: Sequence[tuple[np.ndarray, Sequence[Sequence[tuple[int, int]]]]],
                 where: Sequence[tuple[int, int]],
                 before: Sequence[np.ndarray | None] | None = None) -> None:  # fmt: skip
        self._parts, self._where, self._before = parts, where, before

    def __len__(self) -> int:
        return len(self._where)

    def __getitem__(self, i):  # noqa: ANN001 (an index or a slice, as a Sequence's)
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        part, local = self._where[i]
        pieces = [] if self._before is None or self._before[i] is None else [self._before[i]]
        if part >= 0:
            ends, emits = self._parts[part]
            pieces += [ends[a:b + 1] for a, b in emits[local]]
        return np.concatenate(pieces) if pieces else np.empty(0)

    def subset(self, indices: Sequence[int]) -> TokenTimes:
        before = None if self._before is None else [self._before[i] for i in indices]
        return TokenTimes(self._parts, [self._where[i] for i in indices], before)


# ------------------------------------------------------------- one request's token times


def tpot_from(decode_seconds, output_tokens):  # noqa: ANN001, ANN201 (scalars or arrays)
    """TPOT as vLLM's benchmark defines it: the seconds from the first token to the last
    (e2e − TTFT) over the n − 1 tokens after the first; NaN where n = 1, a one-token output
    with no decode step, which vLLM's benchmark leaves out of its TPOT statistics (read them
    with nan-aware reductions: ``np.nanmean``, ``np.nanmedian``). Broadcasts over arrays."""
    steps = np.asarray(output_tokens) - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(steps > 0, np.asarray(decode_seconds, dtype=float) / steps, np.nan)


def _check_token_times(start_s: float, token_times: Sequence[float]) -> list[float]:
    times = [float(t) for t in token_times]
    if not times:
        raise ValueError("token_times is empty: a request emits at least one token")
    if any(b < a for a, b in zip(times, times[1:], strict=False)) or times[0] < start_s:
        raise ValueError("token_times must be non-decreasing and no earlier than start_s")
    return times


def inter_token_latencies(token_times: Sequence[float]) -> list[float]:
    """Gaps between consecutive tokens (ITL), n − 1 of them: what a streaming user feels."""
    times = _check_token_times(float("-inf"), token_times)
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def token_time_metrics(start_s: float, token_times: Sequence[float]) -> dict[str, float]:
    """TTFT, TPOT, end-to-end latency and the largest ITL of one request (chapter 6).

    ``start_s``: when the request arrived; ``token_times``: when each of its n tokens came
    out. TTFT = t₁ − start; e2e = tₙ − start; TPOT = (e2e − TTFT)/(n − 1) (``tpot_from``,
    as vLLM's benchmark defines it), so that e2e = TTFT + (n − 1)·TPOT holds exactly, and
    TPOT is the mean ITL. A one-token answer has no decode step: its TPOT is NaN (left out
    of statistics over requests) and its max_itl 0.0 (no gap).
    """
    times = _check_token_times(start_s, token_times)
    ttft_s, e2e_s = times[0] - start_s, times[-1] - start_s
    gaps = inter_token_latencies(times)
    return {"ttft": ttft_s, "tpot": float(tpot_from(e2e_s - ttft_s, len(times))),
            "e2e": e2e_s, "max_itl": max(gaps) if gaps else 0.0}  # fmt: skip


def stall_report(
    request: int, arrivals: Sequence[float], token_times: Sequence[Sequence[float]]
) -> dict[str, float | list[int]]:
    """The worst stall in one request's stream and the prefills that ran in it (chapter 6).

    ``arrivals[r]`` and ``token_times[r]``: request r's arrival and its tokens' times, all
    from one engine, which stamps a token when the iteration that made it ends. The stall
    is ``request``'s largest inter-token gap (the earliest on a tie; TTFT is not a gap),
    from ``gap_start`` to ``gap_start + worst_itl``. ``stalled_by``: the other requests whose
    first token, the end of their prefill, came out in (gap_start, gap_end]: a prefill
    stamped at the gap's end ran in the iteration that closed it, one stamped at its start
    ran before it. An arrival says nothing about when a prefill ran (a request may wait).
    """
    if len(arrivals) != len(token_times):
        raise ValueError(f"{len(arrivals)} arrivals but {len(token_times)} token-time lists")
    streams = [_check_token_times(float(a), times)
               for a, times in zip(arrivals, token_times, strict=True)]  # fmt: skip
    own = streams[request]
    if len(own) < 2:
        raise ValueError(f"request {request} has one token: no gap between tokens")
    gaps = inter_token_latencies(own)
    worst = max(range(len(gaps)), key=lambda i: (gaps[i], -i))  # the earliest on a tie
    begin, end = own[worst], own[worst + 1]
    stalled_by = [r for r, times in enumerate(streams)
                  if r != request and begin < times[0] <= end]  # fmt: skip
    return {"worst_itl": gaps[worst], "gap_start": begin, "stalled_by": stalled_by}


# -------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Result:
    """What a run measured (chapters 7-9), simulated or real; per-request arrays follow the
    trace.

    ``first_token`` and ``finish`` are absolute times (s). ``kv_token_share``: the share of
    KV capacity holding real token states, averaged over busy time; ``kv_allocated_share``:
    the share allocated (reserved or in blocks); their gap is reservation waste and
    fragmentation (chapter 7). ``step_ends``/``step_tokens``: every step of every engine,
    when it ended and how many tokens it emitted (for throughput over a window);
    ``token_times``: each request's token times (for ITL). ``window``: set by ``steady``.
    """

    arrival: np.ndarray
    output: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    steps: int
    busy_seconds: float
    kv_token_share: float
    kv_allocated_share: float
    preemptions: int
    prefix_hit_tokens: int
    max_running: int
    extra: dict = field(default_factory=dict)
    token_times: TokenTimes | None = None
    step_ends: np.ndarray | None = None
    step_tokens: np.ndarray | None = None
    window: tuple[float, float] | None = None

    @property
    def ttft(self) -> np.ndarray:
        """Time to first token per request (s)."""
        return self.first_token - self.arrival

    @property
    def e2e(self) -> np.ndarray:
        """End-to-end latency per request (s)."""
        return self.finish - self.arrival

    @property
    def tpot(self) -> np.ndarray:
        """(e2e − TTFT)/(n − 1) per request (``tpot_from``); NaN where n = 1."""
        return tpot_from(self.finish - self.first_token, self.output)

    @property
    def itl(self) -> np.ndarray:
        """Inter-token latencies: every gap between consecutive tokens of a request, all
        requests together (s). A stall shows here (its p99), where TPOT averages it away."""
        if self.token_times is None:
            raise ValueError("this Result has no token times")
        gaps = [np.diff(times) for times in self.token_times]
        return np.concatenate(gaps) if gaps else np.empty(0)

    @property
    def makespan(self) -> float:
        """First arrival to last token (s)."""
        return float(self.finish.max() - self.arrival.min())

    @property
    def throughput(self) -> float:
        """Output tokens per second: over the steady-state window if ``steady`` set one
        (tokens every engine emitted in it), else over the makespan."""
        if self.window is None:
            return float(self.output.sum()) / self.makespan
        start, end = self.window
        inside = (self.step_ends > start) & (self.step_ends <= end)
        return float(self.step_tokens[inside].sum()) / (end - start)

    def steady(self, warmup: float = WARMUP) -> Result:
        """The steady-state part of this run: the requests that arrived after the first
        ``warmup`` share and before the last ``warmup`` share (the engine filling up, and
        draining once arrivals stop, are not steady state), and throughput over the time
        between those two arrivals. Attainment, percentiles and goodput then describe the
        loaded engine, not its start or its drain."""
        if not 0 <= warmup < 0.5:
            raise ValueError(f"warmup must be in [0, 0.5), got {warmup!r}")
        n = len(self.arrival)
        order = np.argsort(self.arrival, kind="stable")
        keep = order[int(n * warmup): n - int(n * warmup)]
        keep = np.sort(keep)
        if len(keep) < 2:
            raise ValueError(f"{n} requests leave {len(keep)} after a warm-up of {warmup:.0%} "
                             "at each end: a steady state needs a longer trace")  # fmt: skip
        start, end = float(self.arrival[keep].min()), float(self.arrival[keep].max())
        if self.step_ends is None or not end > start:
            raise ValueError("a steady-state window needs step times and arrivals spread in time")
        tokens = None if self.token_times is None else self.token_times.subset(keep)
        return replace(self, arrival=self.arrival[keep], output=self.output[keep],
                       first_token=self.first_token[keep], finish=self.finish[keep],
                       token_times=tokens, window=(start, end))  # fmt: skip

    def meets(self, ttft_slo: float, tpot_slo: float) -> np.ndarray:
        """Per request: does it meet both SLOs (TPOT unchecked for one-token outputs)?"""
        tpot = self.tpot
        return (self.ttft <= ttft_slo) & (np.isnan(tpot) | (tpot <= tpot_slo))

    def attainment(self, ttft_slo: float, tpot_slo: float) -> float:
        """Share of requests meeting both SLOs (TPOT is not checked for one-token outputs)."""
        return float(self.meets(ttft_slo, tpot_slo).mean())

    def attainment_se(self, ttft_slo: float, tpot_slo: float, batches: int = BATCHES) -> float:
        """Standard error of ``attainment`` by batch means: the requests, in arrival order,
        cut into ``batches`` consecutive groups; the spread of the groups' attainments over
        √batches. (Neighbours in a queue share their fate, so the binomial √(p(1−p)/n),
        which assumes independent requests, would understate it.)"""
        ok = self.meets(ttft_slo, tpot_slo)[np.argsort(self.arrival, kind="stable")]
        if len(ok) < 2 * batches:
            raise ValueError(f"{len(ok)} requests are too few for {batches} batch means")
        means = [group.mean() for group in np.array_split(ok, batches)]
        return float(np.std(means, ddof=1) / math.sqrt(batches))

    def goodput(self, ttft_slo: float, tpot_slo: float) -> float:
        """Requests per second that meet both SLOs, over the makespan or the steady window
        (DistServe's goodput is the highest arrival rate at which a target share, e.g. 90%,
        meets them: ``max_rate_under_slo``)."""
        span = self.makespan if self.window is None else self.window[1] - self.window[0]
        return self.attainment(ttft_slo, tpot_slo) * len(self.arrival) / span

    def percentiles(self, qs: Sequence[float] = (50, 90, 99)) -> dict[str, float]:
        """TTFT, TPOT and ITL percentiles (s), e.g. ``{"ttft_p50": …, "itl_p99": …}``."""
        out = {}
        tpot = self.tpot[~np.isnan(self.tpot)]
        series = {"ttft": self.ttft, "tpot": tpot}
        if self.token_times is not None:
            series["itl"] = self.itl
        for name, values in series.items():
            for q in qs:
                out[f"{name}_p{q:g}"] = float(np.percentile(values, q)) if len(values) else math.nan
        return out

    def summary(self) -> dict[str, float]:
        """Means and p99s of the latencies, throughput and KV use, for a table."""
        tpot = self.tpot[~np.isnan(self.tpot)]
        return {
            "requests": len(self.arrival),
            "ttft_mean": float(self.ttft.mean()),
            "ttft_p99": float(np.percentile(self.ttft, 99)),
            "tpot_mean": float(tpot.mean()) if len(tpot) else math.nan,
            "tpot_p99": float(np.percentile(tpot, 99)) if len(tpot) else math.nan,
            "e2e_mean": float(self.e2e.mean()),
            "throughput": self.throughput,
            "kv_token_share": self.kv_token_share,
            "kv_allocated_share": self.kv_allocated_share,
            "preemptions": self.preemptions,
        }


def max_rate_under_slo(
    run_at: Callable[[float], Result],
    rates: Sequence[float],
    ttft_slo: float,
    tpot_slo: float,
    share: float = 0.9,
) -> float:
    """DistServe's goodput (Zhong et al., OSDI 2024; chapter 8): the highest request rate at
    which at least ``share`` of requests meet both SLOs. ``run_at(rate)`` runs a trace at
    that rate (make it long enough for a steady state, and return ``Result.steady()``: the
    attainment is read off what it returns); ``rates`` are tried in increasing order until
    one falls short. 0.0 if the lowest already does. DistServe reports it per GPU: divide
    by the chips that served it."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    if list(rates) != sorted(rates) or not rates:
        raise ValueError("rates must be a non-empty increasing sequence")
    best = 0.0
    for rate in rates:
        if run_at(rate).attainment(ttft_slo, tpot_slo) < share:
            break
        best = rate
    return best
