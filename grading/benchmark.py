"""Speed benchmark: this grader (sandboxed, in parallel) against plain sequential
``nbgrader autograde``, on the same honest submissions of one chapter, in the same run.

    python -m grading.benchmark 02_bytes --submissions 100

Prints both wall-clock times and the ratio (the goal: at least 3x). A script, not a test:
it takes many minutes and uses every core. ``--skip-nbgrader`` times this grader alone.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from grading import build, course, sandbox
from grading.stress import honest_notebook


def lay_out(root: Path, assignment: course.Assignment, source: Path, count: int) -> None:
    """``root/source/<chapter>/`` and ``root/submitted/<student>/<chapter>/`` (nbgrader's
    course layout, which this grader reads too)."""
    nb = honest_notebook(assignment, source)
    chapter_source = root / "source" / assignment.name
    chapter_source.mkdir(parents=True)
    nbformat.write(nbformat.read(course.source_notebook(assignment.name, source), as_version=4),
                   chapter_source / assignment.notebook_name)  # fmt: skip
    for i in range(count):
        folder = root / "submitted" / f"student{i:03d}" / assignment.name
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / assignment.notebook_name)


def timed(command: list[str], cwd: Path) -> float:
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=build.tool_environment(), capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{command[2:4]} failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def nbgrader(root: Path, name: str, *command: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *command, name, "--force", "--log-level=ERROR",
            f"--CourseDirectory.root={root}",
            f"--CourseDirectory.db_url=sqlite:///{root / 'gradebook.db'}"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignment", nargs="?", default="02_bytes")
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=None, help="default: all cores")
    parser.add_argument("--source", type=Path, default=build.SOURCE)
    parser.add_argument("--skip-nbgrader", action="store_true")
    args = parser.parse_args(argv)  # fmt: skip
    if not sandbox.bwrap_works():
        print("error: bubblewrap is not available (make system-packages)", file=sys.stderr)
        return 2
    assignment = course.load(args.assignment, args.source)
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        ours_root, theirs_root = Path(tmp, "ours"), Path(tmp, "nbgrader")
        for root in (ours_root, theirs_root):
            lay_out(root, assignment, args.source, args.submissions)
        jobs = ["--jobs", str(args.jobs)] if args.jobs else []
        ours = timed([sys.executable, "-m", "grading", "grade", assignment.name, "--course",
                      str(ours_root), "--source", str(ours_root / "source"), *jobs],
                     cwd=build.ROOT)  # fmt: skip
        print(f"python -m grading grade: {args.submissions} submissions in {ours:.1f} s "
              f"({ours / args.submissions:.2f} s each)")  # fmt: skip
        if args.skip_nbgrader:
            return 0
        timed(nbgrader(theirs_root, assignment.name, "generate_assignment"), cwd=theirs_root)
        theirs = timed(nbgrader(theirs_root, assignment.name, "autograde"), cwd=theirs_root)
        print(f"nbgrader autograde:      {args.submissions} submissions in {theirs:.1f} s "
              f"({theirs / args.submissions:.2f} s each)")  # fmt: skip
        print(f"speed-up: {theirs / ours:.2f}x (goal: 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
