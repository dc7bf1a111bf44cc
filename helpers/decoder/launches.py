"""Launch overhead: how many operators a step dispatches, and what each costs (chapter 8).

Eager PyTorch runs a forward pass as one operator after another (a matmul, each piece of a
norm, an add), and every operator pays a fixed cost whatever its size: the Python call,
torch's dispatcher and, on a GPU, the launch of its kernel. A roofline counts FLOPs and
bytes only, so where a step is short this cost can be a large part of it.

- ``count_ops``: the operators a call dispatches, by name. It counts with a
  ``TorchDispatchMode`` (``torch.utils._python_dispatch``), which sees every ATen operator
  torch runs below autograd, after composite operators are split into the ones that do the
  work (``F.linear`` is a transpose, a view, and one ``addmm`` or ``mm``). Unlike
  ``torch.profiler`` it gives the same answer on every device, with no trace to parse and
  no nesting to undo (the profiler also records the composite operators and what each
  kernel calls inside). Views and bare allocations are left out: they change metadata or
  reserve memory and launch no kernel. On a GPU most counted operators launch one kernel;
  a few launch several, and an engine with fused kernels launches fewer.
- ``decode_step_ops``: one decode step of the decoder's ``forward_paged`` (what the
  serving engine runs), split into the host's index plan and the layers.
- ``same_ops_config``: a config with a model's layers, heads and flags but tiny widths,
  which dispatches the same operators (a count does not depend on widths): Qwen2.5-0.5B's
  24 layers counted in milliseconds.
- ``op_seconds``: the fixed cost of one operator on a device, from a chain of tiny ones
  timed with ``timing.time_callable`` (warmed up, synchronized, median and spread).
- ``launch_overhead``: chapter 8's experiment, one decode step's operators counted and
  timed on a device, set against the step's roofline time on that device's measured
  ceilings (``LaunchOverhead``).

``steps.RooflineSteps(..., step_overhead_s=ops * cost)`` adds the product to every step.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from helpers.counting._validate import non_negative_int, positive_int
from helpers.counting.memory import kv_blocks
from helpers.measuring import timing

if TYPE_CHECKING:
    from helpers.counting.hardware import HardwareSpec
    from helpers.counting.models import ModelConfig
    from helpers.decoder.model import Decoder

__all__ = ["NO_KERNEL", "StepOps", "count_ops", "decode_step_ops", "same_ops_config",
           "op_seconds", "LaunchOverhead", "measured_chip", "launch_overhead"]

NO_KERNEL = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                       "new_empty_strided", "_unsafe_view", "alias"})  # fmt: skip
"""Operators that are not views by their schema but still launch no kernel: allocations
without initialisation, and views that their schema does not mark as one."""


def count_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> collections.Counter:
    """The ATen operators that ``fn(*args, **kwargs)`` dispatches and that run a kernel, as a
    ``Counter`` of names such as ``"aten::mm"`` (its total: ``sum(counter.values())``).
    Views and ``NO_KERNEL`` are left out; an operator an operator calls inside its own
    kernel is not seen (the mode is off while each one runs), so each counts once."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: collections.Counter = collections.Counter()

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not func.is_view and name not in NO_KERNEL:
                counts[f"{func.namespace}::{name}"] += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        fn(*args, **kwargs)
    return counts


@dataclasses.dataclass(frozen=True)
class StepOps:
    """The operators of one step (``decode_step_ops``): ``plan``, the index bookkeeping
    ``forward_paged`` does on the host before the layers (checking the entries, slot and
    mask tensors), and ``model``, everything after (embedding, rotary tables, the layers, the
    final norm and LM head), which on a GPU runs on the device."""

    plan: collections.Counter
    model: collections.Counter

    @property
    def total(self) -> int:
        """Every operator of the step: each pays the fixed cost on the host."""
        return sum(self.plan.values()) + sum(self.model.values())

    @property
    def device(self) -> int:
        """The operators after the plan: on a GPU, about one kernel launch each."""
        return sum(self.model.values())


def decode_step_ops(model: Decoder, batch: int = 1, context: int = 64,
                    block_size: int = 16) -> StepOps:  # fmt: skip
    """The operators of one decode step of ``model.forward_paged``: ``batch`` sequences of
    ``context`` cached tokens each decode one token over a paged cache of their own blocks.
    One step runs first, uncounted (a first call may take paths a later one does not)."""
    import torch

    from helpers.decoder.paged_step import PagedEntry, paged_plan

    positive_int(batch, "batch")
    non_negative_int(context, "context")
    # Each sequence's cache holds its context and the token this step writes.
    per_sequence = kv_blocks(context + 1, block_size)
    cache = model.new_paged_cache(batch * per_sequence, block_size)
    generator = torch.Generator().manual_seed(0)
    entries = [PagedEntry(torch.randint(0, model.cfg.vocab, (1,), generator=generator), context,
                          torch.arange(b * per_sequence, (b + 1) * per_sequence))
               for b in range(batch)]  # fmt: skip
    device = model.embed.weight.device
    with torch.no_grad():
        model.forward_paged(entries, cache)
        step = count_ops(model.forward_paged, entries, cache)
        plan = count_ops(paged_plan, entries, cache, model.cfg, device)
    return StepOps(plan=plan, model=step - plan)


def same_ops_config(cfg: ModelConfig, width: int = 8) -> ModelConfig:
    """``cfg`` with its layers, head counts and flags (biases, tied embeddings, window, rotary
    scaling) but every width small: the hidden size, the MLP, each head (``width``, even for
    the rotary pairs) and the vocabulary. Its decoder dispatches the operators ``cfg``'s
    does, on tensors of a few kilobytes."""
    positive_int(width, "width")
    if width % 2:
        raise ValueError(f"width must be even (rotary embeddings rotate pairs), got {width}")
    return dataclasses.replace(cfg, name=f"{cfg.name}, widths {width}", hidden=4 * width,
                               intermediate=8 * width, head_dim=width,
                               vocab=16 * width)  # fmt: skip


