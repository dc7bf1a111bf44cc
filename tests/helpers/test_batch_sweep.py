"""Chapter 7's decode batch sweep (``helpers.decoder.batch_sweep``): a real run at a tiny size
keeps its record's invariants, and the record says when its knee is only a lower bound."""

import pytest
import torch

from helpers.counting import hardware, latency, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder.batch_sweep import DecodeSweep, decode_batch_sweep, point_move
from helpers.decoder.model import Decoder

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip


def synthetic(step_seconds: dict[int, float]) -> DecodeSweep:
    return DecodeSweep("synthetic", "fp32", 64, 1, step_seconds, dict(step_seconds))


def test_a_real_sweep_keeps_its_record_and_extends_by_doubling_until_proportional():
    """Timed for real on the CPU: every batch asked for is measured, each beside
    ``roofline.decode_split``'s weights plus attention; the sweep doubles its largest batch
    while the last doubling stays under ×1.8, and stops at ``extend_to``."""
    torch.manual_seed(0)
    model = Decoder(TINY).eval()
    hw = hardware.get("H100 SXM")
    with torch.no_grad():
        sweep = decode_batch_sweep(model, [1, 3, 2], 8, hw, "fp32", "cpu", extend_to=16,
                                   min_run_time=0.001, max_run_time=0.01)  # fmt: skip
    batches = sweep.batches
    assert batches[:3] == [1, 2, 3] and batches == sorted(sweep.step_seconds)
    assert list(sweep.predicted) == batches and all(s > 0 for s in sweep.step_seconds.values())
    for b in batches:
        split = roofline.decode_split(TINY, hw, b, 8, "fp32")
        assert sweep.predicted[b] == split["weights"].seconds + split["attention"].seconds
    assert (sweep.model, sweep.dtype, sweep.context) == ("tiny-gqa", "fp32", 8)
    assert sweep.threads == torch.get_num_threads()
    # the extension: 3 → 6 → 12, each added only while the sweep before it was not
    # proportional (3 has no half measured); it stops proportional or at 12 (24 > 16)
    added = batches[3:]
    assert added == [6, 12][: len(added)]
    for b in added:
        before = {k: v for k, v in sweep.step_seconds.items() if k < b}
        assert not synthetic(before).top_proportional
    assert sweep.top_proportional or batches[-1] == 12
    assert sweep.knee == latency.measured_knee(sweep.step_seconds)
    assert sweep.knee_is_lower_bound is not sweep.top_proportional
    # no extend_to: exactly the batches asked for
    with torch.no_grad():
        plain = decode_batch_sweep(model, [2, 1], 8, hw, "fp32", "cpu", min_run_time=0.001,
                                   max_run_time=0.01)  # fmt: skip
    assert plain.batches == [1, 2]


def test_a_flat_top_gives_a_lower_bound_and_a_proportional_top_a_measurement():
    """On the roofline t = max(t1, sB): a sweep that stops below its knee (t1/s = 40) reads
    the knee at its largest batch, too low, and says so; one past it reads 40 exactly."""
    t1, s = 0.010, 0.010 / 40
    flat = synthetic({b: max(t1, s * b) for b in (1, 2, 4, 8, 16, 32)})
    assert flat.last_doubling == 1.0 and not flat.top_proportional
    assert flat.knee_is_lower_bound and flat.knee == pytest.approx(32) and flat.knee < 40
    steep = synthetic({b: max(t1, s * b) for b in (1, 2, 4, 8, 16, 32, 64, 128)})
    assert steep.last_doubling == pytest.approx(2.0) and steep.top_proportional
    assert not steep.knee_is_lower_bound and steep.knee == pytest.approx(40)


@pytest.mark.parametrize("fixed", [0.0, 0.001, 0.003, 0.01, 0.03])
def test_the_knee_is_a_lower_bound_on_t1_over_s_within_an_eighth_once_proportional(fixed):
    """Steps a + sB past a corner: the knee t(1)·B/t(B) rises toward t(1)/s as B grows, never
    above it; from the first doubling of ×1.8 or more it stays within an eighth below it."""
    t1, s = 0.010, 0.010 / 40
    knees = []
    for top in (2**k for k in range(1, 14)):
        batches = [1] + [b for b in (2**k for k in range(1, 14)) if b <= top]
        sweep = synthetic({b: fixed + max(t1, s * b) for b in batches})
        limit = sweep.step_seconds[1] / s  # t(1)/s, the knee a larger sweep would read
        assert sweep.knee <= limit * (1 + 1e-12)
        if not sweep.knee_is_lower_bound:
            assert sweep.knee >= limit * 8 / 9
        knees.append(sweep.knee)
    assert knees == sorted(knees) and not sweep.knee_is_lower_bound


@pytest.mark.parametrize(
    "step_seconds, doubling, bound",
    [
        ({1: 10.0, 32: 38.0, 64: 54.0}, 54 / 38, True),  # chapter 7's CPU top: ×1.42
        ({1: 10.0, 32: 20.0, 64: 36.0}, 1.8, False),  # exactly the factor: proportional
        ({1: 10.0, 3: 12.0}, None, True),  # B_max / 2 not measured: no check, a bound
        ({1: 10.0}, None, True),
    ],
)
def test_the_last_doubling_decides_the_bound(step_seconds, doubling, bound):
    sweep = synthetic(step_seconds)
    assert sweep.last_doubling == (doubling if doubling is None else pytest.approx(doubling))
    assert sweep.knee_is_lower_bound is bound and sweep.top_proportional is not bound


