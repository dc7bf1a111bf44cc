"""The commands of ``python -m grading``, one function each, taking the parsed arguments
and returning the exit status (the arguments are parsed in ``__main__``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat

from grading import course, gradebook, grader, ingest, report, sandbox
from grading.outputs import refresh_outputs
from grading.release import RELEASE, ROOT, generate_release
from grading.results import number, shown_to_student, student_flags
from grading.sandbox import Isolation
from grading.submissions import CorruptNotebook, SubmittedNotebooks, parse


def release_command(args: argparse.Namespace) -> int:
    for path in generate_release(args.chapters or None, progress=True):
        print(path.relative_to(ROOT))
    return 0


def outputs_command(args: argparse.Namespace) -> int:
    for path in refresh_outputs(args.chapters or None, progress=True):
        print(path.relative_to(ROOT))
    return 0


def book_command(args: argparse.Namespace) -> int:
    from grading import book as site

    try:
        pages = site.render_site(progress=True)
    except site.BookError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for page in pages:
        print(page.relative_to(ROOT))
    return 0


def gradescope_command(args: argparse.Namespace) -> int:
    from grading.gradescope import bundle

    default = ROOT / "build" / "gradescope" / args.chapter / "autograder.zip"
    try:
        print(bundle(args.chapter, args.output or default, args.source, args.timeout,
                     args.memory))  # fmt: skip
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def limits(args: argparse.Namespace) -> sandbox.Limits:
    return sandbox.Limits.per_question(args.timeout, memory=args.memory << 20)


def choose_isolation(args: argparse.Namespace, required: bool) -> Isolation:
    """Bubblewrap; none only with --unsafe, or (not ``required``) for a learner's own
    ``check`` where bubblewrap cannot start."""
    if args.unsafe:
        print("warning: --unsafe: student code runs without a sandbox", file=sys.stderr)
        return Isolation.NONE
    if sandbox.bwrap_works():
        return Isolation.BWRAP
    if required:
        raise sandbox.SandboxUnavailable(
            "bubblewrap (bwrap) is not available: install it (`make system-packages`), or pass "
            "--unsafe to grade without isolation"
        )
    print("note: no bubblewrap here; checking your own notebook without a sandbox",
          file=sys.stderr)  # fmt: skip
    return Isolation.NONE


ORDINARY_USER = (
    "note: grading as an ordinary user: each submission's answer and tester processes run "
    "as this user, not as two users of their own, so an answer can signal the grading "
    "processes (a killed one costs that question), and the process limit counts all of this "
    "user's processes; grade as root to have both (docs/grading.md, 'Grading as an ordinary "
    "user')"
)


def grade_command(args: argparse.Namespace) -> int:
    try:
        isolation = choose_isolation(args, required=True)
    except sandbox.SandboxUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        assignment = course.load(args.assignment, args.source)
    except (OSError, ValueError) as error:
        print(f"error: cannot read assignment {args.assignment}: {error}", file=sys.stderr)
        return 2
    if isolation is Isolation.BWRAP and os.geteuid() != 0:
        print(ORDINARY_USER, file=sys.stderr)
    submitted = args.course / "submitted"
    submitted.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    if args.from_zip:
        notes = ingest.from_zip(args.from_zip, assignment.name, submitted, args.name_pattern)
    elif args.from_folder:
        notes = ingest.from_folder(args.from_folder, assignment.name, submitted)
    elif args.from_exchange:
        if not args.course_id:
            print("error: --from-exchange needs --course-id", file=sys.stderr)
            return 2
        notes = ingest.from_exchange(
            args.from_exchange, args.course_id, assignment.name, submitted
        )
    for note in notes:
        print(f"ingest: {note}")
    roster = None
    if args.roster:
        lines = args.roster.read_text(encoding="utf-8").splitlines()
        roster = [ingest.safe_id(line) for line in lines if line.strip()]
    # nbgrader's gradebook learns the assignment while the batch is graded
    registration = gradebook.Registration(assignment, args.course, args.source)
    results = grader.grade_batch(assignment, args.course, roster, args.jobs, limits(args),
                                 isolation=isolation, copied=args.copied)  # fmt: skip
    manual = {}
    submitted = SubmittedNotebooks(args.course, assignment.name)  # read once, for both
    try:  # formgrader and `nbgrader export` for the written answers; grades stand without
        gradebook.sync(results, assignment, args.course, args.source, registration, submitted)
        manual = gradebook.manual_scores(args.course, assignment)
    except Exception as error:  # noqa: BLE001 - report and go on
        print(f"warning: nbgrader gradebook not updated: {error}", file=sys.stderr)
    paths = report.write_reports(results, assignment, args.course, manual, notes,
                                 progress=True, submitted=submitted)
    flagged = [r for r in results if report.needs_attention(r, assignment)]
    print(f"{assignment.name}: {len(results)} students graded, {len(flagged)} need attention")
    for result in flagged:
        print(f"  {result.student}: {'; '.join(report.needs_attention(result, assignment))}")
    for name, path in paths.items():
        print(f"{name}: {path}")
    print(f"feedback: {args.course / 'feedback'}/<student>/{assignment.name}/")
    print(f"gradebook: {args.course / 'gradebook.db'} (written answers: formgrader)")
    return 0


def find_source(name: str, explicit: Path, release: Path = RELEASE) -> tuple[Path, str]:
    """The instructor's source if this checkout has it (all tests), else the release
    (visible tests only)."""
    if course.source_notebook(name, explicit).is_file():
        return explicit, "visible and hidden tests"
    if course.source_notebook(name, release).is_file():
        return release, "visible tests only"
    raise FileNotFoundError(f"no chapter {name} under {explicit} or {release}")


UNANSWERED = "YOUR ANSWER HERE"


def print_written(nb, assignment: course.Assignment, source: Path, show: bool) -> None:
    """Each written answer beside its model answer and rubric (``--rubrics``): from the
    source notebook when this checkout has it, else from a release made with the course
    setting ``c.SelfCheck.rubrics`` on; otherwise a note that there are none here."""
    if not assignment.written:
        return
    if not show:
        print("written answers are graded by hand: add --rubrics to compare yours with the "
              "model answers")  # fmt: skip
        return
    models = course.model_answers(nbformat.read(course.source_notebook(assignment.name, source),
                                                as_version=4))  # fmt: skip
    mine = {course.meta(c).get("grade_id"): c.source for c in nb.cells
            if c.cell_type == "markdown"}  # fmt: skip
    for written in assignment.written:
        text = mine.get(written.grade_id, "").strip()
        print(f"\n{written.grade_id} ({number(written.points)} points, graded by hand)")
        print("  your answer:")
        print(_indented(text if text and text != UNANSWERED else "(not answered yet)"))
        model = models.get(written.grade_id)
        if model is None:
            print("  no model answer here: this release was made without self-check "
                  "(the course setting c.SelfCheck.rubrics)")  # fmt: skip
        else:
            print("  model answer and rubric:")
            print(_indented(model))


def _indented(text: str) -> str:
    return "\n".join(f"    | {line}" for line in text.splitlines())


def check_command(args: argparse.Namespace) -> int:
    name = args.assignment or args.notebook.stem
    try:
        source, scope = find_source(name, args.source, args.release)
        isolation = choose_isolation(args, required=False)
        nb = parse(Path(args.notebook).read_bytes())
    except (FileNotFoundError, CorruptNotebook) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    assignment = course.load(name, source)
    questions, flags = grader.grade_notebook(nb, assignment, limits(args), isolation)
    print(f"{args.notebook}: {name}, {scope}")
    for flag in student_flags(flags):
        print(f"  note: {flag}")
    width = max((len(q.grade_id) for q in questions), default=10)
    for q in questions:
        score = "-" if q.score is None else number(q.score)
        print(f"  {q.grade_id:<{width}}  {score:>3}/{number(q.points):<3} {shown_to_student(q)}")
    total = sum(q.score or 0 for q in questions)
    print(f"autograded: {number(total)}/{number(assignment.max_auto)}"
          + (f" (+{number(assignment.max_written)} graded by hand)"
             if assignment.written else ""))  # fmt: skip
    print_written(nb, assignment, source, args.rubrics)
    return 0 if total == assignment.max_auto else 1


COMMANDS = {"release": release_command, "outputs": outputs_command, "grade": grade_command,
            "check": check_command, "book": book_command, "gradescope": gradescope_command}
