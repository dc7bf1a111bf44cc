"""Requests and their arrivals: the trace every engine serves (chapters 7-9)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helpers.counting._validate import non_negative_int, one_of, positive_int

# --------------------------------------------------------------------------------- traces


@dataclass(frozen=True)
class Request:
    """One request: arrival time (s), prompt and output lengths (tokens).

    ``prefix_id``/``prefix_tokens``: the first ``prefix_tokens`` tokens of the prompt are the
    same for every request with this id (a shared system prompt), so a prefix cache can reuse
    their KV blocks (chapter 8).
    """

    arrival: float
    prompt: int
    output: int
    prefix_id: int | None = None
    prefix_tokens: int = 0


def check_trace(trace: Sequence[Request]) -> None:
    """ValueError naming the first bad request: a negative or zero length, a NaN or negative
    arrival, a shared prefix longer than the prompt or without an id, or arrivals out of
    order (every simulator of chapters 7 and 8 checks its trace with this)."""
    if len(trace) == 0:
        raise ValueError("the trace is empty")
    previous = 0.0
    for index, request in enumerate(trace):
        if not isinstance(request, Request):
            raise ValueError(f"request {index} is a {type(request).__name__}, not a Request")
        if not (math.isfinite(request.arrival) and request.arrival >= 0):
            raise ValueError(f"request {index}: arrival must be >= 0, got {request.arrival!r}")
        for value, name in ((request.prompt, "prompt"), (request.output, "output")):
            if type(value) is not int or value <= 0:
                raise ValueError(
                    f"request {index}: {name} length must be a positive int, got {value!r}"
                )
        non_negative_int(request.prefix_tokens, f"request {index}: prefix_tokens")
        if request.prefix_tokens and request.prefix_id is None:
            raise ValueError(f"request {index}: prefix_tokens={request.prefix_tokens} needs a "
                             "prefix_id naming the prefix it shares")  # fmt: skip
        if request.prefix_tokens > request.prompt:
            raise ValueError(
                f"request {index}: prefix_tokens={request.prefix_tokens} is longer than its "
                f"prompt of {request.prompt}"
            )
        if request.arrival < previous:
            raise ValueError(
                f"arrivals are not sorted: request {index} arrives at {request.arrival} s, "
                f"before request {index - 1} at {previous} s"
            )
        previous = request.arrival


def _lengths(rng: np.random.Generator, n: int, mean: float, dist: str, cap: int) -> np.ndarray:
    if dist == "fixed":
        values = np.full(n, round(mean))
    elif dist == "uniform":  # integers 1 … 2·mean − 1: mean ``mean``
        values = rng.integers(1, max(2, round(2 * mean)), size=n)
    else:  # geometric on 1, 2, …: the discrete exponential, mean ``mean``, a long tail
        values = rng.geometric(1 / mean, size=n)
    return np.clip(values, 1, cap).astype(int)


def poisson_trace(
    n: int,
    rate: float,
    prompt_mean: float,
    output_mean: float,
    seed: int = 0,
    lengths: str = "exponential",
    max_prompt: int = 1 << 30,
    max_output: int = 1 << 30,
    shared_prefix: int = 0,
    shared_fraction: float = 0.0,
) -> list[Request]:
    """``n`` requests with Poisson arrivals at ``rate`` per second, starting at t = 0.

    Lengths (chapters 7 and 8): ``"exponential"`` (geometric on 1, 2, …, mean as given: many
    short requests and a long tail, roughly the shape of chat traces such as ShareGPT),
    ``"uniform"`` (on 1 … 2·mean − 1) or ``"fixed"``; clipped to ``max_prompt`` and
    ``max_output``. With ``shared_fraction`` > 0, that share of requests starts with the same
    ``shared_prefix`` tokens (prefix id 0), added to its drawn prompt length.
    """
    positive_int(n, "n")
    one_of(lengths, ("exponential", "uniform", "fixed"), "lengths")
    if not rate > 0:
        raise ValueError(f"rate must be positive, got {rate!r}")
    for value, name in ((prompt_mean, "prompt_mean"), (output_mean, "output_mean")):
        if not value >= 1:
            raise ValueError(f"{name} must be >= 1, got {value!r}")
    non_negative_int(shared_prefix, "shared_prefix")
    if not 0 <= shared_fraction <= 1:
        raise ValueError(f"shared_fraction must be in [0, 1], got {shared_fraction!r}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, size=n)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    prompts = _lengths(rng, n, prompt_mean, lengths, max_prompt)
    outputs = _lengths(rng, n, output_mean, lengths, max_output)
    shared = rng.random(n) < shared_fraction if shared_prefix else np.zeros(n, dtype=bool)
    return [
        Request(float(a), int(p) + (shared_prefix if s else 0), int(o),
                0 if s else None, shared_prefix if s else 0)
        for a, p, o, s in zip(arrivals, prompts, outputs, shared, strict=True)
    ]  # fmt: skip
