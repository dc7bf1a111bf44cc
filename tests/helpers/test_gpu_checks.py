"""helpers.programs.gpu_checks: the GPU reference's measuring checks (run end to end, at toy sizes,
by
tests/helpers/test_gpu_reference.py)."""

from __future__ import annotations

from helpers.programs import gpu_checks


def test_the_batch_sweep_goes_up_to_the_cap():
    assert gpu_checks._batches(1) == [1]
    assert gpu_checks._batches(64) == [1, 4, 16, 64]
    assert gpu_checks._batches(19_000) == [1, 4, 16, 64, 256, 1024, 4096, 16384, 19_000]
