"""A content scan of every chapter: its prose teaches the subject, and nothing else.

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
* **an exercise that does not say what its answer may call**: the grader refuses every library
  call the model solution does not make, so the brief (the markdown cell before the answer
  cell) names the calls allowed, or says none or torch only (``ALLOWED_CALLS``).
* **a claim its outputs contradict** (the source's stored outputs): a superlative over a
  near-tie, a "fits" or "does not fit" against the table beside it (the last section).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ("01_flops", "02_bytes", "03_roofline", "04_timing", "05_matmuls", "06_ttft_tpot",
            "07_batching", "08_serving", "09_capstone", "10_parallel")
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
# How a brief says what its answer may call ("The answer may call only ...", "Use torch only",
# "Library calls allowed: ...", "no `memory` function is available to your answer").
ALLOWED_CALLS = re.compile(
    r"may\s+(?:call|use)|library\s+calls\s+allowed|use\s+only|only\s+library|needs\s+no\s+library"
    r"|no\s+(?:other\s+)?(?:library|`\w+`)\s+(?:function|call)|torch\s+only|plain\s+Python",
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


def briefs_without_allowed_calls(nb: dict, chapter: str) -> list[str]:
    """Each coded exercise whose brief does not say what its answer may call."""
    cells, found = nb["cells"], []
    for index, cell in enumerate(cells):
        meta = cell["metadata"].get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta.get("solution") or meta.get("grade"):
            continue
        brief = next(_text(c["source"]) for c in reversed(cells[:index])
                     if c["cell_type"] == "markdown")
        if not ALLOWED_CALLS.search(brief):
            found.append(f"{chapter} cell {index} ({meta.get('grade_id')}): the brief names no "
                         "allowed calls")
    return found


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
def test_every_exercise_says_what_its_answer_may_call(chapter):
    found = briefs_without_allowed_calls(notebook(chapter, "solutions"), chapter)
    assert not found, "\n".join(found)


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


def test_the_scan_finds_a_brief_without_allowed_calls():
    answer = {"cell_type": "code", "source": "def f():\n    pass\n",
              "metadata": {"nbgrader": {"solution": True, "grade": False, "grade_id": "ch00_f"}}}
    silent = {"cell_type": "markdown", "source": "### Exercise\nWrite `f`.", "metadata": {}}
    named = {"cell_type": "markdown", "metadata": {},
             "source": "### Exercise\nWrite `f`. The answer may call only `flops.x`."}
    assert briefs_without_allowed_calls({"cells": [silent, answer]}, "ch")
    assert not briefs_without_allowed_calls({"cells": [named, answer]}, "ch")


def test_the_word_count_leaves_out_model_answers():
    nb = _nb("one two three", "Question four five\n### BEGIN SOLUTION\nmany words here\n"
             "### END SOLUTION\n", ("x = 1", "code is not prose"))
    assert prose_words(nb) == 6


# ------------------------------------------- claims held against the outputs beside them
#
# A comparative sentence must agree with the figures printed next to it (issue 36). Two
# checks read a chapter's stored outputs (so ``solutions/`` only: a release has none):
#
# * **a superlative beside a near-tie**: a sentence (or a printed line) that names a winner
#   ("the least", "the best", "is fastest", "highest ... at"; not "is not the best") whose
#   figure, in a table printed beside it, is the column's extreme with another row within
#   ``NEAR_TIE`` (2%) of it, and does not say so ("within", "a tie", "close", ...). The
#   figure is a number the sentence quotes (a measured one: decimals, or 100 and more) or the
#   row it names ("at T = 16", "batch 32"), whose extreme cells are then checked.
# * **a "fits" or "does not fit" against its table**: a clause that says a pair of numbers
#   ("256 at 8,192") fits or does not fit, against a printed row holding both numbers, in
#   that order, and a verdict (yes/no, fits/does not fit).
#
# "Beside" is the outputs of the two code cells before a markdown cell and the one after it.

NEAR_TIE = 0.02
_VALUE = re.compile(r"^[(\[]*([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
                    r"(?:[%x×]|ms|µs|us|s|GB|MB|B|tok/s)?[)\],;:]*$")
_IN_TEXT = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_SUPERLATIVE = re.compile(
    r"\b(?:(?:the|is|are|was)\s+(?:least|best|lowest|highest|fastest|slowest|cheapest|"
    r"smallest|largest|fewest|worst)|(?:least|best|lowest|highest|fastest|cheapest)\s+"
    r"(?:\w+\s+){0,2}(?:measured|at|of|is))\b", re.I)
_ACKNOWLEDGED = re.compile(r"\b(?:tie|ties|tied|near-tie|within|about the same|close|"
                           r"indistinguishable|spread|noise|margin|ahead|behind)\b", re.I)
_ROW_NAMED = re.compile(r"\b(?:at|for|batch|degree)\s+(?:[A-Za-z*]+\s*=\s*)?(\d[\d,]*)\b")
_FIT_NO = re.compile(r"\b(?:does|do|did|would|will|can)(?:\s+not|n't)\s+fit\b|\bcannot\s+fit\b"
                     r"|\bneeds?\s+more\b[^;]*?\bthan\b[^;]*?\bholds?\b"
                     r"|\bno\s+longer\s+fits?\b", re.I)
_FIT_YES = re.compile(r"\bfits?\b", re.I)
_CLAUSE = re.compile(r";|\bbut\b|\bwhile\b|\bwhereas\b", re.I)
_VERDICTS = {"yes": True, "no": False, "true": True, "false": False}


def _value(token: str) -> float | None:
    found = _VALUE.match(token)
    return float(found.group(1).replace(",", "")) if found else None


def _numbers(text: str) -> list[float]:
    """The numbers a sentence quotes, outside math and code spans."""
    text = re.sub(r"\$[^$]*\$|`[^`]*`", " ", text)
    return [float(m.group(0).replace(",", "")) for m in _IN_TEXT.finditer(text)]


def _printed(cell: dict) -> str:
    return "".join(_text(o.get("text") or o.get("data", {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))  # fmt: skip


def printed_tables(text: str) -> list[tuple[list[list[str]], dict[int, dict[int, float]]]]:
    """Each run of two or more consecutive printed lines with the same number of words: its
    rows (words) and its numeric columns, {column: {row: value}}."""
    found, block = [], []

    def close() -> None:
        if len(block) >= 2:
            columns: dict[int, dict[int, float]] = {}
            for r, words in enumerate(block):
                for c, word in enumerate(words):
                    if (v := _value(word)) is not None:
                        columns.setdefault(c, {})[r] = v
            found.append((list(block), columns))

    for line in text.splitlines():
        words = line.split()
        if block and len(words) != len(block[0]):
            close()
            block = []
        if words:
            block.append(words)
    close()
    return found


def _ties(column: dict[int, float], row: int) -> list[float]:
    """Other rows' values within NEAR_TIE of ``row``'s, if ``row`` is the column's extreme."""
    v = column[row]
    if len(column) < 2 or not v or v not in (max(column.values()), min(column.values())):
        return []
    return [w for r, w in column.items() if r != row and abs(w - v) <= NEAR_TIE * abs(v)]


