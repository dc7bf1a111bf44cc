"""How fast the simulator runs: each policy timed on a long trace (``--speed``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from helpers.serving.engine import simulate, simulate_disaggregated
from helpers.serving.kv import KVMemory, kv_capacity_tokens, kv_transfer_seconds
from helpers.serving.metrics import Result
from helpers.serving.steps import RooflineSteps
from helpers.serving.trace import poisson_trace


def simulator_speed(
    n: int = 10_000, rate: float = 40.0, seed: int = 0
) -> list[tuple[str, float, float, Result]]:
    """(policy, wall seconds, CPU seconds, its Result) of simulating each policy on an
    ``n``-request trace (the ≤ 2 s target is checked here, not in a test, since no test
    depends on the host's speed): Qwen2.5-7B on one H100 SXM, bf16, roofline steps,
    geometric lengths with means 512 prompt / 256 output tokens, Poisson at ``rate``/s."""
    from helpers.counting.hardware import get as chip
    from helpers.counting.models import get as model

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
