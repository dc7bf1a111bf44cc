"""Run one submission's questions in a sandbox and decide each from evidence the student's
code cannot produce: the student's answer runs in one process, the instructor's tests in
another that calls it through a socket and gets back plain data only
(:mod:`grading.sandbox_runner`); the tester alone holds a per-question random nonce and
writes ``pass`` with it, and the zygote reports its clean exit.

The sandbox is bubblewrap: no network, a read-only view of Python only (not ``helpers``'
files, ``solutions/``, the course folder, the gradebook or other students), a private tmpfs
home of bounded size, a PID namespace that dies with the grader. ``helpers`` arrives as
sources in the job (:mod:`grading.stubs`): real for the tester, references stubbed for the
answer, the hidden tests in the tester's part only. The runner sets each question's limits
(CPU, memory, files, output, processes, wall clock) before any student code runs.

How far student code is kept from the grader is one :class:`Isolation`, chosen by the
command that grades: bubblewrap; without it, as root, the tester and answer as users of
their own (Gradescope's Docker forbids bubblewrap's namespaces); or none (``--unsafe``).
"""

from __future__ import annotations

import ast
import atexit
import enum
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import helpers
from grading import course, names, stubs

RUNNER = Path(__file__).with_name("sandbox_runner.py")
HOME = "/home/student"
TESTER_HOME = "/run/grader"
# Imported once per grading thread by the template, before any student code: a speed-up
# only (what an IPython shell and `%matplotlib inline` import lazily, too).
PREIMPORT = ["numpy", "numpy.random", "torch", "matplotlib", "matplotlib.pyplot",
             "matplotlib.backends.backend_agg", "IPython", "IPython.core.interactiveshell",
             "IPython.core.application", "IPython.core.completer", "IPython.core.magics",
             "IPython.core.oinspect", "IPython.core.pylabtools", "matplotlib_inline.backend_inline",
             "traitlets.config", "sqlite3", "bdb", "PIL.features"]  # fmt: skip
# System folders a Python process needs, bound read-only (symlinks are recreated).
SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"]
ETC = ["/etc/ld.so.cache", "/etc/alternatives", "/etc/fonts", "/etc/localtime", "/etc/ssl"]


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or does not work here, and --unsafe was not given."""


class Isolation(enum.Enum):
    """How student code is kept from the grader: chosen once, by the command that grades
    (``grade``, ``check``, Gradescope's ``run``), and passed down to :func:`run`."""

    BWRAP = "bubblewrap"  # the sandbox; as root, the tester and answer are users of their own
    USERS = "separate users"  # no bubblewrap (a Docker container forbids its namespaces),
    # as root: the tester and answer still run as users of their own
    NONE = "none"  # --unsafe, or a learner's own check without bubblewrap: as this user

    def __bool__(self) -> bool:  # every member is isolation of some kind: say which
        raise TypeError("an Isolation is not a bool: compare it with Isolation.BWRAP, "
                        "Isolation.USERS or Isolation.NONE")  # fmt: skip


@dataclass(frozen=True)
class Limits:
    # Per question: setup + answer + tests. Chapter 9's choose_config tests run a planner's
    # search, about 30 s alone on a 2-core CPU without AVX-512, and grading jobs share cores.
    wall_s: float = 120.0
    cpu_s: int = 120  # per process (the tester's and the answer's each)
    memory: int = 4 << 30  # address space per question, bytes
    output: int = 16 << 20  # largest file (stdout, scratch files), bytes
    disk: int = 64 << 20  # the private home and /tmp (each a tmpfs), bytes
    processes: int = 2048  # tasks of the grading user (not enforced for root)

    @classmethod
    def per_question(cls, seconds: float, memory: int = 4 << 30) -> Limits:
        """``--timeout``'s limits: ``seconds`` of wall clock for the question and of CPU
        for each of its processes."""
        return cls(wall_s=seconds, cpu_s=max(1, int(seconds)), memory=memory)


@dataclass(frozen=True)
class Question:
    setup: str  # the instructor's setup cell
    answer: str  # the student's answer cell
    visible: str  # the instructor's test cell without hidden tests
    full: str  # the instructor's whole test cell
    names: tuple[str, ...] = ()  # what the exercise asks the answer to define
    references: tuple[str, ...] = ()  # what the tests call: helpers' functions among them,
    # and all they reach, are stubs in the answer process (delegating earns nothing) ...
    tools: tuple[str, ...] = ()  # ... but for what the model solution uses (grading.stubs)

    @classmethod
    def of(cls, setup: str, exercise: course.Exercise, answer: str) -> Question:
        """What ``exercise`` asks, answered by ``answer`` (an answer cell's source)."""
        return cls(setup, answer, exercise.visible, exercise.full, exercise.names,
                   exercise.references, exercise.tools)  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    status: str  # passed, failed, hidden, error, timeout, limit, crash, setup
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def bwrap_works() -> bool:
    """True if bubblewrap is installed and can start a sandbox here."""
    if not shutil.which("bwrap"):
        return False
    probe = subprocess.run(
        ["bwrap", *_namespaces(), "--die-with-parent", *_system_binds(), "true"],
        capture_output=True,
    )
    return probe.returncode == 0


# As root, each sandbox's tester and answer run as two users of their own, from a range no
# account uses: the answer cannot signal, limit or write to the zygote (root) or the tester,
# and RLIMIT_NPROC (which root ignores) binds and counts that answer alone, so a fork bomb in
# one submission cannot starve another.
UID_BASE = 3_000_000 + (os.getpid() % 4096) * 512  # apart from other grading processes
_uids_lock = threading.Lock()
_uids_free = list(range(UID_BASE + 510, UID_BASE, -2))


def _namespaces() -> list[str]:
    if os.geteuid() != 0:  # an unprivileged user namespace
        return ["--unshare-all"]
    # root: no user namespace, so the zygote can switch to the sandbox's own user
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
            "--cap-add", "CAP_CHOWN"]  # fmt: skip


