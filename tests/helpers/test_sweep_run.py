"""helpers.measuring.sweep_run: chapter 5's whole sweep as one call, run for real on this CPU at
a tiny size, and the record it returns."""

from __future__ import annotations

import json

import pytest

from helpers.counting import models
from helpers.measuring import ceilings, machine, sweep, sweep_record, sweep_run


@pytest.fixture(scope="module")
def run():
    """Qwen2.5-0.5B's four shapes at m = 1 and 2, fp32 and bf16, quick, every weight divided by
    8, the matmul ceiling timed on one small GEMM (``ceilings.GEMMS_ENV``), three
    stream-and-matmul pairs per dtype: every step of the experiment, in seconds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ceilings.GEMMS_ENV, "256x256x256")
        patch.setenv(machine.LLC_ENV, "8MiB")
        return sweep_run.run_sweep("cpu", ("fp32", "bf16"), model="Qwen2.5-0.5B", quick=True,
                                   scale=8, max_tokens=2, progress=False, pairs=3,
                                   pair_groups=1)  # fmt: skip


@pytest.mark.slow
def test_every_dtype_shape_and_token_count_is_measured(run):
    shapes = sweep.layer_shapes(models.get("Qwen2.5-0.5B"))
    assert (run.model, run.dtypes, run.tokens, run.quick) == (
        "Qwen2.5-0.5B", ("fp32", "bf16"), (1, 2), True)  # fmt: skip
    for dtype in run.dtypes:
        ours = [p for p in run.points if p.dtype == dtype]
        assert sorted((p.shape, p.m) for p in ours) == sorted(
            (s.label, m) for s in shapes for m in run.tokens)  # fmt: skip
        assert run.scales[dtype] == {m: dict.fromkeys((s.label for s in shapes), 8)
                                     for m in run.tokens}  # fmt: skip
        assert all(p.scale == 8 and p.median_s > 0 for p in ours)
    assert len(run.streams) == len(run.dtypes) + 1  # before, between dtypes, after
    assert run.bandwidth_before == run.initial.bandwidth == run.streams[0]
    assert run.bandwidth_after == run.streams[-1]
    assert run.bandwidth_drift == pytest.approx(run.streams[-1] / run.streams[0] - 1)
    assert run.drifted == (abs(run.bandwidth_drift) > sweep_run.BANDWIDTH_DRIFT)
    assert set(run.loads) == {"the ceilings", "the fp32 sweep", "the bf16 sweep", "the pairs",
                              "the remeasured ceilings"}  # fmt: skip
    assert set(run.pairs) == {"fp32", "bf16"}
    assert all(len(rates) == 3 for _, _, rates in run.pairs.values())


@pytest.mark.slow
def test_the_ceilings_are_the_best_rate_of_the_run(run):
    final, first = run.ceilings, run.initial
    steady = [p for p in run.points if ceilings.steady(p.median_s, p.iqr_s)]
    assert run.unsteady == [p for p in run.points if p not in steady]
    assert final.bandwidth >= max([*run.streams, *(p.achieved_bandwidth for p in steady)])
    for dtype in run.dtypes:
        assert final.peak(dtype) >= first.peak(dtype)
        assert final.peak(dtype) >= max(p.achieved_flops for p in steady if p.dtype == dtype)
    # no steady point above its own roofline (1e-9: the point that set a ceiling sits on it)
    record = run.record()
    assert sweep_record.points_above_roofline({**record, "points": [
        p for p in record["points"] if ceilings.steady(p["median_s"], p["iqr_s"])]},
        tolerance=1e-9) == []  # fmt: skip
    for p in run.points:  # every point predicted from the final ceilings
        assert p.predicted_s == pytest.approx(max(p.bytes / final.bandwidth,
                                                  p.flops / final.peak(p.dtype)))  # fmt: skip
    assert run.summary == sweep_record.summarize(list(run.points), final)
    setter = run.pair_setter
    assert (setter is not None) == any(
        final.bandwidth_method.startswith(label) for label in run.pair_labels.values())


@pytest.mark.slow
def test_the_record_round_trips_through_json(run):
    record = json.loads(json.dumps(run.record()))
    assert sweep_record.record_points(record) == list(run.points)
    assert sweep_record.record_ceilings(record).to_dict() == json.loads(
        json.dumps(run.ceilings.to_dict()))  # fmt: skip
    assert record["bandwidth_streams"] == list(run.streams)
    assert record["tokens"] == [1, 2] and record["dtypes"] == ["fp32", "bf16"]
    assert record["scales"]["bf16"]["2"] == run.scales["bf16"][2]
    assert record["model"] == "Qwen2.5-0.5B" and record["quick"] is True
    assert record["other_processes_cpu_share"] == run.others_share
    assert {"device", "device_name", "torch_version", "date", "cache_bytes", "shapes",
            "summary", "ceilings", "points"} <= set(record)  # fmt: skip


@pytest.mark.slow
def test_shortfalls_name_the_setter_and_the_misses(run):
    found = run.shortfalls
    assert list(found) == list(run.dtypes)
    for dtype, entry in found.items():
        shape = tuple(run.ceilings.matmul_shape[dtype])
        assert entry["shape"] == shape
        setter = entry["setter"]
        assert setter is None or (setter.dtype, (setter.m, setter.k, setter.n)) == (dtype, shape)
        share = sweep_record.SHORT_SHARE
        assert entry["decode"] == [p for p in run.points if p.dtype == dtype and p.m == 1
                                   and p.bound == "memory"
                                   and p.achieved_bandwidth < share * run.ceilings.bandwidth]
        assert entry["prefill"] == [] and entry["swept"] is False  # m ≤ 2: no prefill


def test_a_bad_argument_fails_before_anything_is_measured():
    for kwargs, message in [({"model": "GPT-9"}, "GPT-9"), ({"dtypes": ("fp9",)}, "fp9"),
                            ({"scale": 0}, "scale must be at least 1")]:  # fmt: skip
        args = {"device": "cpu", "dtypes": ("fp32",), **kwargs}
        with pytest.raises(ValueError, match=message):
            sweep_run.run_sweep(**args)
