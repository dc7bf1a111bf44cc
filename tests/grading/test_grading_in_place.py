"""An answer that must write into a tensor it is given is graded on that tensor.

The tests and the answer run in two processes, so the answer works on a copy of each
argument. What it writes in place into a tensor argument comes back and lands in the
tester's own tensor (``sandbox_runner.written_back``); a copy it writes instead does not. Chapter
6's decode step, which must fill the KV cache it is handed, depends on it."""

from __future__ import annotations

import pytest
from grading_support import SANDBOX

from grading import sandbox

SETUP = "import torch\n"
TEST = (
    "buffer, other = torch.zeros(4), torch.ones(2)\n"
    "out = fill(buffer, 7.0, other=other)\n"
    "assert buffer.tolist() == [0.0, 7.0, 0.0, 0.0], buffer\n"
    "assert other.tolist() == [1.0, 1.0], other  # an argument it did not write: as it was\n"
    "assert out == 7.0\n"
)
KEYWORD_TEST = (
    "buffer, other = torch.zeros(4), torch.zeros(2)\n"
    "fill(buffer, 7.0, other=other)\n"
    "assert other.tolist() == [7.0, 0.0], other\n"
)
ANSWERS = {
    "writes in place": ("def fill(buffer, value, other=None):\n"
                        "    buffer[1] = value\n    return value\n", TEST, True),
    "writes a keyword argument in place": ("def fill(buffer, value, other=None):\n"
                                           "    other[0] = value\n    return value\n",
                                           KEYWORD_TEST, True),
    "writes into a copy": ("def fill(buffer, value, other=None):\n"
                           "    buffer = buffer.clone()\n    buffer[1] = value\n"
                           "    return value\n", TEST, False),
    "rebinds instead of writing": ("def fill(buffer, value, other=None):\n"
                                   "    buffer = torch.full((4,), value)\n    return value\n",
                                   TEST, False),
    "resizes the tensor it was given": ("def fill(buffer, value, other=None):\n"
                                        "    buffer.resize_(2)\n    return value\n", TEST,
                                        False),
}  # fmt: skip


@pytest.fixture(scope="module")
def outcomes():
    questions = [sandbox.Question(SETUP, answer, test, test, ("fill",))
                 for answer, test, _ in ANSWERS.values()]  # fmt: skip
    return dict(zip(ANSWERS, sandbox.run(questions, isolation=SANDBOX), strict=True))


@pytest.mark.parametrize("answer", ANSWERS)
def test_writes_into_a_tensor_argument_reach_the_tests(outcomes, answer):
    assert outcomes[answer].passed == ANSWERS[answer][2], outcomes[answer]