def _system_binds() -> list[str]:
    args = []
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _bwrap(limits: Limits) -> list[str]:
    # Python's own folders, and every site-packages on the path (a venv over another
    # venv's packages, as a Python that ordinary users can run may be)
    python_dirs = {Path(sys.base_prefix).resolve(), Path(sys.prefix)} | {
        Path(p).resolve() for p in sys.path
        if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()}
    package_dirs = {Path(p).resolve() for p in helpers.__path__}
    args = ["bwrap", *_namespaces(), "--die-with-parent", "--new-session", *_system_binds()]
    for path in ETC:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "0755", "--dir", "/home",
             "--size", str(limits.disk), "--tmpfs", "/tmp",
             "--size", str(limits.disk), "--tmpfs", HOME,
             # the testers' homes: apart from the disk the answer can fill
             "--perms", "0755", "--dir", "/run",
             "--perms", "0711", "--size", str(limits.disk), "--tmpfs", TESTER_HOME]  # fmt: skip
    # After the tmpfs mounts, so a checkout or venv that lives under /tmp stays visible.
    bound = sorted(python_dirs | package_dirs)
    # bubblewrap makes the folders above a bind 0700: open them to the sandbox's user
    above = {str(a) for p in bound for a in p.parents
             if not any(a == Path(s) or Path(s) in a.parents for s in SYSTEM)}  # fmt: skip
    above -= {"/", "/tmp", "/home", HOME}
    for folder in sorted(above | {"/opt", "/opt/grader"}, key=lambda f: f.count("/")):
        args += ["--perms", "0755", "--dir", folder]
    for path in sorted(python_dirs):
        args += ["--ro-bind", str(path), str(path)]
    # helpers' files are hidden (an empty folder over each, even inside the venv); the
    # runner imports the package from the job's sources. Its data stays readable.
    for path in sorted(package_dirs):
        args += ["--perms", "0755", "--size", str(1 << 20), "--tmpfs", str(path),
                 "--ro-bind-try", str(path / "data"), str(path / "data")]  # fmt: skip
    args += ["--chdir", HOME, "--ro-bind", str(RUNNER), "/opt/grader/runner.py"]
    return args + [sys.executable, "-I", "/opt/grader/runner.py"]


