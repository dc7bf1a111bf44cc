"""Chapter 10's experiment: tensor parallelism of the book's decoder on this machine.

``benchmark`` launches ``distributed.run_tensor_parallel`` once (T processes, gloo over
loopback on a CPU, NCCL on GPUs), times lone all-reduces of several sizes beside a prefill and
decode steps, runs the unsharded decoder on the same ids in the caller's process, and returns a
``TPBenchmark``: the measured and predicted all-reduce times, the ring model fitted to the lone
calls, what they bound (the latency of one hop), the speed-up over the unsharded step and the
largest logit difference from it, with ``report()``, the lines the chapter prints.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from helpers.counting import memory
from helpers.counting.models import ModelConfig
from helpers.measuring.timing import Timing, median_and_iqr
from helpers.measuring.verdicts import slower_beyond_spread
from helpers.parallel import sharding
from helpers.parallel.distributed import TPRun, reference_decoder, run_tensor_parallel

__all__ = ["ALLREDUCE_SIZES", "TPBenchmark", "benchmark"]

ALLREDUCE_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22)
"""Bytes of the all-reduces ``benchmark`` times to fit the ring model (4 KiB … 4 MiB): the
largest take milliseconds over loopback, so the bandwidth shows above a busy host's noise."""

FIT_MEETS = 0.1
"""The share within which the fitted ring is said to meet a small message's lone call."""

