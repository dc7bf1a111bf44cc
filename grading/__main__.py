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

from grading import build

COURSE = build.ROOT / "grading" / "course"


def _grade_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=os.cpu_count(),
                        help="submissions graded in parallel (default: all cores)")
    parser.add_argument("--timeout", type=float, default=60,
                        help="seconds per question (setup, answer and tests)")
    parser.add_argument("--memory", type=int, default=4096, help="MiB per question")
    parser.add_argument("--unsafe", action="store_true",
                        help="run student code without the bubblewrap sandbox")
    parser.add_argument("--source", type=Path, default=build.SOURCE,
                        help="the instructor's notebooks (default: solutions/)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
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
    _grade_arguments(grade)

    check = commands.add_parser("check", help="check one notebook, print each question's result")
    check.add_argument("notebook", type=Path)
    check.add_argument("--assignment", help="chapter (default: the notebook's file name)")
    check.add_argument("--rubrics", action="store_true",
                       help="show each written answer beside its model answer and rubric")
    check.add_argument("--release", type=Path, default=build.RELEASE,
                       help="the student release, when --source has no such chapter "
                            "(default: notebooks/)")  # fmt: skip
    _grade_arguments(check)
    commands.add_parser("book", help="render solutions/ as a static HTML site in build/book/")
    scope = commands.add_parser("gradescope", help="write a Gradescope autograder.zip")
    scope.add_argument("chapter", help="chapter folder, e.g. 02_bytes")
    scope.add_argument("--output", type=Path,
                       help="default: build/gradescope/CHAPTER/autograder.zip")
    scope.add_argument("--timeout", type=float, default=60, help="seconds per question")
    scope.add_argument("--memory", type=int, default=4096, help="MiB per question")
    scope.add_argument("--source", type=Path, default=build.SOURCE,
                       help="the instructor's notebooks (default: solutions/)")

    args = parser.parse_args(argv)
    if args.command == "release":
        for path in build.release(args.chapters or None, progress=True):
            print(path.relative_to(build.ROOT))
    elif args.command == "outputs":
        for path in build.outputs(args.chapters or None, progress=True):
            print(path.relative_to(build.ROOT))
    elif args.command == "grade":
        from grading.cli import grade_command

        return grade_command(args)
    elif args.command == "check":
        from grading.cli import check_command

        return check_command(args)
    elif args.command == "book":
        from grading.book import main as book_main

        return book_main()
    elif args.command == "gradescope":
        from grading import gradescope

        default = build.ROOT / "build" / "gradescope" / args.chapter / "autograder.zip"
        output = args.output or default
        try:
            print(gradescope.bundle(args.chapter, output, args.source, args.timeout, args.memory))
        except (OSError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