def _tiny_ops(x: Any, ops: int) -> Any:
    for _ in range(ops):
        x = x + 1.0  # each on the last one's result, as a forward pass's operators are
    return x


def op_seconds(device: str = "cpu", ops: int = 100, **time_options: Any) -> timing.Timing:
    """The fixed cost of one operator on ``device``: ``ops`` additions on a one-element tensor,
    back to back, timed by ``timing.time_callable`` (warm-up, synchronized, median of blocks;
    no cache flush, as there is nothing to flush), each figure of the ``Timing`` divided by
    ``ops``. On a GPU it is what the slower side costs an operator: the host issuing it or
    the device running it."""
    import torch

    positive_int(ops, "ops")
    x = torch.ones(1, device=device)
    options = {"flush_l2": False, **time_options}
    measured = timing.time_callable(_tiny_ops, [(x, ops)], device, **options)
    return dataclasses.replace(measured, median_s=measured.median_s / ops,
                               iqr_s=measured.iqr_s / ops, min_s=measured.min_s / ops,
                               max_s=measured.max_s / ops)  # fmt: skip


# ------------------------------------------------------- chapter 8's launch experiment


@dataclasses.dataclass(frozen=True)
class LaunchOverhead:
    """One decode step's launch overhead on a device (``launch_overhead``): its operators
    (``ops``), one operator's fixed cost (``per_op``), the device's measured roofline
    (``chip``, in ``dtype``), the step's roofline time on it and, where a fitted step model
    was given, that model's time for the step (s)."""

    cfg: ModelConfig
    batch: int
    context: int
    ops: StepOps
    per_op: timing.Timing
    chip: HardwareSpec
    dtype: str
    roofline_s: float
    fitted_s: float | None = None

    @property
    def launch_s(self) -> float:
        """Every operator's fixed cost, a step: operators × the median cost of one."""
        return self.ops.total * self.per_op.median_s

    def report(self) -> str:
        ops, per_op = self.ops, self.per_op
        fitted = "" if self.fitted_s is None else f", its fitted time {self.fitted_s * 1e3:.2f} ms"
        return "\n".join([
            f"a decode step of {self.batch} sequences, {self.context} tokens cached each: "
            f"{ops.total} operators ({sum(ops.plan.values())} building its indices on the "
            f"host, {ops.device} after)",
            f"one operator: {per_op.median_s * 1e6:.2f} µs (median; IQR "
            f"{per_op.iqr_s * 1e6:.2f} µs)",
            f"{ops.total} x {per_op.median_s * 1e6:.2f} µs = {self.launch_s * 1e3:.2f} ms a "
            f"step; the step's roofline time here {self.roofline_s * 1e3:.2f} ms "
            f"({self.launch_s / self.roofline_s:.2f}x){fitted}"])  # fmt: skip


def measured_chip(device: str, dtype: str) -> HardwareSpec:
    """This device's roofline, measured quickly: one GEMM of ``ceilings.gemm_shapes``'
    quick list for the peak (a lower bound on it) and the read stream for the bandwidth
    (``ceilings.measure_bandwidth``), with the device's memory."""
    from helpers.counting.hardware import HardwareSpec
    from helpers.measuring import ceilings, machine

    peak, _, _ = ceilings.measure_matmul_ceiling(device, dtype,
                                                 shapes=ceilings.gemm_shapes(device, True)[:1])
    return HardwareSpec(f"{device}, measured", {dtype: peak}, ceilings.measure_bandwidth(device),
                        machine.device_memory_bytes(device), "measured above")  # fmt: skip


def launch_overhead(model: Decoder, batch: int, context: int, fitted: Any = None,
                    device: str | None = None) -> LaunchOverhead:  # fmt: skip
    """What launching a step's operators costs beside its roofline time (chapter 8): one
    decode step of ``model.forward_paged`` (``batch`` sequences of ``context`` cached
    tokens) counted (``decode_step_ops``), one operator's fixed cost timed on the model's
    device (``op_seconds``), and the step's time on the roofline of that device, measured
    (``measured_chip``, in the dtype of the model's weights; ``latency.decode_step_time``,
    which the serving simulator's roofline step model equals on a decode step). ``fitted``:
    a serving step model fitted to this device (anything with ``decode_run(batch, total
    context, steps)``, as ``serving.steps.FittedSteps``), whose time for the same step is
    recorded beside it; ``device``: where to time, default the model's."""
    from helpers.counting.latency import decode_step_time
    from helpers.measuring.machine import DTYPE_NAMES, torch_dtype

    positive_int(batch, "batch")
    non_negative_int(context, "context")
    weights = model.embed.weight
    device = device or weights.device.type  # "cuda", as the chapters name it
    dtype = next((name for name in DTYPE_NAMES if torch_dtype(name) == weights.dtype), None)
    if dtype is None:
        raise ValueError(f"the model's weights are {weights.dtype}: no roofline dtype for it")
    ops = decode_step_ops(model, batch, context)
    per_op = op_seconds(device)
    chip = measured_chip(device, dtype)
    roofline = decode_step_time(model.cfg, chip, batch, context, dtype)
    fitted_s = None if fitted is None else float(fitted.decode_run(batch, batch * context, 1)[0])
    return LaunchOverhead(model.cfg, batch, context, ops, per_op, chip, dtype, roofline,
                          fitted_s)  # fmt: skip
