"""Tensor parallelism on the roofline: what T chips cost and save per token (chapter 10).

Megatron-LM's split (Shoeybi et al., 2019) cuts every layer across T chips without moving
weights: q, k, v and the MLP's gate and up are split by columns (each chip holds 1/T of the
heads, of the KV heads and of the intermediate width), o and down by rows. Each chip then
holds a partial sum of the attention's output and of the MLP's, and one all-reduce of the
batch's [tokens × hidden] activations after each makes them whole again: two all-reduces a
layer. Each chip reads 1/T of the layer weights and of the KV cache, so decode's memory time
falls as 1/T while the all-reduces' time does not fall, and past some T it grows.

A ring all-reduce (Patarasuk and Yuan, 2009) sends each chip's share around a ring twice
(reduce-scatter, then all-gather), so each chip sends and receives 2(T − 1)/T of the bytes,
in 2(T − 1) hops: time = 2(T − 1)/T · bytes / bandwidth + 2(T − 1) · hop latency, plus a
fixed start-up cost. A decode all-reduce is tiny (one token's hidden vector a sequence), so
its latency terms, not the link's bandwidth, set its time.

Pipeline parallelism cuts the model the other way, by layers: P chips each hold layers/P
whole layers and pass a micro-batch's activations on to the next (``pipeline_bubble``,
``pp_decode``). A token still crosses every layer one after the other, so a stream's TPOT
does not fall below one chip's; what P chips add is memory, so the batch, and the
throughput, can grow. Tensor parallelism divides the step itself: it serves latency.

The sharded decoder that runs this split for real is ``helpers.parallel.distributed`` (the model
room);
this module is its arithmetic, pure Python like the other formula modules. Embeddings, the
final norm and the LM head stay whole on every chip (replicated), as
``helpers.parallel.distributed``
runs them; Megatron splits the LM head by vocabulary too, which would cut its read T ways
at the price of gathering the logits.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from helpers.counting._validate import non_negative_int, one_of, positive_int
from helpers.counting.flops import attention_flops_per_key
from helpers.counting.hardware import HardwareSpec
from helpers.counting.latency import prefill_time
from helpers.counting.memory import dtype_bytes, kv_bytes_per_token, max_concurrent_sequences
from helpers.counting.models import ModelConfig
from helpers.counting.roofline import decode_split

__all__ = ["Link", "LINKS", "link", "shard_config", "degrees", "allreduce_bytes",
           "step_allreduce_bytes", "ring_allreduce_seconds", "step_allreduce_seconds",
           "tp_decode_step", "tp_chip_seconds", "tp_step_seconds", "tp_tpot", "tp_ttft",
           "best_degree", "fit_ring",
           "tp_max_sequences", "pipeline_bubble", "pp_decode", "attention_per_chip",
           "break_even_hop_latency"]


@dataclass(frozen=True)
class Link:
    """A chip-to-chip link for the ring all-reduce: ``bandwidth`` in B/s each way per chip,
    ``hop_latency`` in seconds per ring step, ``base_latency`` in seconds per call."""

    name: str
    bandwidth: float
    hop_latency: float
    base_latency: float
    source: str

    def __post_init__(self) -> None:
        if not self.bandwidth > 0 or self.hop_latency < 0 or self.base_latency < 0:
            raise ValueError(f"{self.name}: bandwidth must be > 0 and latencies >= 0")


_H100 = "NVIDIA H100 datasheet (total both ways, halved)"
_NCCL = "NCCL src/graph/tuning.cc, ring all-reduce, LL protocol (baseLat, hwLat)"
LINKS = {
    # 900 GB/s is the H100 SXM's NVLink 4 total over both directions: 450 GB/s each way.
    "NVLink 4": Link("NVLink 4", 450e9, 0.6e-6, 6.6e-6, f"{_H100}; {_NCCL}"),
    # 128 GB/s both ways for a Gen5 x16 slot (32 GT/s × 16 lanes, 128b/130b): 64 GB/s each way.
    "PCIe Gen5 x16": Link("PCIe Gen5 x16", 64e9, 1.0e-6, 6.6e-6, f"{_H100}; {_NCCL}"),
}
"""The links the book cites (``docs/sources.md``): bandwidth from the datasheet, latencies
from NCCL's own cost model for a small all-reduce on one node."""


