"""This device's two ceilings, measured (chapter 4, `04_timing`; used in chapter 5).

- Matmul ceiling per dtype: the best FLOP/s of a few large GEMMs (square and rectangular),
  each run with the fastest of torch's kernels for it (``helpers.measuring.kernels``), as the
  sweep's
  points are. A datasheet peak is not reachable by real code; this is the roof real code
  can hit.
- Memory bandwidth: ``x.sum()`` over an fp32 buffer far larger than the last-level cache, a
  read-dominated stream like a decode matmul's weight read. Bytes counted = the buffer's
  size, read once per call; the one-element result's write is negligible.

Each GEMM or stream is timed like every sweep point (``helpers.measuring.timing``: median of the
samples), and the ceiling is the best shape (as mamf-finder does), so that a sweep point's
share of the ceiling compares like with like. Only a steady timing may set a ceiling: one whose
IQR is under ``STEADY_SPREAD`` (half) of its median (``steady``). A two-mode sample (some
rounds fast, some stalled behind another process) has a median that is a coin toss between the
modes, and its IQR is then several times the median.

Both are labelled "measured" and carry the device name, torch version and date; where the
device is in ``helpers.counting.hardware``'s table, its datasheet figures sit beside them.
"""

from __future__ import annotations

import datetime
import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from helpers.counting.flops import matmul_flops
from helpers.measuring import kernels, machine, timing

if TYPE_CHECKING:
    import torch

    from helpers.counting.hardware import HardwareSpec

__all__ = [
    "Ceilings",
    "STEADY_SPREAD",
    "datasheet_chip",
    "GEMMS_ENV",
    "gemm_shapes",
    "measure_matmul_ceiling",
    "stream_buffer",
    "measure_bandwidth",
    "measure_ceilings",
    "steady",
    "with_best_bandwidth",
    "with_best_matmul",
    "Seen",
    "raise_by_matmuls",
    "BandwidthRoof",
    "bandwidth_roof",
]

MiB = 2**20
GiB = 2**30

STEADY_SPREAD = 0.5
"""The largest IQR / median of a timing that may set a ceiling (``steady``)."""


def steady(median_s: float, iqr_s: float) -> bool:
    """Whether a timing is steady enough to set a ceiling: its IQR under ``STEADY_SPREAD`` of
    its median. A busy machine's two-mode samples (IQR several times the median) are not."""
    return median_s > 0 and iqr_s < STEADY_SPREAD * median_s


QUICK_CALL_S = 0.5
"""Quick mode's longest call: a default ceiling GEMM predicted to take longer at the fastest
rate measured so far is skipped (``measure_matmul_ceiling``)."""

GEMMS_ENV = "TEXTBOOK_CEILING_GEMMS"
"""Environment variable that replaces the GEMMs ``gemm_shapes`` offers for the matmul
ceiling, on every device and in both modes: comma-separated ``MxKxN`` shapes such as
``1024x1024x1024``. For a test that needs a ceiling, not a good one: on a CPU without bf16
arithmetic the default bf16 GEMMs take seconds per call (tests/browser/test_widgets.py)."""


@dataclass(frozen=True)
class Ceilings:
    """Measured matmul ceilings (FLOP/s per dtype) and bandwidth (B/s) of one device."""

    device: str
    device_name: str
    torch_version: str
    date: str
    threads: int
    matmul_flops: dict[str, float]
    matmul_shape: dict[str, tuple[int, int, int]]
    bandwidth: float
    bandwidth_method: str
    cache_bytes: int
    memory_bytes: int
    datasheet_chip: str | None = None
    datasheet_flops: dict[str, float] = field(default_factory=dict)
    datasheet_bandwidth: float | None = None
    label: str = "measured"
    matmul_kernel: dict[str, str] = field(default_factory=dict)

    def peak(self, dtype: str) -> float:
        """Measured matmul ceiling for ``dtype`` in FLOP/s."""
        try:
            return self.matmul_flops[dtype]
        except KeyError:
            raise ValueError(
                f"no measured ceiling for {dtype!r}; measured: {', '.join(self.matmul_flops)}"
            ) from None

    def ridge(self, dtype: str) -> float:
        """Measured ridge point in FLOP/B: below it a matmul is memory-bound (chapter 3)."""
        return self.peak(dtype) / self.bandwidth

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def as_hardware_spec(self) -> HardwareSpec:
        """The measured ceilings as a ``HardwareSpec``, so chapter 3's roofline functions
        (``roofline.roofline_time``, ``roofline.roof``) apply to them."""
        from helpers.counting.hardware import HardwareSpec

        return HardwareSpec(
            name=f"{self.device_name} (measured)",
            peak_flops=dict(self.matmul_flops),
            bandwidth=self.bandwidth,
            memory_bytes=self.memory_bytes,
            source=f"measured on {self.date} with torch {self.torch_version}",
            llc_bytes=self.cache_bytes,
        )


