"""Checkers that the exercises' test cells call (every chapter).

Each checker compares the *type* first, strictly (a plain ``int`` is not a ``bool`` or a
``numpy.int64``; a subclass of ``float`` is not a ``float``), then the value, and raises
``AssertionError`` with "yours vs expected" so a learner sees what went wrong. An object
whose ``__eq__`` claims to equal everything fails the type check before ``==`` is ever
called; values are compared with the builtin types' own methods, never the answer's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["check_int", "check_float", "check_choice", "check_dict", "check_tensor"]


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
