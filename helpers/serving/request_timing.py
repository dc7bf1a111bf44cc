"""Chapter 6's requests on the decoder (`06_ttft_tpot` §8-10), each as one call.

``one_request`` serves one request as a server runs it: a prefill, then greedy decode steps,
each token stamped when it is out; the record reads TTFT, TPOT, the worst inter-token
latency and e2e off those stamps (``metrics.token_time_metrics``) and sets them beside the
prediction from measured TTFT and TPOT curves (``latency.predict_e2e``) and the roofline's.
``serve_one_at_a_time`` runs the simplest engine for several users on the decoder: between
decode rounds it prefills the earliest waiting request that has arrived, else runs a decode
round, one token per running request in turn; the record holds each request's arrival,
prefill and token times, and what the chapter reads from them: each prefill against its
idle time, the queue against FIFO's (``latency.fifo_first_tokens``), and where a request
sent mid-round waited. Times are wall-clock seconds, the device synchronized before each
reading.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from helpers.counting import latency
from helpers.decoder.model import Decoder
from helpers.decoder.phase_times import unflushed_note
from helpers.measuring import timing
from helpers.measuring.ceilings import Ceilings
from helpers.serving import metrics

__all__ = ["CHANGED", "OneRequest", "OneAtATime", "one_request", "serve_one_at_a_time"]

CHANGED = 1.25  # a prefill more than 1.25× slower or faster than its idle time ran at another speed
FIFO_WITHIN = 0.05  # FIFO within 5% of the longest measured TTFT of the burst: the queue is FIFO's


@dataclass(frozen=True)
class OneRequest:
    """One request served alone: ``token_times`` (s after it was sent), what they give
    (``ttft``, ``tpot``, ``max_itl``, ``e2e``), e2e predicted from measured curves
    (``predicted_e2e``) and on the roofline (``roofline_e2e``), and ``unflushed``, the note
    that its steps ran without the curves' cache flush ("" where the curves had none)."""

    prompt_tokens: int
    output_tokens: int
    token_times: tuple[float, ...]
    ttft: float
    tpot: float
    max_itl: float
    e2e: float
    predicted_e2e: float
    roofline_e2e: float
    unflushed: str = ""

    @property
    def identity_e2e(self) -> float:
        """TTFT + (n − 1)·TPOT: e2e exactly, TPOT's definition rearranged."""
        return latency.e2e_fixed_tpot(self.ttft, self.tpot, self.output_tokens)

    @property
    def prediction_off(self) -> float:
        """The curves' prediction's relative error, chapter 5's ``latency.prediction_error``:
        predicted / measured − 1 (negative: the run was slower than predicted)."""
        return latency.prediction_error(self.predicted_e2e, self.e2e)

    def report(self) -> str:
        lines = [f"prompt {self.prompt_tokens}, {self.output_tokens} tokens: TTFT "
                 f"{self.ttft * 1e3:.1f} ms, TPOT {self.tpot * 1e3:.2f} ms, worst ITL "
                 f"{self.max_itl * 1e3:.2f} ms, e2e {self.e2e * 1e3:.1f} ms",
                 f"TTFT + (n_out − 1)·TPOT = {self.identity_e2e * 1e3:.1f} ms (the identity)",
                 f"predicted from the measured curves: {self.predicted_e2e * 1e3:.1f} ms "
                 f"(error {self.prediction_off:+.1%}: predicted / measured − 1); from the "
                 f"roofline: "
                 f"{self.roofline_e2e * 1e3:.1f} ms"]
        return "\n".join(lines + ([self.unflushed] if self.unflushed else []))


def _clock(device: str, origin: float) -> float:
    timing.synchronize(device)  # so the reading follows all the work queued before it
    return time.perf_counter() - origin


