"""Speed benchmark: this grader (sandboxed, in parallel) against plain sequential
``nbgrader autograde``, on the same honest submissions of one chapter, in the same run.

    python -m grading.tools.benchmark 02_bytes --submissions 100

Prints both wall-clock times and the ratio (the goal: at least 5x). A script, not a test:
it takes many minutes and uses every core. ``--skip-nbgrader`` times this grader alone;
``--mix`` makes 3 in 10 submissions blank, crashing or lying, and prints the scores. The
nbgrader side is timed from its gradebook already holding the assignment
(``generate_assignment`` runs first, untimed); this grader's time includes registering it.
"""

from __future__ import annotations

import argparse
import collections
import copy
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from grading import course, sandbox
from grading.release import ROOT, SOURCE, tool_environment
from grading.tools.stress import honest_notebook

# --mix: of every ten submissions, seven honest and three that go wrong the way real ones
# do: blank (the release as handed out), a first answer that kills its own process, and a
# first answer whose result claims to equal anything.
MIX = {3: "blank", 6: "crash", 9: "liar"}
BAD_ANSWERS = {
    "crash": "import os\nos._exit(1)",
    "liar": "class Liar(int):\n    def __eq__(self, other):\n        return True\n"
            "    __hash__ = int.__hash__\n\ndef {name}(*args, **kwargs):\n    return Liar(0)",
}


def submission(assignment: course.Assignment, honest: nbformat.NotebookNode,
               kind: str) -> nbformat.NotebookNode:  # fmt: skip
    if kind == "honest":
        return honest
    if kind == "blank":
        return copy.deepcopy(assignment.release)
    nb = copy.deepcopy(honest)
    first = assignment.exercises[0]
    for cell in nb.cells:
        if course.meta(cell).get("grade_id") == first.answer_id:
            cell.source = BAD_ANSWERS[kind].format(name=(first.names or ("answer",))[0])
    return nb


def lay_out(root: Path, assignment: course.Assignment, source: Path, count: int,
            mix: bool = False) -> collections.Counter[str]:  # fmt: skip
    """``root/source/<chapter>/`` and ``root/submitted/<student>/<chapter>/`` (nbgrader's
    course layout, which this grader reads too); how many of each kind."""
    nb = honest_notebook(assignment, source)
    chapter_source = root / "source" / assignment.name
    chapter_source.mkdir(parents=True)
    nbformat.write(nbformat.read(course.source_notebook(assignment.name, source), as_version=4),
                   chapter_source / assignment.notebook_name)  # fmt: skip
    kinds: collections.Counter[str] = collections.Counter()
    for i in range(count):
        folder = root / "submitted" / f"student{i:03d}" / assignment.name
        folder.mkdir(parents=True)
        kind = MIX.get(i % 10, "honest") if mix else "honest"
        kinds[kind] += 1
        nbformat.write(submission(assignment, nb, kind), folder / assignment.notebook_name)
    return kinds


def timed(command: list[str], cwd: Path, tolerate: bool = False) -> float:
    """Seconds the command took; ``tolerate``: a failure is reported, not raised (nbgrader
    autograde exits 1 when a submission's kernel dies)."""
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=tool_environment(), capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0 and not tolerate:
        raise RuntimeError(f"{command[2:4]} failed:\n{done.stderr[-3000:]}")
    if done.returncode != 0:
        print(f"note: {' '.join(command[2:4])} exited {done.returncode}")
    return time.monotonic() - started


def nbgrader(root: Path, name: str, *command: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *command, name, "--force", "--log-level=ERROR",
            f"--CourseDirectory.root={root}",
            f"--CourseDirectory.db_url=sqlite:///{root / 'gradebook.db'}"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading.tools.benchmark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignment", nargs="?", default="02_bytes")
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=None, help="default: all cores")
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--skip-nbgrader", action="store_true")
    parser.add_argument("--mix", action="store_true",
                        help="3 in 10 submissions blank, crashing or lying (default: honest)")
    args = parser.parse_args(argv)  # fmt: skip
    if not sandbox.bwrap_works():
        print("error: bubblewrap is not available (make system-packages)", file=sys.stderr)
        return 2
    assignment = course.load(args.assignment, args.source)
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        ours_root, theirs_root = Path(tmp, "ours"), Path(tmp, "nbgrader")
        for root in (ours_root, theirs_root):
            kinds = lay_out(root, assignment, args.source, args.submissions, args.mix)
        print(f"{assignment.name}: {dict(kinds)}")
        jobs = ["--jobs", str(args.jobs)] if args.jobs else []
        ours = timed([sys.executable, "-m", "grading", "grade", assignment.name, "--course",
                      str(ours_root), "--source", str(ours_root / "source"), *jobs],
                     cwd=ROOT)  # fmt: skip
        print(f"python -m grading grade: {args.submissions} submissions in {ours:.1f} s "
              f"({ours / args.submissions:.2f} s each)")  # fmt: skip
        if args.mix:
            scores: dict[str, collections.Counter[str]] = {}
            with open(ours_root / "reports" / assignment.name / "grades.csv") as table:
                for row in csv.DictReader(table):
                    kind = MIX.get(int(row["student"][-3:]) % 10, "honest")
                    scores.setdefault(kind, collections.Counter())[row["auto_score"]] += 1
            print(f"scores out of {assignment.max_auto:g}, by kind: "
                  + "; ".join(f"{k}: {dict(v)}" for k, v in sorted(scores.items())))  # fmt: skip
        if args.skip_nbgrader:
            return 0
        timed(nbgrader(theirs_root, assignment.name, "generate_assignment"), cwd=theirs_root)
        theirs = timed(nbgrader(theirs_root, assignment.name, "autograde"), cwd=theirs_root,
                       tolerate=args.mix)  # fmt: skip
        print(f"nbgrader autograde:      {args.submissions} submissions in {theirs:.1f} s "
              f"({theirs / args.submissions:.2f} s each)")  # fmt: skip
        print(f"speed-up: {theirs / ours:.2f}x (goal: 5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
