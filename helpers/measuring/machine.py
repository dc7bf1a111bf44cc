"""The machine a measurement runs on (chapters 4-5): which device, its dtypes, the size of
its last-level cache, its free memory and how busy other processes keep its CPU.

Each is read here once, for ``helpers.measuring.timing`` (timing correctly),
``helpers.measuring.ceilings``
(the device's two ceilings) and ``helpers.programs.bench`` (the matmul sweep's CLI):

- the device: ``check_device``, ``device_name``, ``device_memory_bytes``;
- the dtype table: ``DTYPE_NAMES`` and ``torch_dtype``;
- the last-level cache: ``last_level_cache_bytes`` (Linux sysfs, `lscpu`, macOS `sysctl`, or
  ``$TEXTBOOK_LLC_BYTES``);
- the CPU load: ``cpu_seconds`` samples ``/proc/stat``; ``busy_cores`` and
  ``others_share`` are the load other processes put on the machine between two samples;
  ``OthersLoad`` samples it around one timed experiment and ``load_note`` says, beside its
  figure, whether that load made the figure unreliable;
- the threads to time with: ``timing_threads`` (the cores other processes leave free) and
  ``free_core_threads``, torch's threads set to them for a ``with`` block.
"""

from __future__ import annotations

import contextlib
import glob
import os
import platform
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "DTYPE_NAMES",
    "torch_dtype",
    "check_device",
    "device_name",
    "device_memory_bytes",
    "LLC_ENV",
    "DEFAULT_CPU_LLC_BYTES",
    "DEFAULT_MPS_CACHE_BYTES",
    "last_level_cache_bytes",
    "CpuSeconds",
    "cpu_seconds",
    "others_cores",
    "busy_cores",
    "others_share",
    "OthersLoad",
    "LOAD_SLACK_CORES",
    "load_unreliable",
    "load_note",
    "timing_threads",
    "free_core_threads",
]

MiB = 2**20

DTYPE_NAMES = ("fp32", "bf16", "fp16")

DEFAULT_CPU_LLC_BYTES = 64 * MiB
"""Used when the CPU's last-level cache size cannot be read: larger than the L3 of most
desktop and laptop chips, so the rotation errs on the side of too many copies."""

DEFAULT_MPS_CACHE_BYTES = 128 * MiB
"""Apple GPUs do not report their system-level cache; this is above the sizes Apple's
chips are reported to have, for the same reason."""

LLC_ENV = "TEXTBOOK_LLC_BYTES"
"""Environment variable that overrides the detected last-level cache size: bytes, or a size
such as ``8MiB`` or ``1GiB`` (to try the harness as if on another CPU, or where detection is
wrong, e.g. in a VM)."""


def torch_dtype(name: str) -> torch.dtype:
    """``"fp32"`` → ``torch.float32`` etc.; ValueError naming the known dtypes otherwise."""
    import torch

    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: known are {', '.join(DTYPE_NAMES)}") from None


def check_device(device: str) -> str:
    """The device string, validated: ValueError if unknown or not present here."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: use cpu, cuda, cuda:N or mps") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but no CUDA device is available")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} requested but MPS is not available")
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {device!r}: use cpu, cuda or mps")
    return device


def _command_output(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def device_name(device: str) -> str:
    """A human-readable name: the GPU's name, or the CPU's model name."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    if kind == "mps":
        return _command_output(["sysctl", "-n", "machdep.cpu.brand_string"]) or "Apple GPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return (_command_output(["sysctl", "-n", "machdep.cpu.brand_string"])
            or platform.processor() or platform.machine())  # fmt: skip


