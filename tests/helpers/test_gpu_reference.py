"""helpers.gpu_reference (``make gpu-reference``), end to end on the CPU at tiny sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from helpers import gpu_reference, timing


def test_file_stem_names_the_device_kind_and_model():
    assert gpu_reference.file_stem("cuda", "NVIDIA H200") == "cuda_nvidia_h200"
    stem = gpu_reference.file_stem("cuda:1", "NVIDIA A100-SXM4-80GB")
    assert stem == "cuda_nvidia_a100_sxm4_80gb"
    with pytest.raises(ValueError, match="no letters or digits"):
        gpu_reference.file_stem("cuda", " -- ")


@pytest.mark.slow
def test_the_reference_script_runs_end_to_end_on_a_cpu(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "helpers.gpu_reference", "--device", "cpu", "--quick",
         "--scale", "64", "--max-tokens", "2", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=600,  # a hang guard, not a speed test
        env={**os.environ, timing.LLC_ENV: "8MiB"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip().splitlines()[-1]
    (json_path,) = tmp_path.glob("bench_cpu_*.json")
    (png_path,) = tmp_path.glob("roofline_cpu_*.png")
    assert str(json_path) in name and str(png_path) in name
    data = json.loads(json_path.read_text())
    assert data["device"] == "cpu" and data["torch_version"] == torch.__version__
    assert data["dtypes"] == ["fp32", "bf16"] and data["date"]
    assert {p["dtype"] for p in data["points"]} == {"fp32", "bf16"}
    assert len(data["points"]) == 2 * 4 * 2  # dtypes × shapes × token counts
    chapter4 = data["chapter4_ceilings"]
    assert chapter4["label"] == "measured" and set(chapter4["matmul_flops"]) == {"fp32", "bf16"}
    assert chapter4["bandwidth"] > 0
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

