"""Chapter 5's matmul sweep as one call (`05_matmuls`): ``run_sweep`` → ``SweepRun``.

The experiment, in order: this device's ceilings (``ceilings.measure_ceilings``), each dtype's
scales (``sweep.choose_scales``, per dtype: a CPU without bf16 arithmetic must not shrink its
fp32 prefill too), each dtype's sweep (``sweep.measure_sweep``) with the bandwidth streamed again
between dtypes, optionally the paired decode check (``sweep.paired_decode``), then the ceilings
reconciled with every rate seen (``sweep.remeasure_ceilings``) and the headline figures
(``sweep_record.summarize``). ``python -m helpers.programs.bench``, chapter 5 and the GPU
reference (``helpers.programs.gpu_checks``) all call it; ``SweepRun.record()`` is the results
record they write or read (``sweep_record.results_record``), and the run's verdicts (the
bandwidth's drift, a busy machine, unsteady points, timings under load, what set or missed a
ceiling) are its properties.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from helpers.measuring import ceilings as ceilings_mod
from helpers.measuring import machine, sweep, sweep_record
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.sweep import LinearShape, SweepPoint

__all__ = ["SweepRun", "run_sweep", "BUSY_SHARE", "BANDWIDTH_DRIFT", "DEFAULT_MODEL"]

DEFAULT_MODEL = "Qwen2.5-7B"
BUSY_SHARE = 0.05
"""Other processes' share of the CPU over the run above which its timings are slow and noisy."""
BANDWIDTH_DRIFT = 0.15
"""A change of the streamed bandwidth from before the sweep to after it beyond this: other
processes or tenants used memory meanwhile, and memory-bound timings vary with it."""

Pair = tuple[str, LinearShape, list[tuple[float, float]]]
"""``sweep.paired_decode``'s answer: the kernel, the shape timed, the (stream, matmul) B/s."""


