"""The hardware table (chapter 3): capacities in bytes, binary; bandwidths decimal."""

import pytest

from helpers.counting import hardware

MiB, GiB = 2**20, 2**30


def test_capacity_labels_are_binary():
    # An H100's "80 GB" is 80 GiB; an H200's "141 GB" is 141 GiB.
    assert hardware.get("H100 SXM").memory_bytes == 80 * GiB
    assert hardware.get("H200 SXM").memory_bytes == 141 * GiB
    for name in hardware.names():
        hw = hardware.get(name)
        assert "read as GiB" in hw.memory_source and hw.memory_bytes % GiB == 0


def test_visible_memory_is_what_nvidia_smi_reports():
    h100, h200 = hardware.get("H100 SXM"), hardware.get("H200 SXM")
    assert h100.visible_memory_bytes == 81_559 * MiB  # 85.5e9 B
    assert h200.visible_memory_bytes == 143_771 * MiB  # 150.8e9 B
    assert round(h200.visible_memory_bytes / 1e8) == 1508
    for hw in (h100, h200):  # the driver keeps a little back: about 0.4%
        assert 0.99 < hw.visible_memory_bytes / hw.memory_bytes < 1


def test_llama_70b_bf16_fits_an_h200():
    weights = 141_107_412_992  # Llama-3.1-70B in bf16, chapter 2
    assert weights < hardware.get("H200 SXM").visible_memory_bytes
    assert weights > 141e9  # which is why reading "141 GB" as decimal gets it wrong


def test_bandwidth_is_decimal_and_ridge_follows():
    h100 = hardware.get("H100 SXM")
    assert h100.bandwidth == 3.35e12
    assert h100.ridge("bf16") == pytest.approx(295.22, abs=0.01)


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="visible memory"):
        hardware.HardwareSpec(name="x", peak_flops={"bf16": 1e12}, bandwidth=1e9,
                              memory_bytes=GiB, source="test", visible_memory_bytes=2 * GiB)
    with pytest.raises(ValueError, match="unknown chip"):
        hardware.get("H300")
