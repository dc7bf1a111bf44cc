"""helpers.measuring.kernels: every kernel computes F.linear, and the race picks the fastest."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from helpers.measuring import kernels, timing

TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 3e-3}  # mantissa bits: 23, 8, 10


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("m", [1, 3, 64])
def test_every_kernel_computes_the_linear_map(dtype, m):
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    generator = torch.Generator().manual_seed(m)
    x = torch.randn(m, 96, generator=generator).to(torch_dtype)
    weight = torch.randn(80, 96, generator=generator).to(torch_dtype)
    expected = F.linear(x.double(), weight.double())
    for kernel in kernels.linear_kernels("cpu", dtype):
        y = kernel.run(x, kernel.prepare(weight))
        assert y.shape == (m, 80) and y.dtype == torch_dtype and not y.is_mkldnn, kernel
        error = (y.double() - expected).abs().max() / expected.abs().max()
        assert error < TOLERANCE[dtype], (kernel, float(error))


def test_cpu_offers_onednn_kernels_and_gpus_only_eager():
    names = [k.name for k in kernels.linear_kernels("cpu", "fp32")]
    assert names[0] == "eager"
    if torch.backends.mkldnn.is_available():
        assert {"onednn", "packed"} <= set(names)
    assert "aten" not in names  # for fp32 oneDNN-off is MKL: the eager kernel again
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert "packed" in [k.name for k in kernels.linear_kernels("cpu", "bf16")]
    for m, offered in ((None, True), (1, True), (2, False), (4096, False)):
        assert ("aten" in [k.name for k in kernels.linear_kernels("cpu", "bf16", m)]) == offered
    for device in ("cuda", "mps"):
        assert kernels.linear_kernels(device, "bf16") == [kernels.EAGER]


def test_aten_kernel_restores_onednn():
    before = torch.backends.mkldnn.enabled
    kernels.ATEN.run(torch.randn(2, 8).bfloat16(), torch.randn(4, 8).bfloat16())
    assert torch.backends.mkldnn.enabled == before


def test_prepare_all_gives_each_kernel_its_own_form_of_every_weight():
    weights = [torch.randn(16, 8) for _ in range(3)]
    prepared = kernels.prepare_all(weights, "cpu", "fp32")
    assert [k for k, _ in prepared] == kernels.linear_kernels("cpu", "fp32")
    for kernel, forms in prepared:
        assert len(forms) == 3
        if kernel in (kernels.ONEDNN, kernels.PACKED):
            assert all(form.is_mkldnn for form in forms)
        else:
            assert all(form is w for form, w in zip(forms, weights, strict=True))


def _slowed(kernel: kernels.LinearKernel, seconds: float) -> kernels.LinearKernel:
    """The same linear map after a pause: slower by far more than a stall of a busy machine
    (a scheduler time slice), so a race between the two has one right answer."""

    def run(x, weight):
        time.sleep(seconds)
        return kernel.run(x, weight)

    return kernels.LinearKernel(f"{kernel.name}, slowed", "slow", kernel.prepare, run)


def test_race_picks_the_fastest_and_reports_every_time():
    x, weight = torch.randn(64, 256), torch.randn(256, 256)
    slow, fast = _slowed(kernels.EAGER, 0.05), kernels.EAGER
    candidates = [(slow, [(x, weight)]), (fast, [(x, weight)])]
    winner, seconds = kernels.fastest(candidates, "cpu")
    assert winner is fast
    assert set(seconds) == {slow.name, fast.name}
    assert seconds[fast.name] < seconds[slow.name]


def test_race_of_one_runs_nothing_and_of_none_is_an_error():
    def fails(x, weight):
        raise AssertionError("a lone candidate must not be run")

    lone = kernels.LinearKernel("lone", "", kernels.EAGER.prepare, fails)
    assert kernels.fastest([(lone, [(None, None)])], "cpu") == (lone, {})
    with pytest.raises(ValueError, match="at least one kernel"):
        kernels.fastest([], "cpu")


def test_time_fastest_measures_the_race_winner():
    x, weight = torch.randn(64, 256), torch.randn(256, 256)
    slow = _slowed(kernels.EAGER, 0.05)
    candidates = [(slow, [(x, weight)]), (kernels.EAGER, [(x, weight)])]
    kernel, race, measured = kernels.time_fastest(candidates, "cpu", min_run_time=0.02,
                                                  max_run_time=0.1)  # fmt: skip
    assert kernel is kernels.EAGER and set(race) == {slow.name, "eager"}
    assert measured.n >= 4 and measured.median_s < race[slow.name]


def test_the_environment_can_restrict_the_kernels(monkeypatch):
    monkeypatch.setenv(kernels.KERNELS_ENV, "eager")
    assert kernels.linear_kernels("cpu", "fp32", 1) == [kernels.EAGER]
    monkeypatch.setenv(kernels.KERNELS_ENV, "packed")
    offered = kernels.linear_kernels("cpu", "fp32", 1)
    assert offered[0] is kernels.EAGER and set(offered) <= {kernels.EAGER, kernels.PACKED}
    monkeypatch.setenv(kernels.KERNELS_ENV, "eager,turbo")
    with pytest.raises(ValueError, match="TEXTBOOK_KERNELS=.*unknown kernels turbo"):
        kernels.linear_kernels("cpu", "fp32", 1)


def test_race_interleaves_its_rounds_and_ranks_on_the_median():
    """One stalled call (a burst of other work) must not lose a kernel the race: each round
    times one call of every kernel in turn, and a kernel's time is its median round."""
    x, weight = torch.randn(8, 32), torch.randn(32, 32)
    order = []

    def recorded(name, pause):
        def run(x, weight):
            order.append(name)
            if pause(len([n for n in order if n == name])):
                time.sleep(0.05)
            return kernels.EAGER.run(x, weight)

        return kernels.LinearKernel(name, "", kernels.EAGER.prepare, run)

    stalled_once = recorded("stalled once", lambda call: call == 2)  # its first timed call
    always_slower = recorded("always slower", lambda call: call >= 2)
    candidates = [(stalled_once, [(x, weight)]), (always_slower, [(x, weight)])]
    winner, seconds = kernels.fastest(candidates, "cpu", calls=kernels.RANK_CALLS)
    assert kernels.RANK_CALLS >= 3
    assert winner is stalled_once, seconds
    assert order == ["stalled once", "always slower"] * (1 + kernels.RANK_CALLS)
    with pytest.raises(ValueError, match="calls must be at least 1"):
        kernels.fastest(candidates, "cpu", calls=0)


