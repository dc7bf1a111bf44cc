"""Nothing shared between the answer and tester processes, and an attack from inside an
answer cell (the code the grader really runs) costs that question only: every attack is
followed by an honest question that must still pass.

Run sandboxed (as root here: the answer, the tester and the zygote are then three users)
and without the sandbox (``--unsafe``: one user, so an answer can kill the zygote and the
grader must start a fresh one and go on)."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest
from grading_fixture import EXERCISES, SETUP, with_hidden_tests

from grading import release, sandbox
from grading.sandbox import Isolation

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


def test_the_isolation_is_named_never_a_bool():
    """An Isolation says which; a bool (what `sandbox.run` took before) is refused, not read as
    some isolation, and a member cannot be tested for truth."""
    with pytest.raises(TypeError, match="must be one of Isolation.BWRAP, .*, not True"):
        sandbox.run([question(HONEST)], LIMITS, isolation=True)
    with pytest.raises(TypeError, match="not a bool"):
        bool(Isolation.NONE)
    assert Isolation("separate users") is Isolation.USERS


@pytest.mark.skipif(ROOT, reason="root may switch users (test_grading_unprivileged.py runs "
                    "this as an ordinary user)")  # fmt: skip
def test_users_of_their_own_need_root():
    with pytest.raises(sandbox.SandboxUnavailable, match="needs root"):
        sandbox.run([question(HONEST)], LIMITS, isolation=Isolation.USERS)


@pytest.fixture(scope="module")
def sandboxed() -> dict[str, tuple[sandbox.Outcome, sandbox.Outcome]]:
    names = list(ATTACKS)
    results = sandbox.run(each_then_honest(names), LIMITS, isolation=Isolation.BWRAP)
    return {n: (results[2 * i], results[2 * i + 1]) for i, n in enumerate(names)}


@pytest.fixture(scope="module")
def unsafe() -> dict[str, tuple[sandbox.Outcome, sandbox.Outcome]]:
    results = sandbox.run(each_then_honest(UNSAFE_TOO), LIMITS, isolation=Isolation.NONE)
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


@pytest.mark.parametrize("isolation", [Isolation.BWRAP, Isolation.NONE],
                         ids=["sandboxed", "unsafe"])  # fmt: skip
def test_answer_and_tester_share_no_ipython_home_history_or_folders(isolation):
    """Each process has its own IPython directory, an in-memory history, and its own home,
    working and temporary folders (a shared history.sqlite let the two race IPython's
    corrupt-database rename and kill honest answers at random)."""
    q = sandbox.Question("import os", WHERE, APART, APART, ("where", "square"))
    (outcome,) = sandbox.run([q], sandbox.Limits(wall_s=30), isolation=isolation)
    assert outcome.passed, outcome


MARK = "answer-was-here"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> dict:
    """Files of the grading machine an answer may aim at: the host's /tmp (pytest's tmp
    folder lives there), a course's output folder, the repository and $HOME. Only appends
    and new files are tried, so a failure cannot destroy anything."""
    folder = tmp_path_factory.mktemp("host")
    grades = folder / "course" / "grades" / "99_demo"
    grades.mkdir(parents=True)
    (folder / "notes.txt").write_text("the host's own file\n")
    (grades / "student.json").write_text('{"score": 0}\n')
    repository = release.ROOT
    existing = [folder / "notes.txt", grades / "student.json",
                repository / "helpers" / "__init__.py", repository / "pyproject.toml"]  # fmt: skip
    new = [folder / MARK, grades / MARK, repository / MARK, repository / "helpers" / MARK,
           Path.home() / MARK, Path(tempfile.gettempdir()) / MARK]  # fmt: skip
    assert not any(path.exists() for path in new)
    return {"existing": {p: p.read_bytes() for p in existing}, "new": new,
            "removable": [folder / "notes.txt", grades / "student.json"]}  # fmt: skip


def writes_outside(host: dict) -> str:
    appends = [str(p) for p in host["existing"]] + [str(p) for p in host["new"]]
    return (
        "import glob, os\n"
        f"paths = {appends!r}\n"
        "paths += glob.glob('/tmp/grade-*/*') + glob.glob('/tmp/pytest-of-*/**/*.json',\n"
        "                                                 recursive=True)\n"
        "for path in paths:\n    try:\n        with open(path, 'a') as out:\n"
        f"            out.write({MARK!r})\n    except OSError:\n        pass\n"
        f"for path in {[str(p) for p in host['removable']]!r}:\n"
        "    try:\n        os.unlink(path)\n    except OSError:\n        pass\n" + WRONG
    )  # fmt: skip


def connects_to(port: int) -> str:
    return ("import socket\ntry:\n"
            f"    with socket.create_connection(('127.0.0.1', {port}), timeout=3) as peer:\n"
            f"        peer.sendall({MARK.encode()!r})\n    reached = True\n"
            "except OSError:\n    reached = False\n"
            "def square(n):\n    return 0 if reached else n * n\n")  # fmt: skip


def listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    return server


def accepted(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
        return True
    except BlockingIOError:
        return False


def test_answer_cannot_write_outside_the_sandbox_or_reach_the_host_by_loopback(host):
    """An answer cell that appends to the host's files (the repository, a course's grades,
    pytest's folder in the host's /tmp, $HOME), creates new ones or deletes some, and one
    that connects to a socket the host listens on at 127.0.0.1: each is graded as its
    answer deserves and the host sees nothing."""
    server = listener()
    try:
        port = server.getsockname()[1]
        questions = [question(writes_outside(host)), question(HONEST),
                     question(connects_to(port)), question(HONEST)]  # fmt: skip
        outcomes = sandbox.run(questions, LIMITS, isolation=Isolation.BWRAP)
        assert [o.status for o in outcomes] == ["failed", "passed", "passed", "passed"], outcomes
        assert not accepted(server)
    finally:
        server.close()
    for path, content in host["existing"].items():
        assert path.read_bytes() == content, path
    assert not [path for path in host["new"] if path.exists()]


def test_without_the_sandbox_the_loopback_probe_connects():
    """The probe above has teeth: with --unsafe nothing isolates the network, the answer
    reaches the host's socket and its own test fails."""
    server = listener()
    try:
        questions = [question(connects_to(server.getsockname()[1]))]
        (outcome,) = sandbox.run(questions, LIMITS, isolation=Isolation.NONE)
        assert outcome.status == "failed", outcome
        assert accepted(server)
    finally:
        server.close()


