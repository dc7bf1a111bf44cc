"""Chapter 6's timings of decode attention (`06_ttft_tpot` §7), each as one call.

One layer's decode attention (one query token, every query head of a key/value head as one
row of queries, so the cache is read once) reads ``2 · n_kv · d_h`` values a cached token and
does ``4 · n_q · d_h`` FLOPs against it: an intensity of ``2g/b`` FLOP/B whatever the context
(``AttentionRoof``), so which roof binds it on a device is one comparison with the ridge.
``attention_against_context`` times it over growing caches and reads the share it reaches of
that roof; ``split_against_plain`` times Flash-Decoding's split (``split_kv_attention``) at
one length against the plain kernel and says, split by split, whether the difference stands
past the two timings' spread. Inputs rotate among copies past the last-level cache, or the
cache is flushed where too many copies would be needed (``timing.cache_defeat_inputs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from helpers.counting import flops, hardware, memory, models, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder.phase_times import DecodeCurve, within_spread
from helpers.decoder.split_kv import split_kv_attention
from helpers.measuring import machine, timing
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.timing import Timing

__all__ = ["AttentionRoof", "AttentionRow", "AttentionCurve", "SplitVerdict",
           "SplitAgainstPlain", "attention_roof", "attention_against_context",
           "split_against_plain", "against_steps"]  # fmt: skip

GPU, LATENT_MODEL = "H100 SXM", "DeepSeek-V3"  # the bf16 GPU and the latent attention compared


@dataclass(frozen=True)
class AttentionRoof:
    """One layer's decode attention against a device's ceilings: a cached token's K and V
    bytes and its FLOPs (all query heads), the matmul ceiling ``peak`` (FLOP/s) and
    ``bandwidth`` (B/s)."""

    dtype: str
    kv_bytes_per_token: int
    flops_per_token: int
    peak: float
    bandwidth: float

    @property
    def intensity(self) -> float:
        """FLOP/B, 2g/b whatever the length."""
        return self.flops_per_token / self.kv_bytes_per_token

    @property
    def ridge(self) -> float:
        return self.peak / self.bandwidth

    def time(self, length: int) -> roofline.RooflineTime:
        """The roofline's time over ``length`` cached tokens (``roofline.bound_time``)."""
        return roofline.bound_time(self.flops_per_token * length,
                                   self.kv_bytes_per_token * length, self.peak,
                                   self.bandwidth)  # fmt: skip

    @property
    def bound(self) -> str:
        """``"memory"`` or ``"compute"`` (a tie: compute, chapter 3), at every length."""
        return self.time(1).bound

    def share(self, seconds: float, length: int) -> float:
        """The share a call of ``seconds`` over ``length`` tokens reaches of the roof that
        binds it: bytes over the bandwidth, or FLOPs over the peak."""
        return self.time(length).seconds / seconds

    def lines(self) -> list[str]:
        """Which side of the ridge attention falls on, and the ceiling it is read against."""
        head = (f"this device, {self.dtype}: attention's {self.intensity:.1f} FLOP/B is "
                f"{self.intensity / self.ridge:.0%} of the ridge {self.ridge:.1f}: "
                f"{self.bound}-bound at every length")
        if self.bound == "compute":
            return [head, f"  chapter 3's claim (memory-bound at any context) holds for 16-bit "
                          f"KV on a GPU, whose ridge is in the hundreds; it fails here, in "
                          f"{self.dtype} on a ridge this low: the kernel is read against the "
                          f"FLOP ceiling, {self.peak / 1e9:,.1f} GFLOP/s"]
        return [head, f"  chapter 3's claim holds here: the kernel is read against the "
                      f"bandwidth ceiling, {self.bandwidth / 1e9:.1f} GB/s"]


def attention_roof(cfg: ModelConfig, measured: Ceilings, dtype: str) -> AttentionRoof:
    """``cfg``'s one-layer decode attention in ``dtype`` against ``measured``'s ceilings: the
    bytes from ``memory.kv_bytes_per_token``, the FLOPs from ``flops.attention_flops_per_key``,
    each of a one-layer copy of ``cfg``."""
    layer = dataclasses.replace(cfg, layers=1)
    return AttentionRoof(dtype, memory.kv_bytes_per_token(layer, dtype),
                         flops.attention_flops_per_key(layer), measured.peak(dtype),
                         measured.bandwidth)  # fmt: skip


def _inputs(cfg: ModelConfig, length: int, dtype: str, device: str):  # noqa: ANN202
    """A maker of (q, k, v) as the decoder holds them: each kv head's g query heads as g
    query rows [1, n_kv, g, d_h], keys and values [1, n_kv, length, d_h], random."""
    torch_dtype = machine.torch_dtype(dtype)

    def make() -> tuple[torch.Tensor, ...]:
        return (timing.random_tensor((1, cfg.n_kv_heads, cfg.group_size, cfg.head_dim),
                                     torch_dtype, device),
                timing.random_tensor((1, cfg.n_kv_heads, length, cfg.head_dim), torch_dtype,
                                     device),
                timing.random_tensor((1, cfg.n_kv_heads, length, cfg.head_dim), torch_dtype,
                                     device))  # fmt: skip

    return make


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)  # g query rows a kv head: the cache read once


