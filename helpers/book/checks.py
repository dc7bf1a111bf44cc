"""Checkers that the exercises' test cells call (every chapter).

Each checker compares the *type* first, strictly (a plain ``int`` is not a ``bool`` or a
``numpy.int64``; a subclass of ``float`` is not a ``float``), then the value, and raises
``AssertionError`` with "yours vs expected" so a learner sees what went wrong. An object
whose ``__eq__`` claims to equal everything fails the type check before ``==`` is ever
called; values are compared with the builtin types' own methods, never the answer's.

``FakeDevice`` is a made-up asynchronous device with its own clock, for test cells that grade a
timing loop deterministically (chapter 4): nothing on it is measured, so the same loop gives
the same numbers on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["check_int", "check_float", "check_choice", "check_dict", "check_pairs", "check_tensor",
           "FakeDevice"]


def _name(value: Any) -> str:
    kind = type(value)
    return (
        kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    )


def _fail(what: str, yours: str, expected: str, hint: str = "") -> None:
    message = f"{what}: yours = {yours}, expected = {expected}"
    raise AssertionError(message + (f" ({hint})" if hint else ""))


def _require_type(yours: Any, kind: type, what: str) -> None:
    if type(yours) is not kind:
        hint = f"convert with {kind.__name__}(...)" if kind in (int, float) else ""
        _fail(what, f"a {_name(yours)}", f"a plain {kind.__name__}", hint)


def check_int(yours: Any, expected: int, what: str) -> None:
    """Exact integer match; ``yours`` must be a plain ``int``."""
    _require_type(yours, int, what)
    if not int.__eq__(yours, expected):
        _fail(what, f"{int.__repr__(yours)}", f"{expected!r}", f"off by {yours - expected:+,}")


def check_float(
    yours: Any, expected: float, what: str, rel: float = 1e-6, abs_: float = 0.0
) -> None:
    """Float match within a relative (and optional absolute) tolerance; ``yours`` must be a
    plain ``float``."""
    _require_type(yours, float, what)
    yours_value = float.__float__(yours)
    if math.isnan(yours_value) or not math.isclose(
        yours_value, expected, rel_tol=rel, abs_tol=abs_
    ):
        _fail(what, f"{yours_value!r}", f"{expected!r}", f"tolerance {rel:g} relative")


def check_choice(yours: Any, expected: str, what: str, choices: tuple[str, ...]) -> None:
    """One label out of ``choices`` (e.g. ``"compute"`` or ``"memory"``)."""
    _require_type(yours, str, what)
    if str.__str__(yours) not in choices:
        _fail(what, repr(str.__str__(yours)), f"one of {choices}")
    if not str.__eq__(yours, expected):
        _fail(what, repr(str.__str__(yours)), repr(expected))


def check_dict(
    yours: Any, expected: Mapping[str, int | float], what: str, rel: float = 1e-6
) -> None:
    """A plain ``dict`` with exactly the expected keys; each value checked by its type."""
    _require_type(yours, dict, what)
    keys, expected_keys = set(dict.keys(yours)), set(expected)
    if keys != expected_keys:
        missing, extra = sorted(expected_keys - keys), sorted(map(str, keys - expected_keys))
        _fail(
            what,
            f"keys {sorted(map(str, keys))}",
            f"keys {sorted(expected_keys)}",
            f"missing {missing}, unexpected {extra}",
        )
    for key, value in expected.items():
        item = dict.__getitem__(yours, key)
        if type(value) is int:
            check_int(item, value, f"{what}[{key!r}]")
        else:
            check_float(item, value, f"{what}[{key!r}]", rel=rel)


def check_pairs(yours: Any, expected: list[tuple[int | bool, ...]], what: str) -> None:
    """A plain ``list`` of plain ``tuple``s, as many as ``expected`` and in its order; each
    element checked by its expected type (``check_int``, or a ``bool`` for a ``bool``)."""
    _require_type(yours, list, what)
    if list.__len__(yours) != len(expected):
        _fail(what, f"a list of {list.__len__(yours)}", repr(expected))
    for i, want in enumerate(expected):
        item = list.__getitem__(yours, i)
        _require_type(item, tuple, f"{what}[{i}]")
        if tuple.__len__(item) != len(want):
            _fail(f"{what}[{i}]", f"a tuple of {tuple.__len__(item)}", repr(want))
        for j, value in enumerate(want):
            got, where = tuple.__getitem__(item, j), f"{what}[{i}][{j}]"
            if type(value) is bool:
                _require_type(got, bool, where)
                if got is not value:
                    _fail(where, repr(got), repr(value))
            else:
                check_int(got, value, where)


def check_tensor(
    yours: Any, expected: Any, what: str, rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """A ``torch.Tensor`` (not a subclass) of the expected dtype and shape, values close."""
    import torch

    _require_type(yours, torch.Tensor, what)
    if yours.dtype != expected.dtype:
        _fail(what, f"dtype {yours.dtype}", f"dtype {expected.dtype}")
    if tuple(yours.shape) != tuple(expected.shape):
        _fail(what, f"shape {tuple(yours.shape)}", f"shape {tuple(expected.shape)}")
    yours_cpu, expected_cpu = yours.detach().cpu(), expected.detach().cpu()
    if not torch.allclose(yours_cpu, expected_cpu, rtol=rtol, atol=atol, equal_nan=False):
        worst = (yours_cpu.double() - expected_cpu.double()).abs().max().item()
        _fail(
            what,
            "values",
            "values",
            f"largest difference {worst:.3g}, rtol {rtol:g}, atol {atol:g}",
        )


class FakeDevice:
    """A made-up asynchronous accelerator with a host clock, for grading a timing loop
    (chapter 4). Every time is fake seconds, advanced only by these rules, so a loop's result
    depends on the order of its calls and on nothing else:

    - ``kernel(*tensors)`` launches work: the host spends ``launch_s`` and returns at once
      (as a CUDA launch does); the device runs launched work in order, each kernel after the
      one before it. A kernel reads each input tensor: at ``memory_bandwidth`` B/s, or at
      ``cache_bandwidth`` if the tensor is still in the device's least-recently-used cache
      of ``cache_bytes`` (whole tensors, inserted when read), and the first read of a tensor
      ever costs ``first_touch_s_per_byte`` on top (its pages faulted in). The very first
      launch costs ``first_call_s`` more (library loading, kernel selection), and every
      ``hiccup_every``-th launch ``hiccup_s`` more (another process got the device).
    - ``synchronize(device)``: the host waits until all launched work is done.
    - ``clock()``: the host's time now; each read costs ``clock_s``.

    ``launches`` counts the kernels launched. Tensors are told apart by identity, so pass the
    same tensor objects to mean the same memory. A fresh ``FakeDevice`` per measurement: its
    state (clock, queue, cache) carries over between calls, as a real device's does.
    """

    def __init__(
        self,
        *,
        memory_bandwidth: float = 1e10,
        cache_bandwidth: float = 4e10,
        cache_bytes: int = 1 << 20,
        first_touch_s_per_byte: float = 1e-9,
        first_call_s: float = 0.02,
        launch_s: float = 5e-6,
        clock_s: float = 1e-7,
        hiccup_every: int = 7,
        hiccup_s: float = 5e-5,
    ) -> None:
        from collections import OrderedDict

        self.memory_bandwidth, self.cache_bandwidth = memory_bandwidth, cache_bandwidth
        self.cache_bytes, self.first_touch_s_per_byte = cache_bytes, first_touch_s_per_byte
        self.first_call_s, self.launch_s, self.clock_s = first_call_s, launch_s, clock_s
        self.hiccup_every, self.hiccup_s = hiccup_every, hiccup_s
        self.now = 0.0  # the host's time
        self.busy_until = 0.0  # when the device finishes the work launched so far
        self.launches = 0
        self._cache: OrderedDict[int, int] = OrderedDict()  # id -> bytes, oldest first
        self._seen: dict[int, Any] = {}  # id -> tensor: every tensor read (keeps ids unique)

    def clock(self) -> float:
        """The host's clock: fake seconds since this device was made."""
        self.now += self.clock_s
        return self.now

    def synchronize(self, device: Any = None) -> None:
        """Wait (on the host) until every launched kernel has finished."""
        self.now = max(self.now, self.busy_until)

    def kernel(self, *tensors: Any) -> None:
        """Launch a kernel that reads ``tensors`` (torch tensors); returns before it runs."""
        self.now += self.launch_s
        work = self.first_call_s if self.launches == 0 else 0.0
        self.launches += 1
        if self.hiccup_every and self.launches % self.hiccup_every == 0:
            work += self.hiccup_s
        for tensor in tensors:
            key, nbytes = id(tensor), tensor.numel() * tensor.element_size()
            if key not in self._seen:
                self._seen[key] = tensor
                work += nbytes * self.first_touch_s_per_byte
            if key in self._cache:
                work += nbytes / self.cache_bandwidth
                self._cache.move_to_end(key)
            else:
                work += nbytes / self.memory_bandwidth
                self._cache[key] = nbytes
                while sum(self._cache.values()) > self.cache_bytes and len(self._cache) > 1:
                    self._cache.popitem(last=False)
                if sum(self._cache.values()) > self.cache_bytes:
                    self._cache.clear()  # a tensor larger than the cache does not stay in it
        self.busy_until = max(self.now, self.busy_until) + work
