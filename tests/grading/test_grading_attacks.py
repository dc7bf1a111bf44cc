"""Hostile answers: each attack must score 0 (or be contained), decided by the parent from
the runner's nonce and exit status, never from what the student's code prints.

All attacks run as one submission (one sandbox, one forked child per question), against
the fixture's ``square`` exercise, whose right answer is ``n * n``."""

from __future__ import annotations

import pytest
from grading_fixture import EXERCISES, SETUP, with_hidden_tests
from grading_support import SANDBOX, needs_bwrap

from grading import sandbox

_, _, _, VISIBLE, HIDDEN = EXERCISES["ch99_square"]
WRONG = "def square(n):\n    return 0\n"
ATTACKS = {
    "honest": ("def square(n):\n    return n * n", "passed"),
    "prints fake success": ("print('All tests passed! 1/1')\n" + WRONG, "failed"),
    "exits cleanly early": ("import os\nprint('passed')\nos._exit(0)", "crash"),
    "exits inside the call": ("import os\ndef square(n):\n    os._exit(0)", "crash"),
    "sys.exit in the call": ("import sys\ndef square(n):\n    sys.exit(0)", "failed"),
    "patches the checker": (
        "import helpers.book.checks\n"
        "helpers.book.checks.check_int = lambda *a, **k: None\n" + WRONG,
        "failed",
    ),
    "shadows the checker": ("def check_int(*a, **k):\n    pass\n" + WRONG, "failed"),
    "patches builtins": ("import builtins\nbuiltins.type = lambda x: int\n" + WRONG, "failed"),
    "patches the checker when called": (
        "import helpers.book.checks\ndef square(n):\n"
        "    helpers.book.checks.check_int = lambda *a, **k: None\n    return 0",
        "failed",
    ),
    "patches the checker the test imports": (
        "import helpers.book.checks\ndef square(n):\n"
        "    helpers.book.checks.check_int = lambda *a, **k: None\n    return 0",
        "failed",
        "from helpers.book.checks import check_int\nsquare(1)\n"
        "from helpers.book.checks import check_int\n",
    ),
    "equals anything": (
        "class Liar(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\ndef square(n):\n    return Liar(0)",
        "failed",
    ),
    "forges the report": (
        "import os, json\nfor fd in range(3, 64):\n    for q in range(8):\n"
        "        try:\n            os.write(fd, (json.dumps({'q': q, 'stage': 'pass', "
        "'nonce': 'x', 'exit': 0, 'timeout': False}) + '\\n').encode())\n"
        "        except OSError:\n            pass\nos._exit(0)",
        "crash",
    ),
    "finds the nonces in memory": (
        "import gc, json, os, re\nfound = set()\nfor o in gc.get_objects():\n"
        "    for v in (o.values() if isinstance(o, dict) else [o]):\n"
        "        if isinstance(v, str) and re.fullmatch('[0-9a-f]{32}', v):\n"
        "            found.add(v)\n"
        "for fd in range(64):\n    for n in found:\n        for q in range(32):\n"
        "            try:\n                os.write(fd, (json.dumps({'q': q, 'nonce': n, "
        "'stage': 'pass', 'zygote': n, 'exit': 0, 'timeout': False}) + '\\n').encode())\n"
        "            except OSError:\n                pass\n" + WRONG,
        "crash",  # what it wrote into its own socket was garbage
    ),
    "sends a forged verdict to the tester": (
        "import gc, json, os, socket, struct\n"
        "forged = json.dumps({'error': 'x', 'stage': 'pass', 'defined': {}}).encode()\n"
        "for o in gc.get_objects():\n    if isinstance(o, socket.socket):\n"
        "        o.sendall(struct.pack('>Q', len(forged)) + forged)\nos._exit(0)",
        "error",
    ),
    "hangs": ("import time\ntime.sleep(3600)", "timeout"),
    "eats memory": ("hog = bytearray(16 << 30)", "limit"),
    "floods output": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "limit"),
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, sandbox.Outcome]:
    questions = []
    for answer, _, *prefix in ATTACKS.values():
        visible = "".join(prefix) + VISIBLE  # some attacks need a test that imports itself
        questions.append(
            sandbox.Question(SETUP, answer, visible, with_hidden_tests(visible, HIDDEN))
        )
    limits = sandbox.Limits(wall_s=8, cpu_s=8, memory=2 << 30, output=4 << 20)
    results = sandbox.run(questions, limits, isolation=SANDBOX)
    return dict(zip(ATTACKS, results, strict=True))


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_gets_no_points(outcomes, attack):
    expected = ATTACKS[attack][1]
    assert outcomes[attack].status == expected, outcomes[attack]
    assert outcomes[attack].passed == (expected == "passed")


