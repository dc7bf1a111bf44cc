"""``python -m helpers.serving``: the simulator's speed (``--speed``, the default), the vLLM
KV study (``--kv``) and the simulator against the real engine (``--fidelity``)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` and print what each flag asks for."""
    parser = argparse.ArgumentParser(prog="python -m helpers.serving")
    parser.add_argument("--speed", action="store_true",
                        help="simulator wall time per policy (the default)")  # fmt: skip
    parser.add_argument("--kv", action="store_true", help="KV share of real tokens")
    parser.add_argument("--fidelity", action="store_true",
                        help="the simulator against the real engine on this machine, "
                             "predictive and calibrated (on a shared machine, run it as "
                             "`taskset -c 1 python -m helpers.serving --fidelity`: a core "
                             "of its own)")  # fmt: skip
    parser.add_argument("-n", type=int, default=10_000, help="requests in the speed trace")
    parser.add_argument("--rate", type=float, default=40.0, help="arrivals per second")
    args = parser.parse_args(argv)
    if args.fidelity:
        from helpers.serving.fidelity import fidelity, report

        print(report(fidelity()))
        return
    if args.speed or not args.kv:
        from helpers.serving.speed import simulator_speed

        print(f"{args.n} requests, Poisson {args.rate}/s; Qwen2.5-7B on H100 SXM (roofline)")
        print(f"{'policy':30} {'wall s':>7} {'CPU s':>6} {'steps':>7} {'tok/s':>8} "
              f"{'TTFT p50':>9} {'TPOT p50':>9} {'preempt':>7}")  # fmt: skip
        for name, seconds, cpu, r in simulator_speed(args.n, args.rate):
            print(f"{name:30} {seconds:7.2f} {cpu:6.2f} {r.steps:7d} {r.throughput:8.0f} "
                  f"{np.median(r.ttft) * 1e3:7.1f}ms {np.nanmedian(r.tpot) * 1e3:7.2f}ms "
                  f"{r.preemptions:7d}")  # fmt: skip
    if args.kv:
        from helpers.serving.studies import kv_usage_study

        begin = time.perf_counter()
        table = kv_usage_study()
        print(f"KV share of real tokens (vLLM Fig. 2: Orca 20.4–38.2%, vLLM 96.3%), "
              f"{time.perf_counter() - begin:.1f} s")  # fmt: skip
        for name, row in table.items():
            print(f"{name:15} tokens {row['token_share']:6.1%}  allocated "
                  f"{row['allocated_share']:6.1%}  {row['throughput']:7.0f} tok/s  "
                  f"peak batch {row['max_running']}")  # fmt: skip


if __name__ == "__main__":
    main()
