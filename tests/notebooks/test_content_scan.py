"""A content scan of chapters 6-10: their prose teaches the subject, and nothing else.

The rules (CONTRIBUTING.md's "Prose"), made precise. What is scanned: the markdown cells of
each chapter's source (``solutions/``) and of its release (``notebooks/``), model answers
included, and for terms also the text a code cell printed (a table's column label is prose
a reader must understand). What fails, each failure naming the chapter and the cell:

* **an internal file**: a path into ``tests/``, ``helpers/``, ``grading/``, ``solutions/``
  or ``notebooks/``, or any ``*.py`` or ``*.ipynb`` name (``FILE``). A module's dotted name
  (``helpers.serving``, ``latency.prefill_time``) is the library's API, not a file, and
  ``docs/sources.md`` is where the book's citations live, so neither is one.
  (``tests/repository/test_repository.py`` checks that every path a text names exists;
  this scan says which paths a chapter's prose may name at all.)
* **talk of the tests**: "the tests", hidden or visible tests or checks, a test cell, the
  grader, autograding, the judge (``TEST_TALK``). An exercise says what its function must
  return and why; how it is checked is the test cell's own business. A test in the
  subject's sense ("the real test", "a follow-up question that tests the split") passes.
* **a term used before it is defined**: each term of ``TERMS`` (a regex of the term, and
  one of its defining phrase) must be defined at or before its first use in each chapter
  that uses it; a use inside the defining phrase itself does not count.
* **too many words**: more than ``WORD_LIMIT`` words of markdown in the source, model
  answers (between ``### BEGIN SOLUTION`` and ``### END SOLUTION``) excluded; a word is
  what ``str.split`` returns, the count the chapters' commits have reported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ("06_ttft_tpot", "07_batching", "08_serving", "09_capstone", "10_parallel")
KINDS = ("solutions", "notebooks")
WORD_LIMIT = 3500

FILE = re.compile(
    r"(?<![\w./:-])(?:(?:tests|helpers|grading|solutions|notebooks)/[\w./<>*-]*"
    r"|[\w-]+(?:/[\w.-]+)*\.(?:py|ipynb)\b)"
)
TEST_TALK = re.compile(
    r"\b(?:hidden|visible)\s+(?:tests?|checks?|judge)\b"
    r"|\bthe\s+(?:book's\s+|chapter's\s+|exercise's\s+)?tests\b"
    r"|\btest\s+cells?\b|\b(?:auto)?grad(?:er|ers|ing)\b|\bautograd\w*|\bthe\s+judge\b",
    re.I,
)
MODEL_ANSWER = re.compile(r"### BEGIN SOLUTION.*?### END SOLUTION", re.S)


def _term(words: str) -> str:
    """A phrase's regex that matches across a line break or a hyphen."""
    return r"\s+".join(re.escape(w) for w in words.split()).replace(r"\-", r"[-\s]")


# term: (a regex of the term, a regex of its defining phrase), each across line breaks.
TERMS = {
    "CUDA graphs": (r"CUDA\s+graphs?", r"CUDA\s+graphs?\W{1,4}(?:which\s+)?record"),
    "GEMV": (r"\bGEMVs?\b", r"matrix[-–\s]+vector\s+product\s+\(\**GEMV\**\)"),
    "Poisson process": (r"\bPoisson\b", r"Poisson\s+process[^()]{0,40}\(independent\s+arrivals"),
    "geometric lengths": (r"\bgeometric\b", r"geometric\W{1,3}(?:[^()]{0,60}\()?many\s+short"),
    "preemption": (r"\bpreempt", r"\*\*preempts\*\*\s+a\s+sequence:\s+it\s+stops"),
    "GPTQ/AWQ": (r"\b(?:GPTQ|AWQ)\b",
                 r"GPTQ[^.]{0,80}AWQ[^.(]{0,80}\(two\s+(?:post-training\s+)?methods"),
    "FasterTransformer": (r"\bFasterTransformer\b",
                          r"FasterTransformer\s+\(NVIDIA's\s+inference\s+library"),
    "ShareGPT": (r"\bShareGPT\b", r"ShareGPT\s+\(conversations"),
    "OPT": (r"\bOPT\b", r"\bOPT\s+\(Meta's\s+open\s+models"),
    "external fragmentation": (_term("external fragmentation"),
                               r"external\s+fragmentation\*{0,2}[^.]{0,40}free\s+memory\s+split"),
    "time between tokens (ITL)": (r"time[-\s]+between[-\s]+(?:consecutive[-\s]+)?tokens|\bTBT\b",
                                  r"time\s+between\s+consecutive\s+tokens\s+of\s+a\s+stream\s+"
                                  r"\(the\s+inter-token\s+latency,\s+ITL\)"),
    "radix tree": (_term("radix tree"), r"radix\s+tree,\s+a\s+tree\s+whose"),
    "tensor-parallel": (r"tensor[-\s]parallel",
                        r"tensor-parallel\s+group,\s+GPUs\s+that\s+each\s+hold\s+a\s+slice"),
    "NVLink": (r"\bNVLink\b", r"NVLink,\s+the\s+GPU-to-GPU\s+link"),
    "TV": (r"\bTV\b", r"\(\**TV\**\)|\bTV\b[^.]{0,20}total\s+variation|total\s+variation"
                      r"\s+distance\s+\(\**TV\**\)"),
}