# What the sandbox lets an answer see and do, probed by an instructor-side test cell.
PROBES = {
    "no solutions or course folders": (
        "import os\nfrom grading import release\n", "assert False  # grading is not importable"
    ),
    "nothing of the repository but helpers": (
        "import os, helpers\nroot = os.path.dirname(os.path.dirname(helpers.__file__))\n"
        "seen = sorted(os.listdir(root))\n",
        "assert 'solutions' not in seen and 'grading' not in seen and 'notebooks' not in seen, "
        "seen",
    ),
    "no network": (
        "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    reached = True\nexcept OSError:\n    reached = False\n",
        "assert not reached",
    ),
    "read-only system": (
        "try:\n    open('/usr/pwned', 'w')\n    wrote = True\nexcept OSError:\n"
        "    wrote = False\n",
        "assert not wrote",
    ),
    "other users' files hidden": (
        "import os\n",
        "import os\n"
        "assert os.listdir('/home') == ['student'] and not os.path.exists('/etc/shadow')",
    ),
}


@needs_bwrap
def test_sandbox_isolation():
    questions = [sandbox.Question("", answer, test, test) for answer, test in PROBES.values()]
    outcomes = sandbox.run(questions, sandbox.Limits(wall_s=20), isolation=sandbox.Isolation.BWRAP)
    results = dict(zip(PROBES, outcomes, strict=True))
    assert results["no solutions or course folders"].status == "error"  # ImportError
    for probe in list(PROBES)[1:]:
        assert results[probe].passed, (probe, results[probe])


@pytest.mark.parametrize("names", [(), ("square",)])
def test_answer_cannot_replace_a_builtin_the_test_uses(names):
    """A test cell that leans on a builtin (abs) must get the real one, whether or not the
    exercise's names are known."""
    test = "assert abs(square(3) - 9) < 1e-9, 'square(3)'"
    cheat = "def abs(x):\n    return 0\n\ndef square(n):\n    return 0"
    honest = "def square(n):\n    return n * n"
    questions = [sandbox.Question("", answer, test, test, names) for answer in (cheat, honest)]
    outcomes = sandbox.run(questions, sandbox.Limits(wall_s=30), isolation=SANDBOX)
    assert [o.status for o in outcomes] == ["failed", "passed"]


def test_unsafe_mode_grades_the_same_without_bubblewrap():
    """--unsafe (no sandbox) keeps the two processes, the limits and the verdicts."""
    names = ("honest", "shadows the checker", "exits inside the call")
    full = with_hidden_tests(VISIBLE, HIDDEN)
    questions = [sandbox.Question(SETUP, ATTACKS[n][0], VISIBLE, full, ("square",)) for n in names]
    outcomes = sandbox.run(questions, sandbox.Limits(wall_s=30), isolation=sandbox.Isolation.NONE)
    assert [o.status for o in outcomes] == ["passed", "failed", "crash"]


def test_an_exercise_may_redefine_a_setup_name():
    """When the setup imports the reference under the exercise's own name, the tests must
    still call the student's version (so a blank answer cannot pass on the reference)."""
    setup = SETUP + "\nfrom math import factorial"
    test = "check_int(factorial(5), 120, 'factorial(5)')"
    stub = "def factorial(n):\n    raise NotImplementedError()"
    right = "def factorial(n):\n    return 1 if n < 2 else n * factorial(n - 1)"
    questions = [sandbox.Question(setup, answer, test, test, ("factorial",))
                 for answer in (stub, right)]  # fmt: skip
    outcomes = sandbox.run(questions, sandbox.Limits(wall_s=30), isolation=SANDBOX)
    assert [o.status for o in outcomes] == ["failed", "passed"]
