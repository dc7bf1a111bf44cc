"""The vLLM paper's KV-usage finding, reproduced on the simulator (chapter 7)."""

from __future__ import annotations

from helpers.models import ModelConfig
from helpers.serving.engine import simulate
from helpers.serving.kv import (
    KVMemory,
    kv_capacity_tokens,
)
from helpers.serving.steps import RooflineSteps
from helpers.serving.trace import poisson_trace

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
    from helpers.hardware import get as chip

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