def _environment(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "USER": "student",  # getpass.getuser() without a passwd entry for the sandbox user
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


STARTUP_S = 120.0  # bubblewrap, Python and the imports (a new template), before a question
GRACE_S = 10.0  # past a question's wall clock: the zygote's own wait, sweep and cleanup


def run(
    questions: list[Question], limits: Limits = Limits(), *, isolation: Isolation
) -> list[Outcome]:
    """Run every question of one submission, isolated as ``isolation`` says; one Outcome per
    question, in order. Each call gets a fresh zygote, forked from a warm template (see
    :class:`_Template`). When the zygote dies or stops mid-question (the answer killed or
    stopped its parent), that question is lost and a fresh zygote runs the rest."""
    if not isinstance(isolation, Isolation):
        raise TypeError(f"isolation must be one of {', '.join(map(str, Isolation))}, "
                        f"not {isolation!r}")  # fmt: skip
    if isolation is Isolation.USERS and os.geteuid() != 0:
        raise SandboxUnavailable("running student code as users of its own needs root")
    if not questions:
        return []
    if isolation is Isolation.BWRAP and not shutil.which("bwrap"):
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
    nonces = [secrets.token_hex(16) for _ in questions]
    zygote_nonce = secrets.token_hex(16)
    records: list[dict] = []
    lost: dict[int, Outcome] = {}
    first = 0
    while first < len(questions):
        found, stalled = _run_zygote(questions, nonces, zygote_nonce, first, limits, isolation)
        records += found
        done = {r["q"] for r in found if r.get("zygote") == zygote_nonce and "timeout" in r}
        started = {r["q"] for r in found if r.get("zygote") == zygote_nonce and r.get("start")}
        pending = [i for i in range(first, len(questions)) if i not in done]
        if not pending:
            break
        index = pending[0]
        broken = {r["q"] for r in found if r.get("zygote") == zygote_nonce and "broken" in r}
        if index in broken and index != first:  # an earlier answer broke it: go on afresh
            first = index
        elif index in broken:
            lost[index] = Outcome("crash", "the grading process could not start this question")
            first = index + 1
        elif index in started:  # it died (or stopped) during this question: that one is lost
            lost[index] = Outcome("crash", "your code stopped the grading process" if stalled
                                  else "your code killed the grading process")  # fmt: skip
            first = index + 1
        elif done:  # it died between questions (a previous one sabotaged it): go on
            first = index
        else:  # it never started a question: a fresh one would not either
            break
    return [lost.get(i) or _decide(i, nonce, zygote_nonce, records)
            for i, nonce in enumerate(nonces)]  # fmt: skip


def _run_zygote(
    questions: list[Question], nonces: list[str], zygote_nonce: str, first: int, limits: Limits,
    isolation: Isolation,
) -> tuple[list[dict], bool]:  # fmt: skip
    """One sandbox running questions ``first`` onwards: its report records, and whether it
    was stopped for making no progress."""
    uids = None
    if isolation is not Isolation.NONE and os.geteuid() == 0:
        with _uids_lock:
            base = _uids_free.pop()
        uids = {"tester": base, "answer": base + 1}
    try:
        sandboxed = isolation is Isolation.BWRAP
        return _run_as(questions, nonces, zygote_nonce, first, limits, sandboxed, uids)
    finally:
        if uids is not None:
            with _uids_lock:
                _uids_free.append(uids["tester"])


class _Template:
    """A sandbox whose runner has imported the heavy modules once and forks a fresh zygote
    for each submission (:func:`sandbox_runner.serve`): start-up (bubblewrap, Python, torch)
    is paid once per template. It never reads a submission; after each it kills what is
    left, removes what was written and, if anything else changed (its limits, a file it
    keeps, a System V IPC object), ends, and the grader starts a fresh one."""

    def __init__(self, sandboxed: bool, limits: Limits, users: bool):
        self.folder = tempfile.TemporaryDirectory(prefix="grade-")
        home = HOME if sandboxed else str(Path(self.folder.name, "home"))
        if not sandboxed:
            os.mkdir(home)
            if users:  # the two users reach their own folders under it, nothing else here
                os.chmod(self.folder.name, 0o711)
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {"control_fd": theirs.fileno(), "preimport": PREIMPORT, "sandboxed": sandboxed,
                  "tester_home": TESTER_HOME if sandboxed else None}  # fmt: skip
        command = _bwrap(limits) if sandboxed else [sys.executable, "-I", str(RUNNER)]
        with open(Path(self.folder.name, "log.txt"), "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),),
                env=_environment(home),
                cwd=home if not sandboxed else "/",
                start_new_session=True,
            )
        theirs.close()
        try:
            self.process.stdin.write(json.dumps(config).encode())
            self.process.stdin.close()
        except OSError:  # it died at once: the first submission finds out
            pass
        _everyone.add(self)

    def alive(self) -> bool:
        return self.process.poll() is None

    def submit(self, job: dict, private: bytes, preimport: list[str], report_fd: int) -> bool:
        """Hand a job to a fresh zygote, with its private file (the tests and the library
        each process reads its own part of); False if the template is gone."""
        with tempfile.TemporaryFile() as job_file, tempfile.TemporaryFile() as private_file:
            job_file.write(json.dumps(job).encode())
            private_file.write(private)
            for file in (job_file, private_file):
                file.flush()
                file.seek(0)
            try:
                message = json.dumps({"preimport": preimport}).encode()
                socket.send_fds(self.control, [message],
                                [job_file.fileno(), private_file.fileno(), report_fd])
            except OSError:
                return False
        return True

    def reply(self) -> dict | None:
        """The template's word once the zygote has ended; None if the template is gone."""
        try:
            data = self.control.recv(1 << 16)
            return json.loads(data) if data else None
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self.control.close()
        self.folder.cleanup()
        _everyone.discard(self)

    def __del__(self) -> None:  # no longer held by anyone
        try:
            self.kill()
        except BaseException:  # noqa: B036, S110 - never raise from a finaliser
            pass


_everyone: weakref.WeakSet[_Template] = weakref.WeakSet()
# Warm templates not in use, by (sandboxed, disk, users): a submission takes one and gives it
# back pristine. Bubblewrap dies with the thread that started it: a template lasts as long as
# the thread that made it (a grading thread, or the batch's, for :func:`prestart`).
_idle: dict[tuple[bool, int, bool], list[_Template]] = {}
_idle_lock = threading.Lock()


@atexit.register
def _stop_everyone() -> None:
    for template in list(_everyone):
        template.kill()


def _key(sandboxed: bool, limits: Limits, users: bool) -> tuple[bool, int, bool]:
    return sandboxed, limits.disk, users


def prestart(count: int, limits: Limits = Limits(), *, isolation: Isolation) -> None:
    """Start ``count`` warm templates now, from this thread, so that their start-up
    (Python, torch: seconds of a core each) runs while the batch is being set up instead
    of after each grading thread's first submission is ready. Call :func:`stop_idle` when
    the batch is done."""
    if isolation is Isolation.BWRAP and not shutil.which("bwrap"):
        return  # run() says why
    sandboxed = isolation is Isolation.BWRAP
    users = isolation is not Isolation.NONE and os.geteuid() == 0
    key = _key(sandboxed, limits, users)
    with _idle_lock:
        missing = count - len(_idle.get(key, []))
    started = [_Template(sandboxed, limits, users) for _ in range(missing)]
    with _idle_lock:
        _idle.setdefault(key, []).extend(started)


def stop_idle() -> None:
    """End every template not in use (a batch's, once it is done)."""
    with _idle_lock:
        idle = [template for templates in _idle.values() for template in templates]
        _idle.clear()
    for template in idle:
        template.kill()


def _checkout(sandboxed: bool, limits: Limits, users: bool) -> _Template:
    with _idle_lock:
        templates = _idle.get(_key(sandboxed, limits, users), [])
        while templates:
            template = templates.pop()
            if template.alive():
                return template
            template.kill()
    return _Template(sandboxed, limits, users)


def _checkin(template: _Template, sandboxed: bool, limits: Limits, users: bool) -> None:
    with _idle_lock:
        _idle.setdefault(_key(sandboxed, limits, users), []).append(template)


def _job(questions, nonces, zygote_nonce, first, limits, uids) -> tuple[dict, bytes]:
    """The zygote's job, and the private file whose parts the tester and answer processes
    read by the job's offsets. The job: each question's setup and answer, and the library's
    modules as every answer gets them (real where no question stubs a function, stubbed
    where every question stubs the same ones, e.g. 51 of chapter 2's 54: imported once by
    the zygote). The private file: per question the tester's part (the test cell, the names
    asked for, the nonce) and the answer's (modules whose stubs differ between questions),
    and once the real modules for every tester."""
    library = stubs.library()
    wanted = [stubs.stubbed(stubs.plan(q.setup, q.references, q.names, q.tools).stubbed)
              for q in questions]  # fmt: skip
    varying = sorted({name for stubbed in wanted for name in stubbed})
    shared = {name for name in varying
              if all(name in stubbed for stubbed in wanted)
              and len({stubbed[name].source for stubbed in wanted}) == 1}  # fmt: skip
    private = bytearray()

    def part(value) -> list[int]:
        data = json.dumps(value).encode()
        private.extend(data)
        return [len(private) - len(data), len(data)]

    tester_library = part({name: library[name].as_sent() for name in varying})
    sent = []
    for q, nonce, stubbed in zip(questions, nonces, wanted, strict=True):
        answer = {name: stubbed.get(name, library[name]).as_sent()
                  for name in varying if name not in shared}  # fmt: skip
        sent.append({
            "setup": q.setup, "answer": q.answer, "limits": _question_limits(limits),
            "answer_part": part({"library": answer}),
            "tester_part": part({"visible": q.visible, "full": q.full,
                                 "names": list(q.names), "nonce": nonce}),
        })  # fmt: skip
    answers_library = {n: m.as_sent() for n, m in library.items() if n not in varying}
    answers_library |= {n: wanted[0][n].as_sent() for n in shared}
    job = {
        "zygote_nonce": zygote_nonce,
        "preimport": PREIMPORT + _imported(questions),
        "uids": uids,
        "first": first,
        "limits": {"output": limits.output, "processes": limits.processes},
        "library": answers_library,
        "tester_library": tester_library,
        "questions": sent,
    }
    return job, bytes(private)


def _run_as(questions, nonces, zygote_nonce, first, limits, sandboxed, uids):
    users = uids is not None
    template = _checkout(sandboxed, limits, users)  # before the job: a new one starts at once
    job, private = _job(questions, nonces, zygote_nonce, first, limits, uids)
    for attempt in range(2):  # a template that died idle (never seen so far) gets one retry
        if attempt:
            template = _checkout(sandboxed, limits, users)
        with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
            report_path = Path(tmp, "report.jsonl")
            report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                sent = template.submit(job, private, _imported(questions), report_fd)
            finally:
                os.close(report_fd)
            stalled, reply = _watch(template, report_path, zygote_nonce, limits) if sent else (
                False, None)  # fmt: skip
            records = _read_report(report_path, limit=limits.output)
        if reply and reply.get("pristine"):
            _checkin(template, sandboxed, limits, users)
        else:
            template.kill()
        if records or stalled or reply is not None or attempt:
            return records, stalled
    return [], False


def _watch(template: _Template, report: Path, zygote_nonce: str, limits: Limits):
    """Wait for the zygote; stop the sandbox (and say so) when it makes no progress:
    nothing started within STARTUP_S, or a question not done within its wall clock and
    GRACE_S. Returns whether it was stopped, and the template's reply (None: gone)."""
    deadline, size = time.monotonic() + STARTUP_S, -1
    while True:
        ready, _, _ = select.select([template.control], [], [], 0.05)
        if ready:
            return False, template.reply()
        if not template.alive():
            return False, None
        if report.stat().st_size != size:
            size = report.stat().st_size
            ours = [r for r in _read_report(report, limits.output)
                    if r.get("zygote") == zygote_nonce]  # fmt: skip
            if ours and ours[-1].get("start"):
                deadline = time.monotonic() + limits.wall_s + GRACE_S
            elif ours:
                deadline = time.monotonic() + GRACE_S  # the next start, or the end
        if time.monotonic() > deadline:
            template.kill()
            return True, None


def _imported(questions: list[Question]) -> list[str]:
    """Modules the setup cells import (the instructor's): imported once by the zygote, not
    twice per question (ipywidgets, torch.utils.benchmark, helpers' modules...)."""
    found: list[str] = []
    for setup in dict.fromkeys(q.setup for q in questions):
        try:
            tree = names.parse(setup)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(node.module)  # and its submodules, as `from helpers.counting import x`
                found += [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in dict.fromkeys(found) if name not in PREIMPORT]


def _question_limits(limits: Limits) -> dict[str, float | int]:
    return {"wall_s": limits.wall_s, "cpu_s": limits.cpu_s, "memory": limits.memory}


def _read_report(path: Path, limit: int) -> list[dict]:
    records = []
    with open(path, "rb") as report:
        for line in report.read(limit).splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("q"), int):
                records.append(record)
    return records