def notebook(chapter: str, kind: str) -> dict:
    return json.loads((ROOT / kind / chapter / f"{chapter}.ipynb").read_text(encoding="utf-8"))


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def prose(nb: dict) -> list[tuple[int, str]]:
    """(cell index, markdown) of every markdown cell."""
    return [(i, _text(c["source"])) for i, c in enumerate(nb["cells"])
            if c["cell_type"] == "markdown"]  # fmt: skip


def shown(nb: dict) -> list[tuple[int, str]]:
    """(cell index, text) of what a reader reads: markdown, and the text code cells print."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            found.append((i, _text(cell["source"])))
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            if text:
                found.append((i, _text(text)))
    return found


def _where(chapter: str, cell: int, text: str, match: re.Match) -> str:
    line = text[:match.start()].count("\n") + 1
    return f"{chapter} cell {cell} line {line}: {match.group(0)!r}"


def internal_files(nb: dict, chapter: str) -> list[str]:
    return [_where(chapter, i, t, m) for i, t in prose(nb) for m in FILE.finditer(t)]


def talk_of_tests(nb: dict, chapter: str) -> list[str]:
    return [_where(chapter, i, t, m) for i, t in prose(nb) for m in TEST_TALK.finditer(t)]


def terms_before_definition(nb: dict, chapter: str, terms: dict = TERMS) -> list[str]:
    """Each term a chapter uses that it defines only later, or never."""
    problems = []
    texts = shown(nb)
    for term, (use, define) in terms.items():
        uses = [(i, m) for i, t in texts for m in re.finditer(use, t)]
        if not uses:
            continue
        definition = next(((i, m) for i, t in prose(nb) for m in re.finditer(define, t)), None)
        if definition is None:
            cell, match = uses[0]
            problems.append(f"{chapter} cell {cell}: {term!r} is used ({match.group(0)!r}) "
                            "and never defined")  # fmt: skip
            continue
        at, span = definition[0], definition[1].span()
        inside = [(i, m) for i, m in uses if not (i == at and span[0] <= m.start() < span[1])]
        cell, match = inside[0] if inside else (at, definition[1])
        if (cell, match.start()) < (at, span[0]):
            problems.append(f"{chapter} cell {cell}: {term!r} is used ({match.group(0)!r}) "
                            f"before cell {at} defines it")  # fmt: skip
    return problems


def prose_words(nb: dict) -> int:
    return sum(len(MODEL_ANSWER.sub("", t).split()) for _, t in prose(nb))


CASES = [(chapter, kind) for chapter in CHAPTERS for kind in KINDS]


@pytest.mark.parametrize("chapter, kind", CASES)
def test_prose_names_no_internal_file(chapter, kind):
    found = internal_files(notebook(chapter, kind), f"{kind}/{chapter}")
    assert not found, "internal files named in prose:\n" + "\n".join(found)


@pytest.mark.parametrize("chapter, kind", CASES)
def test_prose_does_not_talk_of_the_tests(chapter, kind):
    found = talk_of_tests(notebook(chapter, kind), f"{kind}/{chapter}")
    assert not found, "prose about the tests, not the subject:\n" + "\n".join(found)


@pytest.mark.parametrize("chapter, kind", CASES)
def test_each_term_is_defined_at_first_use(chapter, kind):
    found = terms_before_definition(notebook(chapter, kind), f"{kind}/{chapter}")
    assert not found, "terms used before their definition:\n" + "\n".join(found)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_prose_stays_within_the_word_limit(chapter):
    words = prose_words(notebook(chapter, "solutions"))
    assert words <= WORD_LIMIT, f"{chapter}: {words:,} words of prose, over {WORD_LIMIT:,}"


# ------------------------------------------------------------------- the scanner itself


def _nb(*cells) -> dict:
    """A notebook of markdown cells (str) and code cells ((source, printed))."""
    made = []
    for cell in cells:
        if isinstance(cell, str):
            made.append({"cell_type": "markdown", "source": cell})
        else:
            source, printed = cell
            made.append({"cell_type": "code", "source": source,
                         "outputs": [{"output_type": "stream", "text": printed}]})
    return {"cells": made}


@pytest.mark.parametrize("text", [
    "The reference lives in helpers/serving/planner.py.",
    "See `tests/notebooks/mutants/ch09.py` for the wrong answers.",
    "Open 07_batching.ipynb first.",
    "grading/course.py reads it.",
    "the file planner.py holds it",
])  # fmt: skip
def test_the_scan_finds_an_internal_file(text):
    (problem,) = internal_files(_nb("Intro.", text), "99_x")
    assert problem.startswith("99_x cell 1 line 1:")


@pytest.mark.parametrize("text", [
    "`helpers.serving` simulates it; `latency.prefill_time` is the roofline's.",
    "Cite docs/sources.md, or see https://github.com/vllm-project/vllm/blob/main/setup.py.",
    "A 1.5x speedup, e.g. at 0.5 s.",
])  # fmt: skip
def test_the_scan_passes_api_names_citations_and_urls(text):
    assert internal_files(_nb(text), "99_x") == []


@pytest.mark.parametrize("text", [
    "The hidden tests use other presets.",
    "The visible test uses this deployment.",
    "the tests pass a fake device",
    "The grader runs each cell alone.",
    "on deployments drawn when the judge runs",
    "This test cell checks it.",
    "The book's tests run the same check.",
])  # fmt: skip
def test_the_scan_finds_talk_of_the_tests(text):
    assert len(talk_of_tests(_nb(text), "99_x")) == 1


@pytest.mark.parametrize("text", [
    "the percentiles of TTFT and TPOT are the real test",
    "a follow-up question that tests the split",
    "Here we test it: time one layer.",
    "Return a plain `int`, 0 if no batch meets the target.",
])  # fmt: skip
def test_the_scan_passes_the_subjects_tests(text):
    assert talk_of_tests(_nb(text), "99_x") == []


def test_the_scan_finds_a_term_used_before_its_definition():
    late = _nb("Requests arrive as a Poisson process.",
               "A Poisson process (independent arrivals, exponential gaps) ...")
    (problem,) = terms_before_definition(late, "99_x")
    assert "cell 0" in problem and "before cell 1" in problem and "Poisson" in problem
    never = _nb("Then a radix tree holds them.")
    (problem,) = terms_before_definition(never, "99_x")
    assert "'radix tree'" in problem and "never defined" in problem


def test_the_scan_counts_a_printed_label_as_a_use():
    printed = _nb(("print(table)", "alpha  first token vs p (TV)\n"),
                  "The last column is the total variation distance (TV) between them.")
    (problem,) = terms_before_definition(printed, "99_x")
    assert "'TV'" in problem and "cell 0" in problem


def test_the_scan_passes_a_term_defined_at_first_use():
    ok = _nb("Requests arrive as a Poisson process at 3 per second (independent arrivals, "
             "exponential gaps).", "Later, Poisson arrivals again.",
             "A step of one row is a\nmatrix–vector product (**GEMV**); the GEMV streams.")
    assert terms_before_definition(ok, "99_x") == []


def test_the_word_count_leaves_out_model_answers():
    nb = _nb("one two three", "Question four five\n### BEGIN SOLUTION\nmany words here\n"
             "### END SOLUTION\n", ("x = 1", "code is not prose"))
    assert prose_words(nb) == 6
