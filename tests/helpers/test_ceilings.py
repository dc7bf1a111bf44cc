"""helpers.measuring.ceilings: measured ceilings on small real workloads, and argument checks."""

from __future__ import annotations

import json
import math

import pytest
import torch

from helpers.counting import hardware
from helpers.counting.roofline import roofline_time
from helpers.measuring import ceilings, kernels, machine

SMALL_GEMMS = [(128, 128, 128), (256, 64, 128)]


@pytest.mark.parametrize(
    "name, chip",
    [("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
     ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
     ("NVIDIA L4", "L4"),
     ("NVIDIA L40S", "L40S"), ("AMD Instinct MI300X", "MI300X"), ("AMD EPYC", None),
     ("Apple M2 Pro", None)],
)  # fmt: skip
def test_datasheet_chip_matching(name, chip):
    assert ceilings.datasheet_chip(name) == chip


def test_matmul_ceiling_is_the_best_of_the_shapes_tried():
    flops, shape, kernel = ceilings.measure_matmul_ceiling("cpu", "fp32", shapes=SMALL_GEMMS)
    assert shape in SMALL_GEMMS
    m, _, _ = shape
    assert kernel in {k.name for k in kernels.linear_kernels("cpu", "fp32", m)}
    assert math.isfinite(flops) and flops > 0


def test_quick_mode_skips_a_default_gemm_too_slow_for_its_budget(monkeypatch):
    """A GEMM whose one call would take over QUICK_CALL_S at the rate the smaller one reached
    is not timed: no CPU runs a 64³ GEMM at the 2.2 TFLOP/s that 8192³ in 0.5 s needs."""
    monkeypatch.setattr(ceilings, "gemm_shapes",
                        lambda device, quick: [(8192, 8192, 8192), (64, 64, 64)])
    timed = []
    real = kernels.time_fastest
    monkeypatch.setattr(kernels, "time_fastest",
                        lambda candidates, *a, **k: timed.append(candidates[0][1][0][0].shape)
                        or real(candidates, *a, **k))  # fmt: skip
    _, shape, _ = ceilings.measure_matmul_ceiling("cpu", "fp32", quick=True)
    assert shape == (64, 64, 64) and timed == [(64, 64)]
    # given shapes, or the full mode, every GEMM is timed
    ceilings.measure_matmul_ceiling("cpu", "fp32", quick=True, shapes=[(64, 64, 64), (96, 64, 64)])
    assert timed[1:] == [(64, 64), (96, 64)]


def test_steady_is_an_iqr_under_half_the_median():
    assert ceilings.STEADY_SPREAD == 0.5
    assert ceilings.steady(1.0, 0.49) and not ceilings.steady(1.0, 0.5)
    assert not ceilings.steady(1.29e-3, 14.0e-3)  # a two-mode sample: IQR 11x the median
    assert not ceilings.steady(0.0, 0.0)


def test_bandwidth_is_positive_and_finite():
    bandwidth = ceilings.measure_bandwidth("cpu", nbytes=16 * 2**20)
    assert math.isfinite(bandwidth) and bandwidth > 0


@pytest.mark.parametrize("llc", ["8MiB", "300MiB", "1GiB"])
def test_bandwidth_buffer_is_at_least_twice_the_cache(monkeypatch, llc):
    from helpers.measuring import timing

    monkeypatch.setenv(machine.LLC_ENV, llc)
    cache = machine.last_level_cache_bytes("cpu")
    quarter_of_memory = machine.device_memory_bytes("cpu") // 4
    quick = ceilings.bandwidth_buffer_bytes("cpu", quick=True)
    full = ceilings.bandwidth_buffer_bytes("cpu", quick=False)
    assert quick >= min(max(timing.FLUSH_FACTOR * cache, 256 * 2**20), quarter_of_memory)
    assert full >= min(max(2 * timing.FLUSH_FACTOR * cache, 2**30), quarter_of_memory)
    assert max(quick, full) <= quarter_of_memory


@pytest.fixture(scope="module")
def measured() -> ceilings.Ceilings:
    return ceilings.measure_ceilings("cpu", ("fp32", "bf16"), shapes=SMALL_GEMMS,
                                     bandwidth_bytes=16 * 2**20)  # fmt: skip


@pytest.mark.cache_size
def test_measuring_can_show_a_bar_that_ends_full(capsys):
    ceilings.measure_ceilings("cpu", ("fp32",), shapes=SMALL_GEMMS[:1],
                              bandwidth_bytes=2**20, progress=True)  # fmt: skip
    bar = capsys.readouterr().err  # tqdm outside a notebook draws on stderr
    assert "ceilings: 100%" in bar and "2/2" in bar, bar
    ceilings.measure_ceilings("cpu", ("fp32",), shapes=SMALL_GEMMS[:1], bandwidth_bytes=2**20)
    assert capsys.readouterr().err == ""  # no bar by default


@pytest.mark.cache_size
def test_measured_ceilings_are_labelled_and_complete(measured):
    assert measured.label == "measured"
    assert set(measured.matmul_flops) == set(measured.matmul_shape) == {"fp32", "bf16"}
    assert set(measured.matmul_kernel) == {"fp32", "bf16"}
    assert measured.torch_version == torch.__version__
    assert measured.threads == torch.get_num_threads()
    assert measured.date.startswith("20") and "T" in measured.date
    assert measured.datasheet_chip is None  # a CPU is not in the datasheet table
    assert measured.ridge("bf16") == measured.matmul_flops["bf16"] / measured.bandwidth
    with pytest.raises(ValueError, match="no measured ceiling for 'fp16'"):
        measured.peak("fp16")


@pytest.mark.cache_size
def test_ceilings_serialize_to_json(measured):
    data = json.loads(json.dumps(measured.to_dict()))
    assert data["label"] == "measured"
    assert data["bandwidth"] == measured.bandwidth


@pytest.mark.cache_size
def test_ceilings_as_hardware_spec_feed_the_roofline(measured):
    spec = measured.as_hardware_spec()
    assert isinstance(spec, hardware.HardwareSpec)
    flops, nbytes = 1e9, 1e6
    expected = max(flops / measured.peak("fp32"), nbytes / measured.bandwidth)
    assert roofline_time(flops, nbytes, spec, "fp32").seconds == pytest.approx(expected)


@pytest.mark.cache_size
def test_bandwidth_ceiling_is_the_best_measurement(measured):
    assert ceilings.with_best_bandwidth(measured, [measured.bandwidth / 2]) is measured
    better = ceilings.with_best_bandwidth(measured, [measured.bandwidth / 2,
                                                     measured.bandwidth * 1.5])  # fmt: skip
    assert better.bandwidth == measured.bandwidth * 1.5
    assert better.bandwidth_method.endswith("best of 3 streams during the run")
    assert better.matmul_flops == measured.matmul_flops and better.date == measured.date


@pytest.mark.cache_size
def test_matmul_ceiling_is_the_best_matmul_seen(measured):
    assert ceilings.with_best_matmul(measured, "fp32", measured.peak("fp32") / 2, (8, 8, 8),
                                     "torch.mm") is measured  # fmt: skip
    better = ceilings.with_best_matmul(measured, "fp32", measured.peak("fp32") * 2,
                                       (384, 384, 384), "torch.mm")  # fmt: skip
    assert better.peak("fp32") == measured.peak("fp32") * 2
    assert better.matmul_shape["fp32"] == (384, 384, 384)
    assert better.matmul_kernel["fp32"] == "torch.mm"
    assert better.peak("bf16") == measured.peak("bf16") and better.bandwidth == measured.bandwidth


def test_gemms_env_replaces_the_ceiling_gemms(monkeypatch):
    monkeypatch.delenv(ceilings.GEMMS_ENV, raising=False)
    assert (2048, 2048, 2048) in ceilings.gemm_shapes("cpu", quick=True)  # unset: defaults
    monkeypatch.setenv(ceilings.GEMMS_ENV, "1024x1024x1024, 512x2048x256")
    both = [(1024, 1024, 1024), (512, 2048, 256)]
    assert ceilings.gemm_shapes("cpu", quick=True) == ceilings.gemm_shapes("cpu", False) == both
    monkeypatch.setenv(ceilings.GEMMS_ENV, "64x32x16")
    _, shape, _ = ceilings.measure_matmul_ceiling("cpu", "fp32")
    assert shape == (64, 32, 16)


@pytest.mark.parametrize("value", ["1024", "1024x1024", "0x8x8", "8x8x8,", "8*8*8", "8x8x8x8"])
def test_gemms_env_refuses_what_is_not_a_list_of_shapes(monkeypatch, value):
    monkeypatch.setenv(ceilings.GEMMS_ENV, value)
    with pytest.raises(ValueError, match=f"{ceilings.GEMMS_ENV}=.*not a list of GEMMs"):
        ceilings.gemm_shapes("cpu", quick=True)


# --- what the rest of a run's timings do to the ceilings (chapter 4, section 7) ------------

MiB = 2**20
HAND = ceilings.Ceilings("cpu", "hand-made", "2.x", "2026-12-06T00:00", 2, {"fp32": 100e9},
                         {"fp32": (1024, 1024, 1024)}, 20e9, "x.sum() over 256 MiB", 32 * MiB,
                         8 * 2**30)  # fmt: skip
BUSY = 1000.0  # other processes' cores: more than any machine leaves a timing's threads


def test_matmuls_seen_raise_the_ceiling_only_where_comparable():
    # 2·512³ FLOPs = 268,435,456: 1.342 ms is 200 GFLOP/s, 2× the ceiling; 5.369 ms is 50.
    shape, fast, slow = (512, 512, 512), 2 * 512**3 / 200e9, 2 * 512**3 / 50e9
    seen = [ceilings.Seen("on 1 thread", 1, 0.0, "fp32", shape, fast),
            ceilings.Seen("under load", 2, BUSY, "fp32", shape, fast),
            ceilings.Seen("slower", 2, None, "fp32", shape, slow),
            ceilings.Seen("faster", 2, 0.0, "fp32", shape, fast)]
    raised, lines = ceilings.raise_by_matmuls(HAND, seen)
    assert raised.peak("fp32") == pytest.approx(200e9)
    assert raised.matmul_shape["fp32"] == shape and raised.matmul_kernel["fp32"] == "faster"
    assert lines == [
        "  on 1 thread, fp32, 512×512×512: 0.200 TFLOP/s on 1 thread; not counted: 1 thread, "
        "the ceilings 2",
        "  under load, fp32, 512×512×512: 0.200 TFLOP/s on 2 threads; not counted: timed under "
        "load (1000.0 other cores busy)",
        "  slower, fp32, 512×512×512: 0.050 TFLOP/s on 2 threads; counted: below the ceiling GEMM",
        "  faster, fp32, 512×512×512: 0.200 TFLOP/s on 2 threads; counted: above the ceiling "
        "GEMM, so it raises the ceiling"]
    assert ceilings.raise_by_matmuls(HAND, seen[:3])[0] is HAND  # nothing comparable beat it


def test_the_bandwidth_roof_is_the_best_stream_past_twice_the_cache():
    ceiling = ceilings.Seen("the ceiling's x.sum()", 2, 0.0, rate=20e9)
    others = [ceilings.Seen("sweep 8 MiB", 2, 0.0, working_set=8 * MiB, rate=90e9),  # cached
              ceilings.Seen("sweep 64 MiB", 2, 0.0, working_set=64 * MiB, rate=30e9),
              ceilings.Seen("sweep 128 MiB", 2, BUSY, working_set=128 * MiB, rate=24e9),
              ceilings.Seen("GEMV, 1 thread", 1, 0.0, working_set=256 * MiB, rate=50e9)]
    # The sweep's streaming points start at 128 MiB: 64 MiB is past twice the cache (64 MiB)
    # but before the edge, so it does not count, however fast.
    roof = ceilings.bandwidth_roof(HAND, ceiling, [128 * MiB, 256 * MiB], 128 * MiB, others)
    assert roof.past == 128 * MiB and list(roof.streams) == ["the ceiling's x.sum()",
                                                             "sweep 128 MiB"]
    assert [(s.where, why) for s, why in roof.left_out] == [
        ("sweep 64 MiB", "under 128 MiB"), ("GEMV, 1 thread", "1 thread, the ceilings 2")]
    assert roof.best == "sweep 128 MiB" and roof.bandwidth == 24e9
    assert roof.raised and roof.under_load  # the best was timed under load: a lower bound
    assert roof.ceilings.bandwidth == 24e9 and roof.ceilings.ridge("fp32") == 100e9 / 24e9
    report = roof.report().splitlines()
    assert report[0] == ("streams counted: working sets from 128 MiB on, the sweep's first "
                         "streaming point at least twice the 32 MiB cache")
    assert report[1].endswith("30.0 GB/s  not counted: under 128 MiB")
    assert report[-2] == ("bandwidth roof: 24.0 GB/s, from sweep 128 MiB, 1.20× the ceiling's "
                          "x.sum(): the ceiling is raised to it; timed under load: a lower bound")
    assert report[-1] == "ridge on the raised roof: 4.2 FLOP/B (fp32)"
    # No streaming point past twice the cache: the sweep's edge sets where counting starts.
    # The 8 MiB point, under it and under twice the cache, is left out without a word.
    roof = ceilings.bandwidth_roof(HAND, ceiling, [48 * MiB], 48 * MiB, others[:1])
    assert roof.past == 48 * MiB and roof.best == "the ceiling's x.sum()" and not roof.raised
    assert roof.ceilings is HAND and "not counted" not in roof.report()
    roof = ceilings.bandwidth_roof(HAND, ceiling, [48 * MiB], 48 * MiB, others[:2])
    assert roof.best == "sweep 64 MiB" and roof.raised and not roof.under_load