def test_the_sweep_refuses_batches_that_are_not_positive_ints():
    model = Decoder(TINY).eval()
    for batches in ([], [0, 1], [1.5]):
        with pytest.raises(ValueError, match="positive ints"):
            decode_batch_sweep(model, batches, 8, hardware.get("H100 SXM"), "fp32")


def test_a_batch_out_of_memory_ends_the_sweep_only_when_asked():
    """The GPU reference sweeps up to the memory's cap: a batch whose cache cannot be
    allocated (here, for real, on the CPU) ends the sweep with the reason recorded."""
    model = Decoder(TINY).eval()
    hw = hardware.get("H100 SXM")
    huge = 2**40  # a KV cache of petabytes: the allocator refuses it
    with torch.no_grad():
        sweep = decode_batch_sweep(model, [1, 2, huge], 8, hw, "fp32", "cpu",
                                   min_run_time=0.001, max_run_time=0.01,
                                   stop_when_out_of_memory=True)  # fmt: skip
        assert sweep.batches == [1, 2] and set(sweep.step_iqr) == {1, 2}
        assert sweep.stopped.startswith(f"batch {huge:,} ran out of memory")
        with pytest.raises(RuntimeError, match="can't allocate memory"):
            decode_batch_sweep(model, [1, huge], 8, hw, "fp32", "cpu", min_run_time=0.001,
                               max_run_time=0.01)  # fmt: skip
        with pytest.raises(RuntimeError, match="no batch ran: batch"):
            decode_batch_sweep(model, [huge], 8, hw, "fp32", "cpu",
                               stop_when_out_of_memory=True)  # fmt: skip


# ----- what section 2 reads off the record: throughput, and the figure's moves -----------------


def test_throughput_readings_follow_the_step_times():
    sweep = synthetic({1: 0.010, 2: 0.011, 4: 0.030, 8: 0.040})
    assert sweep.tokens_per_s == {1: 100.0, 2: 2 / 0.011, 4: 4 / 0.030, 8: 200.0}
    assert sweep.throughput_gain == pytest.approx(2.0) and sweep.tpot_rise == pytest.approx(4.0)
    # any swept range: batch 2 to 8 is 181.8 -> 200 tokens/s, 11 -> 40 ms
    assert sweep.rises(2, 8) == pytest.approx((200 / (2 / 0.011), 0.040 / 0.011))
    with pytest.raises(ValueError, match="batch 3 was not swept"):
        sweep.rises(1, 3)
    # 8 (200/s) beats 2 (181.8/s), which beats 4 (133.3/s) and 1 (100/s)
    assert sweep.by_throughput == [8, 2, 4, 1]
    assert sweep.runner_up_behind == pytest.approx(1 - (2 / 0.011) / 200)
    assert synthetic({1: 0.010}).runner_up_behind is None
    assert synthetic({1: 0.010, 2: 0.02}).over_roofline == {1: 1.0, 2: 1.0}


def test_a_point_moves_up_right_or_diagonally_by_its_larger_factor():
    flat = point_move({1: 0.010, 2: 0.010}, 1, 2)  # step flat: throughput doubles
    assert (flat.tpot_rise, flat.rate_rise, flat.way) == (1.0, 2.0, "up")
    assert flat.margin == pytest.approx(1.0)
    steep = point_move({1: 0.010, 2: 0.020}, 1, 2)  # step doubles: throughput flat
    assert steep.way == "right"
    # TPOT × 1.4 and throughput × 2/1.4 = 1.43: within 10% of each other
    close = point_move({1: 0.010, 2: 0.014}, 1, 2)
    assert close.margin == pytest.approx((2 / 1.4) / 1.4 - 1) and close.way == "diagonal"
    assert point_move({1: 0.010, 2: 0.014}, 1, 2, band=0.01).way == "up"


def test_moves_score_the_steps_that_are_not_diagonal_and_name_those_astray():
    """Roofline: up, up, right; measured: up, diagonal, up. Two steps scored, one astray."""
    predicted = {1: 0.010, 2: 0.010, 4: 0.010, 8: 0.020}
    measured = {1: 0.010, 2: 0.011, 4: 0.0155, 8: 0.016}
    sweep = DecodeSweep("synthetic", "fp32", 64, 1, measured, predicted)
    moves = sweep.moves()
    assert [(s.a, s.b) for s in moves.steps] == [(1, 2), (2, 4), (4, 8)]
    assert [s.roofline.way for s in moves.steps] == ["up", "up", "right"]
    assert [s.measured.way for s in moves.steps] == ["up", "diagonal", "up"]
    assert [(s.a, s.b) for s in moves.scored] == [(1, 2), (4, 8)]
    assert [(s.a, s.b) for s in moves.astray] == [(4, 8)] and moves.agreeing == 1
    assert [(s.a, s.b) for s in moves.diagonal] == [(2, 4)]
    table = moves.table().splitlines()
    assert len(table) == 1 + 3 + 1 and table[1].startswith("   1 → 2  ")
    assert table[-1] == ("the measured points move the roofline's way in 1 of 2 scored steps; "
                         "not at 4 → 8; diagonal (margin within 10%), not scored: 2 → 4")
    # a band of 0: nothing diagonal, every step scored
    assert len(sweep.moves(band=0.0).scored) == 3
    with pytest.raises(ValueError, match="band"):
        sweep.moves(band=1.5)
