"""helpers.bench: shapes, FLOP/byte accounting, summaries, and the CLI end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from helpers import bench, kernels, models
from helpers.ceilings import Ceilings

# Made-up ceilings for the pure functions: round numbers, ridge at 10 FLOP/B in fp32.
FAKE = Ceilings(
    device="cpu", device_name="test CPU", torch_version=torch.__version__,
    date="2026-01-01T00:00:00+00:00", threads=1,
    matmul_flops={"fp32": 1e11, "bf16": 4e11}, matmul_shape={"fp32": (1, 1, 1),
                                                             "bf16": (1, 1, 1)},
    bandwidth=1e10, bandwidth_method="test", cache_bytes=2**20, memory_bytes=2**34,
)  # fmt: skip


def test_qwen_7b_layer_shapes_group_identical_matmuls():
    shapes = bench.layer_shapes(models.get("Qwen2.5-7B"))
    got = {s.label: (s.k, s.n) for s in shapes}
    assert got == {"q,o": (3584, 3584), "k,v": (3584, 512), "gate,up": (3584, 18944),
                   "down": (18944, 3584)}  # fmt: skip
    assert sum(s.count for s in shapes) == 7


def test_scaled_shapes_divide_every_dimension():
    got = {s.label: (s.k, s.n) for s in bench.layer_shapes(models.get("Qwen2.5-7B"), 8)}
    assert got == {"q,o": (448, 448), "k,v": (448, 64), "gate,up": (448, 2368),
                   "down": (2368, 448)}  # fmt: skip


def test_token_counts():
    assert bench.token_counts() == [2**i for i in range(13)]
    assert bench.token_counts(4096)[-1] == 4096
    assert bench.token_counts(5) == [1, 2, 4]
    assert bench.token_counts(1) == [1]
    with pytest.raises(ValueError):
        bench.token_counts(0)


def test_scales_keep_full_sizes_unless_memory_or_a_quick_cpu_run_needs_less():
    cfg = models.get("Qwen2.5-7B")
    tokens = bench.token_counts()
    assert set(bench.choose_scales(cfg, ["fp32"], tokens, FAKE, quick=False).values()) == {1}

    quick = bench.choose_scales(cfg, ["fp32"], tokens, FAKE, quick=True)
    assert quick[1] == 1  # decode-shaped GEMMs keep the real sizes
    assert list(quick.values()) == sorted(quick.values())  # only the prefill end shrinks
    for m, scale in quick.items():
        largest = max(bench.matmul_flops(m, s.k, s.n) for s in bench.layer_shapes(cfg, scale))
        assert largest <= bench.QUICK_CPU_GEMM_FLOPS
        if scale > 1:  # the smallest scale that fits the budget
            bigger = bench.layer_shapes(cfg, scale // 2)
            assert max(bench.matmul_flops(m, s.k, s.n) for s in bigger) > bench.QUICK_CPU_GEMM_FLOPS

    small = replace(FAKE, memory_bytes=2**30)  # 256 MiB budget: full-size gate does not fit
    scale = bench.choose_scales(cfg, ["fp32"], [4096], small, quick=False)[4096]
    assert scale > 1 and scale & (scale - 1) == 0
    biggest = max(bench.layer_shapes(cfg, scale), key=lambda s: s.k * s.n)
    assert bench._memory_needed(biggest, 4096, "fp32", small.cache_bytes, "cpu") <= 2**30 // 4
    # a CPU holds each weight copy in three forms (plain, oneDNN, packed), a GPU in one
    cpu, gpu = (bench._memory_needed(biggest, 1, "fp32", 2**25, device)
                for device in ("cpu", "cuda"))  # fmt: skip
    forms = len({k.prepare for k in kernels.linear_kernels("cpu", "fp32")})
    copies = bench.timing.copies_to_exceed_cache(
        bench.linear_bytes(1, biggest.k, biggest.n, "fp32"), 2**25
    )
    assert cpu - gpu == (forms - 1) * copies * 4 * biggest.k * biggest.n
    # a weight larger than the cache is a single copy, but held whole in every form
    gate = bench.LinearShape(("gate", "up"), 3584, 18944)
    assert bench._memory_needed(gate, 1, "fp32", 2**25, "cpu") >= forms * 4 * 3584 * 18944


@pytest.mark.parametrize("dtype, b", [("fp32", 4), ("bf16", 2)])
def test_measured_point_accounting(dtype, b):
    shape = bench.LinearShape(("up",), k=96, n=80)
    weights = [torch.randn(80, 96).to(torch.bfloat16 if b == 2 else torch.float32)]
    p = bench.measure_point(shape, 3, dtype, weights, FAKE)
    assert (p.m, p.k, p.n, p.dtype, p.shape, p.count) == (3, 96, 80, dtype, "up", 1)
    assert p.flops == 2 * 3 * 96 * 80
    assert p.bytes == b * (3 * 96 + 96 * 80 + 3 * 80)
    assert p.intensity == pytest.approx(p.flops / p.bytes)
    assert p.achieved_flops == pytest.approx(p.flops / p.median_s)
    assert p.achieved_bandwidth == pytest.approx(p.bytes / p.median_s)
    compute, memory = p.flops / FAKE.peak(dtype), p.bytes / FAKE.bandwidth
    assert p.predicted_s == pytest.approx(max(compute, memory))
    assert p.bound == ("compute" if compute >= memory else "memory")
    assert p.prediction_error == pytest.approx(p.predicted_s / p.median_s - 1)
    offered = [k.name for k in kernels.linear_kernels("cpu", dtype, 3)]
    assert p.kernel in offered and set(p.race_s) == set(offered)
    assert p.race_s[p.kernel] == min(p.race_s.values())


def test_bound_follows_the_measured_ridge():
    shape = bench.LinearShape(("x",), k=64, n=64)
    weights = [torch.randn(64, 64)]
    assert bench.measure_point(shape, 1, "fp32", weights, FAKE).bound == "memory"
    assert bench.measure_point(shape, 64, "fp32", weights, FAKE).bound == "compute"


def _point(dtype, m, count, flops, nbytes, median_s, predicted_s):
    return bench.SweepPoint(
        dtype=dtype,
        shape="s",
        count=count,
        scale=1,
        m=m,
        k=1,
        n=1,
        flops=flops,
        bytes=nbytes,
        intensity=flops / nbytes,
        median_s=median_s,
        iqr_s=0.0,
        min_s=median_s,
        max_s=median_s,
        samples=4,
        achieved_flops=flops / median_s,
        achieved_bandwidth=nbytes / median_s,
        predicted_s=predicted_s,
        prediction_error=predicted_s / median_s - 1,
        bound="memory",
    )


def test_summary_weights_shapes_by_use():
    points = [
        _point("fp32", 1, 2, 1e6, 1e8, 0.01, 0.01),  # two of these per layer
        _point("fp32", 1, 1, 1e6, 2e8, 0.04, 0.02),
        _point("fp32", 2048, 1, 4e10, 1e8, 1.0, 0.4),
        _point("fp32", 64, 1, 1.0, 1.0, 9.9, 9.9),  # neither decode nor prefill: ignored
    ]
    summary = bench.summarize(points, FAKE)["fp32"]
    # decode: 4e8 B in 0.06 s over 1e10 B/s; predicted 0.04 s
    assert summary["decode_bandwidth_fraction"] == pytest.approx(4e8 / 0.06 / 1e10)
    assert summary["decode_prediction_error"] == pytest.approx(0.04 / 0.06 - 1)
    assert summary["prefill_flops_fraction"] == pytest.approx(0.4)
    assert summary["prefill_prediction_error"] == pytest.approx(-0.6)


def test_dtype_lists_accept_repeats_and_commas():
    assert bench._dtype_list(None) == ["fp32", "bf16"]
    assert bench._dtype_list(["bf16,fp32", "bf16"]) == ["bf16", "fp32"]


@pytest.mark.parametrize(
    "args, message",
    [(["--model", "GPT-9"], "unknown model 'GPT-9'"),
     (["--dtype", "fp8"], "unknown dtype 'fp8'"),
     (["--dtype", "fp32,int3"], "unknown dtype 'int3'"),
     (["--device", "tpu"], "'tpu'"),
     (["--scale", "0"], "scale must be at least 1"),
     (["--pairs", "0"], "pairs must be at least 1"),
     (["--pairs", "3", "--dtype", "fp32,fp9"], "unknown dtype 'fp9'")],
)  # fmt: skip
def test_bad_arguments_exit_non_zero_naming_the_problem(args, message, capsys, tmp_path):
    assert bench.main(["--quick", "--out", str(tmp_path), "--device", "cpu", *args]) != 0
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # failed before measuring or writing anything


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_without_one(capsys, tmp_path):
    assert bench.main(["--device", "cuda", "--out", str(tmp_path)]) != 0
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_end_to_end_writes_json_and_png(tmp_path):
    """The real command in quick mode, shapes scaled down 64× and m ≤ 4 to keep it short."""
    result = subprocess.run(
        [sys.executable, "-m", "helpers.bench", "--device", "cpu", "--quick", "--dtype", "fp32",
         "--scale", "64", "--max-tokens", "4", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=900,  # a hang guard, not a speed test
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "bench_cpu.json").read_text())
    assert data["ceilings"]["label"] == "measured"
    assert data["device"] == "cpu" and data["torch_version"] == torch.__version__
    assert data["scales"] == {"1": 64, "2": 64, "4": 64} and data["tokens"] == [1, 2, 4]
    assert len(data["points"]) == 4 * 3  # 4 distinct shapes × 3 token counts
    for p in data["points"]:
        assert p["flops"] == 2 * p["m"] * p["k"] * p["n"] and p["scale"] == 64
        assert p["median_s"] > 0 and p["bound"] in ("memory", "compute")
    assert set(data["summary"]["fp32"]) == {"decode_bandwidth_fraction",
                                            "decode_prediction_error"}  # fmt: skip
    assert (tmp_path / "roofline_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "q,o" in result.stdout and "bandwidth ceiling" in result.stdout
    before, after = data["bandwidth_before_and_after_sweep"]
    assert data["ceilings"]["bandwidth"] == max(before, after) > 0
    for p in data["points"]:  # predicted from the final ceilings
        memory_s = p["bytes"] / data["ceilings"]["bandwidth"]
        compute_s = p["flops"] / data["ceilings"]["matmul_flops"]["fp32"]
        assert p["predicted_s"] == pytest.approx(max(memory_s, compute_s))
    assert "the ceiling is the best" in result.stdout
    assert {p["kernel"] for p in data["points"]} <= {"eager", "onednn", "packed"}


def test_predict_reprices_a_point_from_new_ceilings():
    point = _point("fp32", 1, 1, flops=2e6, nbytes=4e6, median_s=1e-3, predicted_s=0.0)
    priced = bench.predict(point, FAKE)
    assert priced.predicted_s == pytest.approx(4e6 / FAKE.bandwidth) and priced.bound == "memory"
    faster = bench.predict(point, replace(FAKE, bandwidth=2 * FAKE.bandwidth))
    assert faster.predicted_s == pytest.approx(priced.predicted_s / 2)
    assert faster.prediction_error == pytest.approx(faster.predicted_s / point.median_s - 1)
    assert faster.median_s == point.median_s  # the measurement is untouched


def test_remeasured_bandwidth_raises_the_ceiling_and_re_predicts():
    slow = replace(FAKE, bandwidth=1.0)  # any real measurement beats 1 B/s
    point = bench.predict(_point("fp32", 1, 1, flops=2e6, nbytes=4e6, median_s=1e-3,
                                 predicted_s=0.0), slow)  # fmt: skip
    points, ceilings, again = bench.remeasure_bandwidth([point], slow)
    assert ceilings.bandwidth == again > 1.0
    assert points[0].predicted_s == pytest.approx(4e6 / again)
    assert points[0].predicted_s < point.predicted_s


def test_paired_decode_alternates_stream_and_matmul(monkeypatch):
    calls = []
    real_call_seconds = bench.timing.call_seconds

    def recording_call_seconds(fn, args, device="cpu"):
        calls.append("stream" if fn is torch.sum else "matmul")
        return real_call_seconds(fn, args, device)

    monkeypatch.setattr(bench.timing, "call_seconds", recording_call_seconds)
    shape = bench.LinearShape(("gate", "up"), 256, 1024)
    kernel, rates = bench.paired_decode(shape, "fp32", "cpu", pairs=5)
    assert kernel in {k.name for k in kernels.linear_kernels("cpu", "fp32", 1)}
    assert calls[-10:] == ["stream", "matmul"] * 5  # after one warm-up call of each
    assert len(rates) == 5 and rates == sorted(rates)
    assert all(stream > 0 and matmul > 0 for stream, matmul in rates)


def test_paired_decode_refuses_no_pairs():
    with pytest.raises(ValueError, match="pairs must be at least 1"):
        bench.paired_decode(bench.LinearShape(("q",), 64, 64), "fp32", "cpu", pairs=0)


def test_pairs_are_grouped_from_the_slowest_stream_to_the_fastest():
    rates = [(s * 1e9, s * 0.5e9) for s in (30, 10, 20, 40, 50, 60, 70)]  # matmul = half
    lines = bench.format_pairs("title", rates, groups=3).splitlines()
    assert lines[0] == "title" and "matmul/stream" in lines[1]
    rows = [line.split() for line in lines[2:]]
    assert [row[0] for row in rows] == ["2", "3", "2"]  # 7 pairs in 3 near-equal groups
    assert [row[1] for row in rows] == ["15.0", "40.0", "65.0"]  # median stream GB/s
    assert [row[2] for row in rows] == ["7.5", "20.0", "32.5"]
    assert {row[3] for row in rows} == {"50%"}
    assert len(bench.format_pairs("t", rates[:2], groups=5).splitlines()) == 2 + 2


def test_cli_pairs_prints_one_table_per_dtype(capsys, tmp_path):
    assert bench.main(["--pairs", "4", "--device", "cpu", "--model", "Qwen2.5-0.5B",
                       "--dtype", "fp32", "--out", str(tmp_path)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "Qwen2.5-0.5B gate,up (896x4864), m=1, fp32" in out and "matmul/stream" in out
    assert not list(tmp_path.iterdir())  # a diagnosis, not a results file