EXCHANGE_AGREES = (0.8, 1.25)
"""The band in which a step's exchange and its lone all-reduces are called about equal."""
@dataclass
class TPBenchmark:
    """What ``benchmark`` measured and predicted; seconds throughout. ``step``: rank 0's
    median decode step (``step_iqr``: its IQR; the samples are ``run.step_seconds[0]``), and
    the all-reduce time a step likewise; ``share``: the
    all-reduces' measured share of a step (median of each step's share) and its IQR;
    ``link``: the ring model fitted to the lone all-reduces, the decode step's own message
    among them (``sharding.fit_ring``);
    ``predicted_allreduce``: that model's seconds for a step's 2 · layers all-reduces;
    ``predicted_share``: that over the measured median step. ``exchange`` (median, IQR) and
    ``exchange_share``: a step's all-reduces as the last rank to reach each one timed it
    (the least over ranks, call by call): the exchange itself, without the wait for a slower
    peer that the rest of ``allreduce`` is. ``single_samples``: the
    steps of the unsharded decoder run in the caller's process (all its threads); their
    median and IQR are ``single_step`` and ``single_step_iqr``.
    ``message``: the bytes of one decode all-reduce ([batch × hidden] in float32), and
    ``lone_allreduce``: the median seconds of a lone all-reduce of exactly that size, timed
    beside the other sizes (the measured per-call latency of a decode all-reduce, beside the
    fit's). ``logit_gap``: the largest difference between the sharded logits (prefill and
    decode) and the unsharded decoder's, whose largest logit is ``logit_scale``;
    ``single_threads``: the threads the unsharded step ran on."""

    cfg: ModelConfig
    run: TPRun
    allreduce: float
    allreduce_iqr: float
    share: float
    share_iqr: float
    link: sharding.Link
    predicted_allreduce: float
    exchange: float
    exchange_iqr: float
    exchange_share: float
    single_samples: tuple[float, ...]
    message: int
    lone_allreduce: float
    logit_gap: float
    logit_scale: float
    single_threads: int

    @property
    def predicted_share(self) -> float:
        return self.predicted_allreduce / self.step

    @property
    def step(self) -> float:
        return self._sharded.median_s

    @property
    def step_iqr(self) -> float:
        return self._sharded.iqr_s

    @property
    def single_step(self) -> float:
        return self._single.median_s

    @property
    def single_step_iqr(self) -> float:
        return self._single.iqr_s

    @property
    def _sharded(self) -> Timing:
        return Timing.from_samples(self.run.step_seconds[0], device=self.run.backend,
                                   threads=self.run.threads)  # fmt: skip

    @property
    def _single(self) -> Timing:
        return Timing.from_samples(self.single_samples, device="caller",
                                   threads=self.single_threads)  # fmt: skip

    @property
    def verdict(self) -> str:
        """"paid" or "did not pay" where one step is slower than the other past the spread
        (``verdicts.slower_beyond_spread``); else "showed no difference beyond the spread" (a
        near-tie is no verdict)."""
        if slower_beyond_spread(self._sharded, self._single):
            return "paid"
        if slower_beyond_spread(self._single, self._sharded):
            return "did not pay"
        return "showed no difference beyond the spread"

    @property
    def calls(self) -> int:
        """All-reduces a step: after o and after down, each layer."""
        return 2 * self.cfg.layers

    @property
    def hops(self) -> int:
        """Ring steps of one all-reduce: 2(T − 1)."""
        return 2 * (self.run.ranks - 1)

    @property
    def bound_size(self) -> int:
        """The lone size at or above the message whose median is least: a larger message costs
        no less, so that call bounds the message's own (whose median can be noisy)."""
        at_or_above = {n: s for n, s in self.run.allreduce_times.items() if n >= self.message}
        return min(at_or_above, key=at_or_above.get)

    @property
    def bound_call(self) -> float:
        """Seconds of the ``bound_size`` lone call."""
        return self.run.allreduce_times[self.bound_size]

    @property
    def fitted_at_message(self) -> float:
        """The fitted ring's seconds for one all-reduce of the message."""
        return sharding.ring_allreduce_seconds(self.message, self.run.ranks,
                                               self.link.bandwidth, self.link.hop_latency)

    @property
    def order_noise(self) -> float:
        """The largest share by which a smaller message's median exceeded a larger one's (0
        where the medians rise with the size): noise the lone medians carry at least."""
        times = self.run.allreduce_times
        return max((times[a] / times[b] - 1 for a, b in self.out_of_order), default=0.0)

    @property
    def out_of_order(self) -> list[tuple[int, int]]:
        """(smaller, larger) neighbouring sizes whose medians fell as the size rose: noise."""
        order = sorted(self.run.allreduce_times.items())
        return [(a, b) for (a, ta), (b, tb) in zip(order, order[1:], strict=False) if ta > tb]

    @property
    def transfer(self) -> float:
        """Seconds the message's 2(T − 1)/T · n bytes take at the fitted bandwidth."""
        return self.hops / self.run.ranks * self.message / self.link.bandwidth

    @property
    def hop_at_most(self) -> float:
        """One T cannot split a call's fixed cost from its hops'; with the fixed cost >= 0,
        the bounding call less the message's transfer bounds its 2(T − 1) hops."""
        return max(self.bound_call - self.transfer, 0.0) / self.hops

    @property
    def exchange_ratio(self) -> float:
        """A step's exchange over ``calls`` bounding lone calls."""
        return self.exchange / (self.calls * self.bound_call)

    @property
    def speedup(self) -> float:
        """The unsharded step over the sharded one."""
        return self.single_step / self.step

    @property
    def ideal(self) -> float:
        """The weights' bytes over one rank's (the tied LM head whole on each)."""
        part = sharding.shard_config(self.cfg, self.run.ranks)
        return memory.weight_bytes(self.cfg, "fp32") / memory.weight_bytes(part, "fp32")

    def report(self) -> str:
        """The lines chapter 10 prints: each verdict read from this run's figures."""
        run, times, us = self.run, self.run.allreduce_times, 1e6
        fitted, bound = self.fitted_at_message, self.bound_call
        low, high = EXCHANGE_AGREES
        # a miss no larger than the noise the out-of-order medians show is no miss
        band = max(FIT_MEETS, self.order_noise)
        meets = "about meets" + (f" (within the {band:.0%} the out-of-order medians show)"
                                 if band > FIT_MEETS else "")
        lines = [
            f"T = {run.ranks} over {run.backend}, {run.threads} thread(s) a rank; largest logit "
            f"difference from the unsharded decoder: {self.logit_gap:.1e} (logits up to "
            f"{self.logit_scale:.2f})",
            "lone all-reduces, median: " + "; ".join(
                f"{size:,} B {seconds * us:,.0f} µs" for size, seconds in sorted(times.items()))
            + f" ({self.message:,} B: one decode step's message)",
            f"the ring fitted to all of them: {self.link.bandwidth / 1e9:.2f} GB/s and a fixed "
            f"{self.hops * self.link.hop_latency * us:.0f} µs a call; at the message's size it "
            f"gives {fitted * us:.0f} µs, {fitted / bound:.2f}x the {bound * us:.0f} µs of the "
            f"least lone call at or above it (the {self.bound_size:,} B one): the line "
            + (meets if abs(fitted / bound - 1) <= band
               else "overshoots" if fitted > bound else "falls short of") + " a small message",
            "the medians rise with the size" if not self.out_of_order else
            "out of size order, so the medians carry at least this much noise: " + "; ".join(
                f"{a:,} B took {times[a] * us:,.1f} µs, {b:,} B {times[b] * us:,.1f} µs"
                for a, b in self.out_of_order),
            f"a hop, from the least lone call at or above {self.message:,} B (the "
            f"{self.bound_size:,} B call's): t_hop <= ({bound * us:.0f} µs - "
            f"{self.transfer * us:.1f} µs moving {self.message:,} B) / {self.hops} = "
            f"{self.hop_at_most * us:.0f} µs",
            f"decode step: {self.step * 1e3:.2f} ms (IQR {self.step_iqr * 1e3:.2f}); one process "
            f"unsharded ({self.single_threads} threads): {self.single_step * 1e3:.2f} ms (IQR "
            f"{self.single_step_iqr * 1e3:.2f})"]
        wait = self.allreduce - self.exchange
        lines.append(
            f"its {self.calls} all-reduces on rank 0: {self.allreduce * 1e3:.3f} ms, "
            f"{self.allreduce / self.step:.0%} of the median step; the exchange itself (timed by "
            f"the last rank to arrive) {self.exchange * 1e3:.3f} ms, waiting for the later rank "
            f"{wait * 1e3:.3f} ms ({wait / self.allreduce:.0%} of the all-reduce time)")
        ratio = self.exchange_ratio
        lines.append(
            f"the exchange against {self.calls} lone all-reduces "
            f"({self.calls * bound * 1e3:.3f} ms, the least lone call at or above the message's "
            "size): " + ("about equal" if low <= ratio <= high else f"{ratio:.1f}x as long"))
        if not low <= ratio <= high:
            lines.append(f"all-reduces took {'longer' if ratio > 1 else 'less time'} between "
                         "computations than back to back; this run does not measure why")
        lines.append(
            f"sharding {self.verdict} here ({self._verdict_reason()}): "
            f"{self.speedup:.2f}x the unsharded step's speed; a rank reads 1/{self.ideal:.2f} of "
            f"the weights' bytes (the tied LM head whole on each): {self.ideal:.2f}x is the "
            f"ideal where each rank has what the unsharded run had; here the {run.ranks} ranks "
            f"share its {self.single_threads} threads and one memory bus")
        if self.speedup > self.ideal:
            lines.append(f"a speed-up above the ideal {self.ideal:.2f}x means the unsharded "
                         "baseline was slowed, not that sharding beat splitting the reads; this "
                         "run does not measure by what")
        return "\n".join(lines)

    def _verdict_reason(self) -> str:
        """Why ``verdict`` reads as it does, from the two steps' medians, IQRs and notches."""
        gap = abs(self.step - self.single_step) * 1e3
        widest = max(self.step_iqr, self.single_step_iqr) * 1e3
        if self.verdict != "showed no difference beyond the spread":
            return f"medians {gap:.2f} ms apart, past both IQRs and both notches"
        if gap <= widest:
            return f"medians {gap:.2f} ms apart, within the larger IQR, {widest:.2f} ms"
        return (f"medians {gap:.2f} ms apart, past both IQRs, but their notches overlap: too "
                "few steps to tell")


