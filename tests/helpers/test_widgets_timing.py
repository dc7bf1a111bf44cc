"""Chapter 4's cache sweep read (``helpers.measuring.cache_sweep``) and its explorer's callback:
measured
times in, points, table and figure out."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.measuring import (
    cache_sweep,
    timing,  # noqa: E402
)
from helpers.widgets import timing as widget  # noqa: E402
from helpers.widgets.timing import CacheControls  # noqa: E402

MiB = 2**20
LLC = 32 * MiB
COPIES = [1, 2, 4, 8, 16, 32, 64, 128]
# A made-up but typical curve: 90 GB/s while cached, 20 GB/s once past the cache.
GBPS = [90, 90, 90, 90, 80, 40, 20, 20]
SECONDS = [MiB / (g * 1e9) for g in GBPS]


def points():
    return cache_sweep.cache_points(COPIES, SECONDS, MiB)


def test_points_carry_working_set_bandwidth_and_time_per_byte():
    pts = points()
    assert [p.working_set_bytes for p in pts] == [c * MiB for c in COPIES]
    assert [p.apparent_bandwidth for p in pts] == pytest.approx([g * 1e9 for g in GBPS])
    assert pts[0].ns_per_byte == pytest.approx(1 / 90)


def test_default_view_one_buffer_overstates_bandwidth():
    view = widget.cache_view(points(), LLC)
    assert view.selected.copies == 1
    assert view.verdict.startswith("fits in the LLC")
    # Streaming = the largest working set's rate (128 MiB), not a rule's choice of points.
    assert view.streaming_bandwidth == pytest.approx(20e9)
    assert view.overstatement == pytest.approx(4.5)
    assert view.recommended_copies == timing.copies_to_exceed_cache(MiB, LLC) == 64


@pytest.mark.parametrize(
    ("copies", "start"),
    [(32, "fits in the LLC"), (33, None), (64, "at least 2 × the LLC"), (16, "fits")],
)
def test_verdict_follows_the_working_set(copies, start):
    if start is None:
        with pytest.raises(ValueError, match="no point with 33 copies"):
            widget.cache_view(points(), LLC, CacheControls(copies))
        return
    assert widget.cache_view(points(), LLC, CacheControls(copies)).verdict.startswith(start)


def test_between_llc_and_factor_is_partly_cached():
    pts = cache_sweep.cache_points([48], [MiB / 50e9], MiB)
    view = widget.cache_view(pts, LLC, CacheControls(48))
    assert view.verdict.startswith("past the LLC but under 2")


def test_factor_slider_moves_the_rule_not_the_streaming_reference():
    view = widget.cache_view(points(), LLC, CacheControls(1, factor=4.0))
    assert view.recommended_copies == 128
    assert view.streaming_bandwidth == pytest.approx(20e9)  # the 128 MiB point
    view = widget.cache_view(points(), LLC, CacheControls(1, factor=1.0))
    assert view.recommended_copies == 32
    assert view.streaming_bandwidth == pytest.approx(20e9)  # still the 128 MiB point


def test_no_point_past_the_rule_uses_the_largest():
    pts = cache_sweep.cache_points([1, 2], [MiB / 90e9, MiB / 60e9], MiB)
    assert widget.cache_view(pts, LLC).streaming_bandwidth == pytest.approx(60e9)


def test_streaming_from_is_where_the_curve_settles_whatever_the_reported_cache():
    # GBPS settles at 20 from 64 MiB (two times the 32 MiB cache) on.
    view = widget.cache_view(points(), LLC)
    assert cache_sweep.streaming_from(view.points).working_set_bytes == 64 * MiB
    # A cache reported 4x too large: the streaming rate is the largest point's, and the
    # measured edge is still 64 MiB, a quarter of the cache the machine reports.
    big = widget.cache_view(points(), 4 * LLC)
    assert cache_sweep.streaming_from(big.points).working_set_bytes == 64 * MiB
    # Within 10%: 21.5 GB/s counts as streaming against 20, 40 does not.
    near = cache_sweep.cache_points(COPIES, [MiB / (g * 1e9) for g in
                                        [90, 90, 90, 90, 80, 21.5, 20, 20]], MiB)
    assert cache_sweep.streaming_from(near).working_set_bytes == 32 * MiB


def test_streaming_rate_and_edge_do_not_follow_the_rule():
    # The 64 MiB point (2 × the cache) read 30% *slower* than the largest set: no cache served
    # it, so the edge stays where the fast points end (32 MiB) and the rate is 128 MiB's.
    slow = cache_sweep.cache_points(COPIES, [MiB / (g * 1e9) for g in
                                        [90, 90, 90, 90, 80, 21.5, 14, 20]], MiB)
    view = widget.cache_view(slow, LLC)
    assert view.streaming_bandwidth == pytest.approx(20e9)
    assert cache_sweep.streaming_from(view.points).working_set_bytes == 32 * MiB
    # A 64 MiB point 30% faster than the largest: the cache still helped at 2 × its size.
    fast = cache_sweep.cache_points(COPIES, [MiB / (g * 1e9) for g in
                                        [90, 90, 90, 90, 80, 40, 26, 20]], MiB)
    assert cache_sweep.streaming_from(fast).working_set_bytes == 128 * MiB


def test_at_working_set_brackets_a_size_on_the_curve():
    view = widget.cache_view(points(), LLC)
    below, above = cache_sweep.at_working_set(view.points, 20 * MiB)
    assert (below.working_set_bytes, above.working_set_bytes) == (16 * MiB, 32 * MiB)
    below, above = cache_sweep.at_working_set(view.points, 16 * MiB)
    assert below is above and below.working_set_bytes == 16 * MiB
    assert cache_sweep.at_working_set(view.points, 1)[0].copies == 1  # before the first point
    assert cache_sweep.at_working_set(view.points, 2**40)[1].copies == 128  # past the last


def test_table_marks_the_selected_row_and_states_the_rule():
    text = widget.cache_view(points(), LLC, CacheControls(8)).table()
    lines = text.splitlines()
    assert len(lines) == 1 + len(COPIES) + 2
    marked = [line for line in lines if line.endswith("◀")]
    assert len(marked) == 1 and marked[0].split()[0] == "8"
    assert "64 copies of 1 MiB" in lines[-1]
    assert "4.50 × the sweep's streaming 20.0 GB/s" in lines[-2]


def test_draw_plots_the_curve_and_the_reference_lines():
    fig, ax = plt.subplots()
    widget.draw_cache(ax, widget.cache_view(points(), LLC, CacheControls(4)))
    curve = ax.lines[0]
    assert list(curve.get_xdata()) == COPIES
    assert list(curve.get_ydata()) == pytest.approx(GBPS)
    assert ax.get_xscale() == "log"
    labels = [line.get_label() for line in ax.lines]
    assert "last-level cache" in labels and "2 × LLC (the rule)" in labels
    plt.close(fig)


def test_show_prints_the_table(capsys):
    widget.show_cache(points(), LLC, copies=2, factor=2.0)
    assert "◀" in capsys.readouterr().out
    plt.close("all")


def test_bad_input():
    with pytest.raises(ValueError):
        cache_sweep.cache_points([1, 2], [1e-5], MiB)
    with pytest.raises(ValueError):
        cache_sweep.cache_points([], [], MiB)
    with pytest.raises(ValueError):
        cache_sweep.cache_points([1], [1e-5], 0)
    with pytest.raises(ValueError):
        widget.cache_view([], LLC)


def test_sweep_plan_reaches_four_times_the_cache():
    buffer, copies = cache_sweep.sweep_plan("cpu", LLC)
    assert buffer == MiB
    assert copies == [1, 2, 4, 8, 16, 32, 64, 128]
    buffer, copies = cache_sweep.sweep_plan("cpu", 3 * MiB)
    assert copies[-1] * buffer >= 12 * MiB and copies[-2] * buffer < 12 * MiB


def test_cache_sweep_runs_until_the_curve_settles(capsys):
    # A real run on a small cache claimed: past 4 × the "LLC" the sweep goes on until a larger
    # working set confirms the edge, and the record's verdicts come from its own points.
    threads_before = torch.get_num_threads()
    run = cache_sweep.run_cache_sweep("cpu", 64 * 1024, min_run_time=0.01, progress=True)
    bar = capsys.readouterr().err
    assert "cache sweep" in bar, bar
    # Past its plan the bar grows with the sweep, and its last frame is full, never "n/?".
    last = bar.replace("\r", "\n").strip().splitlines()[-1]
    assert "100%" in last and "/?" not in bar, bar
    assert run.buffer_bytes == MiB and run.copies[0] == 1
    assert all(b == 2 * a for a, b in zip(run.copies, run.copies[1:], strict=False))
    assert run.points[-1].working_set_bytes >= 4 * 64 * 1024
    assert all(p.seconds > 0 for p in run.points)
    assert 1 <= run.threads <= torch.get_num_threads() == threads_before  # restored after
    at_limit = run.points[-1].working_set_bytes >= cache_sweep.MAX_LLC_MULTIPLE * 64 * 1024
    assert run.settled or at_limit
    if run.settled:
        assert run.edge.working_set_bytes < run.points[-1].working_set_bytes
        assert any("settled" in line for line in run.summary())
    assert all(p.apparent_bandwidth <= (1 + run.tolerance) * run.streaming_bandwidth
               for p in run.streaming)
    with pytest.raises(ValueError, match="llc_bytes"):
        cache_sweep.run_cache_sweep("cpu", 0)


def test_cache_sweep_record_reads_settling_from_its_points():
    def record(gbps):
        copies = [2**i for i in range(len(gbps))]
        pts = cache_sweep.cache_points(copies, [MiB / (g * 1e9) for g in gbps], MiB)
        return cache_sweep.CacheSweep("cpu", 32 * MiB, MiB, 2, tuple(pts))

    still_falling = record([80, 80, 80, 80, 70, 47, 36, 31])
    assert not still_falling.settled and still_falling.edge.copies == 128
    assert "not settled" in still_falling.summary()[-1]
    assert "no bound either way" in still_falling.summary()[-1]  # cache and fixed cost pull apart
    settled = record([80, 80, 80, 80, 70, 47, 36, 31, 25, 25])
    assert settled.settled and settled.edge.copies == 256
    assert [p.copies for p in settled.streaming] == [256, 512]
    assert settled.streaming_bandwidth == pytest.approx(25e9)


def test_time_rotating_cycles_through_every_input_set():
    seen = []
    seconds = timing.time_rotating(lambda x: seen.append(x), [(1,), (2,), (3,)], "cpu", 0.01)
    assert seconds > 0
    assert set(seen) == {1, 2, 3} and seen[:5] == [1, 2, 3, 1, 2]
    with pytest.raises(ValueError):
        timing.time_rotating(print, [])


def test_a_sweep_past_its_plan_ends_with_a_full_bar(monkeypatch, capsys):
    # A curve still moving at the planned end: the sweep goes on, and its bar grows with it
    # (a bar past its total would show "n/?" and never reach 100%, in the book too).
    _, planned = cache_sweep.sweep_plan("cpu", 3 * MiB)
    settle = 2 * planned[-1]

    def fake_time(fn, input_sets, device, min_run_time):
        return 1e-3 * (1.5 ** min(len(input_sets), settle).bit_length())  # slower each doubling

    monkeypatch.setattr(cache_sweep.timing, "time_rotating", fake_time)
    run = cache_sweep.run_cache_sweep("cpu", 3 * MiB, progress=True)
    assert run.copies[-1] > planned[-1]  # the sweep went past its plan
    bar = capsys.readouterr().err
    last = bar.replace("\r", "\n").strip().splitlines()[-1]
    assert f"{len(run.points)}/{len(run.points)}" in last and "100%" in last, last
    assert "/?" not in bar, bar


def test_the_measured_edge_outranks_the_rule_in_the_verdict():
    # 64 MiB is 2 × the cache, so the rule says memory; this run still read it 30% faster than
    # the largest set (its streaming edge is 128 MiB): the verdict follows the measurement.
    fast = cache_sweep.cache_points(COPIES, [MiB / (g * 1e9) for g in
                                        [90, 90, 90, 90, 80, 40, 26, 20]], MiB)
    assert widget.cache_view(fast, LLC, CacheControls(64)).verdict == (
        "at least 2 × the LLC, yet under this run's streaming edge (128 MiB): still partly cached")
    assert widget.cache_view(fast, LLC, CacheControls(128)).verdict.endswith("this times memory")
    # where the curve settles at the rule's size, the rule's verdict stands
    assert widget.cache_view(points(), LLC, CacheControls(64)).verdict == (
        "at least 2 × the LLC: this times memory")
