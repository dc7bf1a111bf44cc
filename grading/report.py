"""What a batch produces for people: the grades CSV, the instructor's summary with a plot
(every flag), and each student's feedback page (which never shows hidden tests, nor an
instructor-only flag: :func:`results.shown_to_student`, :func:`results.student_flags`)."""

from __future__ import annotations

import csv
import functools
import hashlib
import html
import io
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from grading.course import Assignment
from grading.results import StudentResult, number, student_flags, verdict, write_atomically
from grading.submissions import SubmittedNotebooks, graded_notebook

ATTENTION = {"timeout", "limit", "crash", "corrupt", "missing", "setup"}


def question_ids(assignment: Assignment) -> list[str]:
    return [e.test_id for e in assignment.exercises] + [w.grade_id for w in assignment.written]


def grades_csv(
    results: list[StudentResult],
    assignment: Assignment,
    manual: dict[tuple[str, str], float] | None = None,
) -> str:
    """One row per student: each question's score (a written answer's is blank until
    graded by hand in formgrader: ``manual``), the totals and maxima, and the flags."""
    ids = question_ids(assignment)
    manual = manual or {}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", "assignment", *ids, "auto_score", "auto_max", "written_score",
                     "written_max", "total", "max", "flags"])  # fmt: skip
    for result in results:
        scores = {q.grade_id: q.score for q in result.questions}
        written = {w.grade_id: manual.get((result.student, w.grade_id))
                   for w in assignment.written}  # fmt: skip
        scores.update({k: v for k, v in written.items() if v is not None})
        graded = [v for v in written.values() if v is not None]
        written_score = sum(graded) if graded else None
        writer.writerow(
            [result.student, assignment.name,
             *(number(scores.get(i)) for i in ids),
             number(result.score), number(assignment.max_auto),
             number(written_score), number(assignment.max_written),
             number(result.score + (written_score or 0)),
             number(assignment.max_auto + assignment.max_written),
             "; ".join(result.flags)]
        )  # fmt: skip
    return out.getvalue()


def reasons_csv(results: list[StudentResult]) -> str:
    """One row per student and question: the score and why (status and detail)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", "question", "score", "points", "status", "reason"])
    for result in results:
        for q in result.questions:
            writer.writerow([result.student, q.grade_id, number(q.score), number(q.points),
                             q.status, q.detail])  # fmt: skip
    return out.getvalue()


def needs_attention(result: StudentResult, assignment: Assignment) -> list[str]:
    reasons = list(result.flags)
    reasons += [f"{q.grade_id}: {q.status}" for q in result.questions if q.status in ATTENTION]
    if assignment.max_auto and result.score < assignment.max_auto / 2:
        reasons.append(f"score {number(result.score)}/{number(assignment.max_auto)}")
    return list(dict.fromkeys(reasons))


def summary(
    results: list[StudentResult],
    assignment: Assignment,
    plot: Path | None,
    notes: list[str] | None = None,
) -> str:
    """Markdown: per question the score distribution and statuses; who needs attention;
    what the ingest skipped."""
    lines = [f"# {assignment.name}: {len(results)} students", ""]
    lines += ["| question | points | mean | full marks | zero | statuses |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for exercise in assignment.exercises:
        rows = [q for r in results for q in r.questions if q.grade_id == exercise.test_id]
        scores = [q.score or 0.0 for q in rows]
        statuses: dict[str, int] = {}
        for q in rows:
            statuses[q.status] = statuses.get(q.status, 0) + 1
        mean = sum(scores) / len(scores) if scores else 0.0
        lines.append(
            f"| {exercise.test_id} | {number(exercise.points)} | {mean:.2f} "
            f"| {sum(s == exercise.points for s in scores)} | {sum(s == 0 for s in scores)} "
            f"| {', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))} |"
        )
    for written in assignment.written:
        lines.append(f"| {written.grade_id} | {number(written.points)} | graded by hand | | | |")
    totals = [r.score for r in results]
    if totals:
        lines += ["", f"Autograded total (of {number(assignment.max_auto)}): "
                  f"mean {sum(totals) / len(totals):.2f}, min {number(min(totals))}, "
                  f"max {number(max(totals))}."]  # fmt: skip
    if plot is not None:
        lines += ["", f"![score distribution]({plot.name})"]
    attention = [(r.student, needs_attention(r, assignment)) for r in results]
    attention = [(s, why) for s, why in attention if why]
    lines += ["", f"## Needs attention ({len(attention)})", ""]
    lines += [f"- **{s}**: {'; '.join(why)}" for s, why in attention] or ["Nobody."]
    if notes:
        lines += ["", f"## Files skipped when ingesting ({len(notes)})", ""]
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def plot_distribution(results: list[StudentResult], assignment: Assignment, path: Path) -> None:
    """Per question: how many students got full marks, zero, or something else; plus the
    histogram of autograded totals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ids = [e.test_id for e in assignment.exercises]
    scores = {(r.student, q.grade_id): q.score for r in results for q in r.questions}
    full = [sum(scores.get((r.student, e.test_id)) == e.points for r in results)
            for e in assignment.exercises]  # fmt: skip
    zero = [len(results) - f for f in full]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4), dpi=80)
    left.barh(ids, full, color="tab:green", label="full marks")
    left.barh(ids, zero, left=full, color="tab:red", label="zero")
    left.set_xlabel("students")
    left.legend(loc="lower right")
    left.invert_yaxis()
    right.hist([r.score for r in results], bins=max(1, int(assignment.max_auto) + 1),
               range=(-0.5, assignment.max_auto + 0.5), color="tab:blue")  # fmt: skip
    right.set_xlabel(f"autograded score (of {number(assignment.max_auto)})")
    right.set_ylabel("students")
    figure.suptitle(assignment.name)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def feedback_notebook(
    result: StudentResult, assignment: Assignment, submission: nbformat.NotebookNode | None
) -> nbformat.NotebookNode:
    """What the student gets back: a score table, then :func:`graded_notebook`."""
    nb = graded_notebook(result, assignment, submission)
    header = [f"# Feedback: {assignment.name}", "",
              f"Student: {result.student}. Autograded score: {number(result.score)} of "
              f"{number(assignment.max_auto)}; written answers "
              f"({number(assignment.max_written)} points) are graded by hand.", "",
              "| question | score | result |", "|---|---|---|"]  # fmt: skip
    for q in result.questions:  # the verdict only: the details are under each test cell
        header.append(f"| {q.grade_id} | {number(q.score) or '–'} / {number(q.points)} "
                      f"| {html.escape(verdict(q.status))} |")  # fmt: skip
    flags = student_flags(result.flags)
    if flags:
        header += ["", "Notes:", *(f"- {html.escape(f)}" for f in flags)]
    summary_cell = nbformat.v4.new_markdown_cell("\n".join(header))
    summary_cell.id = "feedback-summary"  # fixed, so a rerun writes the same page
    nb.cells.insert(0, summary_cell)
    return nb