def benchmark(
    cfg: ModelConfig,
    ranks: int = 2,
    batch: int = 1,
    prompt_tokens: int = 16,
    steps: int = 16,
    *,
    warmup: int = 1,
    seed: int = 0,
    sizes: tuple[int, ...] = ALLREDUCE_SIZES,
    timeout: float = 120.0,
) -> TPBenchmark:
    """T-way tensor parallelism of ``cfg`` (float32, random weights) on this machine: one
    ``run_tensor_parallel`` launch times lone all-reduces of ``sizes`` bytes, then a prefill
    of ``prompt_tokens`` and ``steps`` decode steps (after ``warmup`` untimed passes). The
    ring model fitted to the lone all-reduces predicts a step's all-reduce time, set beside
    the one measured inside the steps (``TPBenchmark``). A lone all-reduce of the decode
    step's own message is timed too (``TPBenchmark.lone_allreduce``) and fitted with the
    others."""
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, cfg.vocab, (batch, prompt_tokens), generator=generator)
    decode = torch.randint(0, cfg.vocab, (batch, steps), generator=generator)
    message = batch * cfg.hidden * torch.empty((), dtype=torch.float32).element_size()
    timed = tuple(sizes) + (() if message in sizes else (message,))
    run = run_tensor_parallel(cfg, ranks, prompt, decode, seed=seed, warmup=warmup,
                              allreduce_sizes=timed, timeout=timeout)  # fmt: skip
    steps_s, reduces = run.step_seconds[0], run.allreduce_seconds[0]
    allreduce, allreduce_iqr = median_and_iqr(reduces)
    share, share_iqr = median_and_iqr([r / s for r, s in zip(reduces, steps_s, strict=True)])
    times = run.allreduce_times
    # Fitted down to the decode step's own message, so the model does not extrapolate below
    # the sizes it was fitted to (an intercept read off megabyte transfers misses the
    # smallest ones by several times on a busy loopback).
    fitted = sharding.fit_ring(list(timed), [times[size] for size in timed], ranks,
                                      f"gloo on loopback, {ranks} processes")  # fmt: skip
    predicted = sharding.step_allreduce_seconds(cfg, fitted, ranks, batch, "fp32")
    # The last rank to arrive at an all-reduce waits for no one: its time is the exchange.
    exchanges = [sum(min(calls) for calls in zip(*per_rank, strict=True))
                 for per_rank in zip(*run.allreduce_calls, strict=True)]  # fmt: skip
    exchange, exchange_iqr = median_and_iqr(exchanges)
    exchange_share = statistics.median(e / s for e, s in zip(exchanges, steps_s, strict=True))
    single_samples, logits, decode_logits = _single_step(cfg, prompt, decode, seed, warmup)
    gap = max((run.logits - logits).abs().max().item(),
              (run.decode_logits - decode_logits).abs().max().item())
    return TPBenchmark(cfg, run, allreduce, allreduce_iqr, share, share_iqr, fitted, predicted,
                       exchange, exchange_iqr, exchange_share, tuple(single_samples), message,
                       times[message], gap,
                       logits.abs().max().item(), torch.get_num_threads())  # fmt: skip


@torch.inference_mode()
def _single_step(
    cfg: ModelConfig, prompt: torch.Tensor, decode: torch.Tensor, seed: int, warmup: int
) -> tuple[list[float], torch.Tensor, torch.Tensor]:
    """The unsharded decoder here, on the same ids as the run: its decode steps' seconds (the
    last pass's), its prefill logits and its decode steps' logits [batch, steps, vocab]."""
    model = reference_decoder(cfg, seed)
    for _ in range(warmup + 1):
        logits, cache = model(prompt, max_tokens=prompt.shape[1] + decode.shape[1])
        samples, steps = [], []
        for column in range(decode.shape[1]):
            start = time.perf_counter()
            out, cache = model(decode[:, column : column + 1], cache)
            samples.append(time.perf_counter() - start)
            steps.append(out)
    return samples, logits, torch.cat(steps, dim=1)