def link(name: str) -> Link:
    """A link of ``LINKS`` by name; ValueError listing the known ones."""
    try:
        return LINKS[name]
    except KeyError:
        raise ValueError(f"unknown link {name!r}; known: {', '.join(LINKS)}") from None


def _kv_heads(cfg: ModelConfig, ranks: int, replicate_kv: bool) -> int | None:
    """KV heads a chip holds at T = ``ranks``, or None when T cannot split them."""
    if cfg.n_kv_heads % ranks == 0:
        return cfg.n_kv_heads // ranks
    if replicate_kv and ranks % cfg.n_kv_heads == 0:
        return 1  # each KV head copied to the T / n_kv chips whose query heads use it
    return None


def shard_config(cfg: ModelConfig, ranks: int, replicate_kv: bool = False) -> ModelConfig:
    """The config of one chip's share under T-way tensor parallelism: ``n_q_heads``,
    ``n_kv_heads`` and ``intermediate`` divided by T; hidden, layers and vocab whole.

    Refuses (ValueError) a T that does not divide the query heads, the KV heads or the
    intermediate width: a head is not split between chips (its scores need all its
    dimensions), and each chip's query heads must find their KV heads on the same chip.
    ``replicate_kv``: past T = n_kv (T a multiple of it), each chip keeps a copy of the one
    KV head its query heads share, as vLLM does, so the KV cache stops shrinking there."""
    positive_int(ranks, "ranks")
    if getattr(cfg, "n_experts", 0) or getattr(cfg, "kv_lora_rank", 0):
        # Experts and a latent KV cache are split other ways (expert parallelism, MLA's
        # heads over a shared latent): these formulas cover dense attention and MLPs.
        raise ValueError(f"{cfg.name}: sharding models dense decoders only")
    kv = _kv_heads(cfg, ranks, replicate_kv)
    for field, bad in (("n_q_heads", cfg.n_q_heads % ranks), ("n_kv_heads", kv is None),
                       ("intermediate", cfg.intermediate % ranks)):  # fmt: skip
        if bad:
            raise ValueError(f"{cfg.name}: {field}={getattr(cfg, field)} is not divisible by "
                             f"T={ranks} chips: tensor parallelism splits whole heads and the "
                             "intermediate width evenly")  # fmt: skip
    if ranks == 1:
        return cfg
    return dataclasses.replace(cfg, name=f"{cfg.name} (1/{ranks} TP shard)",
                               n_q_heads=cfg.n_q_heads // ranks, n_kv_heads=kv,
                               intermediate=cfg.intermediate // ranks)  # fmt: skip


def degrees(cfg: ModelConfig, max_ranks: int, replicate_kv: bool = False) -> list[int]:
    """Every T in 1 … ``max_ranks`` that ``shard_config`` accepts (T divides the query
    heads, the KV heads, or with ``replicate_kv`` is a multiple of them, and the
    intermediate width)."""
    positive_int(max_ranks, "max_ranks")
    return [t for t in range(1, max_ranks + 1)
            if not (cfg.n_q_heads % t or cfg.intermediate % t)
            and _kv_heads(cfg, t, replicate_kv) is not None]  # fmt: skip


def allreduce_bytes(cfg: ModelConfig, tokens: int, dtype: str = "bf16") -> int:
    """Bytes of one all-reduce: the [tokens × hidden] activations (tokens = batch × new tokens
    a sequence: the batch at decode, batch × prompt at prefill)."""
    positive_int(tokens, "tokens")
    return round(tokens * cfg.hidden * dtype_bytes(dtype))


def step_allreduce_bytes(cfg: ModelConfig, tokens: int, dtype: str = "bf16") -> int:
    """Bytes all-reduced by one forward pass: two all-reduces a layer (after o, after down)."""
    return 2 * cfg.layers * allreduce_bytes(cfg, tokens, dtype)


def ring_allreduce_seconds(
    nbytes: float, ranks: int, bandwidth: float, hop_latency: float = 0.0,
    base_latency: float = 0.0,
) -> float:  # fmt: skip
    """Seconds of a ring all-reduce of ``nbytes`` over ``ranks`` chips (Patarasuk and Yuan):
    base_latency + 2(T − 1) · hop_latency + 2(T − 1)/T · nbytes / bandwidth; 0 for T = 1."""
    positive_int(ranks, "ranks")
    if nbytes < 0 or not bandwidth > 0 or hop_latency < 0 or base_latency < 0:
        raise ValueError("nbytes and latencies must be >= 0 and bandwidth > 0")
    if ranks == 1:
        return 0.0
    hops = 2 * (ranks - 1)
    return base_latency + hops * hop_latency + hops / ranks * nbytes / bandwidth


def step_allreduce_seconds(
    cfg: ModelConfig, net: Link, ranks: int, tokens: int, dtype: str = "bf16"
) -> float:
    """Seconds one forward pass spends in its 2 · layers all-reduces on ``net``."""
    one = ring_allreduce_seconds(allreduce_bytes(cfg, tokens, dtype), ranks, net.bandwidth,
                                 net.hop_latency, net.base_latency)  # fmt: skip
    return 2 * cfg.layers * one


def tp_decode_step(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, ranks: int, batch: int, context: int,
    dtype: str = "bf16", replicate_kv: bool = False, *, kv_dtype: str | None = None,
) -> dict[str, float]:  # fmt: skip
    """One decode step at T-way tensor parallelism, in seconds by part: ``weights`` and
    ``attention`` are one chip's share on the roofline (``decode_split`` of its shard: 1/T
    of the layer weights and of the KV cache, the LM head whole), ``all_reduce`` the step's
    2 · layers all-reduces of [batch × hidden]. The parts run one after the other.
    ``dtype``: the weights' and activations'; ``kv_dtype``: the KV cache's (default
    ``dtype``; fp8 or int8 stores it narrower)."""
    parts = decode_split(shard_config(cfg, ranks, replicate_kv), hw, batch, context, dtype,
                         kv_dtype=kv_dtype)  # fmt: skip
    return {"weights": parts["weights"].seconds, "attention": parts["attention"].seconds,
            "all_reduce": step_allreduce_seconds(cfg, net, ranks, batch, dtype)}  # fmt: skip


def tp_chip_seconds(parts: dict[str, float]) -> float:
    """One chip's own seconds of a ``tp_decode_step``: its weights and its attention, the
    all-reduces left out (chapter 10's explorer stacks the two)."""
    return parts["weights"] + parts["attention"]


def tp_step_seconds(parts: dict[str, float]) -> float:
    """A ``tp_decode_step``'s seconds: its parts run one after the other."""
    return sum(parts.values())


def tp_tpot(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, ranks: int, context: int, batch: int = 1,
    dtype: str = "bf16", replicate_kv: bool = False, *, kv_dtype: str | None = None,
) -> float:  # fmt: skip
    """TPOT(T): seconds per output token at T-way tensor parallelism (``tp_decode_step``)."""
    parts = tp_decode_step(cfg, hw, net, ranks, batch, context, dtype, replicate_kv,
                           kv_dtype=kv_dtype)  # fmt: skip
    return tp_step_seconds(parts)


def tp_ttft(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, ranks: int, prompt_tokens: int,
    batch: int = 1, dtype: str = "bf16", replicate_kv: bool = False,
) -> float:  # fmt: skip
    """TTFT(T): one chip's share of the prefill on the roofline (``latency.prefill_time`` of
    its shard) plus the prefill's all-reduces of [batch · prompt × hidden]."""
    part = shard_config(cfg, ranks, replicate_kv)
    compute = prefill_time(part, hw, prompt_tokens, batch, dtype).seconds
    return compute + step_allreduce_seconds(cfg, net, ranks, batch * prompt_tokens, dtype)


def best_degree(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, context: int, batch: int = 1,
    max_ranks: int = 64, dtype: str = "bf16", replicate_kv: bool = False,
) -> int:  # fmt: skip
    """The T (among ``degrees(cfg, max_ranks, replicate_kv)``) with the least TPOT: where
    more chips stop helping this decode. The smallest such T on a tie."""
    non_negative_int(context, "context")

    def cost(t: int) -> tuple[float, int]:
        return tp_tpot(cfg, hw, net, t, context, batch, dtype, replicate_kv), t

    return min(degrees(cfg, max_ranks, replicate_kv), key=cost)


def fit_ring(
    sizes: Sequence[float], seconds: Sequence[float], ranks: int, name: str = "measured"
) -> Link:
    """A ``Link`` fitted to measured all-reduce times (``seconds[i]`` for ``sizes[i]`` bytes
    over ``ranks`` processes) by least squares on the ring model t = a + 2(T − 1)/T · n / β.

    The intercept a is one call's latency; it is reported as ``hop_latency`` a / 2(T − 1)
    with ``base_latency`` 0, since one T cannot tell a fixed cost from a per-hop one."""
    positive_int(ranks, "ranks")
    if ranks < 2:
        raise ValueError("a ring all-reduce needs at least 2 ranks to measure")
    if len(sizes) != len(seconds) or len(set(sizes)) < 2:
        raise ValueError("fit_ring needs one time per size and at least two distinct sizes")
    hops = 2 * (ranks - 1)
    load = [hops / ranks * n for n in sizes]  # bytes each rank sends
    slope, intercept = statistics.linear_regression(load, seconds)
    if not slope > 0:
        raise ValueError(f"the times do not grow with the size (slope {slope:.3g} s/B): "
                         "measure larger all-reduces")  # fmt: skip
    return Link(name, 1 / slope, max(intercept, 0.0) / hops, 0.0,
                f"fitted to {len(sizes)} timed all-reduces over {ranks} ranks")


def tp_max_sequences(
    cfg: ModelConfig, hw: HardwareSpec, ranks: int, context: int, dtype: str = "bf16",
    replicate_kv: bool = False, *, kv_dtype: str | None = None,
) -> int:  # fmt: skip
    """Sequences of ``context`` tokens that T chips hold together (chapter 10): each chip
    keeps its shard's weights (1/T of the layers' weights, the embeddings and LM head whole)
    and its KV heads' share of every sequence's cache, so the answer is one chip's
    ``memory.max_concurrent_sequences`` for its shard: the weights in ``dtype``, the cache
    in ``kv_dtype`` (default ``dtype``)."""
    part = shard_config(cfg, ranks, replicate_kv)
    return max_concurrent_sequences(part, hw.memory_bytes, context, dtype, kv_dtype=kv_dtype)


def pipeline_bubble(stages: int, micro_batches: int, phase: str = "decode") -> float:
    """The share of its time a pipeline stage idles (chapter 10). ``"decode"``: in steady
    state each micro-batch's next token waits for its last one to leave the last stage, so
    m micro-batches keep m of P stages busy: idle 1 − m/P, none from m = P on. ``"prefill"``:
    one pass of m micro-batches fills and drains the pipe, P − 1 stage-times of the
    m + P − 1 it takes are idle on each stage: (P − 1)/(m + P − 1) (GPipe's bubble)."""
    positive_int(stages, "stages")
    positive_int(micro_batches, "micro_batches")
    if one_of(phase, ("decode", "prefill"), "phase") == "decode":
        return max(0.0, 1 - micro_batches / stages)
    return (stages - 1) / (micro_batches + stages - 1)


def pp_decode(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, stages: int, batch: int,
    micro_batches: int, context: int, dtype: str = "bf16",
) -> dict[str, float]:  # fmt: skip
    """Decode at P-stage pipeline parallelism on the roofline, in steady state (chapter 10).
    The batch is cut into m equal micro-batches (m divides B); a stage runs 1/P of the
    model's step at the micro-batch (layers, KV cache and LM head taken as evenly spread)
    and sends its [micro-batch × hidden] activations on (``net``'s base latency plus the
    bytes over its bandwidth). A micro-batch's token goes round the P stages, and m
    micro-batches share each stage: TPOT = max(P, m) · stage time. Returns ``stage``,
    ``tpot`` (seconds), ``throughput`` (tokens/s: B / TPOT) and ``bubble``
    (``pipeline_bubble``)."""
    positive_int(batch, "batch")
    positive_int(micro_batches, "micro_batches")
    if batch % micro_batches:
        raise ValueError(f"micro_batches={micro_batches} must divide batch={batch}")
    positive_int(stages, "stages")
    if cfg.layers % stages:
        raise ValueError(f"{cfg.name}: stages={stages} must divide layers={cfg.layers}")
    micro = batch // micro_batches
    parts = decode_split(cfg, hw, micro, context, dtype)
    send = (net.base_latency + allreduce_bytes(cfg, micro, dtype) / net.bandwidth
            if stages > 1 else 0.0)  # fmt: skip
    stage = (parts["weights"].seconds + parts["attention"].seconds) / stages + send
    tpot = max(stages, micro_batches) * stage
    return {"stage": stage, "tpot": tpot, "throughput": batch / tpot,
            "bubble": pipeline_bubble(stages, micro_batches)}  # fmt: skip


def attention_per_chip(cfg: ModelConfig, ranks: int, kv_dtype: str = "bf16") -> dict[str, float]:
    """One chip's decode attention when a layer's heads are split over T = ``ranks`` chips
    (chapter 10): ``"kv_bytes_per_token"``, the cache bytes the chip keeps per token of
    every sequence (all layers, in ``kv_dtype``), and ``"intensity"``, its attention FLOPs
    per cached byte over a long cache. Grouped-query attention: the chip's n_q / T query
    heads and the key/value heads they read (n_kv / T of them, or one copy of a shared head
    past T = n_kv: ``shard_config`` with ``replicate_kv``). Latent attention (MLA, absorbed):
    the chip's n_q / T heads all read the whole latent, which every chip keeps, so the bytes
    stay and the intensity falls T-fold. T must divide n_q (and n_kv, or be a multiple)."""
    positive_int(ranks, "ranks")
    if cfg.n_q_heads % ranks:
        raise ValueError(f"{cfg.name}: T={ranks} does not divide n_q={cfg.n_q_heads}")
    if cfg.is_mla:
        heads = cfg.n_q_heads // ranks
        part = dataclasses.replace(cfg, n_q_heads=heads, n_kv_heads=heads)
    else:
        part = shard_config(dataclasses.replace(cfg, intermediate=cfg.intermediate * ranks),
                            ranks, replicate_kv=True)  # attention alone: any MLP width
    kv = kv_bytes_per_token(part, kv_dtype)
    return {"kv_bytes_per_token": kv, "intensity": attention_flops_per_key(part) / kv}


def break_even_hop_latency(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, context: int, batch: int, low: int,
    high: int, dtype: str = "bf16",
) -> float:  # fmt: skip
    """The per-hop latency of a ring link (``net``'s bandwidth and per-call latency kept)
    at which ``high`` chips decode a token exactly as fast as ``low`` chips, for ``batch``
    sequences at ``context`` (chapter 10); above it the wider group is slower. TPOT is
    linear in the hop latency (each of the step's 2 · layers all-reduces makes 2(T − 1)
    hops; one chip makes none), so the two TPOTs are read at two hop latencies and the
    lines crossed. 0.0 when ``high`` is no faster even with no hop latency."""
    if not 1 <= low < high:
        raise ValueError(f"need 1 <= low < high, got low={low!r}, high={high!r}")

    def gap(hop: float) -> float:  # TPOT(high) - TPOT(low) at this hop latency
        link_at = dataclasses.replace(net, hop_latency=hop)
        return (tp_tpot(cfg, hw, link_at, high, context, batch, dtype)
                - tp_tpot(cfg, hw, link_at, low, context, batch, dtype))  # fmt: skip

    at_zero, at_micro = gap(0.0), gap(1e-6)
    if at_zero >= 0:
        return 0.0
    return -at_zero / ((at_micro - at_zero) / 1e-6)
