"""Chapter 5's kernel table (`05_matmuls`, section 9): one decode-shaped matmul on every kernel.

A one-token matmul ``[1×k]·[k×n]`` is memory-bound: its time is the weight read. Whether a
kernel streams that weight as fast as the device's bandwidth ceiling is a property of the
kernel and of the weight's layout, not of the roofline. ``kernel_table`` times the product in
each dtype on every kernel of ``kernels.linear_kernels`` (the weight stored ``[out, in]``, as
``nn.Linear`` holds it, each kernel given its own prepared form) and once more as
``x @ B`` with ``B`` stored ``[in, out]``: torch's default call on the other layout, so that
the ratio of ``x @ B`` to ``eager`` is the layout's cost alone, and its ratio to the fastest
kernel what the layout and the kernel cost together. It returns a ``KernelTable`` record
whose ``report()`` prints the table and its verdicts.

The harness: each weight is kept out of the cache as the sweep keeps it
(``timing.plan_cache_defeat``: rotate among enough copies of the weight to pass the cache,
or, for a weight too large to copy so often, flush the cache with ``timing.flush_buffer``
before each round of copies); each variant is timed by ``timing.time_callable`` after one
warm-up call, inside a ``machine.OthersLoad``, so a row timed while other processes took the
cores it needed says so (``machine.load_unreliable``), and a row whose IQR is half its median
or more (``ceilings.steady``) is marked two-mode. The verdicts: the fastest kernel above the
bandwidth ceiling (then the ceiling, the best rate the sweep's run saw past the cache, stream
or matmul, is not the machine's limit, and the memory-bound roofline times built on it, the
sweep's in sections 4–8, are not lower bounds), the layout's cost, the matmul ceiling's cap
where the shape is compute-bound at m = 1 (``roofline.matmul_time``), and the same shape and
kernel's time in the sweep (section 4), where the sweep timed it: the same kernel, so a gap
is the timing's.

This module stands apart from ``kernels`` because it reads ``ceilings.steady``, and
``ceilings`` imports ``kernels``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.counting import memory, roofline
from helpers.measuring import ceilings, kernels, machine, timing

__all__ = ["ABOVE_CEILING", "LAYOUT_CHEAP", "TIMING_GAP", "TRANSPOSED", "KernelRow",
           "DtypeKernels", "KernelTable", "kernel_table"]  # fmt: skip

ABOVE_CEILING = 1.05
"""A fastest kernel streaming more than this share of the bandwidth ceiling shows that the
ceiling is the best the sweep's run saw, not this machine's limit."""

LAYOUT_CHEAP = 1.1
"""``x @ B`` under this multiple of ``eager``'s time: the layout costs little."""

TIMING_GAP = 0.1
"""The sweep's time off this table's, same shape and kernel, by more than this fraction: the
difference is the timing's moment or harness."""

TRANSPOSED = ("x @ B", "B stored [in, out]")
"""The name and description of the row that multiplies by the weight stored ``[in, out]``."""

RUN_TIME_S = (0.05, 0.25)
"""``time_callable``'s ``min_run_time`` and ``max_run_time`` for each row: a table of ten
rows in a few seconds."""


@dataclass(frozen=True)
class KernelRow:
    """One variant timed: its median and IQR (seconds), the bytes it must move over its median
    (``bandwidth``, B/s) and that rate's ``share`` of the bandwidth ceiling; ``others_cores``,
    the cores' worth of CPU other processes used meanwhile (None: unknown), ``loaded``, whether
    they took cores its ``threads`` needed, and ``steady``, whether its IQR is under half its
    median."""

    name: str
    description: str
    median_s: float
    iqr_s: float
    bandwidth: float
    share: float
    others_cores: float | None
    loaded: bool
    steady: bool

    @property
    def label(self) -> str:
        return f"{self.name:7} {self.description}"


