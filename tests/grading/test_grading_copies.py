"""grading/copies.py: copies of the library and between students flagged, honest answers
not. Real copydetect on the real solutions and library; the calibration's own disguises
(grading/tools/copies_calibration.py) make the copies."""

from __future__ import annotations

import ast
import hashlib

import pytest

from grading import copies, course, release
from grading.tools import copies_calibration as calibration

CHAPTERS = release.chapters(release.SOURCE)
SOLUTIONS = calibration.model_solutions()
LONG = calibration.long_functions()  # >= 8 statements: must be flagged when pasted


@pytest.fixture(scope="module")
def corpus() -> copies.Corpus:
    return copies.library_corpus()


def released(chapter: str) -> dict[str, str]:
    return course.load(chapter, release.SOURCE).released_answers


def test_the_corpus_is_every_function_and_method(corpus):
    names = {s.name for s in corpus.sources}
    assert {"helpers.counting.memory.kv_cache_bytes", "helpers.serving.scheduler.Scheduler.admit",
            "helpers.counting.roofline.first_batch"} <= names
    assert len(names) == len(copies.library_definitions()) > 500
    assert copies.library_corpus() is corpus  # built once
    assert len(LONG) > 150 and len(SOLUTIONS) >= 40


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_model_solution_is_flagged_against_the_library(chapter, corpus):
    answers = {"model": {g: text for c, g, text, _ in SOLUTIONS if c == chapter}}
    assert answers["model"]
    flags = copies.copy_flags(answers, library=corpus, boilerplate=released(chapter))
    assert flags == {"model": []}


@pytest.mark.parametrize("name", sorted(LONG))
def test_a_pasted_library_function_is_flagged(name, corpus):
    """Renamed, docstring and comments replaced, imports above, into an exercise whose
    release gave the very signature (see copies_calibration.paste)."""
    answer, stub = calibration.paste(name, LONG[name][0])
    flags = copies.copy_flags({"mallory": {"ch99_pasted": answer}}, library=corpus,
                              boilerplate={"ch99_pasted": stub})
    match = next((m for m in flags["mallory"] if m.matched == name), None)
    assert match is not None, flags
    assert match.similarity >= 0.95 and match.tokens >= copies.MIN_TOKENS
    assert match.flag.startswith(f"copy: ch99_pasted matches {name} (")


def test_a_pasted_function_inside_ipython_syntax_is_still_flagged(corpus):
    name = "helpers.counting.roofline.first_batch"
    body = LONG[name][0]
    answer = "%%time\n!echo hi\n%load_ext autoreload\n" + body.replace(
        "    return low", "    %time low\n    return low")
    flags = copies.copy_flags({"mallory": {"ch99": answer}}, library=corpus)
    assert [m.matched for m in flags["mallory"]] == [name]


def _long_enough(grade_id: str, text: str, stub: str) -> bool:
    printed = copies.fingerprint(grade_id, text, copies.boilerplate_hashes(stub))
    return (printed is not None and printed.tokens >= copies.MIN_TOKENS
            and printed.statements >= copies.MIN_STATEMENTS)


def test_most_model_solutions_are_long_enough_to_flag_a_shared_copy():
    long_enough = [g for _, g, t, r in SOLUTIONS if _long_enough(g, t, r)]
    assert len(long_enough) >= 35, long_enough


@pytest.mark.parametrize(("chapter", "grade_id", "text", "stub"), SOLUTIONS,
                         ids=[g for _, g, _, _ in SOLUTIONS])
def test_two_students_with_one_answer_renamed_flag_each_other(chapter, grade_id, text, stub,
                                                              corpus):
    answers = {"alice": {grade_id: text},
               "bob": {grade_id: calibration.disguised_cell(text, 7)},
               "carol": {grade_id: stub}}  # handed in the release untouched
    flags = copies.copy_flags(answers, library=corpus, boilerplate={grade_id: stub})
    assert flags["carol"] == []
    if not _long_enough(grade_id, text, stub):  # a line or two of formula: not told apart
        assert flags == {"alice": [], "bob": [], "carol": []}
        return
    for one, other in (("alice", "bob"), ("bob", "alice")):
        [match] = flags[one]
        assert (match.student, match.grade_id, match.matched, match.matched_answer) == (
            one, grade_id, f"student:{other}", grade_id)
        assert match.similarity == 1.0
        assert match.flag == (f"copy: {grade_id} matches student:{other}'s {grade_id} "
                              f"(100% of this answer's tokens, {match.tokens} in common)")


def test_a_copy_inside_a_longer_answer_flags_both(corpus):
    text = next(t for _, g, t, _ in SOLUTIONS if g == "ch07_schedule_step")
    longer = calibration.disguised_cell(text, 3) + "\n\n" + "\n".join(
        f"def extra_{i}(a, b):\n    c = a * {i} + b\n    return [c, c ** 2, str(c)]"
        for i in range(6))
    flags = copies.copy_flags({"alice": {"q": text}, "bob": {"q": longer}}, library=corpus)
    assert [m.matched for m in flags["alice"]] == ["student:bob"]
    assert [m.matched for m in flags["bob"]] == ["student:alice"]
    assert flags["alice"][0].share_of == "answer"  # all of alice's answer is in bob's
    assert flags["bob"][0].share_of == "matched"
    assert "of its tokens" in flags["bob"][0].flag


