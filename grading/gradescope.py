"""Gradescope: the grader as a Gradescope autograder.

``python -m grading gradescope CHAPTER`` writes ``autograder.zip``: ``setup.sh`` (run once,
as root, when Gradescope builds its image: bubblewrap from apt, a venv with torch's CPU
build and this project) and ``run_autograder`` (run once per submission), with the project's
code, the chapter's source notebook (hidden tests included: Gradescope's container holds only
what the zip carries) and ``gradescope.json`` (the chapter and the limits).

``run_autograder`` calls ``python -m grading.gradescope run``, which grades the notebook in
``<root>/submission`` the way ``grade`` does and writes ``<root>/results/results.json`` in
Gradescope's format, whatever the submission: ``--root`` (or ``AUTOGRADER_ROOT``) lets a
test lay the folders out elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from grading import course, grader, release, sandbox
from grading.course import Assignment
from grading.release import SOURCE
from grading.results import (
    StudentResult,
    number,
    shown_to_student,
    student_flags,
    write_atomically,
)
from grading.sandbox import Isolation

ROOT = Path("/autograder")
CONFIG = "gradescope.json"
SOLUTIONS = "solutions"  # under <root>/source: the chapter's source notebook
BUNDLED = ["pyproject.toml", "README.md", "helpers", "grading"]
SKIPPED = {"__pycache__", ".ipynb_checkpoints", "course"}  # course/: a local course folder

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
set -euxo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends bubblewrap python3 python3-venv python3-pip
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
# torch's CPU build first, so the project's requirement never pulls a CUDA one
/autograder/venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
# not editable: helpers/ and grading/ land in site-packages, which student code may read
/autograder/venv/bin/pip install /autograder/source
chmod -R a+rX /autograder/venv
/autograder/venv/bin/python -I -c "import grading.gradescope, helpers, torch, nbgrader"
# The library's code is root's alone: graded answers import helpers from the grader's
# sources (with the references stubbed), never from these files, which would hold the
# references' real code when there is no bubblewrap to hide them.
library="$(/autograder/venv/bin/python -I -c 'import helpers; print(helpers.__path__[0])')"
find /autograder/source/helpers "$library" -name "*.py*" -exec chmod go-rwx {} +
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this once per submission, as root. AUTOGRADER_ROOT and AUTOGRADER_PYTHON
# (defaults: /autograder, the venv setup.sh makes) let a test run it in a scratch folder.
root="${AUTOGRADER_ROOT:-/autograder}"
python="${AUTOGRADER_PYTHON:-/autograder/venv/bin/python}"
mkdir -p "$root/results"
# -I: only the installed project is imported, never a file the submission brought
"$python" -I -m grading.gradescope run --root "$root"
status=$?
if [ ! -s "$root/results/results.json" ]; then  # it could not even start: say so
  message="The autograder failed to start (exit status $status): tell your instructor."
  printf '{"score": 0, "tests": [], "output": "%s"}\\n' "$message" > "$root/results/results.json"
fi
exit 0
"""


def _files(folder: Path):
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if path.is_file() and not path.is_symlink() and not path.name.endswith(".pyc") \
                and not any(p in SKIPPED or p.startswith(".") for p in parts):  # fmt: skip
            yield path