def one_request(
    model: Decoder,
    prompt_tokens: int,
    output_tokens: int,
    ttft_curve: Mapping[int, float],
    tpot_curve: Mapping[int, float],
    measured: Ceilings,
    dtype: str,
    device: str = "cpu",
) -> OneRequest:
    """Serve one request of ``prompt_tokens`` random token ids on ``model`` (chapter 6 §8):
    prefill into a cache of ``prompt_tokens + output_tokens`` slots, then greedy decoding,
    a token stamped once the device has finished it, until ``output_tokens`` are out. The
    prediction reads the measured curves (prompt → TTFT, context → TPOT) with
    ``latency.predict_e2e``; the roofline's is ``latency.end_to_end`` on ``measured``'s
    ceilings in ``dtype`` (the model's). ValueError for fewer than two output tokens (no
    TPOT) or a prompt that is not a positive int."""
    if type(prompt_tokens) is not int or prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be a positive int, got {prompt_tokens!r}")
    if type(output_tokens) is not int or output_tokens < 2:
        raise ValueError(f"output_tokens must be an int of at least 2 (a TPOT needs a decode "
                         f"step), got {output_tokens!r}")  # fmt: skip
    cfg = model.cfg
    stamps = []
    with torch.no_grad():
        prompt = torch.randint(0, cfg.vocab, (1, prompt_tokens), device=device)
        cache = model.new_cache(batch=1, max_tokens=prompt_tokens + output_tokens)
        origin = _clock(device, 0.0)
        logits, cache = model(prompt, cache, logits="last")
        for _ in range(output_tokens):
            token = logits[:, -1:].argmax(-1)  # greedy
            stamps.append(_clock(device, origin))  # this token is out
            if len(stamps) < output_tokens:
                logits, cache = model(token, cache, logits="last")
    trace = metrics.token_time_metrics(0.0, stamps)
    return OneRequest(prompt_tokens, output_tokens, tuple(stamps), trace["ttft"], trace["tpot"],
                      trace["max_itl"], trace["e2e"],
                      latency.predict_e2e(ttft_curve, tpot_curve, prompt_tokens, output_tokens),
                      latency.end_to_end(cfg, measured.as_hardware_spec(), prompt_tokens,
                                         output_tokens, dtype=dtype),
                      unflushed_note(cfg, dtype, measured.cache_bytes))  # fmt: skip