SHORT = {
    "formula": "def kv_cache_bytes(cfg, tokens, batch, dtype):\n"
               "    return batch * tokens * kv_bytes_per_token(cfg, dtype)\n",
    "two lines": "def kv_bytes_per_token(cfg, dtype):\n"
                 "    elements = 2 * cfg.layers * cfg.n_kv_heads * cfg.head_dim\n"
                 "    return math.ceil(elements * memory.dtype_bytes(dtype))\n",
    "one long line": "def layer_flops(cfg, t):\n"
                     "    return {'q': 2 * t * cfg.d * cfg.q_width, 'k': 2 * t * cfg.d * "
                     "cfg.kv_width, 'v': 2 * t * cfg.d * cfg.kv_width, 'o': 2 * t * cfg.d "
                     "* cfg.q_width, 'mlp': 6 * t * cfg.d * cfg.ffn}\n",
    "bare expression": "cfg.layers * cfg.hidden * 2\n",
}


@pytest.mark.parametrize("text", SHORT.values(), ids=SHORT.keys())
def test_short_identical_answers_are_not_flagged(text, corpus):
    answers = {f"s{i}": {"q": text} for i in range(5)}
    answers["renamed"] = {"q": text.replace("cfg", "config").replace("dtype", "kind")}
    flags = copies.copy_flags(answers, library=corpus)
    assert all(found == [] for found in flags.values()), flags


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_released_scaffolding_is_not_flagged(chapter, corpus):
    stubs = released(chapter)
    # 30 students hand in the release untouched; 5 more fill each answer with one line
    answers = {f"s{i:02d}": dict(stubs) for i in range(30)}
    answers |= {f"t{i}": {g: s.replace("raise NotImplementedError()", f"return {i}")
                          for g, s in stubs.items()} for i in range(5)}
    flags = copies.copy_flags(answers, library=corpus, boilerplate=stubs)
    assert all(found == [] for found in flags.values())


BAD = {
    "syntax error": "def f(:\n    return 1\n",
    "ipython magic": "%time x = 1\n!ls\nx?\n",
    "assigned shell": "files = !ls\n",
    "empty": "",
    "blank": " \n\t\n",
    "nul byte": "x = 1\x00\n",
    "deeply nested": "x = " + "(" * 5000 + ")" * 5000 + "\n",
    "deep expression": "x = " + "-" * 100_000 + "1\n",
    "huge": "x = 1\n" * 100_000,
    "huge pasted library": "\n\n".join([LONG["helpers.counting.roofline.first_batch"][0]] * 400),
    "huge but allowed": "total = total + values[index] * weights[index]\n" * 600,
    "not a string": None,
    "bytes": b"def f():\n    return 1\n",
    "undecodable surrogate": "x = '\udcff'\n",
}


@pytest.mark.parametrize("text", BAD.values(), ids=BAD.keys())
def test_bad_input_does_not_raise(text, corpus):
    pasted = LONG["helpers.counting.roofline.first_batch"][0]
    answers = {"a": {"q": text}, "b": {"q": text}, "c": {"q": pasted}}
    flags = copies.copy_flags(answers, library=corpus, boilerplate={"q": text})
    assert set(flags) == {"a", "b", "c"}
    assert [m.matched for m in flags["c"]] == ["helpers.counting.roofline.first_batch"]
    assert flags["a"] == flags["b"] == []  # (the same text as the release is boilerplate)


def test_a_long_answer_under_max_chars_is_compared():
    text = BAD["huge but allowed"]
    flags = copies.copy_flags({"a": {"q": text}, "b": {"q": text}})
    assert [m.matched for m in flags["a"]] == ["student:b"]
    assert copies.fingerprint("q", "x = 1\n" * copies.MAX_CHARS) is None


def test_fingerprints_do_not_depend_on_pythons_hash_seed():
    """copydetect's own k-gram hash is hash(), randomised per process: ours is BLAKE2b, so
    every run of the grader flags the same answers."""
    printed = copies.fingerprint("x", LONG["helpers.counting.roofline.first_batch"][0])
    code = printed.fingerprint.filtered_code
    grams = {int.from_bytes(hashlib.blake2b(code[i:i + copies.K].encode(),
                                            digest_size=8).digest(), "little", signed=True)
             for i in range(len(code) - copies.K + 1)}
    assert printed.fingerprint.hashes and printed.fingerprint.hashes <= grams


def test_normalise_drops_comments_docstrings_layout_and_numbers():
    one = ('def f(a, b):\n    """Doc."""\n    # a comment\n    c = (a +\n         b) * 2\n'
           "    return c\n")
    two = "def g(x,y):\n  z=(x+y)*3.5  # other\n  'a string as a comment'\n  return z"
    assert copies.normalise(one) == "def f(a, b):\n    c = (a + b) * 0\n    return c"
    assert copies.normalise(two) == "def g(x, y):\n    z = (x + y) * 0\n    return z"
    assert ast.parse(copies.normalise("%%time\n%time f()\nx = 1\n")).body
