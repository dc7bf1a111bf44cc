"""The checkers test cells use: strict types first, honest feedback, no fooling."""

import numpy as np
import pytest
import torch

from helpers.checks import check_choice, check_dict, check_float, check_int, check_tensor


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
        (lambda: check_tensor(torch.ones(2), torch.ones(2, 1), "t"), "shape \\(2,\\)"),
        (lambda: check_tensor(torch.ones(2).double(), torch.ones(2), "t"), "dtype torch.float64"),
        (lambda: check_tensor(torch.zeros(2), torch.ones(2), "t"), "largest difference 1"),
        (lambda: check_tensor(np.ones(2), torch.ones(2), "t"), "numpy.ndarray"),
    ],
)
def test_wrong_answers_fail_with_yours_vs_expected(call, message):
    with pytest.raises(AssertionError, match=message):
        call()
