"""What a run measured: per-request latencies and the serving metrics built on them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# -------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Result:
    """What a simulation measured (chapters 7 and 8); per-request arrays follow the trace.

    ``first_token`` and ``finish`` are absolute times (s). ``kv_token_share``: the share of
    KV capacity holding real token states, averaged over busy time; ``kv_allocated_share``:
    the share allocated (reserved or in blocks); their gap is reservation waste and
    fragmentation (chapter 7).
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
    token_times: tuple[np.ndarray, ...] | None = None

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
        """(e2e − TTFT)/(n − 1) per request, vLLM's definition; NaN where n = 1."""
        steps = self.output - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(steps > 0, (self.finish - self.first_token) / steps, np.nan)

    @property
    def makespan(self) -> float:
        """First arrival to last token (s)."""
        return float(self.finish.max() - self.arrival.min())

    @property
    def throughput(self) -> float:
        """Output tokens per second over the makespan."""
        return float(self.output.sum()) / self.makespan

    def attainment(self, ttft_slo: float, tpot_slo: float) -> float:
        """Share of requests meeting both SLOs (TPOT is not checked for one-token outputs)."""
        tpot = self.tpot
        ok = (self.ttft <= ttft_slo) & (np.isnan(tpot) | (tpot <= tpot_slo))
        return float(ok.mean())

    def goodput(self, ttft_slo: float, tpot_slo: float) -> float:
        """Requests per second that meet both SLOs, over the makespan (DistServe's goodput
        is the highest arrival rate at which a target share, e.g. 90%, meets them: sweep
        ``poisson_trace``'s rate and read it off ``attainment``)."""
        return self.attainment(ttft_slo, tpot_slo) * len(self.arrival) / self.makespan

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
    which at least ``share`` of requests meet both SLOs. ``run_at(rate)`` simulates a trace
    at that rate; ``rates`` are tried in increasing order until one falls short. 0.0 if the
    lowest already does."""
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
