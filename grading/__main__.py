"""``python -m grading``: build the release, refresh outputs, grade (see ``--help``).

Examples::

    python -m grading release
    python -m grading check notebooks/01_flops/01_flops.ipynb
    python -m grading grade 01_flops --from-zip ~/Downloads/submissions.zip --roster roster.txt
    python -m grading grade 01_flops --from-folder /srv/submitted
    python -m grading grade 01_flops --from-exchange /srv/nbgrader/exchange --course-id llm101
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# jsonschema (under nbformat) imports rfc3987_syntax when it is installed, and that compiles
# 38 grammars as it loads: a second of every command's start, for IRI formats that no
# notebook schema checks. This process goes without it (an import of it raises ImportError,
# which jsonschema expects); the kernels and Jupyter keep theirs.
sys.modules.setdefault("rfc3987_syntax", None)

from grading.grader import COPIED  # noqa: E402 - after the line above
from grading.release import RELEASE, ROOT, SOURCE  # noqa: E402
from grading.sandbox import Limits  # noqa: E402

COURSE = ROOT / "grading" / "course"


def _grade_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=os.cpu_count(),
                        help="submissions graded in parallel (default: all cores)")
    parser.add_argument("--timeout", type=float, default=Limits.wall_s,
                        help="seconds per question (setup, answer and tests)")
    parser.add_argument("--memory", type=int, default=4096, help="MiB per question")
    parser.add_argument("--unsafe", action="store_true",
                        help="run student code without the bubblewrap sandbox")
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="the instructor's notebooks (default: solutions/)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the command: each is a function of grading.commands."""
    parser = argparse.ArgumentParser(
        prog="python -m grading", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    publish = commands.add_parser("release", help="regenerate notebooks/ from solutions/")
    publish.add_argument("chapters", nargs="*", help="chapter folders (default: all)")
    run = commands.add_parser("outputs", help="re-execute solutions/ in place and clean them")
    run.add_argument("chapters", nargs="*", help="chapter folders, e.g. 01_flops (default: all)")

    grade = commands.add_parser(
        "grade", help="ingest submissions, autograde, write feedback, CSV and summary"
    )
    grade.add_argument("assignment", help="chapter folder, e.g. 01_flops")
    grade.add_argument("--course", type=Path, default=COURSE,
                       help="course folder (submitted/, grades/, feedback/, reports/)")
    source = grade.add_mutually_exclusive_group()
    source.add_argument("--from-zip", type=Path, help="an LMS zip download (Canvas, Moodle…)")
    source.add_argument("--from-folder", type=Path, help="a folder of <student>/<assignment>/")
    source.add_argument("--from-exchange", type=Path, help="nbgrader's exchange root")
    grade.add_argument("--course-id", help="nbgrader course id (with --from-exchange)")
    grade.add_argument("--name-pattern", action="append",
                       help="zip member regex with (?P<student_id>…) and (?P<file_id>…), "
                            "as nbgrader zip_collect's named_regexp (repeatable)")
    grade.add_argument("--roster", type=Path,
                       help="file with one student id per line: others are flagged unknown, "
                            "missing ones get a zero")  # fmt: skip
    grade.add_argument("--copied", choices=COPIED, default="flag",
                       help="an answer that matches the library or another submission: "
                            "flag it for the instructor (default), or also score it 0")
    _grade_arguments(grade)

    check = commands.add_parser("check", help="check one notebook, print each question's result")
    check.add_argument("notebook", type=Path)
    check.add_argument("--assignment", help="chapter (default: the notebook's file name)")
    check.add_argument("--rubrics", action="store_true",
                       help="show each written answer beside its model answer and rubric")
    check.add_argument("--release", type=Path, default=RELEASE,
                       help="the student release, when --source has no such chapter "
                            "(default: notebooks/)")  # fmt: skip
    _grade_arguments(check)
    commands.add_parser("book", help="render solutions/ as a static HTML site in build/book/")
    scope = commands.add_parser("gradescope", help="write a Gradescope autograder.zip")
    scope.add_argument("chapter", help="chapter folder, e.g. 02_bytes")
    scope.add_argument("--output", type=Path,
                       help="default: build/gradescope/CHAPTER/autograder.zip")
    scope.add_argument("--timeout", type=float, default=Limits.wall_s,
                       help="seconds per question")
    scope.add_argument("--memory", type=int, default=4096, help="MiB per question")
    scope.add_argument("--source", type=Path, default=SOURCE,
                       help="the instructor's notebooks (default: solutions/)")

    args = parser.parse_args(argv)
    from grading.commands import COMMANDS  # after parsing: --help imports no grader

    return COMMANDS[args.command](args)

if __name__ == "__main__":
    sys.exit(main())