@dataclass(frozen=True)
class OneAtATime:
    """What ``serve_one_at_a_time`` ran, in s from its start. Per request (as listed):
    ``requests`` (arrival or None, prompt tokens), ``arrivals``, ``begun`` (its prefill's
    start), ``stamps`` (its token times), ``idle`` (its prefill's time on an idle engine, read
    off the TTFT curve); each decode round's (start, end, steps) in ``rounds``;
    ``decode_step_s``, one decode step's time on an idle engine; ``unflushed`` as in
    ``OneRequest``. The late request is the one listed with arrival None."""

    requests: tuple[tuple[float | None, int], ...]
    output_tokens: int
    late_round: int
    arrivals: tuple[float, ...]
    begun: tuple[float, ...]
    stamps: tuple[tuple[float, ...], ...]
    rounds: tuple[tuple[float, float, int], ...]
    idle: tuple[float, ...]
    decode_step_s: float
    unflushed: str = ""

    @property
    def late(self) -> int:
        return next(r for r, (arrival, _) in enumerate(self.requests) if arrival is None)

    @property
    def burst(self) -> list[int]:
        """The requests with an arrival given in advance."""
        return [r for r in range(len(self.requests)) if r != self.late]

    @property
    def ran(self) -> tuple[float, ...]:
        """Each prefill's time in this run: from its start to its first token."""
        return tuple(s[0] - b for s, b in zip(self.stamps, self.begun, strict=True))

    @property
    def waited(self) -> tuple[float, ...]:
        return tuple(b - a for b, a in zip(self.begun, self.arrivals, strict=True))

    @property
    def first(self) -> tuple[float, ...]:
        """Each request's measured TTFT."""
        return tuple(s[0] - a for s, a in zip(self.stamps, self.arrivals, strict=True))

    @property
    def fifo(self) -> list[tuple[float, float]]:
        """FIFO's (wait, TTFT) on the idle prefill times."""
        return latency.fifo_first_tokens(self.arrivals, self.idle)

    @property
    def fed(self) -> list[tuple[float, float]]:
        """FIFO's (wait, TTFT) fed this run's prefill times."""
        return latency.fifo_first_tokens(self.arrivals, self.ran)

    @property
    def slower(self) -> tuple[float, ...]:
        """Each prefill's time in this run over its idle time."""
        return tuple(r / i for r, i in zip(self.ran, self.idle, strict=True))

    @property
    def median_step_s(self) -> float:
        """The median decode step of the run: each round's length over its steps."""
        steps = sorted((end - start) / n for start, end, n in self.rounds)
        return steps[len(steps) // 2]

    @property
    def pace(self) -> float:
        """The run's median decode step over the idle one."""
        return self.median_step_s / self.decode_step_s

    @property
    def prefills_changed(self) -> str:
        """``"both"`` where some prefills ran over ``CHANGED`` × slower than their idle time and
        some as much faster, else ``"slower"``, ``"faster"`` or ""."""
        slow, fast = max(self.slower) > CHANGED, min(self.slower) < 1 / CHANGED
        return "both" if slow and fast else "slower" if slow else "faster" if fast else ""

    @property
    def decode_changed(self) -> bool:
        """Whether the decode steps changed speed the way the prefills did."""
        if self.prefills_changed == "slower":
            return self.pace > CHANGED
        return self.prefills_changed == "faster" and self.pace < 1 / CHANGED

    @property
    def fifo_off(self) -> float:
        """The burst's largest distance between FIFO fed this run's prefills and the
        measured TTFT (s)."""
        fed, first = self.fed, self.first
        return max(abs(fed[r][1] - first[r]) for r in self.burst)

    @property
    def queue_is_fifo(self) -> bool:
        """FIFO, fed this run's prefill times, within ``FIFO_WITHIN`` of the burst's longest
        measured TTFT: the burst's queue is FIFO's."""
        return self.fifo_off <= FIFO_WITHIN * max(self.first[r] for r in self.burst)

    @property
    def late_in_round(self) -> int | None:
        """The index of the decode round running when the late request arrived, or None."""
        arrival = self.arrivals[self.late]
        return next((k for k, (start, end, _) in enumerate(self.rounds)
                     if start <= arrival < end), None)  # fmt: skip

    def report(self) -> str:
        idle, ran, fifo, fed = self.idle, self.ran, self.fifo, self.fed
        waited, first, arrivals = self.waited, self.first, self.arrivals
        lines = [f"{'':>15}{'prefill':>17}{'FIFO (idle)':>14}{'measured':>16}",
                 f"{'request':>8}{'prompt':>7}{'idle':>8}{'measured':>9}{'wait':>7}{'TTFT':>7}"
                 f"{'wait':>8}{'TTFT':>8}   ms; arrives"]
        for r, (_, prompt) in enumerate(self.requests):
            lines.append(f"{r:>8}{prompt:>7}{idle[r] * 1e3:>8.0f}{ran[r] * 1e3:>9.0f}"
                         f"{fifo[r][0] * 1e3:>7.0f}{fifo[r][1] * 1e3:>7.0f}"
                         f"{waited[r] * 1e3:>8.0f}{first[r] * 1e3:>8.0f}"
                         f"   at {arrivals[r] * 1e3:.0f} ms")
        lines.append(f"this run's prefills took {min(self.slower):.1f}× to "
                     f"{max(self.slower):.1f}× their idle times; its decode steps a median "
                     f"{self.median_step_s * 1e3:.0f} ms, {self.pace:.1f}× section 5's TPOT")
        way = self.prefills_changed
        if way == "both":
            lines.append("  some prefills ran slower than section 4 timed them, some faster: a "
                         "prefill's time varies from run to run here")
        elif way:
            lines.append(f"  the decode steps ran {way} too: the whole run ran {way} than "
                         f"sections 4 and 5" if self.decode_changed else
                         f"  the decode steps kept section 5's pace: only the prefills ran {way}")
        burst = self.burst
        lines.append(f"the burst's TTFTs, ms: FIFO on idle prefill times "
                     f"{', '.join(f'{fifo[r][1] * 1e3:.1f}' for r in burst)}; FIFO on this "
                     f"run's {', '.join(f'{fed[r][1] * 1e3:.1f}' for r in burst)}; measured "
                     f"{', '.join(f'{first[r] * 1e3:.1f}' for r in burst)}")
        if self.queue_is_fifo:
            lines.append(f"  fed this run's prefill times, FIFO is within "
                         f"{self.fifo_off * 1e3:.1f} ms of the measured: the burst's queue is "
                         f"FIFO's" + (", and its distance from FIFO on idle times is the "
                                      "prefills' speed, not the queue" if way else ""))
        else:
            lines.append(f"  fed this run's prefill times, FIFO is {self.fifo_off * 1e3:.0f} ms "
                         f"off the measured: the engine spent time between the prefills")
        late, k = self.late, self.late_in_round
        if k is not None:
            start, end, _ = self.rounds[k]
            lines.append(f"the late request arrived {(arrivals[late] - start) * 1e3:.0f} ms "
                         f"into decode round {k + 1} ({(end - start) * 1e3:.0f} ms long) and "
                         f"waited {waited[late] * 1e3:.0f} ms for the "
                         f"{(end - arrivals[late]) * 1e3:.0f} ms left of it: work already "
                         f"running when it arrived, which FIFO leaves out (FIFO's wait: "
                         f"{fifo[late][0] * 1e3:.0f} ms on idle prefill times, "
                         f"{fed[late][0] * 1e3:.0f} on this run's)")
        else:
            lines.append(f"the late request arrived outside the decode rounds and waited "
                         f"{waited[late] * 1e3:.0f} ms (FIFO: {fifo[late][0] * 1e3:.0f} ms on "
                         f"idle prefill times, {fed[late][0] * 1e3:.0f} on this run's): FIFO "
                         f"models any prefill queued ahead of it")
        return "\n".join(lines + ([self.unflushed] if self.unflushed else []))


def serve_one_at_a_time(
    model: Decoder,
    requests: Sequence[tuple[float | None, int]],
    output_tokens: int,
    late_round: int,
    ttft_curve: Mapping[int, float],
    decode_step_s: float,
    measured: Ceilings,
    dtype: str,
    device: str = "cpu",
) -> OneAtATime:
    """Serve ``requests``, each (arrival in s or None, prompt tokens), ``output_tokens`` each,
    on ``model`` by the engine of chapter 6 §9: between decode rounds it prefills the earliest
    waiting request that has arrived (first in, first out; ties in the order listed), else runs
    a decode round, one token per running request in turn (no batching); idle, it sleeps
    until the next arrival. Prompts are random token ids, tokens greedy.

    The one request with arrival None is sent by a client watching the stream, half a round
    into round ``late_round``: when round ``late_round − 1`` ends, its arrival is set half
    that round's length later, so that it lands mid-round whether this run's passes are
    slower or faster than the curves'. ``ttft_curve`` (prompt → TTFT, measured on an idle
    engine) gives each prompt's idle prefill time, and ``decode_step_s`` one decode step's.
    ValueError unless exactly one arrival is None, every prompt is on the curve, and
    ``late_round`` is a round the burst runs (2 … ``output_tokens``)."""
    requests = tuple((None if a is None else float(a), int(p)) for a, p in requests)
    if sum(a is None for a, _ in requests) != 1:
        raise ValueError("exactly one request must have arrival None (the late one)")
    missing = sorted({p for _, p in requests} - set(ttft_curve))
    if missing:
        raise ValueError(f"prompts {missing} are not on the TTFT curve (measured: "
                         f"{sorted(ttft_curve)})")  # fmt: skip
    if type(output_tokens) is not int or output_tokens < 2:
        raise ValueError(f"output_tokens must be an int of at least 2, got {output_tokens!r}")
    if type(late_round) is not int or not 2 <= late_round <= output_tokens:
        raise ValueError(f"late_round must be an int in [2, {output_tokens}] (a decode round "
                         f"the burst runs), got {late_round!r}")  # fmt: skip
    cfg = model.cfg
    arrivals = [math.inf if arrival is None else arrival for arrival, _ in requests]
    queue = sorted(range(len(requests)), key=lambda r: arrivals[r])  # FIFO
    begun, stamps, rounds = [0.0] * len(requests), [[] for _ in requests], []
    running = {}  # request -> (its next input token, its cache)
    origin = _clock(device, 0.0)

    def clock() -> float:
        return _clock(device, origin)

    with torch.no_grad():
        while queue or running:
            if queue and arrivals[queue[0]] <= clock():  # a waiting prefill goes first
                r = queue.pop(0)
                begun[r] = clock()
                cache = model.new_cache(batch=1, max_tokens=requests[r][1] + output_tokens)
                ids = torch.randint(0, cfg.vocab, (1, requests[r][1]), device=device)
                logits, cache = model(ids, cache, logits="last")
                running[r] = (logits[:, -1:].argmax(-1), cache)
                stamps[r].append(clock())
            elif running:
                start, steps = clock(), len(running)
                for r in list(running):  # one decode round
                    logits, cache = model(*running[r], logits="last")
                    running[r] = (logits[:, -1:].argmax(-1), cache)
                    stamps[r].append(clock())
                    if len(stamps[r]) == output_tokens:
                        del running[r]
                rounds.append((start, clock(), steps))
                if len(rounds) == late_round - 1:
                    half = (rounds[-1][1] - start) / 2
                    arrivals = [clock() + half if a == math.inf else a for a in arrivals]
            elif arrivals[queue[0]] == math.inf:
                raise RuntimeError(f"the burst ended before decode round {late_round - 1}: "
                                   f"the late request was never sent")  # fmt: skip
            else:  # idle until the next arrival
                time.sleep(max(0.0, arrivals[queue[0]] - clock()))
    return OneAtATime(requests, output_tokens, late_round, tuple(arrivals), tuple(begun),
                      tuple(tuple(s) for s in stamps), tuple(rounds),
                      tuple(ttft_curve[p] for _, p in requests), float(decode_step_s),
                      unflushed_note(cfg, dtype, measured.cache_bytes))  # fmt: skip