@dataclass(frozen=True)
class DtypeKernels:
    """One dtype's rows and what they show. ``kernels`` in ``linear_kernels`` order (``eager``
    first), ``transposed`` the ``x @ B`` row; ``layout``, its time over ``eager``'s (the layout
    alone), ``over_fastest``, over the fastest kernel's; ``fastest_share``, the fastest
    kernel's share of the bandwidth ceiling; ``compute_cap``, the B/s the matmul ceiling
    allows where the shape is compute-bound at m = 1 (else None). ``swept_kernel``,
    ``swept_s`` and ``here_s``: the sweep's point of this shape, its kernel and median, and
    this table's median on that kernel (all None where the sweep has no such point, or timed
    it on a kernel this table does not offer)."""

    dtype: str
    nbytes: int
    cache_defeat: str
    copies: int
    kernels: tuple[KernelRow, ...]
    transposed: KernelRow
    compute_cap: float | None
    swept_kernel: str | None = None
    swept_s: float | None = None
    here_s: float | None = None

    @property
    def fastest(self) -> KernelRow:
        """The kernel row with the least median among the steady ones, where any is (a
        two-mode timing's median is no figure to rank by); ``x @ B`` is not a kernel."""
        steady = [row for row in self.kernels if row.steady] or self.kernels
        return min(steady, key=lambda row: row.median_s)

    @property
    def eager(self) -> KernelRow:
        """``F.linear``'s default kernel, the row the layout is read against."""
        return next(row for row in self.kernels if row.name == kernels.EAGER.name)

    @property
    def layout(self) -> float:
        """``x @ B``'s time over ``eager``'s: the same default call, so the layout alone."""
        return self.transposed.median_s / self.eager.median_s

    @property
    def over_fastest(self) -> float:
        """``x @ B``'s time over the fastest kernel's: layout and kernel together."""
        return self.transposed.median_s / self.fastest.median_s

    @property
    def fastest_share(self) -> float:
        """The fastest kernel's share of the bandwidth ceiling."""
        return self.fastest.share

    @property
    def above_ceiling(self) -> bool:
        """The fastest kernel streamed past the bandwidth ceiling (``ABOVE_CEILING``)."""
        return self.fastest_share > ABOVE_CEILING

    @property
    def layout_within_spread(self) -> bool:
        """``x @ B`` and ``eager`` closer than their IQRs summed: no layout effect shown."""
        return abs(self.transposed.median_s - self.eager.median_s) <= (self.transposed.iqr_s
                                                                        + self.eager.iqr_s)

    @property
    def layout_cheap(self) -> bool:
        """``x @ B`` within ``LAYOUT_CHEAP`` of ``eager``: the kernel, not the layout, makes
        the gap to the fastest."""
        return self.layout < LAYOUT_CHEAP

    @property
    def swept_ratio(self) -> float | None:
        """The sweep's median over this table's on the same kernel."""
        return None if self.swept_s is None or self.here_s is None else self.swept_s / self.here_s

    @property
    def timing_differs(self) -> bool:
        """The sweep and this table, same shape and kernel, differ by more than
        ``TIMING_GAP``: the timing's moment or harness, not the kernel."""
        ratio = self.swept_ratio
        return ratio is not None and abs(ratio - 1) > TIMING_GAP

    def lines(self) -> list[str]:
        """The rows and verdicts as section 9 prints them."""
        dtype = self.dtype
        out = [f"{dtype} {row.label:<46} {row.median_s * 1e6:9.1f} µs (IQR {row.iqr_s * 1e6:6.1f})"
               f" {row.bandwidth / 1e9:6.1f} GB/s = {row.share:4.0%}"
               + "  (timed under load: unreliable)" * row.loaded
               + "  (IQR over half the median: two-mode, unreliable)" * (not row.steady)
               for row in (*self.kernels, self.transposed)]  # fmt: skip
        if self.above_ceiling:
            out.append(f"{dtype}: the fastest kernel streamed {self.fastest_share:.0%} of the "
                       "bandwidth ceiling: the ceiling is the best rate the sweep's run saw "
                       "past the cache, not this machine's limit, so the memory-bound roofline "
                       "times of sections 4–8 are not lower bounds here")
        out.append(f"{dtype} x @ B took {self.layout:.2f}x F.linear's time on the [out, in] "
                   f"layout (layout alone) and {self.over_fastest:.2f}x the fastest kernel's: "
                   + ("within the two timings' spreads, no layout effect shown; the kernel and "
                      "its prepared weight make the gap" if self.layout_within_spread else
                      "the layout cost nothing here (x @ B ran faster); the kernel and its "
                      "prepared weight make the gap" if self.layout < 1 / LAYOUT_CHEAP else
                      "the layout costs little; the kernel and its prepared weight make the gap"
                      if self.layout_cheap else "the layout alone cost time here, past the two "
                      "timings' spreads (through another kernel or the same one reading the "
                      "transposed weight: this run does not record which); engines store each "
                      "weight in the layout their kernel streams best"))
        if self.compute_cap is not None:
            out.append(f"{dtype} at m = 1 is compute-bound here: the matmul ceiling caps it at "
                       f"{self.compute_cap / 1e9:.1f} GB/s")
        if self.swept_s is not None and self.here_s is not None:
            out.append(f"{dtype} section 4's sweep timed this shape on {self.swept_kernel} at "
                       f"{self.swept_s * 1e6:.1f} µs; here {self.here_s * 1e6:.1f} µs "
                       f"(sweep / here {self.swept_ratio:.2f}x)"
                       + (": the same kernel, so the difference is the timing's moment or "
                          "harness" if self.timing_differs else "")
                       + ("; its timing here is two-mode, so this comparison is unreliable"
                          if not next(row.steady for row in self.kernels
                                      if row.name == self.swept_kernel) else ""))
            if self.here_s > (1 + TIMING_GAP) * self.fastest.median_s:
                out.append(f"{dtype} the sweep's race picked {self.swept_kernel}; here "
                           f"{self.fastest.name} took {self.fastest.median_s / self.here_s:.2f}x "
                           "its time: a race of a few calls a kernel can pick a slower one")
        return out