def device_memory_bytes(device: str) -> int:
    """Memory a benchmark may plan around: free GPU memory, MPS's recommended maximum, or
    the CPU's available RAM: Linux's MemAvailable (free memory plus the page cache it can
    reclaim; free memory alone is small on any machine that has read many files), else free
    pages, else total RAM."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    if kind == "mps":
        return int(torch.mps.recommended_max_memory())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    pages = os.sysconf("SC_AVPHYS_PAGES") if "SC_AVPHYS_PAGES" in os.sysconf_names else None
    pages = pages or os.sysconf("SC_PHYS_PAGES")
    return int(pages * os.sysconf("SC_PAGE_SIZE"))


def _parse_size(text: str) -> int | None:
    """'32768K', '32 MiB', '1M' → bytes; None if unreadable."""
    match = re.match(r"\s*([\d.]+)\s*([KMG]?)(i?B)?", text.strip(), re.IGNORECASE)
    if not match:
        return None
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def _cpu_llc_from_sysfs() -> int | None:
    """Largest data/unified cache of cpu0 from Linux sysfs (size as the kernel reports it)."""
    best: tuple[int, int] | None = None
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(index, "level")) as f:
                level = int(f.read())
            with open(os.path.join(index, "size")) as f:
                size = _parse_size(f.read())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None


def _cpu_llc_from_command() -> int | None:
    """L3 (else L2) from `lscpu` (Linux) or `sysctl` (macOS); None if neither answers."""
    for command, pattern in (
        (["lscpu"], r"^L3 cache:\s*(.+?)(\s*\(.*)?$"),
        (["sysctl", "-n", "hw.l3cachesize"], r"^(\d+)$"),
        (["sysctl", "-n", "hw.l2cachesize"], r"^(\d+)$"),
    ):
        out = _command_output(command)
        for line in out.splitlines():
            match = re.match(pattern, line.strip())
            size = _parse_size(match.group(1)) if match else None
            if size:
                return size
    return None


def last_level_cache_bytes(device: str = "cpu") -> int:
    """Size of the cache that a benchmark's working set must exceed (chapter 4).

    The environment variable ``TEXTBOOK_LLC_BYTES`` (``LLC_ENV``), if set, wins. Otherwise
    CPU: the largest data cache in Linux sysfs, else `lscpu` / macOS `sysctl`, else
    ``DEFAULT_CPU_LLC_BYTES``. CUDA: the L2 size torch reports. MPS: Apple does not report
    one, so ``DEFAULT_MPS_CACHE_BYTES``.
    """
    import torch

    override = os.environ.get(LLC_ENV, "").strip()
    if override:
        size = _parse_size(override) if re.fullmatch(r"[\d.]+\s*([KMG]i?B?)?", override,
                                                    re.IGNORECASE) else None  # fmt: skip
        if not size:
            raise ValueError(f"{LLC_ENV}={override!r} is not a cache size: give bytes or a "
                             "size such as 8MiB or 1GiB")  # fmt: skip
        return size
    kind = torch.device(device).type
    if kind == "cuda":
        return int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
    if kind == "mps":
        return DEFAULT_MPS_CACHE_BYTES
    return _cpu_llc_from_sysfs() or _cpu_llc_from_command() or DEFAULT_CPU_LLC_BYTES


@dataclass(frozen=True)
class CpuSeconds:
    """One reading of the CPU clocks: busy CPU-seconds of the whole machine (``/proc/stat``,
    all but idle and iowait), CPU-seconds of this process, and the wall clock."""

    machine_s: float
    own_s: float
    wall_s: float


def cpu_seconds() -> CpuSeconds | None:
    """The CPU clocks now, or None where ``/proc/stat`` is missing or unreadable (not
    Linux)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    own = os.times()
    return CpuSeconds(busy, own.user + own.system, time.perf_counter())


def others_cores(start: CpuSeconds | None, end: CpuSeconds | None) -> float | None:
    """Cores' worth of CPU time that *other* processes used between two ``cpu_seconds``
    readings (the machine's busy time minus this process's own); None without both."""
    if start is None or end is None or end.wall_s <= start.wall_s:
        return None
    others = (end.machine_s - start.machine_s) - (end.own_s - start.own_s)
    return max(0.0, others / (end.wall_s - start.wall_s))


def busy_cores(seconds: float = 0.5) -> float | None:
    """Cores' worth of CPU time that *other* processes used over the next ``seconds``
    (``others_cores``); None where /proc/stat is missing.

    Why it matters (chapter 5): a parallel GEMM waits for its slowest thread at every barrier,
    and a thread whose core another process holds waits a scheduler time slice, milliseconds,
    so a microsecond matmul takes tens of milliseconds. ``timing_threads`` leaves
    those cores to the other processes."""
    start = cpu_seconds()
    time.sleep(seconds)
    return others_cores(start, cpu_seconds())