@functools.cache
def _exporter():
    """One exporter for the whole batch. Most cells of a feedback page are the same for
    every student (the chapter's text, the setup and the tests), so the costly per-cell
    filters (syntax highlighting, markdown, bleach's sanitiser) remember their results;
    and the page is not parsed again by BeautifulSoup (nbconvert's pass that adds
    ``alt`` text to images and ``tabindex`` to lab-template cells: feedback pages have
    neither). Together most of a page's time."""
    from jinja2 import pass_context
    from nbconvert import HTMLExporter
    from nbconvert.exporters.templateexporter import TemplateExporter
    from nbconvert.filters import Highlight2HTML, clean_html
    from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

    seen: dict[tuple, str] = {}

    def remember(key: tuple, make) -> str:
        if key not in seen:
            seen[key] = make()
        return seen[key]

    class Feedback(HTMLExporter):
        def from_notebook_node(self, nb, resources=None, **kw):
            info = nb.metadata.get("language_info", {})
            lexer = info.get("pygments_lexer", info.get("name"))
            highlight = Highlight2HTML(pygments_lexer=lexer, parent=self)

            def highlight_code(source, language=None, metadata=None):
                key = ("code", source, language, lexer, repr(metadata))
                return remember(key, lambda: highlight(source, language, metadata))

            self.register_filter("highlight_code", highlight_code)
            resources = self._init_resources(resources)
            self.register_filter("filter_data_type", WidgetsDataTypeFilter(
                notebook_metadata=self._nb_metadata, parent=self, resources=resources))
            return TemplateExporter.from_notebook_node(self, nb, resources, **kw)

    exporter = Feedback(template_name="classic", exclude_input_prompt=True,
                        exclude_output_prompt=True)  # fmt: skip
    markdown = exporter.markdown2html

    @pass_context
    def markdown2html(context, source):
        if context.get("cell", {}).get("attachments"):
            return markdown(context, source)
        return remember(("markdown", source), lambda: markdown(context, source))

    exporter.register_filter("markdown2html", markdown2html)
    exporter.register_filter("clean_html", lambda html: remember(
        ("clean", str(html)), lambda: clean_html(html)))  # fmt: skip
    return exporter


def feedback_html(
    result: StudentResult, assignment: Assignment, submission: nbformat.NotebookNode | None
) -> str:
    body, _ = _exporter().from_notebook_node(feedback_notebook(result, assignment, submission))
    return body


def write_reports(
    results: list[StudentResult],
    assignment: Assignment,
    course: Path,
    manual: dict[tuple[str, str], float] | None = None,
    notes: list[str] | None = None,
    progress: bool = False,
    submitted: SubmittedNotebooks | None = None,
) -> dict[str, Path]:
    """grades.csv, reasons.csv, summary.md and summary.png under
    ``course/reports/<assignment>/``, and
    ``course/feedback/<student>/<assignment>/<assignment>.html`` for each student.
    ``submitted``: the batch's notebooks, when the gradebook has read them already."""
    submitted = submitted or SubmittedNotebooks(course, assignment.name)
    reports = course / "reports" / assignment.name
    plot = reports / "summary.png"
    plot_distribution(results, assignment, plot)
    written = {"csv": reports / "grades.csv", "reasons": reports / "reasons.csv",
               "summary": reports / "summary.md", "plot": plot}  # fmt: skip
    write_atomically(written["csv"], grades_csv(results, assignment, manual))
    write_atomically(written["reasons"], reasons_csv(results))
    write_atomically(written["summary"], summary(results, assignment, plot, notes))
    for result in tqdm(results, desc="feedback", unit="student", disable=not progress):
        target = course / "feedback" / result.student / assignment.name
        # The page depends only on the stored result (keyed by submission and source):
        # unchanged results keep their pages, so a rerun is quick and writes nothing.
        made_from = hashlib.sha256(result.to_json().encode()).hexdigest()
        stamp = target / ".made-from"
        if stamp.is_file() and stamp.read_text() == made_from:
            continue
        page = feedback_html(result, assignment, submitted.of(result))
        write_atomically(target / f"{assignment.name}.html", page)
        write_atomically(stamp, made_from)
    return written