class AttentionRow(NamedTuple):
    """One length: cached tokens, median seconds and IQR of a call, the cache's K, V bytes."""

    length: int
    seconds: float
    iqr: float
    kv_bytes: int


@dataclass(frozen=True)
class AttentionCurve:
    """What ``attention_against_context`` measured, and the same intensity on a bf16 GPU's
    datasheet ridge (``gpu_ridge``) for ``cfg``'s attention and for latent attention's."""

    model: str
    roof: AttentionRoof
    rows: tuple[AttentionRow, ...]
    gpu: str
    gpu_ridge: float
    gpu_intensity: float
    latent_model: str
    latent_intensity: float

    @property
    def shares(self) -> list[float]:
        """Each length's share of the roof that binds attention on this device."""
        return [self.roof.share(row.seconds, row.length) for row in self.rows]

    def report(self) -> str:
        roof = self.roof
        lines = [*roof.lines(),
                 f"{'cached tokens':>14}{'µs':>10}{'KV MB':>8}{'GB/s':>7}{'GFLOP/s':>9}"
                 f"{'of roof':>9}"]
        for (length, seconds, _, kv), share in zip(self.rows, self.shares, strict=True):
            lines.append(f"{length:>14,}{seconds * 1e6:>10.0f}{kv / 1e6:>8.1f}"
                         f"{kv / seconds / 1e9:>7.1f}"
                         f"{roof.flops_per_token * length / seconds / 1e9:>9.1f}{share:>9.0%}")
        lines.append(f"an {self.gpu}, bf16 (datasheet ridge {self.gpu_ridge:.0f} FLOP/B): this "
                     f"model's attention {self.gpu_intensity:.0f} FLOP/B "
                     f"({self.gpu_intensity / self.gpu_ridge:.0%} of the ridge), "
                     f"{self.latent_model}'s MLA {self.latent_intensity:.0f} "
                     f"({self.latent_intensity / self.gpu_ridge:.0%})")
        return "\n".join(lines)


def against_steps(curve: AttentionCurve, decode: DecodeCurve, layers: int) -> str | None:
    """Section 5's TPOT growth between the shortest and longest context both ``curve`` and
    ``decode`` timed, against ``curve``'s one-layer attention growth times ``layers``: the
    two measurements of what a cached token costs, read against their summed spreads
    (``within_spread``). None where they share fewer than two contexts."""
    attention = {row.length: row for row in curve.rows}
    steps = {row.context: row.seconds for row in decode.rows}
    common = sorted(set(attention) & set(steps))
    if len(common) < 2:
        return None
    a, b = common[0], common[-1]
    alone = layers * (attention[b].seconds - attention[a].seconds)
    step = steps[b] - steps[a]
    spread = layers * (attention[a].iqr + attention[b].iqr) + decode.spread[a] + decode.spread[b]
    line = (f"from {a:,} to {b:,} cached tokens: attention timed alone grew "
            f"{alone * 1e3:.2f} ms over {layers} layers, section 5's TPOT {step * 1e3:.2f} ms "
            f"(spreads summed {spread * 1e3:.2f} ms): ")
    if within_spread(alone, step, spread):
        return line + "no difference shown within their spreads"
    return line + (f"attention alone costs {'more' if alone > step else 'less'} beyond the "
                   "spreads (each call here reads caches rotated out of the last-level cache; "
                   "inside a step it follows the weights' reads): an estimate of attention's "
                   "share of a step should say which of the two it uses")


def _lengths(lengths: Sequence[int]) -> list[int]:
    lengths = list(lengths)
    if not lengths or any(type(n) is not int or n < 1 for n in lengths):
        raise ValueError(f"lengths must be positive ints, at least one; got {lengths}")
    return lengths


def attention_against_context(
    cfg: ModelConfig,
    lengths: Sequence[int],
    measured: Ceilings,
    dtype: str,
    device: str = "cpu",
    *,
    run_time: float = 1.0,
) -> AttentionCurve:
    """Time one layer of ``cfg``'s decode attention (``F.scaled_dot_product_attention``, the
    decoder's call) over caches of each length in ``lengths`` (chapter 6 §7), on random
    inputs rotated past the last-level cache or flushed (``timing.cache_defeat_inputs``),
    two warm-up calls, 0.1 to 0.5 s × ``run_time`` each. The record holds the roof on
    ``measured``'s ceilings and, for comparison, ``roofline.decode_attention_intensity`` of
    ``cfg`` and of DeepSeek-V3's latent attention in bf16 against an H100's datasheet ridge.
    ValueError unless ``lengths`` are positive ints."""
    roof = attention_roof(cfg, measured, dtype)
    rows = []
    with torch.no_grad():
        for length in _lengths(lengths):
            sets, flush, _ = timing.cache_defeat_inputs(_inputs(cfg, length, dtype, device),
                                                        measured.cache_bytes, device)
            timed = timing.time_callable(_attend, sets, device, warmup=2,
                                         min_run_time=0.1 * run_time,
                                         max_run_time=0.5 * run_time, flush=flush)  # fmt: skip
            rows.append(AttentionRow(length, timed.median_s, timed.iqr_s,
                                     roof.kv_bytes_per_token * length))  # fmt: skip
    return AttentionCurve(cfg.name, roof, tuple(rows), GPU, hardware.get(GPU).ridge("bf16"),
                          roofline.decode_attention_intensity(cfg, "bf16"), LATENT_MODEL,
                          roofline.decode_attention_intensity(models.get(LATENT_MODEL),
                                                              "bf16"))  # fmt: skip


