"""Chapter 9 §1 (`09_capstone`), measured: a stream's decode steps form a chain.

Token i + 1 is an input of the step that makes token i + 2, so S output tokens cost S
passes one after another, while a prompt of the same S tokens costs one. ``chain_decoder``
builds the section's decoder on this device; ``pass_against_chain`` times one prefill pass
over S tokens against the S chained decode steps that would produce them
(→ ``ChainTiming``); ``chain_on_roofline`` reads that measurement beside the same
comparison on chapter 3's roofline for a full-size model (→ ``ChainReading``).
``medians_in_turn`` is the timing harness both this module and the section's verifying pass
(``helpers.serving.capstone.greedy_check``) use: callables timed in turn, so load from other
work on the machine falls on all of them alike.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from helpers.counting import hardware, latency, models, roofline
from helpers.counting._validate import positive_int
from helpers.counting.hardware import HardwareSpec
from helpers.counting.interview import pass_intensity, short_name
from helpers.counting.models import ModelConfig
from helpers.decoder.model import Decoder, random_decoder
from helpers.measuring import machine, timing

__all__ = ["CPU_TOKENS", "GPU_TOKENS", "STEPS_MORE", "ChainDecoder", "ChainTiming",
           "ChainReading", "chain_decoder", "medians_in_turn", "pass_against_chain",
           "chain_on_roofline"]  # fmt: skip

CPU_TOKENS, GPU_TOKENS = 16, 256  # S: the prompt, and the chain's length
STEPS_MORE = 1.5  # a pass that costs more than 1.5 decode steps costs more than its weight read


@dataclass(frozen=True, eq=False)  # eq=False: a model and a tensor are not compared by value
class ChainDecoder:
    """Section 1's decoder on one device (``chain_decoder``): ``model`` (random weights) of
    ``cfg`` in ``dtype``, a random ``prompt`` [1, S] of token ids, and the timing ``rounds``."""

    cfg: ModelConfig
    model: Decoder
    dtype: str
    device: str
    prompt: torch.Tensor
    rounds: int

    @property
    def tokens(self) -> int:
        """S: the prompt's tokens, and the chain's steps."""
        return int(self.prompt.shape[1])


def chain_decoder(device: str) -> ChainDecoder:
    """Chapter 6's decoder as chapter 9 §1 times it: on a CPU, Qwen2.5-0.5B's layer shapes
    with one layer and a 4,096-token vocabulary in fp32, a prompt of ``CPU_TOKENS`` and 9
    rounds (a full model's decode steps would take minutes); on a GPU, the published
    Qwen2.5-0.5B in bf16, ``GPU_TOKENS`` and 5 rounds. Weights and prompt are drawn from
    torch's global generator (``setup()`` seeds it)."""
    on_cpu = torch.device(device).type == "cpu"
    small = models.get("Qwen2.5-0.5B")
    cfg = (dataclasses.replace(small, name="Qwen2.5-0.5B shapes, 1 layer, vocab 4,096",
                               layers=1, vocab=4096) if on_cpu else small)  # fmt: skip
    dtype = "fp32" if on_cpu else "bf16"
    model = random_decoder(cfg, device, machine.torch_dtype(dtype))
    tokens = CPU_TOKENS if on_cpu else GPU_TOKENS
    prompt = torch.randint(0, cfg.vocab, (1, tokens), device=device)
    return ChainDecoder(cfg, model, dtype, str(device), prompt, 9 if on_cpu else 5)


def medians_in_turn(calls: Sequence[Callable[[], Any]], rounds: int, device: str) -> list[float]:
    """Each callable's median seconds over ``rounds`` rounds of one synchronized call each
    (``timing.call_seconds``), the callables taken in turn within a round after one warm-up
    call of each: load from other work on the machine falls on all of them alike. On a CPU
    it times on the cores other programs leave free, torch's thread count restored after.
    Inference only (no autograd)."""
    positive_int(rounds, "rounds")
    if not calls:
        raise ValueError("calls must hold at least one callable to time")
    seconds: list[list[float]] = [[] for _ in calls]
    with machine.free_core_threads(device, os.cpu_count() or 1), torch.no_grad():
        for call in calls:  # warm-up
            call()
        for _ in range(rounds):
            for call, kept in zip(calls, seconds, strict=True):
                kept.append(timing.call_seconds(call, (), device))
    return [float(np.median(kept)) for kept in seconds]


@dataclass(frozen=True)
class ChainTiming:
    """One prefill pass over S tokens against S chained decode steps, on ``device``: each
    one's median seconds over ``rounds`` rounds, the two timed in turn."""

    cfg: ModelConfig
    dtype: str
    device: str
    tokens: int
    rounds: int
    pass_s: float
    chain_s: float

    @property
    def step_s(self) -> float:
        """One decode step of the chain, on average."""
        return self.chain_s / self.tokens

    @property
    def ratio(self) -> float:
        """The chain over the pass: how much longer the same S tokens take as an output."""
        return self.chain_s / self.pass_s

    @property
    def pass_steps(self) -> float:
        """The pass in decode steps' time."""
        return self.pass_s / self.step_s

    def report(self) -> str:
        s = self.tokens
        return "\n".join([
            f"{self.cfg.name} on {self.device}, {s} tokens; medians of {self.rounds} rounds, "
            "the two in turn",
            f"  one prefill pass over {s} tokens: {self.pass_s * 1e3:8.2f} ms",
            f"  {s} serial decode steps:          {self.chain_s * 1e3:8.2f} ms "
            f"({self.step_s * 1e3:.2f} ms a step)",
            f"  serial / one pass: {self.ratio:.1f}x for the same {s} tokens",
        ])  # fmt: skip


def pass_against_chain(setting: ChainDecoder) -> ChainTiming:
    """Chapter 9 §1: one prefill pass over the prompt's S tokens (logits for the last only)
    against S decode steps from its first token, each step fed the token the step before
    chose (greedy), into a cache preallocated to S tokens: the same S tokens as a prompt and
    as an output. Timed in turn, ``setting.rounds`` rounds (``medians_in_turn``)."""
    model, ids, s = setting.model, setting.prompt, setting.tokens

    def prefill_once() -> torch.Tensor:
        return model(ids, logits="last")

    def decode_serially() -> torch.Tensor:
        logits, cache = model(ids[:, :1], logits="last", max_tokens=s)
        for _ in range(s - 1):  # each step feeds the token the step before chose
            logits, cache = model(logits[:, -1:].argmax(-1), cache, logits="last")
        return logits

    pass_s, chain_s = medians_in_turn([prefill_once, decode_serially], setting.rounds,
                                      setting.device)  # fmt: skip
    return ChainTiming(setting.cfg, setting.dtype, setting.device, s, setting.rounds, pass_s,
                       chain_s)  # fmt: skip


@dataclass(frozen=True)
class ChainReading:
    """``chain_on_roofline``'s answer: on the roofline, ``prompt`` serial decode steps of
    ``model`` on ``chip`` (as prose names it: "H100") against one prefill of as many tokens
    (``roofline_ratio``), the prefill in decode steps' time and its bound, the chip's ridge;
    measured, the chain's ratio and the pass in steps' time (``measured``) and the pass's
    intensity; the verdict ``pass_costs_more``: the pass costs more than ``STEPS_MORE``
    decode steps, more than its one read of the weights."""

    model: str
    chip: str
    prompt: int
    prefill_s: float
    serial_s: float
    prefill_bound: str
    ridge: float
    measured: ChainTiming
    pass_intensity: float

    @property
    def roofline_ratio(self) -> float:
        return self.serial_s / self.prefill_s

    @property
    def prefill_steps(self) -> float:
        """The roofline's prefill in its mean decode step's time."""
        return self.prefill_s / (self.serial_s / self.prompt)

    @property
    def pass_costs_more(self) -> bool:
        return self.measured.pass_steps > STEPS_MORE

    def report(self) -> str:
        m, chip = self.measured, self.chip
        why = ("more than one step's weight read, so more than the weight read costs: its "
               f"FLOPs, if {self.pass_intensity:.1f} FLOP/B is near or past this device's "
               f"{m.dtype} ridge (chapter 4 measures it), else small matmuls short of their "
               "ceiling" if self.pass_costs_more else
               "about one step's weight read, as a memory-bound pass costs")  # fmt: skip
        return "\n".join([
            f"roofline, {self.prompt:,} tokens: {self.roofline_ratio:.0f}x of at most "
            f"{self.prompt:,}x; the prefill costs {self.prefill_steps:.1f} decode steps' time, "
            f"being {self.prefill_bound}-bound past the {chip}'s ridge "
            f"({self.ridge:.0f} FLOP/B)",
            f"measured, {m.tokens} tokens: {m.ratio:.1f}x of at most {m.tokens}x; the pass "
            f"costs {m.pass_steps:.1f} steps' time at {self.pass_intensity:.1f} FLOP/B "
            f"({m.dtype}) on {m.device}: " + why,
        ])  # fmt: skip


def chain_on_roofline(measured: ChainTiming, cfg: ModelConfig, hw: HardwareSpec | str,
                      prompt: int = 1024, dtype: str = "bf16") -> ChainReading:  # fmt: skip
    """Chapter 9 §1's measurement read against the roofline: S serial steps cost at most
    about S times a pass that costs one step (both read the weights once), and a pass costs
    more steps as its FLOPs come to count, past or near the ridge. On the roofline, for
    ``cfg`` on ``hw`` in ``dtype``: one prefill of ``prompt`` tokens (``latency.prefill_time``)
    against the ``prompt`` decode steps at contexts 0 … prompt − 1 that would produce them
    one at a time (``latency.decode_step_time``, equal to chapters 7–8's
    ``serving.RooflineSteps`` on those steps); measured, the pass's FLOPs over its bytes
    (``interview.pass_intensity``, dense attention as the book's decoder computes it)."""
    positive_int(prompt, "prompt")
    hw = hardware.get(hw) if isinstance(hw, str) else hw
    prefill = latency.prefill_time(cfg, hw, prompt, dtype=dtype)
    serial_s = sum(latency.decode_step_time(cfg, hw, 1, context, dtype)
                   for context in range(prompt))  # fmt: skip
    intensity = pass_intensity(measured.cfg, measured.tokens, dtype=measured.dtype,
                               attention="dense")  # fmt: skip
    return ChainReading(cfg.name, short_name(hw), prompt, prefill.seconds, float(serial_s),
                        prefill.bound, roofline.ridge_point(hw, dtype), measured, intensity)
