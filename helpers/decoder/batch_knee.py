"""Chapter 7 §3 (`07_batching`): the measured batch sweep's knees against the critical batch
(``batch_sweep.decode_batch_sweep``), each reading one call that returns a record.

``knee_reading`` → ``KneeReading``: the split roofline's critical batch B* on the measured
ceilings against the sweep's knee, t(1) over the largest batch's step per sequence: within an
eighth below t(1)/s (s: the slope of what grows with B), the knee a larger sweep would read,
when the last doubling nearly doubled the step, else only a lower bound on it; the last
doubling's line (what grows in proportion to B and what does not) beside the roofline's and
the weights' read; the two-point knee (``latency.quantized_knee``), which a cost every step
pays does not move, and which is 0 where the large batches' intercept reaches t(1); what the
knee's line holds on the roofline (the weights' matmuls and each sequence's KV read, so
whether the knee can be read as B* at all); and why it lands where it does (t(1) and t(B_max),
each off its roofline by a factor, so the knee off the roofline's own by their ratio). Its
``datasheets`` (``datasheet_critical`` → ``DatasheetCritical``) say why the published
model's B* on a GPU lies past the ridge: a matmul's activations weigh against its weights
when the hidden size is small.

``matmul_batch_sweep`` → ``MatmulSweep``: the MLP's up-projection timed alone at each batch of
the sweep, against its own roofline and beside the whole step, so that where a step leaves
its roofline below B* can be set against one matrix's kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from helpers.counting import hardware, latency, memory, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder.batch_sweep import PROPORTIONAL_DOUBLING, DecodeSweep
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


def _ms(seconds: float, top: float | None = None) -> str:
    """Milliseconds to three significant figures; 0 where ``seconds`` is a rounding error
    beside ``top`` (a line's intercept on the roofline past B*)."""
    if top is not None and abs(seconds) < 1e-9 * top:
        seconds = 0.0
    return f"{seconds * 1e3:.3g} ms"


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
    (``half_ridge``). The knee (``latency.measured_knee``) is t(1)·B_max/t(B_max), B_max =
    ``top``: t(1) over B_max's step per sequence, a lower bound on t(1)/s (s: the slope of
    what grows with B). ``two_point``: the line through the two largest batches (the two
    batches, seconds a sequence, intercept) and ``two_point_knee`` where it meets t(1)
    (``latency.quantized_knee``; 0.0 at or below batch 0), both None with fewer than three
    batches or a line that does not rise. The line through the origin has the slope of what
    grows with B, to within an eighth, only if the last doubling multiplied the step by at
    least ``PROPORTIONAL_DOUBLING`` (``proportional``); that slope is compute's only if the
    roofline says so at B_max: past B* and with each sequence's KV read small beside compute,
    so that the roofline's own knee on the same batches (``roofline_knee``) lands near B*
    (``line_is_compute``). ``half_s`` and
    ``half_roofline_s``: t(B_max/2), measured and on the roofline (None: not measured), for
    the last doubling's line; ``weights_read_s``: the weights' bytes at the measured
    bandwidth; ``top_attention_s``: the roofline's attention (each sequence's KV read) at
    B_max. The measured knee is the roofline's own times t(1)'s factor off its roofline
    (``t1_ratio``) over t(B_max)'s (``steep``). ``faster``: batches whose step beat its
    roofline (ceilings measured under more load)."""

    dtype: str
    ridge: float
    dtype_bytes: float
    critical: int | None
    crossing: float
    top: int
    context: int
    last_doubling: float | None
    proportional: bool
    knee: float
    knee_is_lower_bound: bool
    t1_s: float
    t1_roofline_s: float
    top_s: float
    top_roofline_s: float
    half_s: float | None
    half_roofline_s: float | None
    weights_read_s: float
    top_attention_s: float
    roofline_knee: float
    two_point: tuple[int, int, float, float] | None
    two_point_knee: float | None
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
        """t(B_max) over its roofline: the measured slope t(B_max)/B_max over the roofline's."""
        return self.top_s / self.top_roofline_s

    @property
    def attention_share(self) -> float:
        """The KV read's share of the roofline's step at B_max (the rest: the weights' part)."""
        return self.top_attention_s / self.top_roofline_s

    @property
    def top_past_critical(self) -> bool:
        """B_max at or past B*: the weights' matmuls compute-bound there on the roofline."""
        return self.critical is not None and self.top >= self.critical

    @property
    def line_is_compute(self) -> bool:
        """On the roofline, the line through the origin and B_max is compute's: B_max past B*
        and the roofline's own knee on these batches within ``NEAR`` of B*."""
        return (self.top_past_critical
                and NEAR[0] <= self.roofline_knee / self.critical <= NEAR[1])  # fmt: skip

    @staticmethod
    def _line(half: float | None, top_s: float, top: int) -> tuple[float, float] | None:
        if half is None:
            return None
        slope = (top_s - half) / (top - top // 2)
        return slope, top_s - slope * top

    @property
    def doubling_line(self) -> tuple[float, float] | None:
        """The line through the last doubling's two steps, (seconds a sequence: what grows
        with B, seconds a step: what does not); None when B_max/2 was not measured."""
        return self._line(self.half_s, self.top_s, self.top)

    @property
    def roofline_doubling_line(self) -> tuple[float, float] | None:
        """The same line through the roofline's two steps."""
        return self._line(self.half_roofline_s, self.top_roofline_s, self.top)

    @property
    def reading(self) -> str:
        """``"lower bound"`` (the last doubling under ``PROPORTIONAL_DOUBLING``: no slope to
        read, the knee only a lower bound on t(1)/s), ``"not compute's"`` (a slope, but on
        the roofline it is not compute's alone: B_max short of B*, or the KV read moves the
        roofline's own knee off B*),
        ``"errors cancel"`` (the knee near B* with t(1) and the slope both far off their
        rooflines, their ratio leaving it near B*) or ``"off the roofline"`` (their ratio moves
        the knee off the roofline's own)."""
        if self.knee_is_lower_bound:
            return "lower bound"
        if not self.line_is_compute:
            return "not compute's"
        near = NEAR[0] <= self.knee / self.critical <= NEAR[1]
        if near and min(self.t1_ratio, self.steep) >= LARGE:
            return "errors cancel"
        return "off the roofline"

    def _doubling_lines(self) -> list[str]:
        """The last doubling's factor against the criterion, and its line: what grows with B
        and what does not, beside the roofline's and the weights' read."""
        top, half = self.top, self.top // 2
        if self.last_doubling is None:
            return [f"no last doubling to test: batch {top} is odd" if top % 2 else
                    f"no last doubling to test: batch {half} not measured"]  # fmt: skip
        # rounded down: a factor just under the criterion must not print as the criterion
        shown = math.floor(self.last_doubling * 1000) / 1000
        lines = [f"last doubling {half} → {top}: step ×{shown:.3f}, "
                 + (f"at least ×{PROPORTIONAL_DOUBLING}: t({top}) is nearly proportional to "
                    "B (what does not grow with B is at most a ninth of it)" if self.proportional
                    else f"under ×{PROPORTIONAL_DOUBLING}: t({top}) is not yet proportional to "
                    "B")]  # fmt: skip
        (slope, fixed), (roof_slope, roof_fixed) = self.doubling_line, self.roofline_doubling_line
        read, star = self.weights_read_s, self.critical
        hidden = star is not None and half >= star  # both steps' weights compute-bound
        line = (f"the line through batches {half} and {top}: {_ms(slope)} a sequence plus an "
                f"intercept of {_ms(fixed)} (the part of these steps not proportional to B"
                + (f", more than the whole batch-1 step, {_ms(self.t1_s)}: no cost every step "
                   f"pays, so below batch {half} the step grew faster than this line"
                   if fixed > self.t1_s else "")
                + f"); the roofline's: {_ms(roof_slope)} plus "
                f"{_ms(roof_fixed, top=self.top_roofline_s)} ("
                + (f"past B* = {star} its weights' read, {_ms(read)}, hides under compute)"
                   if hidden else f"its weights' read, {_ms(read)}, not hidden under compute "
                   f"at batch {half})"))  # fmt: skip
        if fixed > read:
            line += (f"; the weights' read at the measured bandwidth is {read / fixed:.0%} of "
                     "the measured intercept")  # fmt: skip
        elif fixed > 0:
            line += ("; the weights' read at the measured bandwidth could account for the "
                     "measured intercept")  # fmt: skip
        return [*lines, line]

    def _two_point_line(self) -> str:
        """The two-point knee beside the origin line's: what a cost every step pays does to
        each, or why the two-point knee is 0."""
        if self.two_point is None:
            return ("two-point knee: none (fewer than three batches, or the two largest steps "
                    "do not rise)")  # fmt: skip
        before, last, slope, fixed = self.two_point
        line = (f"two-point knee (Exercise 2's reading): the line through batches {before} and "
                f"{last} meets t(1) at {self.two_point_knee:.1f}")  # fmt: skip
        if fixed >= self.t1_s:
            return line + (f" (at or before batch 0): its intercept, {_ms(fixed)}, is at or "
                           f"above t(1), {_ms(self.t1_s)}: the steps are no a + sB from batch 1 "
                           "to the largest, so neither knee marks where a flat stretch ends, and "
                           f"the origin line's only counts t(1) in batch {self.top}'s steps per "
                           "sequence")  # fmt: skip
        if fixed > 0:
            return line + (f"; its intercept, {_ms(fixed)} a step, does not grow with B and "
                           f"puts t(1)/s = {self.t1_s / slope:.1f} past it by "
                           f"{fixed / slope:.1f}; the origin line's knee, {self.knee:.1f}, lies "
                           + ("past" if self.knee > self.two_point_knee else "short of")
                           + " it")  # fmt: skip
        return line + (f"; its intercept, {_ms(fixed, top=self.top_s)}, holds no cost that does "
                       "not grow with B to move the origin line's knee past it")  # fmt: skip

    def report(self) -> str:
        """What chapter 7 §3 prints, in its order: B* and the ridge, the GPUs' B*, the last
        doubling and its line, the knee and the two-point knee, what the origin line holds on
        the roofline, t(1) and the slope against their rooflines, and the reading."""
        top, star = self.top, self.critical
        first_past = star is not None and star - 1 < self.crossing <= star
        star_text = f"B* = {star}" if star is not None else "B* (not reached)"
        lines = [
            f"split roofline, measured ceilings: weights compute-bound from B* = {star}; "
            f"ridge × b / 2 = {self.ridge:.2f} FLOP/B × {self.dtype_bytes:g} B / 2 = "
            f"{self.half_ridge:.2f}; with the activations' bytes the weights' part reaches its "
            f"ridge at B = {self.crossing:.2f} ({self.crossing / self.half_ridge:.3f}× ridge × "
            f"b / 2)" + (f", and B* = {star} is the first whole batch past it"
                         if first_past else ""),
            self.datasheets.report(),
            *self._doubling_lines(),
            f"measured knee: t(1)·{top}/t({top}) = {self.knee:.1f}, batch 1's step over batch "
            f"{top}'s per sequence ({_ms(self.top_s / top)}): where that cost a sequence adds "
            "up to t(1); knee / B* = "
            + (f"{self.knee / star:.2f}; " if star is not None else "none (no B*); ")
            + ("only a lower bound on t(1)/s (s: the slope of what grows with B), the knee a "
               f"larger sweep would read (no last doubling of ×{PROPORTIONAL_DOUBLING} or more: "
               f"t({top})/{top} is still well above s)" if self.knee_is_lower_bound
               else "within an eighth below t(1)/s (s: the slope of what grows with B), the "
               f"knee a larger sweep would read (the last doubling ×{PROPORTIONAL_DOUBLING} or "
               "more)"),
            self._two_point_line(),
            f"on the roofline at batch {top} ({self.context:,} tokens a sequence) the line "
            f"through the origin holds the weights' matmuls {1 - self.attention_share:.1%} ("
            + (f"compute-bound past {star_text}" if self.top_past_critical
               else f"memory-bound short of {star_text}")
            + f") and each sequence's attention (its KV read, with its queries and outputs) "
            f"{self.attention_share:.1%}; its own "
            f"knee on these batches, t(1)·{top}/t({top}) = {self.roofline_knee:.1f}"
            + (f", {self.roofline_knee / star:.2f}× B*" if star is not None else "")
            + ("" if self.line_is_compute else ": that line is not compute's alone"),
            f"t(1) is {self.t1_ratio:.2f}× its roofline ({self.t1_s * 1e3:.2f} against "
            f"{self.t1_roofline_s * 1e3:.2f} ms); t({top})/{top}, "
            f"{_ms(self.top_s / top)} per sequence, is {self.steep:.2f}× the "
            f"roofline's ({_ms(self.top_roofline_s / top)})"
            + ("" if self.proportional else ", an upper bound on the slope's own factor: "
               f"t({top}) is not yet proportional to B"),
        ]  # fmt: skip
        if self.reading == "lower bound":
            past = star is not None and self.knee > star
            lines.append(f"so t(1)/s, the knee a larger sweep would read, lies at or past "
                         f"{self.knee:.1f}, "
                         + (f"past B* = {star} already" if past else
                            f"on either side of {star_text} for all this sweep says")
                         + f"; t({top})/{top} is not yet the slope of what grows with B, so "
                         "t(1)'s and the slope's errors cannot be weighed")  # fmt: skip
        elif self.reading == "not compute's":
            lines.append(f"so the knee, {self.knee:.1f}, is t(1) over this device's step "
                         f"per sequence at batch {top}, not a reading of {star_text}: it is the "
                         "roofline's own "
                         f"knee, {self.roofline_knee:.1f}, times {self.t1_ratio:.2f}/"
                         f"{self.steep:.2f} = {self.t1_ratio / self.steep:.2f} (t(1)'s factor "
                         f"off its roofline over t({top})'s)")  # fmt: skip
        elif self.reading == "errors cancel":
            lines.append(f"so the knee lands near B* because two large errors partly cancel: "
                         f"the roofline's own knee, {self.roofline_knee:.1f}, times "
                         f"{self.t1_ratio:.2f}/{self.steep:.2f} (= "
                         f"{self.t1_ratio / self.steep:.2f}) gives {self.knee:.1f}, not because "
                         "the steps follow the roofline")  # fmt: skip
        else:
            lines.append(f"so the knee is the roofline's own, {self.roofline_knee:.1f}, times "
                         f"{self.t1_ratio:.2f}/{self.steep:.2f} = "
                         f"{self.t1_ratio / self.steep:.2f} (t(1)'s factor off its roofline "
                         f"over t({top})'s)")  # fmt: skip
        if self.faster:  # a step cannot beat its roofline: the ceilings were measured under load
            lines.append(f"steps faster than their roofline at batches {list(self.faster)}: "
                         "the ceilings were measured while other processes took more of the "
                         "cores; rerun on a quieter machine")  # fmt: skip
        return "\n".join(lines)


def knee_reading(sweep: DecodeSweep, cfg: ModelConfig, measured: Ceilings,
                 published: ModelConfig) -> KneeReading:  # fmt: skip
    """Read ``sweep`` (of ``cfg``, timed on the device ``measured`` describes) against the
    split roofline on the measured ceilings (chapter 7 §3): B* (``critical_batch_split``)
    and the real batch at which the weights' part meets the ridge; the knee and whether it
    lies within an eighth below t(1)/s or only below it (``DecodeSweep.knee_is_lower_bound``);
    the last doubling's line beside the roofline's and the weights' read; the two-point knee
    (``latency.quantized_knee`` with nothing quantized) and its line; what the line through
    the origin holds on the roofline at the largest batch (``roofline.decode_split`` at the
    sweep's context: the weights' part and each sequence's KV read) and the roofline's own
    knee; the two factors the knee is off that by. ``published``: the model as published,
    whose B* on GPUs' datasheets ``datasheets`` reads (``datasheet_critical``). The sweep
    needs batch 1."""
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
    half = top // 2 if sweep.last_doubling is not None else None
    at_top = roofline.decode_split(cfg, hw, top, sweep.context, dtype)
    steps, two_point, two_point_knee = sweep.step_seconds, None, None
    if len(sweep.batches) >= 3 and steps[top] > steps[sweep.batches[-2]]:
        before = sweep.batches[-2]
        slope = (steps[top] - steps[before]) / (top - before)
        two_point = (before, top, slope, steps[top] - slope * top)
        # Exercise 2's reading with nothing quantized: no weights' bytes saved, so n_params 0
        two_point_knee = latency.quantized_knee(steps, 0, measured.bandwidth, dtype,
                                                dtype)["knee"]  # fmt: skip
    return KneeReading(
        dtype=dtype, ridge=ridge, dtype_bytes=memory.dtype_bytes(dtype),
        critical=roofline.critical_batch_split(cfg, hw, dtype), crossing=crossing, top=top,
        context=sweep.context, last_doubling=sweep.last_doubling,
        proportional=sweep.top_proportional, knee=sweep.knee,
        knee_is_lower_bound=sweep.knee_is_lower_bound,
        t1_s=sweep.step_seconds[1], t1_roofline_s=sweep.predicted[1],
        top_s=sweep.step_seconds[top], top_roofline_s=sweep.predicted[top],
        half_s=None if half is None else sweep.step_seconds[half],
        half_roofline_s=None if half is None else sweep.predicted[half],
        weights_read_s=(w1.bytes_moved - per_sequence) / measured.bandwidth,
        top_attention_s=at_top["attention"].seconds,
        roofline_knee=latency.measured_knee(sweep.predicted), two_point=two_point,
        two_point_knee=two_point_knee,
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