def near_tie_superlatives(sentence: str, printed: list[str]) -> list[str]:
    """What ties a sentence's superlative to a near-tie in the tables printed beside it."""
    named_winner = [m for m in _SUPERLATIVE.finditer(sentence)
                    if not re.search(r"\bnot\s*$", sentence[:m.start()])]  # "is not the best"
    if not named_winner or _ACKNOWLEDGED.search(sentence):
        return []
    quoted = [v for v in _numbers(sentence) if v != int(v) or v >= 100]
    named = {float(m.group(1).replace(",", "")) for m in _ROW_NAMED.finditer(
        re.sub(r"\$[^$]*\$|`[^`]*`", " ", sentence))}
    found = set()
    for text in printed:
        for rows, columns in printed_tables(text):
            for c, column in columns.items():
                for r, v in column.items():
                    # a row the sentence names by its label: every other cell of that row
                    labels = [k for k, w in enumerate(rows[r][:2]) if _value(w) in named]
                    by_row = bool(labels) and c not in labels and len(column) >= 3
                    if v in quoted or by_row:
                        found.update(f"{v:g} against {w:g}" for w in _ties(column, r))
    return sorted(found)


def _verdict(words: list[str]) -> bool | None:
    line = " ".join(words).lower()
    if "does not fit" in line or "doesn't fit" in line:
        return False
    said = [_VERDICTS[w.strip("()[],;:*").lower()] for w in words
            if w.strip("()[],;:*").lower() in _VERDICTS]
    if len(said) == 1:
        return said[0]
    return True if re.search(r"\bfits\b", line) else None


def fit_contradictions(sentence: str, printed: list[str]) -> list[str]:
    """Printed rows that contradict a clause saying a pair of numbers fits or does not."""
    found = []
    for clause in _CLAUSE.split(sentence):
        if _FIT_NO.search(clause):
            claimed = False
        elif _FIT_YES.search(clause):
            claimed = True
        else:
            continue
        numbers = _numbers(clause)
        for text in printed:
            for line in text.splitlines():
                words = line.split()
                verdict = _verdict(words)
                if verdict is None or verdict == claimed:
                    continue
                row = [_value(w) for w in words]
                for a, b in zip(numbers, numbers[1:], strict=False):
                    if a in row and b in row[row.index(a) + 1:]:
                        found.append(f"{a:g} and {b:g}: {line.strip()!r}")
    return found


