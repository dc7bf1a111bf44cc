"""Chapter 6's requests on the decoder (``helpers.serving.request_timing``): a real request
and a real run of the one-at-a-time engine at a tiny size keep their records (read with the
library's metrics and FIFO), and the engine's verdicts flip where they should on records
built by hand."""

import dataclasses

import pytest
import torch

from helpers.counting import latency
from helpers.counting.models import ModelConfig
from helpers.decoder.model import Decoder
from helpers.measuring.ceilings import Ceilings
from helpers.serving import metrics, request_timing
from helpers.serving.request_timing import OneAtATime

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip
MEASURED = Ceilings("cpu", "test CPU", "t", "today", 1, {"fp32": 1e10}, {"fp32": (1, 1, 1)},
                    1e9, "stream", 2**20, 2**34)  # fmt: skip
TTFT = {4: 0.002, 8: 0.003, 16: 0.005}
TPOT = {4: 0.001, 64: 0.0012}


@pytest.fixture(scope="module")
def model() -> Decoder:
    torch.manual_seed(0)
    return Decoder(TINY).eval()


def test_one_request_reads_its_metrics_off_its_own_token_times(model):
    alone = request_timing.one_request(model, 8, 5, TTFT, TPOT, MEASURED, "fp32")
    assert len(alone.token_times) == 5 and alone.token_times == tuple(sorted(alone.token_times))
    trace = metrics.token_time_metrics(0.0, alone.token_times)
    assert (alone.ttft, alone.tpot, alone.max_itl, alone.e2e) == (
        trace["ttft"], trace["tpot"], trace["max_itl"], trace["e2e"])
    assert alone.identity_e2e == pytest.approx(alone.e2e, rel=1e-12)
    assert alone.predicted_e2e == latency.predict_e2e(TTFT, TPOT, 8, 5)
    assert alone.roofline_e2e == latency.end_to_end(TINY, MEASURED.as_hardware_spec(), 8, 5,
                                                    dtype="fp32")  # fmt: skip
    assert alone.prediction_off == pytest.approx(alone.predicted_e2e / alone.e2e - 1)  # ch 5 sign
    lines = alone.report().splitlines()
    assert lines[0].startswith("prompt 8, 5 tokens: TTFT ") and lines[1].endswith("(the identity)")
    assert len(lines) == 3 + bool(alone.unflushed)
    for bad in (1, 0):
        with pytest.raises(ValueError, match="output_tokens"):
            request_timing.one_request(model, 8, bad, TTFT, TPOT, MEASURED, "fp32")


def test_the_engine_prefills_first_in_first_out_and_sends_the_late_request_mid_round(model):
    requests = [(0.0, 16), (0.0, 8), (0.0, 4), (None, 16)]
    run = request_timing.serve_one_at_a_time(model, requests, 4, 2, TTFT, 0.001, MEASURED,
                                             "fp32")  # fmt: skip
    assert run.requests == ((0.0, 16), (0.0, 8), (0.0, 4), (None, 16))
    assert run.late == 3 and run.burst == [0, 1, 2]
    assert all(len(s) == 4 for s in run.stamps) and run.idle == (0.005, 0.003, 0.002, 0.005)
    # the burst is prefilled in the order listed, each after the one before it ended
    assert run.begun[0] <= run.stamps[0][0] <= run.begun[1] <= run.stamps[1][0] <= run.begun[2]
    # sent half a round after round 1 ended, and prefilled no earlier
    end_of_first = run.rounds[0][1]
    assert end_of_first < run.arrivals[3] <= run.begun[3]
    assert run.ran == tuple(s[0] - b for s, b in zip(run.stamps, run.begun, strict=True))
    assert run.fed == latency.fifo_first_tokens(run.arrivals, run.ran)
    assert run.fifo == latency.fifo_first_tokens(run.arrivals, run.idle)
    report = run.report().splitlines()
    assert len(report) >= 2 + 4 + 3 and report[-1 - bool(run.unflushed)].startswith(
        "the late request arrived")  # fmt: skip


@pytest.mark.parametrize("requests, late_round, match", [
    ([(0.0, 16), (0.0, 8)], 2, "exactly one"),
    ([(None, 16), (None, 8)], 2, "exactly one"),
    ([(0.0, 32), (None, 8)], 2, "not on the TTFT curve"),
    ([(0.0, 16), (None, 8)], 1, "late_round"),
    ([(0.0, 16), (None, 8)], 5, "late_round"),
])  # fmt: skip
def test_the_engine_refuses_what_it_cannot_run(model, requests, late_round, match):
    with pytest.raises(ValueError, match=match):
        request_timing.serve_one_at_a_time(model, requests, 4, late_round, TTFT, 0.001, MEASURED,
                                           "fp32")  # fmt: skip


def by_hand(ran: tuple[float, ...], step: float, late_at: float) -> OneAtATime:
    """Two requests at 0 with idle prefills of 1 s each, prefilled one after the other in
    ``ran`` seconds, then rounds of two ``step``-second decode steps; a late request (idle 1 s)
    arriving at ``late_at``, prefilled at the end of the round running then."""
    first, second = ran[0], ran[0] + ran[1]
    rounds = tuple((second + 2 * step * k, second + 2 * step * (k + 1), 2) for k in range(3))
    running = [(s, e) for s, e, _ in rounds if s <= late_at < e]
    begun_late = running[0][1] if running else late_at
    stamps = ((first, *(e - step for _, e, _ in rounds)), (second, *(e for _, e, _ in rounds)),
              (begun_late + ran[2],))
    return OneAtATime(((0.0, 1), (0.0, 2), (None, 1)), 4, 2, (0.0, 0.0, late_at),
                      (0.0, first, begun_late), stamps, rounds, (1.0, 1.0, 1.0), 0.5)


def test_the_engines_verdicts_follow_its_times():
    steady = by_hand((1.0, 1.0, 1.0), 0.5, late_at=2.5)
    assert steady.prefills_changed == "" and steady.pace == 1.0
    assert steady.queue_is_fifo and steady.fifo_off == 0.0
    assert steady.late_in_round == 0 and steady.waited[2] == 0.5 and steady.fifo[2][0] == 0.0
    assert "arrived 500 ms into decode round 1 (1000 ms long) and waited 500 ms" in (
        steady.report())
    slow = by_hand((2.0, 2.0, 2.0), 0.5, late_at=4.5)
    assert slow.prefills_changed == "slower" and not slow.decode_changed
    assert "only the prefills ran slower" in slow.report()
    assert slow.queue_is_fifo and "prefills' speed, not the queue" in slow.report()
    all_slow = by_hand((2.0, 2.0, 2.0), 1.0, late_at=5.0)
    assert all_slow.decode_changed and "the whole run ran slower" in all_slow.report()
    mixed = by_hand((2.0, 0.5, 1.0), 0.5, late_at=3.0)
    assert mixed.prefills_changed == "both"
    outside = by_hand((1.0, 1.0, 1.0), 0.5, late_at=10.0)
    assert outside.late_in_round is None and "arrived outside the decode rounds" in (
        outside.report())
    # the second prefill begun 0.5 s after the first ended: 0.5 s past FIFO's TTFT
    gap = dataclasses.replace(steady, begun=(0.0, 1.5, steady.begun[2]),
                              stamps=(steady.stamps[0], (2.5, *steady.stamps[1][1:]),
                                      steady.stamps[2]))
    assert gap.fifo_off == 0.5 and not gap.queue_is_fifo
    assert "the engine spent time between the prefills" in gap.report()
