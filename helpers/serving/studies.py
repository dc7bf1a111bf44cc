"""Experiments on the simulator that chapters 7 and 8 report and explore: the vLLM paper's
KV-usage finding (and the simulator's figures set against the paper's), a long prompt
stalling a batch of decodes (on the simulator, and by hand on a linear step model), a prefix
cache's TTFT, and a prompt's KV handoff between a prefill and a decode engine. Chapter 7's
scheduling experiments (static against continuous batching, preemption) are in
``batching_studies``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers.counting._validate import positive_int
from helpers.counting.flops import attended_keys
from helpers.counting.memory import kv_cache_bytes
from helpers.counting.models import ModelConfig
from helpers.serving.engine import roofline_engine, simulate
from helpers.serving.kv import (
    KVMemory,
    kv_capacity_tokens,
    kv_transfer_seconds,
)
from helpers.serving.steps import RooflineSteps, Step
from helpers.serving.trace import Request, poisson_trace

# ------------------------------------------------------------- the vLLM paper's finding


def _opt_13b() -> ModelConfig:
    # facebook/opt-13b's config.json in this library's terms (OPT is not of the Llama family:
    # its LayerNorm biases and learned positions are left out, a few MB). Its KV cache is
    # 2·40·40·128·2 = 819,200 B per token, the "800 KB" the vLLM paper quotes.
    return ModelConfig(name="OPT-13B", model_type="opt", hidden=5120, intermediate=20480,
                       layers=40, n_q_heads=40, n_kv_heads=40, head_dim=128, vocab=50272,
                       tied_embeddings=True, qkv_bias=False, gated_mlp=False,
                       source="Hugging Face config.json of facebook/opt-13b")  # fmt: skip


def kv_usage_study(
    n: int = 1000,
    rate: float = 20.0,
    seed: int = 0,
    prompt_mean: float = 161,
    output_mean: float = 338,
    max_seq_len: int = 2048,
    block_size: int = 16,
) -> dict[str, dict[str, float]]:
    """Share of KV memory holding real tokens, per allocator (chapter 7).

    The vLLM paper (Kwon et al., SOSP 2023, Fig. 2) measured 20.4–38.2% for earlier systems
    (Orca with Max, Pow2 and Oracle reservations) and 96.3% for vLLM. Setup here, stated:
    OPT-13B on one A100 40GB in bf16 (as the paper), KV capacity ⌊(memory − weights)/κ⌋
    with the chip's memory as ``hardware`` holds it (``kv_capacity_tokens``; no activation
    reserve, so more room than the paper had), the roofline step model, continuous
    batching, ``n`` requests arriving as Poisson at ``rate``/s (enough to keep memory full),
    geometric lengths with the ShareGPT means the paper reports (161 prompt, 338 output
    tokens), each request clipped to ``max_seq_len`` = 2048 (OPT's limit). Reservation waste
    here is reserved-but-unused slots only: no external fragmentation is modelled, so the
    reservation figures are upper bounds on the paper's. Returns, per allocator, the time-
    averaged token share and allocated share of capacity (over the whole run's busy time),
    steady-state throughput and peak batch.
    """
    cfg = _opt_13b()
    from helpers.counting.hardware import get as chip

    capacity = kv_capacity_tokens(cfg, chip("A100 40GB SXM").memory_bytes)
    half = max_seq_len // 2
    trace = poisson_trace(n, rate, prompt_mean, output_mean, seed=seed,
                          max_prompt=half, max_output=half)  # fmt: skip
    steps = RooflineSteps(cfg, chip("A100 40GB SXM"))
    setups = {
        "Orca (Max)": KVMemory(capacity, "reserve", reservation="max", max_seq_len=max_seq_len),
        "Orca (Pow2)": KVMemory(capacity, "reserve", reservation="pow2"),
        "Orca (Oracle)": KVMemory(capacity, "reserve", reservation="oracle"),
        "vLLM (paged)": KVMemory(capacity, "paged", block_size=block_size),
    }
    table = {}
    for name, memory in setups.items():
        result = simulate(trace, steps, memory, policy="continuous")
        table[name] = {
            "token_share": result.kv_token_share,
            "allocated_share": result.kv_allocated_share,
            "throughput": result.steady().throughput,  # warm-up and drain dropped
            "max_running": result.max_running,
        }
    return table


# ------------------------------------------------------------- a long prompt's stall


def prefill_stall_study(
    model: str = "Qwen2.5-7B",
    chip: str = "H100 SXM",
    decodes: int = 32,
    prompt_tokens: int = 8192,
    token_budget: int = 512,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """A batch of decodes meets one long prompt (chapter 8's chunked prefill, Sarathi-Serve):
    ``decodes`` requests (512-token prompts, 256 output tokens) decode together on one
    ``chip`` (``roofline_engine``); one ``prompt_tokens`` prompt arrives at 0.5 s, or once
    every one of them decodes under either policy if that is later (many decodes and a small
    budget can still be prefilling their own prompts at 0.5 s: the long prompt would then
    wait for them, a start-up cost, not the stall this study measures). Simulated
    with continuous batching (the prompt prefilled whole in one step) and with chunked
    prefill under ``token_budget``. Returns, per policy, the seconds of every step that
    carried decodes (each decode waits one step for its next token), and the long prompt's
    TTFT. ValueError for a budget the chunked engine refuses (not above the batch)."""
    positive_int(decodes, "decodes")
    positive_int(prompt_tokens, "prompt_tokens")
    positive_int(token_budget, "token_budget")
    steps, memory = roofline_engine(model, chip)
    background = [Request(0.0, 512, 256)] * decodes
    policies = (("continuous (whole)", "continuous", None),
                (f"chunked ({token_budget})", "chunked", token_budget))
    decoding = max(float(np.max(simulate(background, steps, memory, policy, max_batch=decodes + 1,
                                         token_budget=budget).ttft))
                   for _, policy, budget in policies)  # fmt: skip
    trace = background + [Request(max(0.5, decoding), prompt_tokens, 1)]
    gaps, ttft = {}, {}
    for name, policy, budget in policies:
        log: list[float] = []

        # Each step timed on its own (no ``decode_run``), so every gap is logged.
        def timed(step: Step, log: list[float] = log) -> float:
            seconds = steps(step)
            if step.decode:
                log.append(seconds)
            return seconds

        result = simulate(trace, timed, memory, policy, max_batch=decodes + 1,
                          token_budget=budget)  # fmt: skip
        gaps[name], ttft[name] = np.array(log), float(result.ttft[-1])
    return gaps, ttft


COST_TERMS = ("fixed", "per_token", "per_key")


def chunked_prefill(prompt_tokens: int, decodes: int, context: int, token_budget: int,
                    cost: dict[str, float]) -> dict[str, float | int]:  # fmt: skip
    """One long prompt prefilled under Sarathi-Serve's rule beside a batch of decodes, on a
    linear step model (chapter 8's first exercise).

    Every step carries the ``decodes`` running sequences first (one token each; their caches
    start at ``context`` tokens and grow by one a step), then the prompt's next chunk: what is
    left of ``token_budget``, or the prompt's remainder. A step costs ``cost["fixed"]`` +
    ``cost["per_token"]`` per token through the linear layers + ``cost["per_key"]`` per
    query-key pair: a decode holding c tokens attends to c + 1 keys, a chunk of n tokens after
    b cached to n·b + n(n + 1)/2 (causal, ``flops.attended_keys``), which is where a chunk
    re-reads the chunks before it. Returns ``"steps"`` (the prompt's), ``"ttft"`` (their
    seconds, the first's start to the last's end) and ``"worst_gap"`` (the longest: the
    longest a decoding stream waits for a token meanwhile)."""
    positive_int(prompt_tokens, "prompt_tokens")
    positive_int(token_budget, "token_budget")
    for value, name in ((decodes, "decodes"), (context, "context")):
        if type(value) is not int or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if token_budget <= decodes:
        raise ValueError(f"a budget of {token_budget} leaves no room beside {decodes} decodes")
    if set(cost) != set(COST_TERMS) or min(cost.values()) < 0:
        raise ValueError(f"cost needs the terms {COST_TERMS}, each >= 0, got {cost!r}")
    room = token_budget - decodes
    seconds = []
    for step, done in enumerate(range(0, prompt_tokens, room)):
        new = min(room, prompt_tokens - done)
        keys = attended_keys(new, done, "causal") + decodes * (context + step + 1)
        seconds.append(cost["fixed"] + cost["per_token"] * (new + decodes)
                       + cost["per_key"] * keys)  # fmt: skip
    return {"steps": len(seconds), "ttft": float(sum(seconds)),
            "worst_gap": float(max(seconds))}  # fmt: skip


# ------------------------------------------------------------------ a prefix cache


def prefix_cache_study(
    shared_fraction: float = 0.5,
    shared_prefix: int = 2048,
    model: str = "Qwen2.5-7B",
    chip: str = "H100 SXM",
    rate: float = 8.0,
    n: int = 300,
) -> dict[str, float | tuple[float, float]]:
    """What a prefix cache buys (chapter 8): ``n`` Poisson requests at ``rate``/s (unique
    prompt parts of mean 256 tokens, outputs of mean 128), a ``shared_fraction`` of them
    starting with the same ``shared_prefix`` tokens, on one ``chip``
    (``roofline_engine``), continuous batching, without and with prefix caching. Returns
    ``"hit_rate"``, the share of prompt tokens served from the cache over every request,
    and ``"ttft_mean"`` and ``"ttft_p99"``, each (without, with) at steady state
    (``Result.steady``)."""
    steps, memory = roofline_engine(model, chip)
    trace = poisson_trace(n, rate, 256, 128, seed=3, max_prompt=4096, max_output=1024,
                          shared_prefix=shared_prefix,
                          shared_fraction=shared_fraction)  # fmt: skip
    plain = simulate(trace, steps, memory).steady()
    cached = simulate(trace, steps, KVMemory(memory.capacity_tokens, prefix_caching=True))
    hit = cached.prefix_hit_tokens / sum(r.prompt for r in trace)
    cached = cached.steady()  # latencies at steady state: warm-up and drain dropped
    return {"hit_rate": hit,
            "ttft_mean": (float(plain.ttft.mean()), float(cached.ttft.mean())),
            "ttft_p99": (float(np.percentile(plain.ttft, 99)),
                         float(np.percentile(cached.ttft, 99)))}  # fmt: skip


# --------------------------------------------------------------------- disaggregation


def kv_handoff_study(
    model: str = "Qwen2.5-7B",
    chip: str = "H100 SXM",
    prompt_tokens: int = 1024,
    link_bytes_per_s: float = 50e9,
    decode_batch: int = 32,
) -> dict[str, float]:
    """One prompt's KV handoff in disaggregated serving (chapter 8; DistServe, Splitwise):
    its KV cache's bytes (``kv_bytes``) and their transfer over a link of
    ``link_bytes_per_s`` (``transfer_s``, ``kv_transfer_seconds``), beside its prefill alone
    (``prefill_s``) and a decode step of ``decode_batch`` sequences at that context
    (``decode_step_s``), on ``roofline_engine``'s step model."""
    positive_int(prompt_tokens, "prompt_tokens")
    positive_int(decode_batch, "decode_batch")
    steps, _ = roofline_engine(model, chip)
    cfg = steps.cfg
    return {
        "kv_bytes": kv_cache_bytes(cfg, prompt_tokens),
        "transfer_s": kv_transfer_seconds(cfg, prompt_tokens, link_bytes_per_s),
        "prefill_s": steps(Step(((prompt_tokens, 0),), 0, 0, 1)),
        "decode_step_s": steps(Step((), decode_batch, decode_batch * prompt_tokens,
                                    decode_batch)),
    }  # fmt: skip


# ------------------------------------------------------------- the vLLM paper, compared

# The vLLM paper's Fig. 2: the share of KV memory holding real tokens per allocator, and the
# share lost to "external fragmentation and others", which the simulator does not model.
VLLM_TOKEN_SHARE = {"Orca (Max)": 0.204, "Orca (Pow2)": 0.268, "Orca (Oracle)": 0.382,
                    "vLLM (paged)": 0.963}  # fmt: skip
VLLM_EXTERNAL = {"Orca (Max)": 0.089, "Orca (Pow2)": 0.416, "Orca (Oracle)": 0.366}


@dataclass(frozen=True)
class KVUsageComparison:
    """``kv_usage_study``'s table (allocator → token share, allocated share, throughput,
    peak batch) beside the vLLM paper's Fig. 2 (``paper``: its token shares; ``external``:
    what it lost to external fragmentation and others, per reservation allocator)."""

    table: dict[str, dict[str, float]]
    paper: dict[str, float]
    external: dict[str, float]

    @property
    def gap(self) -> dict[str, float]:
        """Simulator minus paper, token share per allocator (a fraction, not points)."""
        return {name: row["token_share"] - self.paper[name] for name, row in self.table.items()}

    @property
    def same_order(self) -> bool:
        """Whether the simulator ranks the allocators' token shares as the paper does."""
        ranked = sorted(self.table, key=lambda name: self.table[name]["token_share"])
        return ranked == sorted(self.paper, key=self.paper.get)

    @property
    def over_paper(self) -> dict[str, float]:
        """Simulator over paper, token share, per reservation allocator."""
        return {name: self.table[name]["token_share"] / self.paper[name]
                for name in self.external}  # fmt: skip

    @property
    def inside(self) -> dict[str, float]:
        """The paper's token share of the memory its external fragmentation left: the
        figure the simulator, which models none, should be set against."""
        return {name: self.paper[name] / (1 - lost) for name, lost in self.external.items()}

    @property
    def inside_gap(self) -> dict[str, float]:
        """Simulator minus ``inside``, per reservation allocator."""
        return {name: self.table[name]["token_share"] - share
                for name, share in self.inside.items()}  # fmt: skip

    def gain(self, key: str, over: str = "Orca (Max)", by: str = "vLLM (paged)") -> float:
        """``by``'s ``key`` (``"throughput"``, ``"max_running"``) over ``over``'s."""
        return self.table[by][key] / self.table[over][key]

    def report(self) -> str:
        """The table and the comparison with the paper, as chapter 7 §6 prints them."""
        lines = [f"{'allocator':<15}{'real tokens':>12}{'allocated':>11}{'tokens/s':>10}"
                 f"{'peak batch':>12}{'vLLM paper':>12}"]  # fmt: skip
        for name, row in self.table.items():
            lines.append(f"{name:<15}{row['token_share']:>12.1%}{row['allocated_share']:>11.1%}"
                         f"{row['throughput']:>10,.0f}{row['max_running']:>12}"
                         f"{self.paper[name]:>12.1%}")  # fmt: skip
        lines.append("simulator minus paper: " + ", ".join(
            f"{name} {gap * 100:+.1f} points" for name, gap in self.gap.items()))
        lines.append(f"same order as the paper: {self.same_order}; simulator over paper: "
                     + ", ".join(f"{name} ×{ratio:.2f}"
                                 for name, ratio in self.over_paper.items()))  # fmt: skip
        lines.append("the paper's shares without external fragmentation and others: " + ", ".join(
            f"{name} {share:.1%} (simulator {self.inside_gap[name] * 100:+.1f} points)"
            for name, share in self.inside.items()))
        lines.append(f"paged vs max-length reservation: {self.gain('throughput'):.1f}× the "
                     f"throughput, from {self.gain('max_running'):.1f}× the peak batch")
        return "\n".join(lines)


def kv_usage_vs_paper(**study: float) -> KVUsageComparison:
    """``kv_usage_study`` (``study``: its arguments) set against the vLLM paper's Fig. 2
    (chapter 7 §6): the gap per allocator, whether the order is the paper's, and the paper's
    shares without the external fragmentation the simulator does not model."""
    return KVUsageComparison(kv_usage_study(**study), dict(VLLM_TOKEN_SHARE),
                             dict(VLLM_EXTERNAL))  # fmt: skip
