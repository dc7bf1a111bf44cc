"""The checkers test cells use: strict types first, honest feedback, no fooling."""

import numpy as np
import pytest
import torch

from helpers.book.checks import (
    check_choice,
    check_dict,
    check_float,
    check_int,
    check_pairs,
    check_tensor,
)


class EqualsEverything(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class Liar:
    def __eq__(self, other):
        return True


def test_right_answers_pass():
    check_int(12, 12, "x")
    check_float(0.1 + 0.2, 0.3, "x")
    check_choice("memory", "memory", "bound", ("compute", "memory"))
    check_dict({"a": 1, "b": 2.0}, {"a": 1, "b": 2.0}, "d")
    check_pairs([(5, False), (8, True)], [(5, False), (8, True)], "p")
    check_pairs([], [], "p")
    check_tensor(torch.ones(2, 3), torch.ones(2, 3), "t")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check_int(11, 12, "flops"), "flops: yours = 11, expected = 12 \\(off by -1\\)"),
        (lambda: check_int(12.0, 12, "flops"), "yours = a float, expected = a plain int"),
        (lambda: check_int(True, 1, "flag"), "yours = a bool"),
        (lambda: check_int(np.int64(12), 12, "n"), "numpy.int64.*convert with int"),
        (lambda: check_int(EqualsEverything(5), 12, "n"), "EqualsEverything"),
        (lambda: check_int(Liar(), 12, "n"), "Liar"),
        (lambda: check_float(np.float64(0.3), 0.3, "x"), "numpy.float64.*convert with float"),
        (lambda: check_float(float("nan"), 0.3, "x"), "yours = nan"),
        (lambda: check_float(0.31, 0.3, "x"), "yours = 0.31, expected = 0.3"),
        (lambda: check_choice("Memory", "memory", "b", ("compute", "memory")), "one of"),
        (lambda: check_choice("compute", "memory", "b", ("compute", "memory")), "'compute'"),
        (lambda: check_dict({"a": 1}, {"a": 1, "b": 2}, "d"), "missing \\['b'\\]"),
        (lambda: check_dict({"a": 1, "b": 3}, {"a": 1, "b": 2}, "d"), "d\\['b'\\]: yours = 3"),
        (lambda: check_dict([("a", 1)], {"a": 1}, "d"), "a plain dict"),
        (lambda: check_pairs(((5, False),), [(5, False)], "p"), "a tuple, expected = a plain list"),
        (lambda: check_pairs([(5, False)], [(5, False), (8, True)], "p"), "a list of 1"),
        (lambda: check_pairs([[5, False]], [(5, False)], "p"), "p\\[0\\]: yours = a list"),
        (lambda: check_pairs([(5,)], [(5, False)], "p"), "a tuple of 1"),
        (lambda: check_pairs([(5, 0)], [(5, False)], "p"), "p\\[0\\]\\[1\\]: yours = a int"),
        (lambda: check_pairs([(5, True)], [(5, False)], "p"), "yours = True, expected = False"),
        (lambda: check_pairs([(EqualsEverything(5), False)], [(5, False)], "p"), "EqualsEver"),
        (lambda: check_pairs([(8, True), (5, False)], [(5, False), (8, True)], "p"), "off by"),
        (lambda: check_tensor(torch.ones(2), torch.ones(2, 1), "t"), "shape \\(2,\\)"),
        (lambda: check_tensor(torch.ones(2).double(), torch.ones(2), "t"), "dtype torch.float64"),
        (lambda: check_tensor(torch.zeros(2), torch.ones(2), "t"), "largest difference 1"),
        (lambda: check_tensor(np.ones(2), torch.ones(2), "t"), "numpy.ndarray"),
    ],
)
def test_wrong_answers_fail_with_yours_vs_expected(call, message):
    with pytest.raises(AssertionError, match=message):
        call()


# --- FakeDevice: the made-up asynchronous device chapter 4's timing loop is graded on -------

from helpers.book.checks import FakeDevice  # noqa: E402
from helpers.measuring import timing  # noqa: E402

KIB = 256  # fp32 elements in a KiB


def fake_run(loop, copies, kib=256, device_options=None, **options):
    device = FakeDevice(**({"cache_bytes": 2**20} | (device_options or {})))
    sets = [(torch.empty(kib * KIB),) for _ in range(copies)]
    return loop(device.kernel, sets, "fake", clock=device.clock,
                synchronize=device.synchronize, **options)  # fmt: skip


def test_fake_device_launches_return_at_once_and_synchronize_waits():
    device = FakeDevice(first_call_s=0.0, hiccup_every=0, launch_s=1e-6, clock_s=0.0)
    x = torch.empty(1024 * KIB)  # 1 MiB: 1e-4 s at 10 GB/s, plus its first touch
    start = device.clock()
    device.kernel(x)
    assert device.clock() - start == pytest.approx(1e-6)  # the launch only
    device.synchronize("fake")
    assert device.clock() - start == pytest.approx(1e-6 + 2**20 / 1e10 + 2**20 * 1e-9)
    assert device.launches == 1


def test_fake_device_cache_is_least_recently_used():
    device = FakeDevice(first_call_s=0.0, hiccup_every=0, launch_s=0.0, clock_s=0.0,
                        first_touch_s_per_byte=0.0, cache_bytes=2 * 2**20)  # fmt: skip
    tensors = [torch.empty(1024 * KIB) for _ in range(3)]  # 1 MiB each, the cache holds two

    def seconds(tensor):
        device.synchronize()
        start = device.clock()
        device.kernel(tensor)
        device.synchronize()
        return device.clock() - start

    miss, hit = 2**20 / 1e10, 2**20 / 4e10
    assert [seconds(t) for t in tensors[:2]] == pytest.approx([miss, miss])
    assert seconds(tensors[0]) == pytest.approx(hit)  # still cached; now the most recent
    assert seconds(tensors[2]) == pytest.approx(miss)  # evicts tensors[1], the oldest
    assert seconds(tensors[1]) == pytest.approx(miss)
    assert seconds(tensors[2]) == pytest.approx(hit)
    big = torch.empty(3072 * KIB)  # 3 MiB: larger than the cache, never kept
    assert seconds(big) == pytest.approx(3 * miss)
    assert seconds(big) == pytest.approx(3 * miss)


def test_the_reference_loop_on_the_fake_device():
    median, iqr, samples = fake_run(timing.time_blocks, 8)
    assert len(samples) == 5 and (median, iqr) == timing.median_and_iqr(samples)
    memory_read = 256 * 2**10 / 1e10
    assert min(samples) == pytest.approx(memory_read + 5e-5 / 10, rel=0.02)  # a hiccup a block
    cached = fake_run(timing.time_blocks, 1)[0]
    assert cached < median / 2  # one set that fits: the loop measures the cache
    cold = fake_run(timing.time_blocks, 8, warmup=0)[2]
    assert cold[0] > 30 * samples[0] and cold[1:] != samples[1:]  # the first call was timed


def test_the_fake_device_tells_the_mistakes_apart():
    def unsynchronized(fn, input_sets, device, warmup=1, blocks=5, number=10, clock=None,
                       synchronize=None):  # fmt: skip
        return timing.time_blocks(fn, input_sets, device, warmup, blocks, number, clock,
                                  lambda device: None)  # fmt: skip

    right = fake_run(timing.time_blocks, 8)
    wrong = fake_run(unsynchronized, 8)
    assert wrong[0] < right[0] / 3  # launches only
    again = fake_run(timing.time_blocks, 8)
    assert again == right  # deterministic: a fresh device gives the same numbers
