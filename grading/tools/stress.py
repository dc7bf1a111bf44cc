"""Stress check: grade one honest notebook many times while busy loops load every core;
every run must earn full marks (a race between the answer and tester processes, such as a
shared IPython history, shows up here as a random ``crash``).

    python -m grading.tools.stress 02_bytes --runs 30 --busy 2

Prints each run's score and status counts, then the totals; exits 1 unless every run got
full marks. A script, not a test: it takes minutes and loads the machine on purpose.
"""

from __future__ import annotations

import argparse
import collections
import copy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from grading import course, grader, sandbox
from grading.release import SOURCE


def honest_notebook(assignment: course.Assignment, source: Path) -> nbformat.NotebookNode:
    """The release with every answer cell replaced by the instructor's solution."""
    nb = nbformat.read(course.source_notebook(assignment.name, source), as_version=4)
    solutions = {course.meta(c)["grade_id"]: c.source for c in nb.cells
                 if course.meta(c).get("solution")}  # fmt: skip
    release = copy.deepcopy(assignment.release)
    for cell in release.cells:
        grade_id = course.meta(cell).get("grade_id")
        if grade_id in solutions:
            cell.source = solutions[grade_id]
    return release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.tools.stress", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignment", nargs="?", default="02_bytes")
    parser.add_argument("--runs", type=int, default=30, help="times to grade it (default 30)")
    parser.add_argument("--busy", type=int, default=2, help="busy loops (default 2)")
    parser.add_argument("--jobs", type=int, default=1, help="runs graded at once (default 1)")
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--unsafe", action="store_true", help="without the sandbox")
    args = parser.parse_args(argv)  # fmt: skip
    if not args.unsafe and not sandbox.bwrap_works():
        print("error: bubblewrap is not available (make system-packages), or pass --unsafe",
              file=sys.stderr)  # fmt: skip
        return 2
    isolation = sandbox.Isolation.NONE if args.unsafe else sandbox.Isolation.BWRAP
    assignment = course.load(args.assignment, args.source)
    nb = honest_notebook(assignment, args.source)
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(args.busy)]  # fmt: skip
    statuses: collections.Counter[str] = collections.Counter()
    bad_runs, started = 0, time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="stress-") as tmp:
            for run in range(args.runs):
                folder = Path(tmp, "submitted", f"run{run:03d}", assignment.name)
                folder.mkdir(parents=True)
                nbformat.write(nb, folder / assignment.notebook_name)
            results = grader.grade_batch(assignment, Path(tmp), jobs=args.jobs,
                                         isolation=isolation, progress=False)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    for result in results:
        auto = [q for q in result.questions if q.score is not None]
        statuses.update(q.status for q in auto)
        full = result.score == assignment.max_auto
        bad_runs += not full
        odd = "; ".join(f"{q.grade_id}: {q.status} {q.detail}" for q in auto if not q.score)
        print(f"{result.student}: {result.score:g}/{assignment.max_auto:g}"
              + ("" if full else f"  <- {odd}"))  # fmt: skip
    questions = sum(statuses.values())
    elapsed = time.monotonic() - started
    print(f"\n{assignment.name}: {len(results)} runs, {questions} questions graded under "
          f"{args.busy} busy loops in {elapsed:.0f} s; statuses: {dict(statuses)}; "
          f"crashes: {statuses['crash']}; runs below full marks: {bad_runs}")  # fmt: skip
    return 0 if bad_runs == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
