"""Chapter 7's experiments on how a batch is formed (`07_batching` §5), each one call that
returns a record: static against continuous batching on the same trace, and each policy's
capacity (``static_vs_continuous`` → ``PolicyStudy``); what left-padding a static batch's
prompts costs, which the simulator leaves out (``static_padding_cost`` → ``PaddingCost``);
continuous batching in a KV room too small for its batch, preempting
(``preemption_study`` → ``PreemptionStudy``). Every run is on one chip's roofline engine
(``engine.roofline_engine``); each record holds its runs as ``PolicyRun`` records, which
read the statistics the chapter prints off the simulator's ``Result``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers.counting._validate import positive_int
from helpers.serving.engine import roofline_engine, simulate
from helpers.serving.kv import KVMemory
from helpers.serving.metrics import Result
from helpers.serving.steps import Step
from helpers.serving.trace import Request, poisson_trace

__all__ = ["POLICIES", "PolicyRun", "PolicyStudy", "static_vs_continuous", "PaddingCost",
           "static_padding_cost", "PreemptionStudy", "preemption_study"]  # fmt: skip

POLICIES = ("static", "continuous")


def _batching_trace(n: int, rate: float, seed: int) -> list[Request]:
    # Chapter 7's requests: Poisson arrivals, geometric prompt and output lengths of means
    # 512 and 256 tokens, capped at 4,096 and 2,048.
    return poisson_trace(n, rate, 512, 256, seed=seed, max_prompt=4096, max_output=2048)


OVERLOAD = 1.05  # fed over served: a queue that grows, not a window's noise

@dataclass(frozen=True)
class PolicyRun:
    """One scheduling policy (``policy``) serving ``requests`` requests arriving at ``rate``
    per second: ``result`` as ``simulate`` returned it, at steady state where the study
    asked for it (``Result.steady``: the first and last 10% of requests dropped)."""

    policy: str
    requests: int
    rate: float
    result: Result

    @property
    def arrived(self) -> float:
        """Output tokens/s asked for by the requests that arrived in the steady-state
        window: what the policy serves if it keeps up."""
        if self.result.window is None:
            raise ValueError("a run over the whole trace has no steady-state window")
        start, end = self.result.window
        return float(self.result.output.sum()) / (end - start)

    @property
    def throughput(self) -> float:
        return self.result.throughput

    @property
    def served_share(self) -> float:
        """Throughput over ``arrived``: 1 when the policy keeps up."""
        return self.throughput / self.arrived

    @property
    def ttft_p50(self) -> float:
        return float(np.median(self.result.ttft))

    @property
    def ttft_p99(self) -> float:
        return float(np.percentile(self.result.ttft, 99))

    @property
    def tpot_p50(self) -> float:
        """Median TPOT, one-token outputs (NaN) left out."""
        return float(np.nanmedian(self.result.tpot))

    @property
    def e2e_p50(self) -> float:
        return float(np.median(self.result.e2e))

    @property
    def max_running(self) -> int:
        return self.result.max_running

    @property
    def preemptions(self) -> int:
        return self.result.preemptions


@dataclass(frozen=True)
class PolicyStudy:
    """Static against continuous batching on one chip (chapter 7 §5). ``runs``: each policy
    at ``rate`` requests/s on ``requests`` and twice as many, keyed (policy, requests);
    ``capacity``: each policy fed ``feed[policy]`` requests/s, more than it serves, on
    ``capacity_requests`` and twice as many, keyed requests → policy. A capacity is read
    only if every capacity run was overloaded (``overloaded``) and doubling the trace moved
    neither by more than ``tolerance`` (``capacity_settled``)."""

    model: str
    chip: str
    max_batch: int
    rate: float
    runs: dict[tuple[str, int], PolicyRun]
    feed: dict[str, float]
    capacity: dict[int, dict[str, PolicyRun]]
    tolerance: float

    @property
    def overloaded(self) -> bool:
        """Whether every capacity run was fed at least ``OVERLOAD`` times the output tokens it
        served: its queue grew, so its rate is what the policy sustains (at light load the
        two are equal within the window's noise, either way)."""
        return all(run.arrived >= OVERLOAD * run.throughput
                   for runs in self.capacity.values() for run in runs.values())  # fmt: skip

    @property
    def capacity_moved(self) -> float:
        """The larger relative change of either policy's capacity from N requests to 2N."""
        short, long = (self.capacity[n] for n in sorted(self.capacity))
        return max(abs(long[p].throughput / short[p].throughput - 1) for p in self.feed)

    @property
    def capacity_settled(self) -> bool:
        return self.capacity_moved <= self.tolerance

    def capacity_ratio(self, requests: int) -> float:
        """Continuous batching's capacity over static batching's, on ``requests``."""
        runs = self.capacity[requests]
        return runs["continuous"].throughput / runs["static"].throughput

    def report(self) -> str:
        """The runs' table, what each policy serves, the capacities and their checks."""
        # tokens/s asked for by the arrivals, then served: the two tokens/s columns
        lines = [f"{'policy':<11}{'requests':>9}{'asked/s':>9}{'served/s':>9}{'TTFT p50':>10}"
                 f"{'TTFT p99':>10}{'TPOT p50':>10}{'e2e p50':>9}{'peak batch':>12}"]  # fmt: skip
        for (policy, n), run in self.runs.items():
            lines.append(f"{policy:<11}{n:>9,}{run.arrived:>9,.0f}{run.throughput:>9,.0f}"
                         f"{run.ttft_p50:>9.3f}s{run.ttft_p99:>9.3f}s{run.tpot_p50 * 1e3:>8.2f}ms"
                         f"{run.e2e_p50:>8.2f}s{run.max_running:>12}")  # fmt: skip
        short, long = sorted({n for _, n in self.runs})
        for policy in POLICIES:
            first, second = self.runs[policy, short], self.runs[policy, long]
            lines.append(f"{policy}: serves {first.served_share:.0%} and "
                         f"{second.served_share:.0%} of the tokens that arrive, TTFT p50 "
                         f"{first.ttft_p50:.3f} s and {second.ttft_p50:.3f} s, on {short:,} and "
                         f"{long:,} requests")  # fmt: skip
        for n, runs in self.capacity.items():
            lines.append(f"capacity on {n:,} requests: " + "; ".join(
                f"{policy} {runs[policy].throughput:,.0f} tokens/s (fed {rate:g} requests/s, "
                f"{runs[policy].arrived:,.0f} tokens/s)" for policy, rate in self.feed.items())
                + f": {self.capacity_ratio(n):.2f}x")
        lines.append(f"each fed more than it serves: {self.overloaded}; doubling the trace "
                     f"moves either capacity by at most {self.capacity_moved:.1%}, "
                     f"{'within' if self.capacity_settled else 'outside'} {self.tolerance:.0%}")
        return "\n".join(lines)


def _check_rate(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def static_vs_continuous(
    requests: int = 2000,
    rate: float = 20.0,
    capacity_requests: int = 32_000,
    feed: dict[str, float] | None = None,
    tolerance: float = 0.02,
    model: str = "Llama-3.1-8B",
    chip: str = "H100 SXM",
    max_batch: int = 64,
    seed: int = 0,
) -> PolicyStudy:
    """Static against continuous batching (chapter 7 §5) on ``roofline_engine(model, chip)``
    (paged KV memory of all the memory beside the weights), ``max_batch`` running at most.

    First both policies serve the same trace (``seed``) at ``rate`` requests/s, on
    ``requests`` requests and on twice as many, each read at steady state: a policy that
    keeps up serves what arrives and its latencies do not grow with the trace. Then each
    policy's capacity: fed ``feed[policy]`` requests/s (default 15 static, 40 continuous),
    more than it serves, so that its queue never empties, on ``capacity_requests`` and
    twice as many. A static batch lasts as long as its longest request, seconds that vary
    batch to batch, so the average settles only over tens of thousands of requests: the
    record says whether doubling the trace moved either capacity by more than
    ``tolerance``, and whether every capacity run was overloaded."""
    positive_int(requests, "requests")
    positive_int(capacity_requests, "capacity_requests")
    positive_int(max_batch, "max_batch")
    _check_rate(rate, "rate")
    feed = {"static": 15.0, "continuous": 40.0} if feed is None else dict(feed)
    if sorted(feed) != sorted(POLICIES):
        raise ValueError(f"feed must give a rate for each of {POLICIES}, got {feed!r}")
    for policy, fed in feed.items():
        _check_rate(fed, f"feed[{policy!r}]")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    steps, memory = roofline_engine(model, chip)

    def serve(n: int, at: float, policy: str) -> PolicyRun:
        trace = _batching_trace(n, at, seed)
        result = simulate(trace, steps, memory, policy, max_batch=max_batch).steady()
        return PolicyRun(policy, n, at, result)

    runs = {(policy, n): serve(n, rate, policy)
            for policy in POLICIES for n in (requests, 2 * requests)}  # fmt: skip
    capacity = {n: {policy: serve(n, fed, policy) for policy, fed in feed.items()}
                for n in (capacity_requests, 2 * capacity_requests)}  # fmt: skip
    return PolicyStudy(model, chip, max_batch, float(rate), runs, feed, capacity, tolerance)


@dataclass(frozen=True)
class PaddingCost:
    """What the simulator leaves out of a static batch (chapter 7 §5): ``prompts`` prompts
    prefilled as simulated (each its own length) and left-padded to the longest, on the
    roofline; the first decode step after each (``decode_s``: the padded one reads the
    padding's cache too); ``batch_s``: how long a static batch of that many requests lasts
    at the study's static capacity (mean output over throughput, per request)."""

    prompts: int
    prefill_s: dict[str, float]  # "as simulated", "left-padded"
    decode_s: dict[str, float]
    batch_s: float

    @property
    def added_s(self) -> float:
        """Seconds the padded prefill adds to each static batch."""
        return self.prefill_s["left-padded"] - self.prefill_s["as simulated"]

    @property
    def capacity_cut(self) -> float:
        """The share of static capacity the padded prefill costs: added over the batch's
        new length."""
        return self.added_s / (self.batch_s + self.added_s)

    @property
    def decode_ratio(self) -> float:
        """The padded first decode step over the simulated one."""
        return self.decode_s["left-padded"] / self.decode_s["as simulated"]


def static_padding_cost(prompt_lengths: list[int], study: PolicyStudy) -> PaddingCost:
    """A static batch of ``prompt_lengths`` on ``study``'s engine (chapter 7 §5): its prefill
    and first decode step as the simulator times them (each prompt its own length) and
    left-padded to the longest (``steps`` on a ``Step`` of each), set against how long a
    static batch of as many requests lasts at ``study``'s static capacity on its longest
    trace."""
    if not prompt_lengths:
        raise ValueError("prompt_lengths is empty: a static batch needs a prompt")
    for length in prompt_lengths:
        positive_int(length, "each prompt length")
    steps, _ = roofline_engine(study.model, study.chip)
    n = len(prompt_lengths)
    shapes = {"as simulated": list(prompt_lengths), "left-padded": [max(prompt_lengths)] * n}
    prefill = {k: steps(Step(tuple((p, 0) for p in ps), 0, 0, n)) for k, ps in shapes.items()}
    decode = {k: steps(Step((), n, sum(ps), n)) for k, ps in shapes.items()}
    at_capacity = study.capacity[max(study.capacity)]["static"]
    batch_s = n * float(at_capacity.result.output.mean()) / at_capacity.throughput
    return PaddingCost(n, prefill, decode, batch_s)


@dataclass(frozen=True)
class PreemptionStudy:
    """Continuous batching with paged KV memory of each size in ``runs`` (token slots →
    the run over the whole trace), everything else the same (chapter 7 §5)."""

    model: str
    chip: str
    requests: int
    runs: dict[int, PolicyRun]


def preemption_study(
    rooms: tuple[int, ...] = (16_384, 32_768),
    requests: int = 300,
    rate: float = 20.0,
    model: str = "Llama-3.1-8B",
    chip: str = "H100 SXM",
    max_batch: int = 64,
    seed: int = 0,
) -> PreemptionStudy:
    """One trace of chapter 7's requests (``requests`` at ``rate``/s) under continuous
    batching on ``roofline_engine(model, chip)``'s steps, with paged KV room for each of
    ``rooms`` tokens: short of blocks, the scheduler preempts the latest admitted and
    recomputes it when readmitted (vLLM's default), so a small room shows as preemptions,
    a smaller peak batch and waiting (TTFT) before it shows in throughput. Whole-trace
    figures, not steady state: the trace is short."""
    if not rooms:
        raise ValueError("rooms is empty: give at least one KV room")
    for room in rooms:
        positive_int(room, "each room")
    positive_int(requests, "requests")
    _check_rate(rate, "rate")
    steps, _ = roofline_engine(model, chip)
    trace = _batching_trace(requests, rate, seed)
    runs = {room: PolicyRun("continuous", requests, float(rate),
                            simulate(trace, steps, KVMemory(room, "paged"), "continuous",
                                     max_batch=max_batch))
            for room in rooms}  # fmt: skip
    return PreemptionStudy(model, chip, requests, runs)
