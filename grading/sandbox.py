"""Run one submission's questions in a sandbox and decide each from evidence the student's
code cannot produce: the student's answer runs in one process, the instructor's tests in
another that calls it through a socket and gets back plain data only
(:mod:`grading.sandbox_runner`); the tester alone holds a per-question random nonce and
writes ``pass`` with it, and the zygote reports its clean exit.

The sandbox is bubblewrap: no network, a read-only view of Python and of ``helpers`` only
(not ``solutions/``, the course folder, the gradebook or other students), a private tmpfs
home of bounded size, a new PID namespace that dies with the grader. Limits on CPU time,
memory, file and output size, processes and wall-clock time are set per question by the
runner (:mod:`grading.sandbox_runner`) before any student code runs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import helpers

RUNNER = Path(__file__).with_name("sandbox_runner.py")
HOME = "/home/student"
# Imported once per submission by the zygote, before any student code: a speed-up only.
PREIMPORT = ["numpy", "torch", "matplotlib", "matplotlib.pyplot", "IPython", "helpers.checks",
             "helpers.notebook"]  # fmt: skip
# System folders a Python process needs, bound read-only (symlinks are recreated).
SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"]
ETC = ["/etc/ld.so.cache", "/etc/alternatives", "/etc/fonts", "/etc/localtime", "/etc/ssl"]


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or does not work here, and --unsafe was not given."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60.0  # per question: setup + answer + tests
    cpu_s: int = 60
    memory: int = 4 << 30  # address space per question, bytes
    output: int = 16 << 20  # largest file (stdout, scratch files), bytes
    disk: int = 64 << 20  # the private home and /tmp (each a tmpfs), bytes
    processes: int = 2048  # tasks of the grading user (not enforced for root)


@dataclass(frozen=True)
class Question:
    setup: str  # the instructor's setup cell
    answer: str  # the student's answer cell
    visible: str  # the instructor's test cell without hidden tests
    full: str  # the instructor's whole test cell
    names: tuple[str, ...] = ()  # what the exercise asks the answer to define


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
        ["bwrap", "--unshare-all", "--die-with-parent", *_system_binds(), "true"],
        capture_output=True,
    )
    return probe.returncode == 0


def _system_binds() -> list[str]:
    args = []
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _bwrap(limits: Limits) -> list[str]:
    python_dirs = {Path(sys.base_prefix).resolve(), Path(sys.prefix)}
    package_dirs = {Path(p).resolve() for p in helpers.__path__}
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", *_system_binds()]
    for path in ETC:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(limits.disk), "--tmpfs", "/tmp",
             "--size", str(limits.disk), "--tmpfs", HOME]  # fmt: skip
    # After the tmpfs mounts, so a checkout or venv that lives under /tmp stays visible.
    for path in sorted(python_dirs | package_dirs):
        args += ["--ro-bind", str(path), str(path)]
    args += ["--chdir", HOME, "--ro-bind", str(RUNNER), "/opt/grader/runner.py"]
    return args + [sys.executable, "-I", "/opt/grader/runner.py"]


def _environment(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def run(
    questions: list[Question], limits: Limits = Limits(), sandbox: bool = True
) -> list[Outcome]:
    """Run every question of one submission; one Outcome per question, in order."""
    if not questions:
        return []
    if sandbox and not shutil.which("bwrap"):
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
    nonces = [secrets.token_hex(16) for _ in questions]
    zygote_nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        report_path, log_path = Path(tmp, "report.jsonl"), Path(tmp, "log.txt")
        report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        home = HOME if sandbox else str(Path(tmp, "home"))
        if not sandbox:
            os.mkdir(home)
        job = {
            "report_fd": report_fd,
            "zygote_nonce": zygote_nonce,
            "preimport": PREIMPORT,
            "limits": {"output": limits.output, "processes": limits.processes},
            "questions": [
                {**asdict(q), "nonce": n, "limits": _question_limits(limits)}
                for q, n in zip(questions, nonces, strict=True)
            ],
        }
        command = _bwrap(limits) if sandbox else [sys.executable, "-I", str(RUNNER)]
        overall = limits.wall_s * len(questions) + 120  # startup and imports
        try:
            with open(log_path, "wb") as log:
                subprocess.run(
                    command,
                    input=json.dumps(job).encode(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(report_fd,),
                    env=_environment(home),
                    cwd=home if not sandbox else tmp,
                    timeout=overall,
                    start_new_session=True,
                )
        except subprocess.TimeoutExpired:
            pass  # subprocess.run killed it; unanswered questions read as timeouts below
        finally:
            os.close(report_fd)
        records = _read_report(report_path, limit=limits.output)
    return [
        _decide(i, nonce, zygote_nonce, records) for i, nonce in enumerate(nonces)
    ]


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


SIGNALS = {
    signal.SIGXCPU: ("limit", "CPU time limit"),
    signal.SIGXFSZ: ("limit", "output or file size limit"),
    signal.SIGKILL: ("crash", "killed (out of memory?)"),
    signal.SIGSEGV: ("crash", "segmentation fault"),
}


def _decide(index: int, nonce: str, zygote_nonce: str, records: list[dict]) -> Outcome:
    """The parent's verdict for one question, from the runner's nonce-marked records only."""
    exits = [r for r in records if r["q"] == index and r.get("zygote") == zygote_nonce]
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
