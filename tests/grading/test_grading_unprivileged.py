"""Grading as an ordinary user, run: the outcomes the root tests check (scores, no way
around the stubs, no hidden test in reach, a killed zygote costing one question, nothing
carried between submissions, instructor files left byte-identical), graded by a user made
for it (``useradd``; as an ordinary user already, that user), with bubblewrap and without
it (``--unsafe``). What only root can isolate is said once in the run's output and listed
in docs/grading.md."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grading_fixture as fixture
import pytest
import reach
from grading_support import demo_answers, fill, submit, tree_digest
from test_grading_isolation import (
    HONEST,
    IPC_EMPTY,
    KILLED,
    SHARED_MEMORY,
    killing,
    marked,
    probe,
    question,
)

USER = "textbook-grader"
LIMITS = {"wall_s": 60, "cpu_s": 60, "memory": 2 << 30, "output": 4 << 20, "processes": 256}


@pytest.fixture(scope="module")
def user() -> tuple[int, int]:
    """An unprivileged user's uid and gid (made here when we are root, as CI is)."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", USER], check=True, capture_output=True)  # fmt: skip
        entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


@pytest.fixture(scope="module")
def home(user):
    """A folder of that user's own (pytest's folders are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="unprivileged-"))
    os.chown(folder, *user)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def python_for_others() -> list[str]:
    """A command prefix that lets another user run this Python when a folder above it is
    closed to others (pyenv under /root, as here): in a mount namespace of the command's
    own, that folder becomes an empty 0755 one holding only the Python. (An instructor's
    own Python is theirs to run; this recreates that, nothing more.)"""
    base = Path(sys.base_prefix).resolve()
    closed = [p for p in reversed(base.parents) if not p.stat().st_mode & 0o001]
    if not closed:
        return []
    stage = tempfile.mkdtemp(prefix="python-")
    base_q, stage_q, top_q = (shlex.quote(str(p)) for p in (base, stage, closed[0]))
    script = (f"mount --bind {base_q} {stage_q} && mount -t tmpfs -o mode=0755 tmpfs {top_q}"
              f" && mkdir -p {base_q} && mount --bind {stage_q} {base_q}"
              f" && umount -l {stage_q} && exec \"$@\"")  # fmt: skip
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


def as_user(user, home: Path, command: list[str], stdin: str = "") -> subprocess.CompletedProcess:
    uid, gid = user
    prefix = [*python_for_others(), "setpriv", f"--reuid={uid}", f"--regid={gid}",
              "--clear-groups"]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    done = subprocess.run((prefix if os.geteuid() == 0 else []) + command, input=stdin,
                          env=env, cwd=home, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def run_as_user(user, home, submissions, sandboxed: bool) -> list[list[dict]]:
    job = {"sandbox": sandboxed, "limits": LIMITS,
           "submissions": [[dataclasses.asdict(q) for q in s] for s in submissions]}  # fmt: skip
    script = str(Path(__file__).with_name("run_questions.py"))
    done = as_user(user, home, [sys.executable, script], json.dumps(job))
    return json.loads(done.stdout)


def between_submissions():
    """A submission that leaves state behind and holds a marked answer, then one that looks
    for both: it finds neither (while a later question of its own finds its own mark)."""
    first = [question(SHARED_MEMORY + "open('/tmp/left-behind', 'w').write('x')\n" + HONEST),
             question(marked("alice"))]  # fmt: skip
    gone = "import os\nassert not os.path.exists('/tmp/left-behind')\n" + IPC_EMPTY
    second = [question(HONEST, gone, gone), probe("alice", False), question(marked("bob")),
              probe("bob", True)]  # fmt: skip
    return [first, second]


def zygote_attacks():
    """Each attack on the answer's own grading process, then an honest question."""
    found = []
    for call in ("os.kill(os.getppid(), signal.SIGKILL)", "os.kill(os.getppid(), signal.SIGSTOP)"):
        found += [question(killing(call)), question(HONEST)]
    return found