@dataclass(frozen=True)
class SplitVerdict:
    """One split against plain: ``ratio``, plain's median over the split's (above 1: the split
    is faster), and whether the difference is ``within`` the two timings' IQRs added."""

    name: str
    ratio: float
    within: bool

    def line(self) -> str:
        if self.within:
            verdict = "within the two timings' spread: no difference shown"
        elif self.ratio > 1:
            verdict = f"faster beyond the spread, {self.ratio:.2f}x plain's speed"
        else:
            verdict = f"slower beyond the spread, plain is {1 / self.ratio:.2f}x faster"
        return f"{self.name} against plain: {verdict}"


@dataclass(frozen=True)
class SplitAgainstPlain:
    """What ``split_against_plain`` measured: each variant's timing, plain first, at
    ``length`` cached tokens holding ``kv_bytes``."""

    model: str
    roof: AttentionRoof
    length: int
    timings: tuple[tuple[str, Timing], ...]

    @property
    def kv_bytes(self) -> int:
        """The cache's bytes: the same for every variant (not the split's intermediates)."""
        return self.roof.kv_bytes_per_token * self.length

    @property
    def verdicts(self) -> tuple[SplitVerdict, ...]:
        """Each split judged against plain on its own."""
        (_, plain), *splits = self.timings
        return tuple(SplitVerdict(name, plain.median_s / t.median_s,
                                  within_spread(plain.median_s, t.median_s,
                                                plain.iqr_s + t.iqr_s))
                     for name, t in splits)  # fmt: skip

    def report(self) -> str:
        lines = [f"{self.length:,} cached tokens, {self.kv_bytes / 1e6:.1f} MB of KV",
                 f"{'':>14}{'µs':>9}{'spread µs':>10}{'GB/s':>7}{'of roof':>9}  "
                 f"({self.roof.bound}-bound)"]
        for name, t in self.timings:
            lines.append(f"{name:>14}{t.median_s * 1e6:>9.0f}{t.iqr_s * 1e6:>10.0f}"
                         f"{self.kv_bytes / t.median_s / 1e9:>7.1f}"
                         f"{self.roof.share(t.median_s, self.length):>9.0%}")
        lines += [verdict.line() for verdict in self.verdicts]
        return "\n".join(lines)


ROUNDS = 3  # rounds in which split_against_plain's variants take turns


def split_against_plain(
    cfg: ModelConfig,
    length: int,
    measured: Ceilings,
    dtype: str,
    device: str = "cpu",
    *,
    chunks: Sequence[int] = (4, 16, 64),
    run_time: float = 1.0,
) -> SplitAgainstPlain:
    """Time one layer's decode attention over ``length`` cached tokens plainly and split into
    each number of ``chunks`` (``split_kv_attention``, Flash-Decoding's log-sum-exp merge:
    the same bytes and FLOPs, with float32 intermediates it moves besides), on the same input
    sets, timed as ``attention_against_context`` times, the variants taking turns in
    ``ROUNDS`` rounds (chapter 6 §7). A split's verdict:
    within the two timings' IQRs added, else faster or slower beyond that spread. ValueError
    for a length or a chunk count that is not a positive int, or more chunks than tokens."""
    _lengths([length])
    if not chunks or any(type(c) is not int or not 1 <= c <= length for c in chunks):
        raise ValueError(f"chunks must be ints in [1, {length}], at least one; got "
                         f"{list(chunks)}")  # fmt: skip
    roof = attention_roof(cfg, measured, dtype)

    def split(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int) -> torch.Tensor:
        # q as the decoder holds it for the split: [batch, query heads, 1, head_dim]
        return split_kv_attention(q.view(1, cfg.n_q_heads, 1, cfg.head_dim), k, v, n)

    variants = {"plain": _attend} | {f"split, J = {n}": (lambda q, k, v, n=n: split(q, k, v, n))
                                     for n in chunks}  # fmt: skip
    with torch.no_grad():
        sets, flush, _ = timing.cache_defeat_inputs(_inputs(cfg, length, dtype, device),
                                                    measured.cache_bytes, device)
        kept = timing.time_in_turn([(fn, sets) for fn in variants.values()], device,
                                   rounds=ROUNDS, min_run_time=0.1 * run_time / ROUNDS,
                                   max_run_time=0.5 * run_time / ROUNDS, flush=flush)
    timings = tuple(zip(variants, kept, strict=True))
    return SplitAgainstPlain(cfg.name, roof, length, timings)
