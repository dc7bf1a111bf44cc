"""Argument checks shared by the counting modules: bad input names the problem."""

from __future__ import annotations

from typing import Any


def positive_int(value: Any, name: str) -> int:
    """``value`` if it is a positive int (not a bool), else ValueError naming ``name``."""
    if type(value) is not int or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def non_negative_int(value: Any, name: str) -> int:
    """``value`` if it is an int >= 0 (not a bool), else ValueError naming ``name``."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def one_of(value: Any, choices: tuple[str, ...], name: str) -> str:
    """``value`` if it is one of ``choices``, else ValueError listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value