def others_share(start: CpuSeconds | None) -> float | None:
    """Fraction of the machine's CPU time that *other* processes used since ``start``: on a
    machine with few cores, any of it steals time from a benchmark's threads."""
    cores = others_cores(start, cpu_seconds())
    return None if cores is None else cores / (os.cpu_count() or 1)


LOAD_SLACK_CORES = 0.25
"""Cores' worth of other processes' CPU time beyond the cores a timing left them that still
counts as quiet: ``/proc/stat`` counts in clock ticks (10 ms), and a short experiment's
sample carries that much noise."""


MIN_LOAD_WINDOW_S = 0.1
"""The shortest window whose load ``load_note`` judges: ``/proc/stat`` counts 10 ms ticks, so
over a few tens of milliseconds one tick more or less is a quarter core or more."""


class OthersLoad:
    """Cores' worth of CPU time other processes used during a ``with`` block
    (``others_cores``): ``.cores`` once the block ends, None where ``/proc/stat`` is missing,
    and ``.seconds``, the block's wall time. Chapters 4 and 5 wrap each timed experiment in
    one, so that the load printed beside a figure is the load it was timed under, not a sample
    taken earlier."""

    def __init__(self) -> None:
        self.cores: float | None = None
        self.seconds: float | None = None
        self._start: CpuSeconds | None = None

    def __enter__(self) -> OthersLoad:
        self._start = cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        end = cpu_seconds()
        self.cores = others_cores(self._start, end)
        if self._start is not None and end is not None:
            self.seconds = end.wall_s - self._start.wall_s

    @property
    def too_short(self) -> bool:
        """Whether the block was shorter than ``MIN_LOAD_WINDOW_S``: too short to judge."""
        return self.seconds is not None and self.seconds < MIN_LOAD_WINDOW_S


def load_unreliable(cores: float | None, threads: int, total: int | None = None) -> bool:
    """Whether other processes, using ``cores`` cores' worth of CPU while a figure was timed
    on ``threads`` threads, took cores those threads needed: more than the ``total - threads``
    the timing left them, by over ``LOAD_SLACK_CORES``. A thread whose core another process
    holds waits a scheduler slice (milliseconds), so such a figure measures the load too.
    False where the load is unknown."""
    total = total or os.cpu_count() or 1
    return cores is not None and cores > max(0, total - threads) + LOAD_SLACK_CORES


def load_note(
    cores: float | None, threads: int, total: int | None = None, seconds: float | None = None
) -> str:
    """The load a figure was timed under, for printing beside it, and whether it made the
    figure unreliable (``load_unreliable``); "too short to judge" where the figure's window,
    ``seconds``, was under ``MIN_LOAD_WINDOW_S``."""
    total = total or os.cpu_count() or 1
    if seconds is not None and seconds < MIN_LOAD_WINDOW_S:
        return (
            f"other processes' load: too short to judge ({seconds * 1e3:.0f} ms timed; "
            "/proc/stat counts 10 ms ticks)"
        )
    if cores is None:
        return "other processes' load: unknown (no /proc/stat)"
    line = f"other processes used {cores:.1f} of {total} cores"
    if load_unreliable(cores, threads, total):
        return (
            f"{line}, more than the {max(0, total - threads)} that {threads} timing "
            f"thread{'s' * (threads != 1)} left them: unreliable, it measured the load too"
        )
    return f"{line}: quiet enough for {threads} timing thread{'s' * (threads != 1)}"


def timing_threads(cores: int, busy: float | None) -> int:
    """Threads to time with: every core that other processes leave free, at least one.

    A parallel GEMM waits for its slowest thread at every barrier; a thread whose core is
    taken by another process waits for the scheduler (milliseconds), so on a busy machine
    fewer threads give faster *and* steadier timings (chapter 5)."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    if busy is None:
        return cores
    return max(1, min(cores, cores - round(busy)))


@contextlib.contextmanager
def free_core_threads(device: str, cores: int | None = None) -> Iterator[int]:
    """For a ``with`` block: on a CPU, torch's threads set to ``timing_threads`` of ``cores``
    (torch's own count by default) and the load other processes put on the machine now;
    restored after. Yields the threads the block runs on (torch's, unchanged, on a GPU)."""
    import torch

    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(timing_threads(cores or threads, busy_cores()))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