@dataclass(frozen=True)
class KernelTable:
    """Section 9's table: the ``[1×k]·[k×n]`` matmul on ``device`` with ``threads`` timing
    threads, against the bandwidth ceiling ``bandwidth`` (B/s), one ``DtypeKernels`` a
    dtype."""

    k: int
    n: int
    device: str
    threads: int
    bandwidth: float
    dtypes: tuple[DtypeKernels, ...]

    def __getitem__(self, dtype: str) -> DtypeKernels:
        for table in self.dtypes:
            if table.dtype == dtype:
                return table
        raise KeyError(dtype)

    def report(self) -> str:
        """The table and its verdicts, as section 9 prints them."""
        head = (f"[1×{self.k}]·[{self.k}×{self.n}], bandwidth ceiling "
                f"{self.bandwidth / 1e9:.1f} GB/s")  # fmt: skip
        return "\n".join([head, *(line for table in self.dtypes for line in table.lines())])


_POINT_FIELDS = ("dtype", "m", "k", "n", "kernel", "median_s")


def _field(point: Any, name: str) -> Any:
    """A swept point's field, from an object (``sweep.SweepPoint``) or a mapping (a record's
    point); ValueError naming the field where it has none."""
    try:
        return point[name] if isinstance(point, Mapping) else getattr(point, name)
    except (KeyError, AttributeError):
        raise ValueError(f"a swept point has no {name!r} (it needs "
                         f"{', '.join(_POINT_FIELDS)}): {point!r:.80}") from None  # fmt: skip


def _swept(points: Sequence[Any], dtype: str, k: int, n: int) -> tuple[str, float] | None:
    """The kernel and median seconds of the sweep's first m = 1 point of this dtype and k × n."""
    for point in points:
        if (_field(point, "dtype"), _field(point, "m"), _field(point, "k"),
                _field(point, "n")) == (dtype, 1, k, n):  # fmt: skip
            return str(_field(point, "kernel")), float(_field(point, "median_s"))
    return None


def _time_row(name: str, description: str, run: Any, input_sets: list[tuple[Any, ...]],
              nbytes: int, bandwidth: float, device: str, flush: Any,
              run_time_s: tuple[float, float]) -> KernelRow:  # fmt: skip
    import torch

    with machine.OthersLoad() as load:
        timed = timing.time_callable(run, input_sets, device, warmup=1,
                                     min_run_time=run_time_s[0], max_run_time=run_time_s[1],
                                     flush=flush)  # fmt: skip
    rate = timing.achieved_bandwidth(nbytes, timed.median_s)
    return KernelRow(name, description, timed.median_s, timed.iqr_s, rate, rate / bandwidth,
                     load.cores, machine.load_unreliable(load.cores, torch.get_num_threads()),
                     ceilings.steady(timed.median_s, timed.iqr_s))  # fmt: skip