SIGNALS = {signal.SIGXCPU: ("limit", "CPU time limit"),
           signal.SIGXFSZ: ("limit", "output or file size limit"),
           signal.SIGKILL: ("crash", "killed (out of memory?)"),
           signal.SIGSEGV: ("crash", "segmentation fault")}  # fmt: skip


def _decide(index: int, nonce: str, zygote_nonce: str, records: list[dict]) -> Outcome:
    """The parent's verdict for one question, from the runner's nonce-marked records only."""
    exits = [r for r in records
             if r["q"] == index and r.get("zygote") == zygote_nonce and "timeout" in r]  # fmt: skip
    stages = [r for r in records if r["q"] == index and r.get("nonce") == nonce]
    if not exits:
        return Outcome("timeout", "the submission ran out of time before this question")
    if exits[0].get("timeout"):
        return Outcome("timeout", "wall-clock time limit")
    code = exits[0].get("exit")
    if isinstance(code, int) and code < 0:
        status, detail = SIGNALS.get(-code, ("crash", f"killed by signal {-code}"))
        return Outcome(status, detail)
    if not stages:
        return Outcome("crash", f"the tester exited early (status {code})")
    stage, error = stages[-1].get("stage"), str(stages[-1].get("error", ""))
    if "[Errno 27]" in error:  # EFBIG: Python ignores SIGXFSZ, so the write fails instead
        return Outcome("limit", "output or file size limit")
    if error.startswith("MemoryError"):
        return Outcome("limit", "memory limit")
    answer_code = exits[0].get("answer_exit")
    if stage == "crash" and isinstance(answer_code, int) and answer_code < 0:
        status, detail = SIGNALS.get(-answer_code, ("crash", f"killed by signal {-answer_code}"))
        return Outcome(status, detail)
    if stage == "pass":
        return Outcome("passed") if code == 0 else Outcome("crash", f"exit status {code}")
    if stubs.NOT_AN_ANSWER in error and stage in ("visible", "answer"):
        start = error.rfind("calling ", 0, error.index(stubs.NOT_AN_ANSWER))
        return Outcome("failed", error[start:].split("\n")[0])
    if stage == "visible":
        if error.startswith("NotImplementedError"):
            return Outcome("failed", "not answered yet (the function raises NotImplementedError)")
        return Outcome("failed", error)
    if stage == "hidden":
        return Outcome("hidden", "hidden tests failed")
    if stage == "answer":
        return Outcome("error", f"your answer cell raised {error}")
    if stage == "setup":
        return Outcome("setup", f"the setup cell failed: {error}")
    return Outcome("crash", error or "the runner failed")