def datasheet_chip(name: str) -> str | None:
    """The ``helpers.counting.hardware`` chip whose name best matches a device name, or None.

    A chip matches when its first word (e.g. "H100") is a word of the device name; among
    matches, the one sharing the most words wins ("NVIDIA H100 PCIe" → "H100 PCIe").
    """
    from helpers.counting import hardware

    words = set(re.findall(r"[\w.]+", name.upper()))
    best: tuple[int, str] | None = None
    for chip in hardware.names():
        chip_words = re.findall(r"[\w.]+", chip.upper())
        if chip_words[0] not in words:
            continue
        score = sum(w in words for w in chip_words)
        if best is None or score > best[0]:
            best = (score, chip)
    return best[1] if best else None


def gemm_shapes(device: str, quick: bool) -> list[tuple[int, int, int]]:
    """(m, k, n) GEMMs tried for the ceiling: large enough to be compute-bound, small
    enough to run in a second or two on the device (a 2-core CPU does ~1e11 FLOP/s).
    ``$TEXTBOOK_CEILING_GEMMS`` (``GEMMS_ENV``), if set, wins."""
    import torch

    override = os.environ.get(GEMMS_ENV, "").strip()
    if override:
        parts = [part.strip() for part in override.split(",")]
        if not all(re.fullmatch(r"[1-9]\d*x[1-9]\d*x[1-9]\d*", part) for part in parts):
            raise ValueError(f"{GEMMS_ENV}={override!r} is not a list of GEMMs: give MxKxN "
                             "shapes such as 1024x1024x1024,512x2048x1024")  # fmt: skip
        return [tuple(int(size) for size in part.split("x")) for part in parts]
    if torch.device(device).type == "cpu":
        shapes = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 1024, 2048)]
        return shapes if quick else shapes + [(4096, 4096, 4096), (4096, 4096, 1024)]
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 4096, 16384)]
    return shapes if quick else shapes + [(16384, 16384, 16384), (16384, 8192, 4096)]


def measure_matmul_ceiling(
    device: str, dtype: str, quick: bool = True, shapes: list[tuple[int, int, int]] | None = None
) -> tuple[float, tuple[int, int, int], str]:
    """Best FLOP/s over ``shapes`` (default ``gemm_shapes``), the shape that reached it and
    the kernel that ran it: each shape runs with its fastest kernel (``kernels.fastest``).
    Only steady timings (``steady``) compete; if none is steady, the steadiest one is taken.
    In quick mode the default shapes run smallest first, and one whose single call would
    take over ``QUICK_CALL_S`` at the fastest rate seen so far is skipped: a dtype the device
    has no instructions for (bf16 on a CPU without them runs ~10 GFLOP/s) would otherwise
    spend most of a notebook's time budget on a few calls.

    The GEMM's inputs are not rotated: it is compute-bound, and cache-resident inputs are
    its best case, which is what a ceiling is.
    """
    best: tuple[float, tuple[int, int, int], str] | None = None
    steadiest: tuple[float, tuple[float, tuple[int, int, int], str]] | None = None
    fastest_rate = 0.0
    skip_slow = quick and shapes is None
    if skip_slow:
        shapes = sorted(gemm_shapes(device, quick), key=lambda shape: math.prod(shape))
    for m, k, n in shapes or gemm_shapes(device, quick):
        if skip_slow and fastest_rate and 2 * m * k * n / fastest_rate > QUICK_CALL_S:
            continue
        x = timing.random_tensor((m, k), machine.torch_dtype(dtype), device)
        w = timing.random_tensor((n, k), machine.torch_dtype(dtype), device)
        candidates = [(kernel, [(x, kernel.prepare(w))])
                      for kernel in kernels.linear_kernels(device, dtype, m)]  # fmt: skip
        kernel, _, measured = kernels.time_fastest(candidates, device,
                                                   min_run_time=0.1 if quick else 0.5,
                                                   max_run_time=0.5 if quick else 3.0)  # fmt: skip
        flops = timing.achieved_flops(2 * m * k * n, measured.median_s)
        fastest_rate = max(fastest_rate, flops)
        if steady(measured.median_s, measured.iqr_s) and (best is None or flops > best[0]):
            best = (flops, (m, k, n), kernel.name)
        if steadiest is None or measured.relative_iqr < steadiest[0]:
            steadiest = (measured.relative_iqr, (flops, (m, k, n), kernel.name))
        del x, w, candidates
    assert steadiest is not None
    return best if best is not None else steadiest[1]


