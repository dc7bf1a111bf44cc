"""Datasheet figures for accelerators (chapter 3, `03_roofline`).

Dense peaks (no 2:4 sparsity: datasheets that print "with sparsity" figures are halved here),
bandwidth in decimal units (1 TB/s = 1e12 B/s). Memory is held in bytes. Datasheets label
HBM capacity "GB", but the size is binary: HBM stacks come in powers of two of bytes, and an
H100's "80 GB" is 80 GiB (80 · 2**30 B = 85.9e9 B), not 80e9 B. So ``memory_bytes`` is the
label read as GiB. The driver reserves a little of it: ``visible_memory_bytes`` is what
nvidia-smi reports, where the book has that figure (H100 SXM 81,559 MiB, H200 SXM
143,771 MiB, 0.4% under the label). The L2 sizes (``llc_bytes``) are binary too: an H100's
"50 MB" L2 is what CUDA reports as 52,428,800 B (50 MiB), an A100's "40 MB" is 40 MiB. These are
*datasheet* numbers: chapter 4 measures the reader's own device, and the ``best_matmul_bf16``
column shows how far below the datasheet a real GEMM lands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["HardwareSpec", "CHIPS", "get", "names"]

T = 1e12
MiB = 2**20
GiB = 2**30


@dataclass(frozen=True)
class HardwareSpec:
    """One chip's roofline: peak FLOP/s per dtype, memory bandwidth (B/s), capacity (B).

    ``memory_bytes``: the datasheet's capacity label read as binary GiB. ``memory_source``
    says where the label comes from; ``visible_memory_bytes``, where known, is the total the
    CUDA driver reports for the chip (slightly less: it reserves some).
    """

    name: str
    peak_flops: Mapping[str, float]
    bandwidth: float
    memory_bytes: float
    source: str
    memory_source: str = ""
    visible_memory_bytes: float | None = None
    llc_bytes: float | None = None
    best_matmul_bf16: float | None = None
    best_matmul_source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if self.bandwidth <= 0 or self.memory_bytes <= 0:
            raise ValueError(f"{self.name}: bandwidth and memory must be positive")
        if self.visible_memory_bytes is not None and not (
            0 < self.visible_memory_bytes <= self.memory_bytes
        ):
            raise ValueError(f"{self.name}: visible memory must be positive and at most the total")
        for dtype, peak in self.peak_flops.items():
            if peak <= 0:
                raise ValueError(f"{self.name}: peak for {dtype} must be positive")

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; ValueError if the datasheet gives none."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise ValueError(
                f"{self.name} has no datasheet peak for dtype {dtype!r}; "
                f"known: {', '.join(self.peak_flops)}"
            ) from None

    def ridge(self, dtype: str = "bf16") -> float:
        """Ridge point in FLOP/B: the intensity where compute and memory time are equal."""
        return self.peak(dtype) / self.bandwidth


_MAMF = "stas00/ml-engineering, compute/accelerator/README.md (mamf-finder, bf16)"


def _chip(name: str, source: str, bandwidth_tbs: float, memory_label_gb: float,
          **peaks_tflops: float | None) -> dict:  # fmt: skip
    # The datasheet's "GB" label is a binary size: read it as GiB.
    peaks = {k: v * T for k, v in peaks_tflops.items() if v is not None}
    label = f"{source.split(' (')[0]}: \"{memory_label_gb:g} GB\", read as GiB"
    return {"name": name, "source": source, "bandwidth": bandwidth_tbs * T,
            "memory_bytes": memory_label_gb * GiB, "peak_flops": peaks,
            "memory_source": label}  # fmt: skip


CHIPS: dict[str, HardwareSpec] = {
    spec.name: spec
    for spec in (
        HardwareSpec(**_chip("A100 40GB SXM", "NVIDIA A100 datasheet", 1.555, 40,
                             fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
                     llc_bytes=40 * MiB),
        HardwareSpec(**_chip("A100 80GB SXM", "NVIDIA A100 datasheet", 2.039, 80,
                             fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
                     llc_bytes=40 * MiB, best_matmul_bf16=271.2 * T, best_matmul_source=_MAMF),
        HardwareSpec(**_chip("H100 SXM", "NVIDIA H100 datasheet (sparsity figures halved)",
                             3.35, 80, fp32=67, tf32=494.5, bf16=989, fp16=989, fp8=1979,
                             int8=1979),
                     llc_bytes=50 * MiB, best_matmul_bf16=794.5 * T, best_matmul_source=_MAMF,
                     visible_memory_bytes=81_559 * MiB,
                     notes="1979 TFLOP/s bf16 is with 2:4 sparsity; LLM-Viewer uses 3.072 TB/s, "
                           "the datasheet says 3.35"),
        HardwareSpec(**_chip("H100 PCIe", "NVIDIA H100 datasheet (sparsity figures halved)",
                             2.0, 80, fp32=51, tf32=378, bf16=756, fp16=756, fp8=1513,
                             int8=1513),
                     llc_bytes=50 * MiB),
        HardwareSpec(**_chip("H200 SXM", "NVIDIA H200 datasheet (sparsity figures halved)",
                             4.8, 141, fp32=67, tf32=494.5, bf16=989, fp16=989, fp8=1979,
                             int8=1979),
                     llc_bytes=50 * MiB, visible_memory_bytes=143_771 * MiB,
                     notes="same compute as H100 SXM; more and faster HBM"),
        HardwareSpec(**_chip("B200", "NVIDIA DGX/HGX B200 datasheet, per GPU, dense", 8.0, 180,
                             bf16=2250, fp16=2250, fp8=4500),
                     llc_bytes=126 * MiB, best_matmul_bf16=1745 * T, best_matmul_source=_MAMF),
        HardwareSpec(**_chip("L4", "NVIDIA L4 datasheet (sparsity figures halved)", 0.300, 24,
                             fp32=30.3, bf16=121, fp16=121, fp8=242.5)),
        HardwareSpec(**_chip("L40S", "NVIDIA L40S datasheet (sparsity figures halved)", 0.864,
                             48, fp32=91.6, bf16=362, fp16=362, fp8=733)),
        HardwareSpec(**_chip("MI300X", "AMD Instinct MI300X datasheet", 5.3, 192, fp32=163.4,
                             bf16=1307, fp16=1307, fp8=2615),
                     best_matmul_bf16=668.4 * T, best_matmul_source=_MAMF),
        HardwareSpec(**_chip("TPU v5e", "Google Cloud TPU v5e documentation; jax-ml scaling-book",
                             0.82, 16, bf16=197, int8=394)),
    )
}  # fmt: skip


def names() -> list[str]:
    """Names of the chips in the table."""
    return list(CHIPS)


def get(name: str) -> HardwareSpec:
    """A chip by name, e.g. ``get("H100 SXM")``."""
    try:
        return CHIPS[name]
    except KeyError:
        raise ValueError(f"unknown chip {name!r}: known are {', '.join(CHIPS)}") from None