def test_sandboxed_as_an_ordinary_user(user, home):
    """Bubblewrap as an ordinary user: every route around the stubs scores 0 with the
    stub's reason (test_grading_reach.py shows, as root, that they reach the real function
    without the stubs, and scans for the canary), a killed or stopped zygote costs that
    question only, and nothing of one submission reaches the next."""
    routes = reach.route_questions()[: len(reach.ROUTES)]
    found = run_as_user(user, home, [routes, zygote_attacks(), *between_submissions()], True)
    graded, attacks, first, second = found
    for route, outcome in zip(reach.ROUTES, graded, strict=True):
        assert (outcome["status"], outcome["detail"]) == ("failed", reach.REFUSED), route
    details = [KILLED, "your code stopped the grading process"]
    assert [(o["status"], o["detail"]) for o in attacks[::2]] == [("crash", d) for d in details]
    assert all(o["status"] == "passed" for o in attacks[1::2]), attacks
    assert [o["status"] for o in first + second] == ["passed"] * 6, first + second


def test_without_bubblewrap_as_an_ordinary_user(user, home):
    """--unsafe as an ordinary user: the same verdicts for the zygote attacks, and no
    submission's answers in the next one's memory."""
    attacks, first, second = run_as_user(
        user, home, [zygote_attacks(), [question(marked("carol"))],
                     [probe("carol", False), question(marked("dave")), probe("dave", True)]],
        False)  # fmt: skip
    details = [KILLED, "your code stopped the grading process"]
    assert [(o["status"], o["detail"]) for o in attacks[::2]] == [("crash", d) for d in details]
    assert all(o["status"] == "passed" for o in attacks[1::2]), attacks
    assert [o["status"] for o in first + second] == ["passed"] * 4, first + second


# An answer that appends to and deletes the instructor's files and another student's work.
def vandal(targets: list[Path]) -> str:
    return ("import os\n"
            f"for path in {[str(t) for t in targets]!r}:\n"
            "    try:\n        open(path, 'a').write('vandal')\n        os.unlink(path)\n"
            "    except OSError:\n        pass\n"
            + fixture.EXERCISES["ch99_square"][2])  # fmt: skip


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "unsafe"])
def test_grade_as_an_ordinary_user(demo, user, home, sandboxed):
    """``python -m grading grade`` run by that user: the right scores, the isolation it
    cannot have without root said once and, with bubblewrap, the instructor's files and
    the other students' work byte-identical after an answer that aims at them."""
    root = home / ("bubblewrap" if sandboxed else "unsafe")
    shutil.copytree(demo["source"], root / "source")
    course = root / "course"
    release = demo["assignment"].release
    right = dict.fromkeys(fixture.EXERCISES, "right")
    submit(course, "alice", fixture.NAME, fill(release, demo_answers(right)))
    wrong_mean = demo_answers({**right, "ch99_mean": "wrong"})
    submit(course, "bob", fixture.NAME, fill(release, wrong_mean))
    mallory = {**demo_answers(right)}
    protected = [root / "source" / fixture.NAME / f"{fixture.NAME}.ipynb",
                 course / "submitted" / "alice" / fixture.NAME / f"{fixture.NAME}.ipynb"]
    mallory["ch99_square"] = vandal(protected)
    if sandboxed:  # without a sandbox nothing protects them (the note says so)
        submit(course, "mallory", fixture.NAME, fill(release, mallory))
    subprocess.run(["chown", "-R", f"{user[0]}:{user[1]}", str(root)], check=True)
    before = {path: path.read_bytes() for path in protected}
    digests = tree_digest(root / "source"), tree_digest(course / "submitted")
    command = [sys.executable, "-m", "grading", "grade", fixture.NAME, "--course", str(course),
               "--source", str(root / "source"), "--jobs", "2", "--timeout", "60"]
    done = as_user(user, home, command + ([] if sandboxed else ["--unsafe"]))
    scores = {s: json.loads((course / "grades" / fixture.NAME / f"{s}.json").read_text())
              for s in ("alice", "bob", "mallory")[: 3 if sandboxed else 2]}  # fmt: skip
    points = {s: sum(q["score"] or 0 for q in r["questions"]) for s, r in scores.items()}
    square = fixture.EXERCISES["ch99_square"][0]
    expected = {"alice": fixture.MAX_AUTO, "bob": fixture.MAX_AUTO - 2}
    if sandboxed:
        expected["mallory"] = fixture.MAX_AUTO - square
    assert points == expected, points
    lost = [line for line in done.stderr.splitlines() if line.startswith("note: ")]
    assert len(lost) == 1, done.stderr
    assert ("ordinary user" in lost[0]) if sandboxed else ("no sandbox" in lost[0]), lost
    assert {path: path.read_bytes() for path in protected} == before
    assert (tree_digest(root / "source"), tree_digest(course / "submitted")) == digests