@dataclass(frozen=True)
class SweepRun:
    """What one run of chapter 5's sweep measured.

    ``initial``: the ceilings measured before the sweep; ``ceilings``: the final ones, raised to
    the best rate of the run, from which every point is predicted. ``scales``: per dtype,
    {m: {shape label: scale}}. ``streams``: the bandwidth streamed before the sweep, between
    dtypes and after it (one more than the dtypes). ``pairs``: per dtype, the paired decode
    check (empty unless asked for); ``pair_groups``: the groups its fastest group is read from.
    ``loads``: per step ("the ceilings", "the fp32 sweep", …), the cores' worth of CPU other
    processes used while it ran (None where unknown) and the threads it timed with.
    ``others_share``: other processes' share of the CPU over the whole run."""

    model: str
    dtypes: tuple[str, ...]
    tokens: tuple[int, ...]
    quick: bool
    date: str
    initial: Ceilings
    ceilings: Ceilings
    scales: dict[str, dict[int, dict[str, int]]]
    points: tuple[SweepPoint, ...]
    streams: tuple[float, ...]
    pairs: dict[str, Pair]
    pair_groups: int
    loads: dict[str, tuple[float | None, int]]
    others_share: float | None
    summary: dict[str, dict[str, Any]]

    @property
    def bandwidth_before(self) -> float:
        return self.streams[0]

    @property
    def bandwidth_after(self) -> float:
        return self.streams[-1]

    def sweep_moment(self, dtype: str) -> float | None:
        """The stream rate beside ``dtype``'s sweep: the mean of the streams just before and
        just after it, where the two agree within ``BANDWIDTH_DRIFT``; None where they do not
        (memory changed speed at a moment no stream saw) and for the last dtype, whose next
        stream comes after the pairs: there the sweep's moment is not known."""
        i = self.dtypes.index(dtype)
        if i + 1 >= len(self.dtypes):
            return None
        before, after = self.streams[i:i + 2]
        if abs(after / before - 1) > BANDWIDTH_DRIFT:
            return None
        return (before + after) / 2

    @property
    def bandwidth_drift(self) -> float:
        """The streamed bandwidth after the sweep over the one before it, less 1."""
        return self.bandwidth_after / self.bandwidth_before - 1

    @property
    def drifted(self) -> bool:
        """Whether the bandwidth moved by more than ``BANDWIDTH_DRIFT`` during the run."""
        return abs(self.bandwidth_drift) > BANDWIDTH_DRIFT

    @property
    def busy(self) -> bool:
        """Whether other processes used more than ``BUSY_SHARE`` of the CPU during the run."""
        return self.others_share is not None and self.others_share > BUSY_SHARE

    @property
    def unsteady(self) -> list[SweepPoint]:
        """The points too noisy to set a ceiling (``ceilings.steady``)."""
        return [p for p in self.points if not ceilings_mod.steady(p.median_s, p.iqr_s)]

    @property
    def loaded(self) -> list[str]:
        """The steps timed while other processes took cores their threads needed
        (``machine.load_unreliable``): their figures are slower than this device."""
        return [name for name, (cores, threads) in self.loads.items()
                if machine.load_unreliable(cores, threads)]  # fmt: skip

    @property
    def pair_labels(self) -> dict[str, str]:
        """Per dtype, the label its paired matmul carries in a bandwidth method it set."""
        return {dtype: _pair_label(dtype, kernel, timed)
                for dtype, (kernel, timed, _) in self.pairs.items()}  # fmt: skip

    @property
    def pair_setter(self) -> str | None:
        """The dtype whose paired matmul set the bandwidth ceiling, or None."""
        method = self.ceilings.bandwidth_method
        return next((d for d, label in self.pair_labels.items() if method.startswith(label)),
                    None)  # fmt: skip

    @property
    def shortfalls(self) -> dict[str, dict[str, Any]]:
        """Per dtype, what set its matmul ceiling and the points that miss a ceiling
        (``sweep_record.shortfalls``)."""
        return sweep_record.shortfalls(self.points, self.ceilings)

    def record(self) -> dict[str, Any]:
        """The run's results record (``sweep_record.results_record``): what ``python -m
        helpers.programs.bench`` writes as JSON and the GPU reference keeps;
        ``sweep_record.record_points`` and ``record_ceilings`` read it back."""
        from helpers.counting import models

        return sweep_record.results_record(
            self.ceilings, self.points, date=self.date, model=self.model,
            scales={dtype: {str(m): by_shape for m, by_shape in by_m.items()}
                    for dtype, by_m in self.scales.items()},
            quick=self.quick, other_processes_cpu_share=self.others_share,
            bandwidth_streams=list(self.streams), cache_bytes=self.ceilings.cache_bytes,
            dtypes=list(self.dtypes), tokens=list(self.tokens),
            shapes=[asdict(s) for s in sweep.layer_shapes(models.get(self.model))],
            summary=self.summary,
        )  # fmt: skip


def _pair_label(dtype: str, kernel: str, timed: LinearShape) -> str:
    return f"the {dtype} {timed.label} matmul at m=1 ({kernel} kernel, paired with x.sum())"


