"""Which of torch's kernels runs a linear layer (chapter 5, `05_matmuls`).

``y = x·Wᵀ`` can reach a device's arithmetic through more than one kernel, with the same
FLOPs and the same bytes and, on a CPU, times that differ severalfold:

- ``eager``: ``F.linear(x, W)``, what ``nn.Linear`` runs. On a CPU torch picks the library
  per dtype (MKL for fp32, oneDNN for bf16, re-laying out the weight on every call); on a GPU
  cuBLAS, the only kernel offered here.
- ``onednn``: oneDNN's inner product on the weight held as a oneDNN tensor in its plain
  layout, what ``torch.utils.mkldnn.to_mkldnn`` makes of an ``nn.Linear``. CPU only.
- ``packed``: oneDNN with the weight re-laid out once, ahead of time, into the blocked format
  its kernel reads (``torch.ops.mkldnn._reorder_linear_weight``, then ``_linear_pointwise``).
  This is what ``torch.compile`` does to a frozen model's linear layers on a CPU, and what
  CPU serving engines do when they load weights. CPU only.
- ``aten``: torch's own kernel with oneDNN switched off, for bf16/fp16 on a CPU at m = 1 only:
  it is a matrix-vector kernel, and for m > 1 torch falls back to a plain loop many times
  slower (for fp32, oneDNN off means MKL, the same as ``eager``).

A measurement of "a matmul" is a measurement of one kernel. The benchmark
(``helpers.programs.bench``)
and the matmul ceiling (``helpers.measuring.ceilings``) therefore time each point with the fastest
kernel available for it, chosen by ``fastest`` and reported by name: the question they answer
is how close this device gets to its roofline, not how one default call does. Preparing a
weight (packing) happens once, outside the timing, as it would at load time.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from helpers.measuring import machine, timing

if TYPE_CHECKING:
    import torch

__all__ = [
    "LinearKernel",
    "EAGER",
    "ONEDNN",
    "PACKED",
    "ATEN",
    "RANK_CALLS",
    "KERNELS_ENV",
    "linear_kernels",
    "prepare_all",
    "fastest",
    "time_fastest",
]

RANK_CALLS = 3
"""Timed rounds when choosing the fastest kernel, after one warm-up call of each: every
round times one call of each kernel in turn, and a kernel's race time is the median of its
rounds; the winner is then measured properly. Interleaving spreads a burst of other work on
the machine over every kernel instead of charging it to whichever was running, and the
median of three drops one unlucky call: a single call per kernel made eager's decode gap
look 1.8x where proper timing finds 1.14x, and sometimes crowned a kernel that proper timing
puts below eager."""


KERNELS_ENV = "TEXTBOOK_KERNELS"
"""Environment variable restricting the kernels offered to a comma-separated list of names
(e.g. ``eager``), to measure what the race is worth: ``TEXTBOOK_KERNELS=eager python -m
helpers.programs.bench --quick`` runs everything, ceilings included, with ``F.linear`` alone."""


@dataclass(frozen=True)
class LinearKernel:
    """One way to compute ``F.linear(x, W)``: ``run(x, prepare(W))``."""

    name: str
    description: str
    prepare: Callable[[torch.Tensor], Any]
    run: Callable[[torch.Tensor, Any], torch.Tensor]

    def __repr__(self) -> str:
        return f"LinearKernel({self.name!r})"


def _unchanged(weight: torch.Tensor) -> torch.Tensor:
    return weight


def _eager(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.linear(x, weight)


def _to_onednn(weight: torch.Tensor) -> torch.Tensor:
    return weight.to_mkldnn()


def _onednn(x: torch.Tensor, onednn_weight: torch.Tensor) -> torch.Tensor:
    import torch

    return torch._C._nn.mkldnn_linear(x.to_mkldnn(), onednn_weight, None).to_dense()


def _pack(weight: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(weight)


def _packed(x: torch.Tensor, packed_weight: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, packed_weight, None, "none", [], "")


def _aten(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False  # not flags(): that also sets TF32 and warns
    try:
        return F.linear(x, weight)
    finally:
        torch.backends.mkldnn.enabled = enabled


EAGER = LinearKernel("eager", "F.linear, torch's default kernel", _unchanged, _eager)
ONEDNN = LinearKernel("onednn", "oneDNN, weight as a oneDNN tensor", _to_onednn, _onednn)
PACKED = LinearKernel("packed", "oneDNN, weight packed ahead of time", _pack, _packed)
ATEN = LinearKernel("aten", "torch's own kernel, oneDNN off", _unchanged, _aten)


def _onednn_supports(torch_dtype: torch.dtype) -> bool:
    import torch

    if not torch.backends.mkldnn.is_available():
        return False
    if torch_dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if torch_dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return torch_dtype == torch.float32


def linear_kernels(device: str, dtype: str, m: int | None = None) -> list[LinearKernel]:
    """The kernels worth trying for a ``dtype`` linear layer on ``device`` with ``m`` rows of
    input (None: for any m), ``eager`` first; only those named in ``TEXTBOOK_KERNELS`` where
    that is set (``eager`` is always offered, so every point has a kernel)."""
    import os

    import torch

    kernels = [EAGER]
    if torch.device(device).type == "cpu":
        if _onednn_supports(machine.torch_dtype(dtype)):
            kernels += [ONEDNN, PACKED]
        if dtype != "fp32" and m in (None, 1):
            kernels.append(ATEN)
    wanted = os.environ.get(KERNELS_ENV, "").strip()
    if not wanted:
        return kernels
    names = {name.strip() for name in wanted.split(",") if name.strip()}
    known = {k.name for k in (EAGER, ONEDNN, PACKED, ATEN)}
    if names - known:
        raise ValueError(f"{KERNELS_ENV}={wanted!r} names unknown kernels "
                         f"{', '.join(sorted(names - known))}: known are "
                         f"{', '.join(sorted(known))}")  # fmt: skip
    return [k for k in kernels if k is EAGER or k.name in names]


def prepare_all(
    weights: Sequence[torch.Tensor], device: str, dtype: str
) -> list[tuple[LinearKernel, list[Any]]]:
    """Every kernel of ``linear_kernels`` with its own form of each weight (packing happens
    here, once, outside any timing)."""
    return [(kernel, [kernel.prepare(w) for w in weights])
            for kernel in linear_kernels(device, dtype)]  # fmt: skip


def _interleaved_medians(
    candidates: Sequence[tuple[LinearKernel, Sequence[tuple[Any, ...]]]],
    device: str,
    calls: int,
    flush: torch.Tensor | None = None,
) -> dict[str, float]:
    """Each candidate's median of ``calls`` synchronized calls, after one warm-up call of
    each; the calls are taken in rounds (one of each kernel per round). With ``flush``, every
    call is cold, as the winner will be timed: the calls walk the input sets' positions in
    turn, whichever kernel makes them, and the cache is flushed each time the walk starts
    over, so no two calls between flushes share an input (the kernels' sets hold the same
    activations at a position, ``sweep.measure_point``)."""
    rounds = min(len(sets) for _, sets in candidates)
    for kernel, sets in candidates:  # warm up on the position the walk reaches last
        timing.call_seconds(kernel.run, sets[rounds - 1], device)
    seconds: dict[str, list[float]] = {kernel.name: [] for kernel, _ in candidates}
    position = 0
    for _ in range(calls):
        for kernel, sets in candidates:
            cold = flush if position % rounds == 0 else None
            seconds[kernel.name].append(
                timing.call_seconds(kernel.run, sets[position % rounds], device, cold))
            position += 1
    return {name: statistics.median(times) for name, times in seconds.items()}


def fastest(
    candidates: Sequence[tuple[LinearKernel, Sequence[tuple[Any, ...]]]],
    device: str,
    calls: int = RANK_CALLS,
    flush: torch.Tensor | None = None,
) -> tuple[LinearKernel, dict[str, float]]:
    """The fastest kernel of ``candidates`` (each with its input sets, ``(x, prepared W)``
    rotated as in ``timing.time_callable``), and each one's median seconds over ``calls``
    interleaved rounds (each call after a cache flush when ``flush``, a
    ``timing.flush_buffer``, is given).
    Every candidate raced has been warmed up; a lone candidate is returned without being run
    (and an empty dict)."""
    if not candidates:
        raise ValueError("need at least one kernel to choose from")
    if len(candidates) == 1:
        return candidates[0][0], {}
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    seconds = _interleaved_medians(candidates, device, calls, flush)
    winner = min(candidates, key=lambda candidate: seconds[candidate[0].name])[0]
    return winner, seconds


def time_fastest(
    candidates: Sequence[tuple[LinearKernel, Sequence[tuple[Any, ...]]]],
    device: str,
    flush: torch.Tensor | None = None,
    **time_options: Any,
) -> tuple[LinearKernel, dict[str, float], timing.Timing]:
    """Race ``candidates`` (``fastest``), then measure the winner properly with
    ``timing.time_callable(flush=flush, **time_options)``: the kernel, the race's times and
    the timing. A raced winner is already warm; a lone candidate gets one warm-up call."""
    kernel, race = fastest(candidates, device, flush=flush)
    input_sets = next(sets for candidate, sets in candidates if candidate is kernel)
    measured = timing.time_callable(kernel.run, input_sets, device, warmup=0 if race else 1,
                                    flush=flush, **time_options)  # fmt: skip
    return kernel, race, measured
