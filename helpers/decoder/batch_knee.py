"""Chapter 7 §3 (`07_batching`): where a decode step stops being flat, read off the measured
batch sweep (``batch_sweep.decode_batch_sweep``), each reading one call that returns a record.

``knee_reading`` → ``KneeReading``: the split roofline's critical batch B* on the measured
ceilings against the sweep's knee, whether the knee is a measurement or only a lower bound,
and why it lands where it does (t(1) and the slope, each off its roofline by a factor, so the
knee by their ratio). Its ``datasheets`` (``datasheet_critical`` → ``DatasheetCritical``) say
why the published model's B* on a GPU lies past the ridge: a matmul's activations weigh
against its weights when the hidden size is small.

``matmul_batch_sweep`` → ``MatmulSweep``: the MLP's up-projection timed alone at each batch of
the sweep, against its own roofline and beside the whole step, so that where a step leaves
its roofline below B* can be set against one matrix's kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.counting import flops, hardware, memory, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder.batch_sweep import COMPUTE_BOUND_DOUBLING, DecodeSweep
from helpers.measuring import machine, timing
from helpers.measuring.ceilings import Ceilings

__all__ = ["DATASHEET_CHIPS", "DatasheetCritical", "datasheet_critical", "KneeReading",
           "knee_reading", "MatmulSweep", "matmul_batch_sweep"]  # fmt: skip

DATASHEET_CHIPS = ("A100 80GB SXM", "H100 SXM", "H200 SXM")
# The weight matrices of a step, grouped as the chapter names them.
GROUPS = {"MLP": ("gate", "up", "down"), "LM head": ("lm_head",), "q and o": ("q", "o"),
          "k and v": ("k", "v")}  # fmt: skip
NEAR = (0.8, 1.25)  # a knee within these factors of B* lands "near" it
LARGE = 1.5  # t(1) and the slope each this far or more off their rooflines: large errors


@dataclass(frozen=True)
class DatasheetCritical:
    """A model's critical batch on GPUs' datasheet ceilings (``chips``: chip → (B*, ridge);
    B* None where it is not reached), and, at ``at``'s B* (``at_batch``), the bytes the
    activations add to the weights' part of a step beside batch 1's (``extra_bytes``: per
    weight matrix; ``batch1_bytes``: the weights' part at batch 1)."""

    model: str
    dtype: str
    hidden: int
    chips: dict[str, tuple[int | None, float]]
    at: str
    at_batch: int
    extra_bytes: dict[str, int]
    batch1_bytes: int

    @property
    def extra_share(self) -> float:
        """What the activations add, over batch 1's weights' part."""
        return sum(self.extra_bytes.values()) / self.batch1_bytes

    @property
    def group_shares(self) -> dict[str, float]:
        """Each group's share of what the activations add (``GROUPS``)."""
        total = sum(self.extra_bytes.values())
        return {group: sum(self.extra_bytes[op] for op in ops) / total
                for group, ops in GROUPS.items()}  # fmt: skip

    def report(self) -> str:
        def chip_part(chip: str) -> str:
            star, ridge = self.chips[chip]
            if star is None:
                return f"{chip} B* not reached (the ridge {ridge:.0f})"
            return f"{chip} B* = {star}, {star / ridge:.2f}× the ridge {ridge:.0f}"

        return "\n".join([
            f"{self.model} as published, {self.dtype}, datasheet ceilings: "
            + "; ".join(chip_part(chip) for chip in self.chips),
            f"{self.at} at B* = {self.at_batch}: activations add "
            f"{sum(self.extra_bytes.values()) / 1e6:,.0f} MB to the weights' part "
            f"({self.extra_share:.0%} of batch 1's), hidden size {self.hidden}; of them "
            + ", ".join(f"{group} {share:.0%}" for group, share in self.group_shares.items()),
        ])  # fmt: skip


def datasheet_critical(cfg: ModelConfig, dtype: str = "bf16",
                       chips: tuple[str, ...] = DATASHEET_CHIPS,
                       at: str = "H100 SXM") -> DatasheetCritical:  # fmt: skip
    """``cfg``'s critical batch (``roofline.critical_batch_split``) on each of ``chips``'
    datasheet ceilings beside its ridge, and why it lies past the ridge: a
    [B × d_in]·[d_in × d_out] matmul moves B(d_in + d_out) activation elements against
    d_in·d_out weights, so at ``at``'s B* the activations add bytes the ridge·b/2 estimate
    leaves out (``memory.forward_bytes`` at B* against batch 1, per weight matrix)."""
    if at not in chips:
        raise ValueError(f"at must be one of the chips {chips}, got {at!r}")
    table = {}
    for chip in chips:
        spec = hardware.get(chip)
        table[chip] = (roofline.critical_batch_split(cfg, spec, dtype), spec.ridge(dtype))
    star = table[at][0]
    if star is None:
        raise ValueError(f"{cfg.name}'s weights never turn compute-bound on {at}")
    one, many = (memory.forward_bytes(cfg, 1, context=1, batch=b, logits="last", dtype=dtype)
                 for b in (1, star))  # fmt: skip
    weights = [op for op in one if op != "attention"]
    return DatasheetCritical(cfg.name, dtype, cfg.hidden, table, at, star,
                             {op: many[op] - one[op] for op in weights},
                             sum(one[op] for op in weights))  # fmt: skip


@dataclass(frozen=True)
class KneeReading:
    """The split roofline's critical batch on the measured ceilings against a measured
    sweep's knee (chapter 7 §3).

    ``critical``: B*, the first whole batch whose weights' part is compute-bound;
    ``crossing``: the real B at which that part (the weights' bytes once, the activations'
    bytes and the FLOPs a sequence) meets the ridge, against the estimate ridge × b / 2
    (``half_ridge``). The knee (``latency.measured_knee``) is t(1)·B_max/t(B_max): t(1)
    over the slope t(B_max)/B_max, each off its roofline by a factor (``t1_ratio``,
    ``steep``: the slope over 2N/P, compute at the measured peak), the knee by their ratio.
    ``faster``: batches whose step beat its roofline (ceilings measured under more load)."""

    dtype: str
    ridge: float
    dtype_bytes: float
    critical: int | None
    crossing: float
    top: int
    last_doubling: float | None
    top_compute_bound: bool
    knee: float
    knee_is_lower_bound: bool
    t1_s: float
    t1_roofline_s: float
    slope_s: float
    compute_slope_s: float
    faster: tuple[int, ...]
    datasheets: DatasheetCritical

    @property
    def half_ridge(self) -> float:
        """ridge × b / 2: B* if the activations' bytes were nothing."""
        return self.ridge * self.dtype_bytes / 2

    @property
    def t1_ratio(self) -> float:
        """t(1) over its roofline."""
        return self.t1_s / self.t1_roofline_s

    @property
    def steep(self) -> float:
        """The slope t(B_max)/B_max over compute's, 2N/P."""
        return self.slope_s / self.compute_slope_s

    @property
    def roofline_knee(self) -> float:
        """The roofline's own knee: its t(1) over 2N/P."""
        return self.t1_roofline_s / self.compute_slope_s

    @property
    def reading(self) -> str:
        """``"lower bound"`` (the largest batch is not compute-bound: no slope to read),
        ``"errors cancel"`` (the knee near B* with t(1) and the slope both far off their
        rooflines, by about the same factor) or ``"off the roofline"`` (their ratio moves
        the knee off the roofline's own)."""
        if self.knee_is_lower_bound:
            return "lower bound"
        near = self.critical is not None and NEAR[0] <= self.knee / self.critical <= NEAR[1]
        if near and min(self.t1_ratio, self.steep) >= LARGE:
            return "errors cancel"
        return "off the roofline"

    def report(self) -> str:
        """What chapter 7 §3 prints, in its order: B* and the ridge, the GPUs' B*, the
        largest batch's doubling, the knee, t(1) and the slope, and the reading."""
        top, star = self.top, self.critical
        first_past = star is not None and star - 1 < self.crossing <= star
        lines = [
            f"split roofline, measured ceilings: weights compute-bound from B* = {star}; "
            f"ridge × b / 2 = {self.ridge:.2f} FLOP/B × {self.dtype_bytes:g} B / 2 = "
            f"{self.half_ridge:.2f}; with the activations' bytes the weights' part reaches its "
            f"ridge at B = {self.crossing:.2f} ({self.crossing / self.half_ridge:.3f}× ridge × "
            f"b / 2)" + (f", and B* = {star} is the first whole batch past it"
                         if first_past else ""),
            self.datasheets.report(),
            (f"last doubling {top // 2} → {top}: step ×{self.last_doubling:.2f}"
             if self.last_doubling is not None else f"batch {top // 2} not measured")
            + f"; compute-bound from ×{COMPUTE_BOUND_DOUBLING}: {self.top_compute_bound}",
            f"measured knee: t(1)·{top}/t({top}) = {self.knee:.1f}; knee / B* = "
            + (f"{self.knee / star:.2f}; " if star is not None else "none (no B*); ")
            + ("a measurement: the largest batch is compute-bound"
               if not self.knee_is_lower_bound
               else f"a lower bound: batch {top} is not yet compute-bound"),
            f"t(1) is {self.t1_ratio:.2f}× its roofline ({self.t1_s * 1e3:.2f} against "
            f"{self.t1_roofline_s * 1e3:.2f} ms); t({top})/{top}, {self.slope_s * 1e3:.3f} ms "
            f"per sequence, is {self.steep:.2f}× compute at the measured peak "
            f"({self.compute_slope_s * 1e3:.3f} ms, 2N/P)"
            + ("" if self.top_compute_bound else ", an upper bound on the matmuls' own "
               "slowness: part of it is still the weights' read"),
        ]  # fmt: skip
        if self.reading == "lower bound":
            past = star is not None and self.knee > star
            lines.append(f"so the knee lies at or past {self.knee:.1f}, "
                         + (f"past B* = {star} already" if past else
                            f"on either side of B* = {star} for all this sweep says")
                         + f"; t({top})/{top} is no compute slope, so no cancelling of errors "
                         "can be read")  # fmt: skip
        elif self.reading == "errors cancel":
            lines.append(f"so the knee lands near B* because two errors of about the same "
                         f"size cancel ({self.t1_ratio:.2f}/{self.steep:.2f} = "
                         f"{self.t1_ratio / self.steep:.2f}), not because the steps follow "
                         "the roofline")  # fmt: skip
        else:
            lines.append(f"their ratio, {self.t1_ratio / self.steep:.2f}, moves the knee off "
                         f"the roofline's own ({self.roofline_knee:.1f} = roofline t(1) over "
                         "2N/P)")  # fmt: skip
        if self.faster:  # a step cannot beat its roofline: the ceilings were measured under load
            lines.append(f"steps faster than their roofline at batches {list(self.faster)}: "
                         "the ceilings were measured while other processes took more of the "
                         "cores; rerun on a quieter machine")  # fmt: skip
        return "\n".join(lines)


def knee_reading(sweep: DecodeSweep, cfg: ModelConfig, measured: Ceilings,
                 published: ModelConfig) -> KneeReading:  # fmt: skip
    """Read ``sweep`` (of ``cfg``, timed on the device ``measured`` describes) against the
    split roofline on the measured ceilings (chapter 7 §3): B* (``critical_batch_split``)
    and the real batch at which the weights' part meets the ridge, the knee and whether it
    is a measurement (``DecodeSweep.knee_is_lower_bound``), and the two factors the knee
    is off its roofline by. ``published``: the model as published, whose B* on GPUs'
    datasheets ``datasheets`` reads (``datasheet_critical``). The sweep needs batch 1."""
    if 1 not in sweep.step_seconds:
        raise ValueError("the sweep needs batch 1: the knee and t(1) are read against it")
    dtype = sweep.dtype
    hw, ridge = measured.as_hardware_spec(), measured.ridge(dtype)
    # The weights' part is linear in B (the weights' bytes once, the activations' bytes and
    # the FLOPs a sequence), so it meets the ridge at one real B, usually between two batches.
    w1, w2 = (roofline.decode_split(cfg, hw, b, 1, dtype)["weights"] for b in (1, 2))
    per_sequence = w2.bytes_moved - w1.bytes_moved
    crossing = (w1.bytes_moved - per_sequence) / (w1.flops / ridge - per_sequence)
    top = sweep.batches[-1]
    return KneeReading(
        dtype=dtype, ridge=ridge, dtype_bytes=memory.dtype_bytes(dtype),
        critical=roofline.critical_batch_split(cfg, hw, dtype), crossing=crossing, top=top,
        last_doubling=sweep.last_doubling, top_compute_bound=sweep.top_compute_bound,
        knee=sweep.knee, knee_is_lower_bound=sweep.knee_is_lower_bound,
        t1_s=sweep.step_seconds[1], t1_roofline_s=sweep.predicted[1],
        slope_s=sweep.step_seconds[top] / top,
        compute_slope_s=2 * flops.param_count(cfg) / measured.peak(dtype),
        faster=tuple(b for b in sweep.batches if sweep.step_seconds[b] < sweep.predicted[b]),
        datasheets=datasheet_critical(published),
    )  # fmt: skip


@dataclass(frozen=True)
class MatmulSweep:
    """One matmul, [B × d_in]·[d_in × d_out] (``shape``: (d_in, d_out)), timed alone at each
    batch of a decode sweep (``matmul_s``, median seconds) beside its roofline on the
    measured ceilings (``roofline_s``) and the sweep's whole step (``step_s``); ``critical``:
    the split roofline's B* on the same ceilings (None: not reached)."""

    shape: tuple[int, int]
    dtype: str
    critical: int | None
    matmul_s: dict[int, float]
    roofline_s: dict[int, float]
    step_s: dict[int, float]

    @property
    def below_roofline(self) -> list[int]:
        """Batches whose matmul beat its roofline: ceilings measured under more load, or
        weights left in cache."""
        return [b for b, seconds in self.matmul_s.items() if seconds < self.roofline_s[b]]

    def _below_critical(self, b: int) -> bool:
        return self.critical is None or b < self.critical

    @property
    def against_first(self) -> list[tuple[int, float, float]]:
        """(B, step over the first batch's, matmul over the first batch's) for each later
        batch below B*."""
        first, *rest = self.matmul_s
        return [(b, self.step_s[b] / self.step_s[first], self.matmul_s[b] / self.matmul_s[first])
                for b in rest if self._below_critical(b)]  # fmt: skip

    @property
    def largest_rise(self) -> tuple[int, int] | None:
        """The neighbouring batches below B* between which the matmul rises most (None:
        fewer than two batches below B*)."""
        batches = list(self.matmul_s)
        pairs = [(a, b) for a, b in zip(batches, batches[1:], strict=False)
                 if self._below_critical(b)]  # fmt: skip
        if not pairs:
            return None
        return max(pairs, key=lambda pair: self.matmul_s[pair[1]] / self.matmul_s[pair[0]])

    def report(self) -> str:
        """The table, then the matmul's and the step's rises below B*."""
        lines = [f"{'batch':>6}{'matmul ms':>11}{'roofline ms':>13}{'measured/roofline':>19}"]
        for b, seconds in self.matmul_s.items():
            bound = self.roofline_s[b]
            lines.append(f"{b:>6}{seconds * 1e3:>11.3f}{bound * 1e3:>13.3f}"
                         f"{seconds / bound:>19.2f}")  # fmt: skip
        if self.below_roofline:
            lines.append(f"faster than the roofline at batches {self.below_roofline}: the "
                         "ceilings were measured under more load, or the weights stayed in "
                         "cache")  # fmt: skip
        lines.append(f"below B* = {self.critical}, against batch {next(iter(self.matmul_s))}: "
                     + "; ".join(f"B = {b}: step {step:.2f}×, matmul {matmul:.2f}×"
                                 for b, step, matmul in self.against_first))  # fmt: skip
        if self.largest_rise is None:
            lines.append("largest rise of the matmul between neighbouring batches below B*: "
                         "none (fewer than two batches below it)")  # fmt: skip
        else:
            a, b = self.largest_rise
            lines.append(f"largest rise of the matmul between neighbouring batches below B*: "
                         f"{a} -> {b}, {self.matmul_s[b] / self.matmul_s[a]:.2f}× (step "
                         f"{self.step_s[b] / self.step_s[a]:.2f}×; roofline "
                         f"{self.roofline_s[b] / self.roofline_s[a]:.2f}×)")  # fmt: skip
        return "\n".join(lines)


def matmul_batch_sweep(sweep: DecodeSweep, cfg: ModelConfig, measured: Ceilings,
                       device: str = "cpu", *, min_run_time: float = 0.02,
                       max_run_time: float = 0.1) -> MatmulSweep:  # fmt: skip
    """Time ``cfg``'s MLP up-projection, [B × hidden]·[hidden × intermediate], alone at each
    batch of ``sweep`` (chapter 7 §3), in the sweep's dtype on ``device``: random inputs,
    never zeros, rotated among copies or with the cache flushed so that no call finds the
    weights in cache (``timing.cache_defeat_inputs`` with ``measured``'s cache size; chapter
    4), one warm-up call, medians. Beside each: its roofline on the measured ceilings
    (``roofline.matmul_time``) and the sweep's step, so that a step's rise below B* can be
    set against one matrix's kernel: the math library picks a kernel by shape."""
    dtype, (hidden, wide) = sweep.dtype, (cfg.hidden, cfg.intermediate)
    peak, bandwidth = measured.peak(dtype), measured.bandwidth
    torch_dtype = machine.torch_dtype(dtype)
    matmul_s, roofline_s = {}, {}
    for batch in sweep.batches:
        def inputs(batch: int = batch) -> tuple[torch.Tensor, torch.Tensor]:
            return (timing.random_tensor((batch, hidden), torch_dtype, device),
                    timing.random_tensor((wide, hidden), torch_dtype, device))  # fmt: skip

        sets, flush, _ = timing.cache_defeat_inputs(inputs, measured.cache_bytes, device)
        timed = timing.time_callable(torch.nn.functional.linear, sets, device, warmup=1,
                                     min_run_time=min_run_time, max_run_time=max_run_time,
                                     flush=flush)  # fmt: skip
        sets = flush = None  # free this batch's copies before the next batch's
        matmul_s[batch] = timed.median_s
        roofline_s[batch] = roofline.matmul_time(batch, hidden, wide, peak, bandwidth,
                                                 dtype).seconds  # fmt: skip
    critical = roofline.critical_batch_split(cfg, measured.as_hardware_spec(), dtype)
    return MatmulSweep((hidden, wide), dtype, critical, matmul_s, roofline_s,
                       {b: sweep.step_seconds[b] for b in sweep.batches})  # fmt: skip