def bandwidth_buffer_bytes(device: str, quick: bool) -> int:
    """Size of the streamed buffer: ``timing.FLUSH_FACTOR`` (2) × the last-level cache and at
    least 256 MiB (4 × and 1 GiB in full mode), at most a quarter of the device's memory. A
    sequential pass over twice the cache finds none of it still cached, and the same buffer
    then serves as the harness's cache flush (``timing.flush_buffer``)."""
    cache = machine.last_level_cache_bytes(device)
    factor = timing.FLUSH_FACTOR
    wanted = max(factor * cache, 256 * MiB) if quick else max(2 * factor * cache, GiB)
    return int(min(wanted, machine.device_memory_bytes(device) // 4))


def stream_buffer(device: str, quick: bool = True, nbytes: int | None = None) -> torch.Tensor:
    """The buffer the bandwidth stream reads: ``timing.flush_buffer`` of at least ``nbytes``
    (default ``bandwidth_buffer_bytes``), random fp32, made once per process. The stream is
    ``torch.sum`` over it; the bytes it moves are the buffer's size, read once per call."""
    return timing.flush_buffer(device, nbytes or bandwidth_buffer_bytes(device, quick))


def measure_bandwidth(device: str, quick: bool = True, nbytes: int | None = None) -> float:
    """Read bandwidth in B/s: ``x.sum()`` over ``stream_buffer``."""
    import torch

    x = stream_buffer(device, quick, nbytes)
    measured = timing.time_callable(torch.sum, [(x,)], device, warmup=2,
                                    min_run_time=0.2 if quick else 1.0,
                                    max_run_time=0.5 if quick else 3.0)  # fmt: skip
    return timing.achieved_bandwidth(x.numel() * x.element_size(), measured.median_s)


def measure_ceilings(
    device: str = "cpu",
    dtypes: tuple[str, ...] = ("fp32", "bf16"),
    quick: bool = True,
    shapes: list[tuple[int, int, int]] | None = None,
    bandwidth_bytes: int | None = None,
    progress: bool = False,
) -> Ceilings:
    """Measure this device's matmul ceiling for each dtype and its read bandwidth.

    ``shapes`` and ``bandwidth_bytes`` override the GEMMs tried and the streamed buffer's
    size (defaults: ``gemm_shapes`` and ``bandwidth_buffer_bytes``), e.g. for a fast test.
    ``progress`` shows a bar with a step per dtype and one for the bandwidth (seconds each).
    """
    import torch
    from tqdm.auto import tqdm

    from helpers.counting import hardware

    machine.check_device(device)
    for dtype in dtypes:
        machine.torch_dtype(dtype)
    flops: dict[str, float] = {}
    best_shape: dict[str, tuple[int, int, int]] = {}
    best_kernel: dict[str, str] = {}
    with tqdm(total=len(dtypes) + 1, desc="ceilings", disable=not progress) as bar:
        for dtype in dtypes:
            bar.set_postfix_str(f"{dtype} matmul")
            flops[dtype], best_shape[dtype], best_kernel[dtype] = measure_matmul_ceiling(
                device, dtype, quick, shapes
            )
            bar.update()
        bar.set_postfix_str("bandwidth")
        buffer = stream_buffer(device, quick, bandwidth_bytes)
        nbytes = buffer.numel() * buffer.element_size()
        bandwidth = measure_bandwidth(device, quick, nbytes)
        bar.update()
        bar.set_postfix_str("")

    name = machine.device_name(device)
    chip = datasheet_chip(name)
    spec = hardware.get(chip) if chip else None
    return Ceilings(
        device=device,
        device_name=name,
        torch_version=torch.__version__,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        threads=torch.get_num_threads(),
        matmul_flops=flops,
        matmul_shape=best_shape,
        matmul_kernel=best_kernel,
        bandwidth=bandwidth,
        bandwidth_method=f"x.sum() over a {nbytes / MiB:.0f} MiB fp32 buffer; "
        "bytes = buffer size, read once per call",
        cache_bytes=machine.last_level_cache_bytes(device),
        memory_bytes=machine.device_memory_bytes(device),
        datasheet_chip=chip,
        datasheet_flops={d: spec.peak_flops[d] for d in dtypes if d in spec.peak_flops}
        if spec
        else {},
        datasheet_bandwidth=spec.bandwidth if spec else None,
    )


def with_best_bandwidth(ceilings: Ceilings, bandwidths: Sequence[float]) -> Ceilings:
    """``ceilings`` with the bandwidth ceiling set to the best of its own and ``bandwidths``
    (the same stream measured again later). On a shared machine other tenants' memory
    traffic changes the stream rate from second to second; a ceiling is the best this device
    reached, as the matmul ceiling is its best GEMM."""
    best = max([ceilings.bandwidth, *bandwidths])
    if best == ceilings.bandwidth:
        return ceilings
    return replace(ceilings, bandwidth=best,
                   bandwidth_method=f"{ceilings.bandwidth_method}; best of "
                   f"{len(bandwidths) + 1} streams during the run")  # fmt: skip


def with_best_matmul(
    ceilings: Ceilings, dtype: str, rate: float, shape: tuple[int, int, int], kernel: str
) -> Ceilings:
    """``ceilings`` with ``dtype``'s matmul ceiling raised to ``rate`` (FLOP/s of an
    ``shape`` = (m, k, n) matmul timed elsewhere in the run, with ``kernel``) where it is
    higher; ``matmul_shape`` and ``matmul_kernel`` then name that matmul. A ceiling is the best
    rate this device reached: a timing above it means the ceiling was measured at a busier
    moment, not that the timing is wrong."""
    if rate <= ceilings.peak(dtype):
        return ceilings
    return replace(ceilings, matmul_flops={**ceilings.matmul_flops, dtype: rate},
                   matmul_shape={**ceilings.matmul_shape, dtype: tuple(shape)},
                   matmul_kernel={**ceilings.matmul_kernel, dtype: kernel})  # fmt: skip


@dataclass(frozen=True)
class Seen:
    """A timing made elsewhere in a run, offered to a ceiling (chapter 4, section 7): an
    ``[m×k]·[k×n]`` matmul (``shape``) in ``dtype`` or a stream over ``working_set`` bytes,
    its ``seconds`` or ``rate``, where it was made, and the load it was timed under: other
    processes' ``cores`` (None: unknown) while it ran on ``threads`` threads."""

    where: str
    threads: int
    cores: float | None
    dtype: str = "fp32"
    shape: tuple[int, int, int] = (0, 0, 0)
    seconds: float = 0.0
    working_set: int = 0
    rate: float = 0.0

    @property
    def under_load(self) -> bool:
        return machine.load_unreliable(self.cores, self.threads)


def raise_by_matmuls(ceilings: Ceilings, seen: Sequence[Seen]) -> tuple[Ceilings, list[str]]:
    """``ceilings`` with each dtype's matmul ceiling raised to the best of the ``seen``
    matmuls that compare like with like (``with_best_matmul``): timed on the ceilings'
    threads and not under load (load only slows, so a loaded timing proves nothing). Also
    one line per matmul saying whether it counted and why."""
    lines = []
    for s in seen:
        rate = timing.achieved_flops(matmul_flops(*s.shape), s.seconds)
        plural = "s" * (s.threads > 1)
        if s.threads != ceilings.threads:
            why = f"not counted: {s.threads} thread{plural}, the ceilings {ceilings.threads}"
        elif s.under_load:
            why = f"not counted: timed under load ({s.cores:.1f} other cores busy)"
        elif rate > ceilings.peak(s.dtype):
            why = "counted: above the ceiling GEMM, so it raises the ceiling"
        else:
            why = "counted: below the ceiling GEMM"
        if why.startswith("counted"):
            ceilings = with_best_matmul(ceilings, s.dtype, rate, s.shape, s.where)
        lines.append(f"  {s.where}, {s.dtype}, {'×'.join(map(str, s.shape))}: "
                     f"{rate / 1e12:.3f} TFLOP/s on {s.threads} thread{plural}; {why}")
    return ceilings, lines


@dataclass(frozen=True)
class BandwidthRoof:
    """The bandwidth roof of a run (chapter 4, section 7): the best of the streams counted,
    each past ``past`` bytes (the cache sweep's first streaming point at least twice the
    cache) and timed on the ceilings' threads. ``streams``: label → the stream counted;
    ``left_out``: (stream, why) past twice the cache yet not counted; ``ceilings``: the
    input ceilings with their bandwidth raised to the roof where it is higher."""

    past: int
    cache_bytes: int
    streams: dict[str, Seen]
    left_out: list[tuple[Seen, str]]
    best: str
    ceilings: Ceilings
    before: float  # the ceiling's own x.sum() rate

    @property
    def bandwidth(self) -> float:
        return self.streams[self.best].rate

    @property
    def raised(self) -> bool:
        return self.bandwidth > self.before

    @property
    def under_load(self) -> bool:
        return self.streams[self.best].under_load

    def report(self) -> str:
        lines = [f"streams counted: working sets from {self.past / MiB:g} MiB on, the sweep's "
                 f"first streaming point at least twice the {self.cache_bytes / MiB:g} MiB cache"]
        lines += [f"{s.where:<46}{s.rate / 1e9:7.1f} GB/s  not counted: {why}"
                  for s, why in self.left_out]
        lines += [f"{label:<46}{s.rate / 1e9:7.1f} GB/s"
                  + "  (timed under load: a lower bound)" * s.under_load
                  for label, s in self.streams.items()]
        lines.append(f"bandwidth roof: {self.bandwidth / 1e9:.1f} GB/s, from {self.best}"
                     + (f", {self.bandwidth / self.before:.2f}× the ceiling's x.sum(): the "
                        "ceiling is raised to it" if self.raised else "")
                     + ("; timed under load: a lower bound" if self.under_load else ""))
        lines.append(f"ridge on the {'raised ' * self.raised}roof: "
                     f"{self.ceilings.ridge('fp32'):.1f} FLOP/B (fp32)")
        return "\n".join(lines)


def bandwidth_roof(ceilings: Ceilings, ceiling_stream: Seen, streaming_sizes: Sequence[int],
                   edge_size: int, others: Sequence[Seen]) -> BandwidthRoof:  # fmt: skip
    """The best stream past the cache (``BandwidthRoof``): ``ceiling_stream`` (the ceiling's
    own ``x.sum()``) and each of ``others`` (streams over ``working_set`` bytes at ``rate``)
    whose working set reaches ``past`` (the first of ``streaming_sizes``, the cache sweep's
    streaming points, at least twice ``ceilings.cache_bytes``; ``edge_size``, the sweep's
    edge, if none) and which ran on the ceilings' threads (more threads stream faster)."""
    past = min((n for n in streaming_sizes if n >= 2 * ceilings.cache_bytes), default=edge_size)
    streams, left_out = {ceiling_stream.where: ceiling_stream}, []
    for s in others:
        why = (f"under {past / MiB:g} MiB" if s.working_set < past
               else f"{s.threads} thread{'s' * (s.threads > 1)}, the ceilings {ceilings.threads}"
               if s.threads != ceilings.threads else "")
        if not why:
            streams[s.where] = s
        elif s.working_set >= 2 * ceilings.cache_bytes:  # past twice the cache: say why not
            left_out.append((s, why))
    best = max(streams, key=lambda label: streams[label].rate)
    return BandwidthRoof(past, ceilings.cache_bytes, streams, left_out, best,
                         with_best_bandwidth(ceilings, [streams[best].rate]),
                         ceilings.bandwidth)  # fmt: skip