def _one_dtype(
    k: int,
    n: int,
    dtype: str,
    measured: ceilings.Ceilings,
    device: str,
    swept_points: Sequence[Any],
    run_time_s: tuple[float, float],
) -> DtypeKernels:
    """Every kernel and ``x @ B`` for one dtype; its tensors are freed on return."""
    import torch

    nbytes = memory.linear_bytes(1, k, n, dtype)
    plan = timing.plan_cache_defeat(nbytes, measured.cache_bytes)  # rotate, or flush
    flush = timing.flush_buffer(device, plan.flush_bytes) if plan.method == "flush" else None
    torch_dtype = machine.torch_dtype(dtype)
    x = timing.random_tensor((1, k), torch_dtype, device)
    stored_out_in = [timing.random_tensor((n, k), torch_dtype, device)
                     for _ in range(plan.copies)]  # fmt: skip
    rows = tuple(_time_row(kernel.name, kernel.description, kernel.run,
                           [(x, kernel.prepare(w)) for w in stored_out_in], nbytes,
                           measured.bandwidth, device, flush, run_time_s)
                 for kernel in kernels.linear_kernels(device, dtype, 1))  # fmt: skip
    transposed = _time_row(*TRANSPOSED, torch.matmul,
                           [(x, w.t().contiguous()) for w in stored_out_in], nbytes,
                           measured.bandwidth, device, flush, run_time_s)  # fmt: skip
    roof = roofline.matmul_time(1, k, n, measured.peak(dtype), measured.bandwidth, dtype)
    cap = nbytes / roof.seconds if roof.bound == "compute" else None  # 2/b above the ridge
    swept = _swept(swept_points, dtype, k, n)
    same = [row for row in rows if swept is not None and row.name == swept[0]]
    compared = (swept[0], swept[1], same[0].median_s) if same and swept else (None, None, None)
    return DtypeKernels(dtype, nbytes, plan.method, plan.copies, rows, transposed, cap,
                        *compared)  # fmt: skip


def kernel_table(
    k: int,
    n: int,
    dtypes: Sequence[str],
    measured: ceilings.Ceilings,
    device: str,
    swept_points: Sequence[Any] = (),
    run_time_s: tuple[float, float] = RUN_TIME_S,
) -> KernelTable:
    """Time ``[1×k]·[k×n]`` in each of ``dtypes`` on every kernel of ``kernels.linear_kernels``
    and as ``x @ B`` with ``B`` stored ``[in, out]``, each kept out of ``measured``'s cache,
    and read each row against ``measured``'s bandwidth ceiling and the dtype's matmul ceiling
    (the module's docstring says how and why). ``swept_points``: the sweep's points
    (``sweep.SweepPoint`` objects, or mappings with the same keys: dtype, m, k, n, kernel,
    median_s), for the comparison with the sweep's own m = 1 point of this shape; a point of
    another shape or m is ignored. ``run_time_s``: each row's ``(min_run_time,
    max_run_time)``. ValueError for no dtypes, a repeated or unknown dtype, a k or n under 1,
    a dtype without a matmul ceiling, a run time that is not positive, or a swept point
    without one of those keys, before any timing."""
    if not dtypes:
        raise ValueError("need at least one dtype")
    if len(set(dtypes)) != len(dtypes):
        raise ValueError(f"dtypes repeat: {', '.join(dtypes)}")
    if not (0 < run_time_s[0] <= run_time_s[1]):
        raise ValueError(f"run_time_s must be (min, max) with 0 < min <= max, got {run_time_s}")
    for dtype in dtypes:
        machine.torch_dtype(dtype)  # an unknown dtype names the known ones
        memory.linear_bytes(1, k, n, dtype)  # k and n at least 1
        measured.peak(dtype)  # a dtype the ceilings did not measure
    for point in swept_points:
        for name in _POINT_FIELDS:
            _field(point, name)
    import torch

    device = machine.check_device(device)
    tables = tuple(_one_dtype(k, n, dtype, measured, device, swept_points, run_time_s)
                   for dtype in dtypes)  # fmt: skip
    return KernelTable(k, n, device, torch.get_num_threads(), measured.bandwidth, tables)