# Reads this process's whole memory (heap, stacks, anonymous mappings) for a marker, with
# a pattern that spells its hyphens \x2d so that the probe itself never holds the marker's
# bytes. (The grader makes its processes not dumpable; the answer may undo that for itself.)
SEEKS = ("import ctypes, re\n"
         "def seen(*parts):\n"
         "    needle = re.compile(rb'\\x2d'.join(re.escape(p.encode()) for p in parts))\n"
         "    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again: its /proc/self/mem\n"
         "    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
         "        for line in maps:\n"
         "            fields = line.split()\n"
         "            if 'r' not in fields[1] or (len(fields) > 5 and fields[5].startswith('/')):\n"
         "                continue\n"
         "            start, end = (int(x, 16) for x in fields[0].split('-'))\n"
         "            for at in range(start, end, 1 << 24):\n"
         "                try:\n"
         "                    mem.seek(at)\n"
         "                    chunk = mem.read(min(1 << 24, end - at) + 64)\n"
         "                except (OSError, ValueError, OverflowError):\n"
         "                    break\n"
         "                if needle.search(chunk):\n"
         "                    return True\n"
         "    return False\n")  # fmt: skip


def marked(name: str) -> str:
    return f"# {'-'.join(['student', name, 'secret'])}\n{HONEST}"


def probe(name: str, expected: bool) -> sandbox.Question:
    test = f"assert found is {expected}, found\n" + VISIBLE
    answer = SEEKS + f"found = seen('student', {name!r}, 'secret')\n" + HONEST
    return sandbox.Question(SETUP, answer, test, test, ("square", "found"))


def template() -> object:
    """The warm template not in use (the sandbox keeps and reuses it)."""
    (sandboxed,) = [t for key, idle in sandbox._idle.items() if key[0] for t in idle]
    return sandboxed


def test_a_reused_template_carries_no_student_work_into_the_next_submission():
    """Two submissions in a row, through one warm template: the second one's processes
    do not hold the first one's answers anywhere in memory, while a later question of the
    same submission does find an earlier one's (the probe has teeth: each zygote holds
    its own submission's job)."""
    first = sandbox.run([question(marked("alice"))], LIMITS, isolation=Isolation.BWRAP)
    warm = template()
    second = sandbox.run([probe("alice", False), question(marked("bob")), probe("bob", True)],
                         LIMITS, isolation=Isolation.BWRAP)  # fmt: skip
    assert [o.status for o in first + second] == ["passed"] * 4, first + second
    assert template() is warm and warm.alive()


SHARED_MEMORY = ("import ctypes\nlibc = ctypes.CDLL(None)\n"
                 "assert libc.shmget(0, 4096, 0o1000 | 0o666) >= 0\n")  # IPC_CREAT
IPC_EMPTY = ("assert len(open('/proc/sysvipc/shm').read().splitlines()) == 1\n"
             + VISIBLE)  # fmt: skip


def test_a_submission_that_leaves_state_behind_gets_the_next_one_a_fresh_sandbox():
    """A System V shared memory segment outlives its process: the template sees it after
    the submission, ends, and the next submission runs in a fresh sandbox without it."""
    sandbox.run([question(HONEST)], LIMITS, isolation=Isolation.BWRAP)
    warm = template()
    (left,) = sandbox.run([question(SHARED_MEMORY + HONEST)], LIMITS, isolation=Isolation.BWRAP)
    assert left.passed, left
    assert not warm.alive()
    (after,) = sandbox.run([sandbox.Question(SETUP, HONEST, IPC_EMPTY, IPC_EMPTY, ("square",))],
                           LIMITS, isolation=Isolation.BWRAP)  # fmt: skip
    assert after.passed, after
    assert template() is not warm