def run_sweep(
    device: str,
    dtypes: Sequence[str],
    model: str = DEFAULT_MODEL,
    quick: bool = False,
    scale: int | None = None,
    max_tokens: int = sweep.MAX_TOKENS,
    progress: bool = True,
    tokens: Sequence[int] | None = None,
    pairs: int = 0,
    pair_groups: int = sweep.PAIR_GROUPS,
    remeasure_matmul: bool = True,
) -> SweepRun:
    """Measure the ceilings, sweep a preset's linear layers in each dtype, reconcile the
    ceilings: one run of chapter 5's experiment (the module's docstring gives the order).

    ``scale``: one scale for every shape and m (default: ``sweep.choose_scales``'s per dtype).
    ``tokens``: the token counts (default ``sweep.token_counts(max_tokens)``). ``pairs``: if
    positive, that many stream-and-matmul pairs per dtype on the largest layer at its m = 1
    scale (``sweep.paired_decode``) after the sweeps, their fastest group's rates
    (``sweep.fastest_group`` of ``pair_groups``) counted towards the bandwidth ceiling.
    ``remeasure_matmul``: time each dtype's ceiling GEMMs again after the sweep (a notebook
    with a time budget skips it). A bad model, dtype, device or scale fails before anything is
    measured."""
    import torch

    from helpers.counting import models

    cfg = models.get(model)
    for dtype in dtypes:
        machine.torch_dtype(dtype)
    machine.check_device(device)
    if scale is not None and scale < 1:
        raise ValueError(f"scale must be at least 1, got {scale}")
    tokens = list(sweep.token_counts(max_tokens) if tokens is None else tokens)
    dtypes = tuple(dtypes)
    loads: dict[str, tuple[float | None, int]] = {}

    def timed(name: str, measure: Any) -> Any:
        with machine.OthersLoad() as load:
            answer = measure()
        loads[name] = (load.cores, torch.get_num_threads())
        return answer

    start = machine.cpu_seconds()
    initial = timed("the ceilings", lambda: ceilings_mod.measure_ceilings(
        device, dtypes, quick, progress=progress))  # fmt: skip
    labels = [s.label for s in sweep.layer_shapes(cfg)]
    scales = {dtype: ({m: dict.fromkeys(labels, scale) for m in tokens} if scale
                      else sweep.choose_scales(cfg, [dtype], tokens, initial, quick))
              for dtype in dtypes}  # fmt: skip
    streams = [initial.bandwidth]  # before, between dtypes, after
    points: list[SweepPoint] = []
    for i, dtype in enumerate(dtypes):
        if i:
            streams.append(ceilings_mod.measure_bandwidth(device, quick))
        points += timed(f"the {dtype} sweep", lambda d=dtype: sweep.measure_sweep(
            initial, cfg, [d], scales[d], quick, progress))  # fmt: skip
    paired: dict[str, Pair] = {}
    if pairs > 0:
        largest = max(sweep.scaled_shapes(cfg, scales[dtypes[0]][min(tokens)]),
                      key=lambda s: s.k * s.n)  # fmt: skip
        # Pair the kernel the sweep ran for this shape at the fewest tokens, where it is timed
        # at full size: the verdict is then about the sweep's own point.
        def swept_kernel(dtype: str) -> str | None:
            return next((p.kernel for p in points if p.dtype == dtype and p.m == min(tokens)
                         and p.shape == largest.label and (p.k, p.n) == (largest.k, largest.n)),
                        None)  # fmt: skip

        paired = timed("the pairs", lambda: {
            dtype: sweep.paired_decode(largest, dtype, device, pairs, swept_kernel(dtype))
            for dtype in dtypes})  # fmt: skip
    fastest = {dtype: sweep.fastest_group(rates, pair_groups)
               for dtype, (_, _, rates) in paired.items()}  # fmt: skip
    matmul_streams = [(fastest[dtype][1], _pair_label(dtype, kernel, shape))
                      for dtype, (kernel, shape, _) in paired.items()]  # fmt: skip
    final_points, final, after = timed("the remeasured ceilings", lambda: sweep.remeasure_ceilings(
        points, initial, quick, [*streams[1:], *(s for s, _ in fastest.values())],
        matmul=remeasure_matmul, matmul_streams=matmul_streams))  # fmt: skip
    streams.append(after)
    return SweepRun(
        model=model, dtypes=dtypes, tokens=tuple(tokens), quick=quick,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        initial=initial, ceilings=final, scales=scales, points=tuple(final_points),
        streams=tuple(streams), pairs=paired, pair_groups=pair_groups, loads=loads,
        others_share=machine.others_share(start),
        summary=sweep_record.summarize(final_points, final),
    )  # fmt: skip