def _sentences(text: str) -> list[str]:
    """A markdown cell's sentences (model answers left out): split after . ! or ? and a space,
    so a decimal point stays inside its number."""
    return [s for s in re.split(r"(?<=[.!?])\s+", MODEL_ANSWER.sub("", text)) if s.strip()]


def claims_against_outputs(nb: dict, chapter: str, check) -> list[str]:
    """``check(sentence, printed)`` over every markdown sentence (the outputs of the two code
    cells before it and the one after) and every printed line (its own cell's output)."""
    cells = nb["cells"]
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    problems = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            beside = [j for j in code if j < i][-2:] + [j for j in code if j > i][:1]
            printed = [_printed(cells[j]) for j in beside]
            for sentence in _sentences(_text(cell["source"])):
                problems += [f"{chapter} cell {i}: {' '.join(sentence.split())[:90]!r}: {why}"
                             for why in check(sentence, printed)]  # fmt: skip
        else:
            out = _printed(cell)
            for line in out.splitlines():
                problems += [f"{chapter} cell {i} prints {line.strip()[:90]!r}: {why}"
                             for why in check(line, [out])]  # fmt: skip
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_superlative_stands_on_a_near_tie(chapter):
    found = claims_against_outputs(notebook(chapter, "solutions"), chapter,
                                   near_tie_superlatives)
    assert not found, (f"a winner named over a near-tie (within {NEAR_TIE:.0%}) without saying "
                       "so:\n" + "\n".join(found))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_fit_claim_agrees_with_its_table(chapter):
    found = claims_against_outputs(notebook(chapter, "solutions"), chapter, fit_contradictions)
    assert not found, "a fits / does not fit sentence against its table:\n" + "\n".join(found)


_TPOT_BY_DEGREE = ("print(rows)", "  T  TPOT NVLink  TPOT PCIe\n  2   22.52ms   22.68ms\n"
                   "  4   12.59ms   13.03ms\n  8    9.10ms    9.16ms\n 16    8.95ms    9.80ms\n")


@pytest.mark.parametrize("text", [
    "Over NVLink TPOT is least at T = 16.",
    "The best degree over NVLink is the last row, 8.95 ms.",
])  # fmt: skip
def test_the_scan_finds_a_superlative_on_a_near_tie(text):
    (problem,) = claims_against_outputs(_nb(_TPOT_BY_DEGREE, text), "99_x",
                                        near_tie_superlatives)
    assert "cell 1" in problem and "8.95 against 9.1" in problem


@pytest.mark.parametrize("text", [
    "Over PCIe TPOT is least at T = 8.",  # 9.16 ms against 9.80: a clear winner
    "Over NVLink TPOT is least at T = 16, within 2% of T = 8.",
    "TPOT is lowest at the largest degree of this table.",
])  # fmt: skip
def test_the_scan_passes_a_clear_or_acknowledged_winner(text):
    assert claims_against_outputs(_nb(_TPOT_BY_DEGREE, text), "99_x",
                                  near_tie_superlatives) == []


def test_the_scan_finds_a_printed_winner_on_a_near_tie():
    printed = ("print(...)", "batch  tokens/s\n    1     89.5\n   32   1301.0\n   64   1307.7\n"
               "highest throughput measured: 1307.7 tokens/s at batch 64\n")
    (problem,) = claims_against_outputs(_nb(printed), "99_x", near_tie_superlatives)
    assert "prints 'highest throughput" in problem and "1307.7 against 1301" in problem


_FITS = ("print(table)", " prompt  decode batch  context  fits?\n"
         "   4096             1     1024  yes\n    128           256     8192   no\n"
         "     32          1024      512  yes\n")


@pytest.mark.parametrize("text", [
    "A batch of 256 at 8,192 tokens (or 1,024 at 512) needs more KV cache than an H100 holds.",
    "A batch of 1,024 at 512 tokens does not fit.",
    "Even 256 at 8,192 fits.",
])  # fmt: skip
def test_the_scan_finds_a_fit_claim_its_table_contradicts(text):
    (problem,) = claims_against_outputs(_nb(_FITS, text), "99_x", fit_contradictions)
    assert "cell 1" in problem


@pytest.mark.parametrize("text", [
    "A batch of 256 at 8,192 tokens needs more KV cache than an H100 holds.",
    "A batch of 1,024 at 512 fits; 256 at 8,192 does not fit.",
    "512 at 1,024 does not fit (no row says so either way).",
])  # fmt: skip
def test_the_scan_passes_a_fit_claim_its_table_agrees_with(text):
    assert claims_against_outputs(_nb(_FITS, text), "99_x", fit_contradictions) == []