def _add(archive: zipfile.ZipFile, name: str, data: bytes | str, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # same zip on every build
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def bundle(
    chapter: str,
    output: Path,
    source: Path = SOURCE,
    timeout: float = 60,
    memory: int = 4096,
) -> Path:
    """Write Gradescope's ``autograder.zip`` for one chapter; returns its path."""
    notebook = course.source_notebook(chapter, source)
    if not notebook.is_file():
        raise FileNotFoundError(f"no chapter {chapter}: {notebook} does not exist")
    course.load(chapter, source)  # refuse a source the grader cannot read, here not there
    output.parent.mkdir(parents=True, exist_ok=True)
    config = {"chapter": chapter, "timeout": timeout, "memory": memory}
    with zipfile.ZipFile(output, "w") as archive:
        _add(archive, "setup.sh", SETUP_SH, 0o755)
        _add(archive, "run_autograder", RUN_AUTOGRADER, 0o755)
        _add(archive, CONFIG, json.dumps(config, indent=1) + "\n")
        for name in BUNDLED:
            path = release.ROOT / name
            for file in _files(path) if path.is_dir() else [path]:
                _add(archive, str(file.relative_to(release.ROOT)), file.read_bytes())
        for file in _files(notebook.parent):
            _add(archive, f"{SOLUTIONS}/{chapter}/{file.relative_to(notebook.parent)}",
                 file.read_bytes())  # fmt: skip
    return output


def results(result: StudentResult, assignment: Assignment, note: str = "") -> dict:
    """Gradescope's results.json for one graded submission: what the student may see of it
    (:func:`results.shown_to_student`, :func:`results.student_flags`). Written answers are
    not in ``tests``: they are graded by hand (a Gradescope manual question each), and the
    output says so."""
    tests = []
    for index, q in enumerate((q for q in result.questions if q.score is not None), 1):
        tests.append({
            "name": q.grade_id, "number": str(index), "score": q.score,
            "max_score": q.points, "status": "passed" if q.status == "passed" else "failed",
            "output": shown_to_student(q), "visibility": "visible",
        })  # fmt: skip
    lines = [f"{assignment.name}: {number(result.score)} of "
             f"{number(result.max_auto)} points autograded."]  # fmt: skip
    written = [q for q in result.questions if q.score is None]
    if written:
        ids = ", ".join(f"{q.grade_id} ({number(q.points)})" for q in written)
        lines.append(f"Written answers, graded by hand and not included here: {ids}.")
    flags = student_flags(result.flags)  # the others are in the log (stdout), hidden
    lines += [f"Note: {flag}" for flag in flags]
    return {
        "score": result.score,
        "output": "\n".join(lines + ([note] if note else [])),
        "stdout_visibility": "hidden",  # the grader's log is for the instructor
        "tests": tests,
        "extra_data": {"file": result.file, "flags": flags,
                       "written": {q.grade_id: q.points for q in written}},  # fmt: skip
    }


def failure(message: str) -> dict:
    return {"score": 0.0, "tests": [], "output": message, "stdout_visibility": "hidden"}


def unprivileged_import_fails(python: str = sys.executable) -> str:
    """Why a user of no account cannot import what the answers need with this Python
    (a venv whose interpreter lives under /root, say), or "" when it can."""
    nobody = 65534
    try:
        done = subprocess.run(
            [python, "-I", "-c", "import torch, IPython"],  # helpers: from the job
            user=nobody, group=nobody, extra_groups=[], cwd="/", capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return repr(error)
    return "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


def isolation_here() -> Isolation:
    """Gradescope's isolation: bubblewrap where it starts; in a Docker container that
    forbids its namespaces, as root, the tester and answer as users of their own."""
    if sandbox.bwrap_works():
        return Isolation.BWRAP
    return Isolation.USERS if os.geteuid() == 0 else Isolation.NONE


def run(root: Path = ROOT) -> int:
    """Grade ``root/submission`` and write ``root/results/results.json``; 0 once written."""
    out = root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        config = json.loads((root / "source" / CONFIG).read_text(encoding="utf-8"))
        solutions = root / "source" / SOLUTIONS
        assignment = course.load(config["chapter"], solutions)
        limits = sandbox.Limits.per_question(float(config["timeout"]),
                                             memory=int(config["memory"]) << 20)
    except Exception as error:  # noqa: BLE001 - the zip is broken: say so, to everyone
        print(f"error: cannot read the autograder in {root / 'source'}: {error!r}")
        write_atomically(out, json.dumps(failure(
            "The autograder is misconfigured (its chapter could not be read): tell your "
            "instructor.")))  # fmt: skip
        return 1
    if os.geteuid() == 0:
        # without bubblewrap student code runs beside us: keep the hidden tests and the
        # results root's only (the answer and tester become users of their own)
        solutions.chmod(0o700)
        out.parent.chmod(0o755)
    isolation = isolation_here()
    if isolation is not Isolation.BWRAP:
        print("note: bubblewrap cannot start here; student code runs without it"
              + (", as users of its own" if isolation is Isolation.USERS else ", as this user"))
        problem = isolation is Isolation.USERS and unprivileged_import_fails()
        if problem:  # else every question would fail as "the setup cell failed"
            print(f"error: an unprivileged user cannot run this Python: {problem}")
            write_atomically(out, json.dumps(failure(
                "The autograder cannot run student code here (its Python is not readable by "
                "an unprivileged user): tell your instructor.")))  # fmt: skip
            return 1
    try:
        result = grader.grade_submission(root / "submission", assignment, limits, isolation,
                                         nested=True)  # fmt: skip
        # one submission: compared with the library only, flagged for the instructor
        answers = grader.submitted_answers(root / "submission", assignment, nested=True)
        matches = grader.copy_matches({result.student: answers}, assignment.released_answers)
        grader.flag_copies([result], matches, assignment)
        data = results(result, assignment)
        for flag in result.flags:  # all of them, for the instructor: stdout is hidden
            print(f"flag: {flag}")
    except Exception as error:  # noqa: BLE001 - the grader's own failure, not the student's
        print(f"error: the grader failed: {error!r}")
        data = failure("The autograder failed on this submission: tell your instructor.")
    data["execution_time"] = round(time.monotonic() - started, 1)
    write_atomically(out, json.dumps(data, indent=1))
    print(f"{out}: {number(data['score'])} points")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.gradescope", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser("run", help="grade <root>/submission (what run_autograder does)")
    grade.add_argument("--root", type=Path,
                       default=Path(os.environ.get("AUTOGRADER_ROOT") or ROOT),
                       help="Gradescope's folder (default: $AUTOGRADER_ROOT or /autograder)")
    args = parser.parse_args(argv)
    return run(args.root)


if __name__ == "__main__":
    sys.exit(main())
