"""``python -m helpers.serving``: the simulator's benchmark and the KV study."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from helpers.serving.engine import simulate, simulate_disaggregated
from helpers.serving.kv import (
    KVMemory,
    kv_capacity_tokens,
    kv_transfer_seconds,
)
from helpers.serving.metrics import Result
from helpers.serving.steps import RooflineSteps
from helpers.serving.studies import kv_usage_study
from helpers.serving.trace import poisson_trace

# ------------------------------------------------------------------------- benchmark


def bench(
    n: int = 10_000, rate: float = 40.0, seed: int = 0
) -> list[tuple[str, float, float, Result]]:
    """Time each policy on an ``n``-request trace, wall and CPU seconds (the ≤ 2 s target is
    checked here, not in a test): Qwen2.5-7B on one H100 SXM, bf16, roofline steps,
    geometric lengths with means 512 prompt / 256 output tokens, Poisson at ``rate``/s."""
    from helpers.hardware import get as chip
    from helpers.models import get as model

    cfg, hw = model("Qwen2.5-7B"), chip("H100 SXM")
    trace = poisson_trace(n, rate, 512, 256, seed=seed, max_prompt=8192, max_output=4096)
    capacity = kv_capacity_tokens(cfg, hw.memory_bytes)
    paged = KVMemory(capacity, "paged")
    runs: dict[str, Callable[[], Result]] = {
        "static, paged": lambda: simulate(trace, RooflineSteps(cfg, hw), paged, "static"),
        "continuous, paged": lambda: simulate(trace, RooflineSteps(cfg, hw), paged),
        "continuous, reserve (oracle)": lambda: simulate(
            trace, RooflineSteps(cfg, hw), KVMemory(capacity, "reserve")),
        "chunked 512, paged": lambda: simulate(trace, RooflineSteps(cfg, hw), paged, "chunked",
                                               token_budget=512),
        "disaggregated 1+1, 50 GB/s": lambda: simulate_disaggregated(
            trace, RooflineSteps(cfg, hw), RooflineSteps(cfg, hw), paged, paged,
            lambda tokens: kv_transfer_seconds(cfg, tokens, 50e9), prefill_budget=8192),
    }  # fmt: skip
    timed = []
    for name, run in runs.items():
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        timed.append((name, time.perf_counter() - wall, time.process_time() - cpu, result))
    return timed


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m helpers.serving --bench``: simulator wall time on 10,000 requests;
    ``--kv``: the vLLM fragmentation study."""
    parser = argparse.ArgumentParser(prog="python -m helpers.serving")
    parser.add_argument("--bench", action="store_true", help="time each policy")
    parser.add_argument("--kv", action="store_true", help="KV share of real tokens")
    parser.add_argument("--fidelity", action="store_true",
                        help="the simulator against the real engine on this machine")
    parser.add_argument("-n", type=int, default=10_000, help="requests in the bench trace")
    parser.add_argument("--rate", type=float, default=40.0, help="arrivals per second")
    args = parser.parse_args(argv)
    if args.fidelity:
        from helpers.serving.fidelity import fidelity, report

        print(report(fidelity()))
        return
    if args.bench or not args.kv:
        print(f"{args.n} requests, Poisson {args.rate}/s; Qwen2.5-7B on H100 SXM (roofline)")
        print(f"{'policy':30} {'wall s':>7} {'CPU s':>6} {'steps':>7} {'tok/s':>8} "
              f"{'TTFT p50':>9} {'TPOT p50':>9} {'preempt':>7}")  # fmt: skip
        for name, seconds, cpu, r in bench(args.n, args.rate):
            print(f"{name:30} {seconds:7.2f} {cpu:6.2f} {r.steps:7d} {r.throughput:8.0f} "
                  f"{np.median(r.ttft) * 1e3:7.1f}ms {np.nanmedian(r.tpot) * 1e3:7.2f}ms "
                  f"{r.preemptions:7d}")  # fmt: skip
    if args.kv:
        begin = time.perf_counter()
        table = kv_usage_study()
        print(f"KV share of real tokens (vLLM Fig. 2: Orca 20.4–38.2%, vLLM 96.3%), "
              f"{time.perf_counter() - begin:.1f} s")  # fmt: skip
        for name, row in table.items():
            print(f"{name:15} tokens {row['token_share']:6.1%}  allocated "
                  f"{row['allocated_share']:6.1%}  {row['throughput']:7.0f} tok/s  "
                  f"peak batch {row['max_running']}")  # fmt: skip
