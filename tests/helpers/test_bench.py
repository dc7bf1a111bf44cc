"""helpers.programs.bench: the CLI end to end, its table, summary and pairs reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from helpers.measuring import ceilings, machine, sweep, sweep_record, timing
from helpers.measuring.ceilings import steady as steady_timing
from helpers.programs import bench


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


def _run_cli(tmp_path, llc, *args):
    """The real command in quick mode, fp32, the cache size overridden to ``llc``, its
    matmul ceiling measured on one GEMM (``ceilings.GEMMS_ENV``): these tests check what the
    run records, and the default GEMMs took 5 of its 14 s on a 2-core CPU."""
    result = subprocess.run(
        [sys.executable, "-m", "helpers.programs.bench", "--device", "cpu", "--quick",
         "--dtype", "fp32", "--out", str(tmp_path), "--no-progress", *args],
        capture_output=True, text=True, timeout=600,  # a hang guard, not a speed test
        env={**os.environ, machine.LLC_ENV: llc, ceilings.GEMMS_ENV: "512x512x512"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result, json.loads((tmp_path / "bench_cpu.json").read_text())


def _check_results(data, result, tmp_path, tokens, scale):
    assert data["ceilings"]["label"] == "measured"
    assert data["device"] == "cpu" and data["torch_version"] == torch.__version__
    labels = {"q,o", "k,v", "gate,up", "down"}
    assert data["scales"] == {"fp32": {str(m): dict.fromkeys(labels, scale) for m in tokens}}
    assert data["tokens"] == tokens
    assert len(data["points"]) == 4 * len(tokens)  # 4 distinct shapes
    for p in data["points"]:
        assert p["flops"] == 2 * p["m"] * p["k"] * p["n"] and p["scale"] == scale
        assert p["median_s"] > 0 and p["bound"] in ("memory", "compute")
        assert p["cache_defeat"] in ("rotate", "flush")
    assert {"decode_bandwidth_fraction", "decode_flops_fraction", "decode_bound",
            "decode_prediction_error",
            "decode_kernels"} == set(data["summary"]["fp32"])  # fmt: skip
    assert (tmp_path / "roofline_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "q,o" in result.stdout and "bandwidth ceiling" in result.stdout
    ceilings = data["ceilings"]
    # the ceiling is the best stream or steady point of the run (IQR under half the median),
    # and no steady point is above it
    steady = [p for p in data["points"] if steady_timing(p["median_s"], p["iqr_s"])]
    rates = data["bandwidth_streams"] + [p["achieved_bandwidth"] for p in steady]
    assert ceilings["bandwidth"] == max(rates) > 0
    # 1e-9: the point that set the bandwidth ceiling sits exactly on its roof, and
    # intensity × bandwidth rounds 1 ulp either side of its achieved FLOP/s
    assert sweep_record.points_above_roofline({**data, "points": steady}, tolerance=1e-9) == []
    for p in data["points"]:  # predicted from the final ceilings
        memory_s = p["bytes"] / ceilings["bandwidth"]
        compute_s = p["flops"] / ceilings["matmul_flops"]["fp32"]
        assert p["predicted_s"] == pytest.approx(max(memory_s, compute_s))
    assert "each ceiling is the best rate of the run" in result.stdout
    assert {p["kernel"] for p in data["points"]} <= {"eager", "onednn", "packed"}


@pytest.mark.slow
def test_cli_with_a_small_cache_rotates_and_flushes(tmp_path):
    """An 8 MiB cache at scale 8: the 4 MiB gate weight rotates among a few copies, the
    114 KB k,v weight would need over a hundred and is flushed instead."""
    result, data = _run_cli(tmp_path, "8MiB", "--scale", "8", "--max-tokens", "2")
    _check_results(data, result, tmp_path, [1, 2], 8)
    assert data["cache_bytes"] == 8 * 2**20
    method = {p["shape"]: p["cache_defeat"] for p in data["points"] if p["m"] == 1}
    assert method["gate,up"] == "rotate" and method["k,v"] == "flush"
    gate = next(p for p in data["points"] if p["shape"] == "gate,up" and p["m"] == 1)
    assert gate["copies"] * gate["bytes"] >= 2 * 8 * 2**20


@pytest.mark.slow
def test_cli_with_a_huge_cache_flushes_tiny_weights(tmp_path):
    """A 1 GiB cache with 66 KB weights (the case that once asked for thousands of copies,
    each packed): every point flushes, before each round of at most ``MAX_COPIES`` copies."""
    result, data = _run_cli(tmp_path, "1GiB", "--scale", "64", "--max-tokens", "1")
    _check_results(data, result, tmp_path, [1], 64)
    assert data["cache_bytes"] == 2**30
    rounds = {(p["cache_defeat"], p["copies"]) for p in data["points"]}
    assert rounds == {("flush", timing.MAX_COPIES)}  # 66 KB x 32 is far below half the cache
    assert f"flush x{timing.MAX_COPIES}" in result.stdout


def test_the_summary_names_what_set_each_ceiling_and_what_misses_one():
    from test_sweep import FAKE  # ceilings: 1e11 FLOP/s fp32, 1e10 B/s

    def point(shape, m, k, n, seconds, scale=1):
        flops, nbytes = 2 * m * k * n, 4 * (m * k + k * n + m * n)
        return sweep.SweepPoint(
            dtype="fp32", shape=shape, count=1, scale=scale, m=m, k=k, n=n, flops=flops,
            bytes=nbytes, intensity=flops / nbytes, median_s=seconds, iqr_s=0.0, min_s=seconds,
            max_s=seconds, samples=5, achieved_flops=flops / seconds,
            achieved_bandwidth=nbytes / seconds, predicted_s=0.0, prediction_error=0.0,
            bound="")  # fmt: skip

    gemm = point("down", 4096, 1024, 1024, 2 * 4096 * 1024 * 1024 / 1e11)  # on the ceiling
    thin = point("k,v", 4096, 448, 64, 2 * 4096 * 448 * 64 / 0.5e11, scale=8)  # 50% of it
    slow = point("q,o", 1, 1024, 1024, 4 * (1024 + 1024 * 1024 + 1024) / 0.7e10)  # 70%
    fast = point("down", 1, 1024, 1024, 4 * (1024 + 1024 * 1024 + 1024) / 0.95e10)
    ceilings = replace(FAKE, matmul_shape={"fp32": (4096, 1024, 1024)})
    (line,) = bench.shortfalls([gemm, thin, slow, fast], ceilings)
    assert "fp32 matmul ceiling set by the sweep's down at m=4096" in line
    # The label names the points it reads: from PREFILL_MIN_TOKENS, at the sizes timed.
    assert "under 90% of it, prefill (m>=1024, as timed): k,v m=4096 (scale 8) 50.0%;" in line
    assert line.endswith("decode: q,o 70.0%")
    # Shares to one decimal place: 89.7% reads as itself, never as the 90% it is under, and
    # 89.97% is rounded down, not up to 90.0%; any other share to the nearest tenth.
    near = point("gate,up", 4096, 1024, 1024, 2 * 4096 * 1024 * 1024 / 0.897e11, scale=8)
    (line,) = bench.shortfalls([gemm, near], ceilings)
    assert "prefill (m>=1024, as timed): gate,up m=4096 (scale 8) 89.7%;" in line
    nearer = replace(near, achieved_flops=0.8997e11)
    (line,) = bench.shortfalls([gemm, nearer], ceilings)
    assert "gate,up m=4096 (scale 8) 89.9%;" in line
    # Elsewhere to nearest, as chapter 5's layer table prints the same share: 89.38% is 89.4%.
    nearest = replace(near, achieved_flops=0.8938e11)
    (line,) = bench.shortfalls([gemm, nearest], ceilings)
    assert "gate,up m=4096 (scale 8) 89.4%;" in line
    sharp = replace(slow, achieved_bandwidth=0.5263e10)  # 52.63%: one decimal, not 52% or 53%
    (line,) = bench.shortfalls([gemm, sharp], ceilings)
    assert line.endswith("decode: q,o 52.6%")
    (line,) = bench.shortfalls([gemm, fast], replace(FAKE, matmul_shape={"fp32": (8, 8, 8)}))
    assert "set by the GEMM 8x8x8, no layer's shape" in line and line.endswith("decode: none")
    assert "prefill (m>=1024, as timed): none;" in line  # swept (m = 4096), none under 90%
    (line,) = bench.shortfalls([fast], FAKE)
    assert "prefill (m>=1024, as timed): not swept;" in line
    summary = bench.format_summary({}, FAKE, [gemm, fast]).splitlines()
    assert summary[-1] == bench.shortfalls([gemm, fast], FAKE)[0]  # the points' line, last
    # A compute-bound one-token point (2/b above the ridge) is held to the matmul ceiling, not
    # read as a bandwidth shortfall.
    gemv = replace(point("q,o", 1, 1024, 1024, 2 * 1024 * 1024 / 0.8e11), bound="compute")
    (line,) = bench.shortfalls([gemm, gemv], ceilings)
    assert line.endswith("; compute-bound decode (m=1), under 90% of the matmul ceiling: q,o 80.0%")
    assert "of the bandwidth" not in line
    (line,) = bench.shortfalls([gemm, gemv, replace(fast, bound="memory")], ceilings)
    assert "of the bandwidth, decode: none; compute-bound decode (m=1)" in line
    summary = sweep_record.summarize([gemv], FAKE)
    assert summary["fp32"]["decode_bound"] == "compute"
    assert summary["fp32"]["decode_flops_fraction"] == pytest.approx(0.8)
    text = bench.format_summary(summary, FAKE)
    assert "decode m=1 compute-bound, 80% of matmul ceiling" in text


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
    assert sweep.fastest_group(rates, groups=3) == (65e9, 32.5e9)  # the last row's medians
    assert sweep.fastest_group(rates[:1], groups=3) == (30e9, 15e9)
    with pytest.raises(ValueError, match="at least one pair"):
        sweep.fastest_group([])


@pytest.mark.cache_size
def test_cli_pairs_prints_one_table_per_dtype(capsys, tmp_path):
    assert bench.main(["--pairs", "4", "--device", "cpu", "--model", "Qwen2.5-0.5B",
                       "--dtype", "fp32", "--out", str(tmp_path)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "Qwen2.5-0.5B gate,up (896x4864), m=1, fp32" in out and "matmul/stream" in out
    assert not list(tmp_path.iterdir())  # a diagnosis, not a results file
