"""Nothing shared between the answer and tester processes, and an attack from inside an
answer cell (the code the grader really runs) costs that question only: every attack is
followed by an honest question that must still pass.

Run sandboxed (as root here: the answer, the tester and the zygote are then three users)
and without the sandbox (``--unsafe``: one user, so an answer can kill the zygote and the
grader must start a fresh one and go on)."""

from __future__ import annotations

import os

import pytest
from grading_fixture import EXERCISES, SETUP, with_hidden_tests

from grading import sandbox

_, HONEST, _, VISIBLE, HIDDEN = EXERCISES["ch99_square"]
HONEST = "def square(n):\n    return n * n"
WRONG = "def square(n):\n    return 0\n"
ROOT = os.geteuid() == 0
LIMITS = sandbox.Limits(wall_s=8, cpu_s=8, memory=2 << 30, output=4 << 20, processes=64)


def killing(call: str) -> str:
    """An answer that tries ``call`` (refused when it cannot reach the target), then
    answers wrong."""
    return f"import os, resource, signal\ntry:\n    {call}\nexcept OSError:\n    pass\n{WRONG}"


# attack -> (answer cell, status sandboxed, status without the sandbox, detail expected)
KILLED = "your code killed the grading process"
ATTACKS = {
    "os._exit in the answer cell": (
        "import os\nos._exit(0)", "crash", "crash", "ended its process",
    ),
    "segfault": ("import ctypes\nctypes.string_at(0)", "crash", "crash", "segmentation fault"),
    "SIGKILL of the parent": (
        killing("os.kill(os.getppid(), signal.SIGKILL)"),
        "failed" if ROOT else "crash", "crash", "" if ROOT else KILLED,
    ),
    "SIGKILL of the parent's process group": (
        killing("os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)"),
        "failed" if ROOT else "crash", "crash", "" if ROOT else KILLED,
    ),
    "SIGSTOP of the parent": (
        killing("os.kill(os.getppid(), signal.SIGSTOP)"),
        "failed" if ROOT else "crash", "crash", "" if ROOT else "stopped the grading process",
    ),
    "lowers the parent's limits": (
        killing("resource.prlimit(os.getppid(), resource.RLIMIT_NPROC, (0, 0))"),
        "failed", "failed", "",
    ),
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "timeout", "timeout", "wall-clock",
    ),
    "daemon left running": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    while True:\n"
        "        open('/tmp/daemon', 'a').write('x')\n        time.sleep(0.01)\n" + WRONG,
        "failed", "failed", "",
    ),
    "output flood": (
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "limit", "limit", "output",
    ),
    "disk fill": (
        "import os\nfor i in range(10 ** 6):\n"
        "    with open(os.path.expanduser(f'~/fill{i}'), 'wb') as out:\n"
        "        out.write(b'x' * (1 << 20))",
        "error", "error", "No space left on device",
    ),
    "corrupts the IPython history": (
        "import os\nfor home in (os.path.expanduser('~'), os.environ.get('HOME', ''),\n"
        "             '/home/student', '/run/grader'):\n"
        "    for root, dirs, files in os.walk(home):\n"
        "        for name in files:\n"
        "            if name.endswith('.sqlite'):\n"
        "                try:\n"
        "                    open(os.path.join(root, name), 'wb').write(b'garbage' * 99)\n"
        "                except OSError:\n"
        "                    pass\n" + WRONG,
        "failed", "failed", "",
    ),
}
# Without the sandbox the answer can reach the real file system: only attacks that are
# safe for this machine run there (no fork bomb, no disk fill, no kill of every process).
UNSAFE_TOO = ["os._exit in the answer cell", "segfault", "SIGKILL of the parent",
              "SIGKILL of the parent's process group", "SIGSTOP of the parent",
              "lowers the parent's limits", "daemon left running", "output flood",
              "corrupts the IPython history"]  # fmt: skip
if not ROOT:
    UNSAFE_TOO.remove("daemon left running")  # its /tmp/daemon would be the machine's


def question(answer: str, visible: str = VISIBLE, full: str | None = None) -> sandbox.Question:
    return sandbox.Question(SETUP, answer, visible, full or with_hidden_tests(visible, HIDDEN),
                            ("square",))  # fmt: skip


def each_then_honest(names: list[str]) -> list[sandbox.Question]:
    questions = []
    for name in names:
        questions += [question(ATTACKS[name][0]), question(HONEST)]
    return questions


@pytest.fixture(scope="module")
def sandboxed() -> dict[str, tuple[sandbox.Outcome, sandbox.Outcome]]:
    names = list(ATTACKS)
    results = sandbox.run(each_then_honest(names), LIMITS, sandbox=True)
    return {n: (results[2 * i], results[2 * i + 1]) for i, n in enumerate(names)}


@pytest.fixture(scope="module")
def unsafe() -> dict[str, tuple[sandbox.Outcome, sandbox.Outcome]]:
    results = sandbox.run(each_then_honest(UNSAFE_TOO), LIMITS, sandbox=False)
    return {n: (results[2 * i], results[2 * i + 1]) for i, n in enumerate(UNSAFE_TOO)}


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_in_the_answer_costs_that_question_only(sandboxed, attack):
    _, status, _, detail = ATTACKS[attack]
    outcome, honest_after = sandboxed[attack]
    assert (outcome.status, outcome.passed) == (status, False), outcome
    assert detail in outcome.detail, outcome
    assert honest_after.passed, honest_after


@pytest.mark.parametrize("attack", UNSAFE_TOO)
def test_attack_without_the_sandbox_costs_that_question_only(unsafe, attack):
    _, _, status, detail = ATTACKS[attack]
    outcome, honest_after = unsafe[attack]
    assert (outcome.status, outcome.passed) == (status, False), outcome
    if status == "crash" and "kill" in attack:  # the zygote died: a fresh one went on
        assert outcome.detail == KILLED
    assert detail in outcome.detail, outcome
    assert honest_after.passed, honest_after


# The answer reports where its IPython keeps its files and history; the tester compares.
WHERE = ("ip = get_ipython()\n"
         "where = [ip.ipython_dir, str(ip.history_manager.hist_file), os.getcwd(),\n"
         "         os.environ['HOME'], __import__('tempfile').gettempdir()]\n"
         + HONEST)  # fmt: skip
APART = ("import os, tempfile\nip = get_ipython()\nmine = [ip.ipython_dir, os.getcwd(),\n"
         "        os.environ['HOME'], tempfile.gettempdir()]\n"
         "assert str(ip.history_manager.hist_file) == ':memory:', ip.history_manager.hist_file\n"
         "assert where[1] == ':memory:', where\n"
         "assert not set(mine) & set(where[:1] + where[2:]), (mine, where)\n"
         "assert square(3) == 9\n")  # fmt: skip


@pytest.mark.parametrize("isolated", [True, False], ids=["sandboxed", "unsafe"])
def test_answer_and_tester_share_no_ipython_home_history_or_folders(isolated):
    """Each process has its own IPython directory, an in-memory history, and its own home,
    working and temporary folders (a shared history.sqlite let the two race IPython's
    corrupt-database rename and kill honest answers at random)."""
    q = sandbox.Question("import os", WHERE, APART, APART, ("where", "square"))
    (outcome,) = sandbox.run([q], sandbox.Limits(wall_s=30), sandbox=isolated)
    assert outcome.passed, outcome