def test_a_flushed_race_never_reuses_an_input_between_flushes(monkeypatch):
    """Two kernels, three input positions: the calls walk the positions in turn, whichever
    kernel runs, and the cache is flushed each time the walk starts over, so every timed call
    reads an input (the activation is shared by both kernels at a position) that nothing has
    read since the last flush."""
    xs = [torch.randn(4, 8) for _ in range(3)]
    weight = torch.randn(8, 8)
    events = []

    def recorded(name):
        def run(x, w):
            events.append((name, next(i for i, known in enumerate(xs) if known is x)))
            return kernels.EAGER.run(x, w)

        return kernels.LinearKernel(name, "", kernels.EAGER.prepare, run)

    buffer = torch.randn(1024)
    real_flush = timing.flush_cache

    def recorded_flush(b):  # the real flush, noted
        events.append(("flush", b is buffer))
        real_flush(b)

    monkeypatch.setattr(timing, "flush_cache", recorded_flush)
    first, second = recorded("first"), recorded("second")
    sets = [(x, weight) for x in xs]
    kernels.fastest([(first, sets), (second, sets)], "cpu", calls=3, flush=buffer)
    warm_ups, timed = events[:2], events[2:]
    assert warm_ups == [("first", 2), ("second", 2)]  # the position the walk reaches last
    assert timed == [("flush", True), ("first", 0), ("second", 1), ("first", 2),
                     ("flush", True), ("second", 0), ("first", 1), ("second", 2)]
    between = [[]]
    for event in timed:
        if event[0] == "flush":
            between.append([])
        else:
            between[-1].append(event[1])
    assert all(len(set(round_)) == len(round_) for round_ in between)
