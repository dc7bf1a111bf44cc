"""Copies flagged: answers that match a function of ``helpers`` or another student's answer.

A grade means the student did the work. ``helpers`` holds the reference implementation of
nearly every exercise, and students see each other's notebooks, so :func:`copy_flags`
compares each answer cell with every function and method of the installed ``helpers``
package (:func:`library_corpus`) and with the answers of the same question (grade_id) of
the other submissions, and returns a :class:`CopyMatch` per match: which answer, what it
matched, how closely, and a ``flag`` line for the report. It flags; it does not grade: an
instructor reads the flag.

How code is compared, in three layers:

1. **Python's own parser** (:func:`normalise`, here): the answer is parsed with ``ast``
   (after IPython syntax is neutralised, if it does not parse as it is: a cell magic's
   ``%%`` line is dropped, a line magic or a ``!`` shell line becomes ``pass``), every bare
   string statement (docstrings included) is dropped, every number becomes ``0``, ``self``
   and ``cls`` become an ordinary name, and ``ast.unparse`` writes it back: comments,
   docstrings, layout (blank lines, indentation width, line continuations, redundant
   parentheses, quote style) and numbers are gone.
2. **copydetect** (``filter_code``, pygments' Python lexer) replaces every variable and
   attribute name by ``V``, every function name it defines by ``F``, every class name by
   ``O``, every string by ``S``, and drops whitespace. Keywords, operators and the names of
   builtins stay. What is left is a string in which one character is one of copydetect's
   tokens (``return a * b`` is ``returnV*V``, 9 tokens): "tokens" below are those.
3. **Winnowing** (copydetect's ``winnow``, the algorithm of MOSS): the hashes of every
   ``K``-token substring, of which the minimum of each window of ``WINDOW`` is kept as a
   fingerprint (:func:`_winnowed` says why the hash is BLAKE2b). The fingerprints of the
   released answer cell (``boilerplate``: the signature and docstring students receive)
   are removed from both sides, so unchanged scaffolding matches nothing. The overlap is
   measured by copydetect's ``compare_files``: the tokens covered by shared fingerprints,
   as a share of each side's.

A match counts (:attr:`Overlap.copied`) when all hold: at least ``MIN_TOKENS`` tokens in
common, and they cover at least ``SIMILARITY`` of one side that holds at least
``MIN_STATEMENTS`` statements (the answer that is mostly someone else's code, or the
library function that is mostly in the answer). A formula of a line or two is what honest
answers write too: whatever two students' one-liners share, they are not flagged. The
calibration behind the constants is in their comments; ``python -m
grading.tools.copies_calibration`` prints it again from the current solutions and library
(``--timing`` also times :func:`copy_flags`).

Bad input never raises: an answer that does not parse as Python even after the IPython
lines are neutralised (a syntax error, ``x = !ls``, ``f?``), one longer than
``MAX_CHARS``, or one whose parse fails in any other way (too deeply nested) is not
fingerprinted, so it is never flagged (a cell that does not parse scores nothing anyway).
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import itertools
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import filter_code, get_token_coverage, winnow

from grading import stubs
from grading.names import AST_LOCK, parse

# Calibration (python -m grading.tools.copies_calibration; copydetect 0.5.0): the 40 model
# solutions of the 10 chapters against the 676 functions and methods of helpers, each with
# its released cell as boilerplate; and the 204 of those functions whose body holds >= 8
# statements (nested ones included, docstrings not) pasted as answers: renamed (function,
# parameters, locals, ``self``), docstring and comments replaced, the module's imports
# above, the released cell a stub of that very signature (so the signature counts on
# neither side). Deterministic (see _winnowed): the figures below are exact.
#
# K, copydetect's noise threshold: the shortest run of tokens that can match. 15 is about
# one short statement (``returnV*V//V`` is 12). K=10 lets a model solution reach 75% of a
# library function, K=15 67%, K=20 66%, at the same separation of the copies.
K = 15
# Winnowing window: every common run of K + WINDOW - 1 = 18 tokens is sure to be found.
WINDOW = 4
# The overlap must cover this share of one side (of at least MIN_STATEMENTS). Highest
# share of a model solution vs any library function: 64% (ch07_schedule_step vs
# helpers.serving.scheduler.schedule_step, 147 tokens: the instructor wrote both, the same
# algorithm twice; next, ch02_int4_checkpoint_bytes, 57% of 66 tokens). Lowest share of
# a pasted function with itself: 99% (helpers.book.notebook.pick_device). 0.85: 21 points
# above, 14 below.
SIMILARITY = 0.85
# The tokens in common must be at least this many. The lowest overlap of a pasted >= 8-
# statement function is 87 tokens (helpers.counting.roofline.first_batch, 9 statements); a
# formula of a line or two (42 and 59 tokens in the exercises of earlier releases) is what
# two honest students write alike, and is not flagged. 60: 27 below the smallest copy.
# (It does not separate honest answers from the library: model solutions share up to 147
# tokens with it; SIMILARITY does.)
MIN_TOKENS = 60
# The side whose share counts must hold at least this many statements (the ``def`` line
# and three more): a formula of a line or two is what every honest answer writes, however
# long the line (the longest one-statement line of a model solution is 66 tokens, a dict
# of counts in ch02_kv_count_mistake). A pasted >= 8-statement function holds 9 or more.
# With both minimums, all 40 model solutions flag two students who hand one in renamed.
MIN_STATEMENTS = 4
# Answers longer than this are not fingerprinted: 17 times the longest model solution
# (5.9 kB), 4 times the longest module of helpers (serving/scheduler.py, 25.7 kB), and
# about half a second of normalising and fingerprinting (pygments' lexer is most of it).
MAX_CHARS = 100_000


@dataclass(frozen=True)
class Source:
    """A fingerprinted piece of code: a library function or an answer."""

    name: str  # helpers.counting.memory.kv_cache_bytes, or the answer's grade_id
    statements: int  # ast statements in it, nested ones included, docstrings not
    fingerprint: CodeFingerprint = field(repr=False, compare=False)

    @property
    def tokens(self) -> int:
        """copydetect's token coverage: the tokens its fingerprints cover."""
        return int(self.fingerprint.token_coverage)


@dataclass(frozen=True)
class CopyMatch:
    """One answer of ``student`` (``grade_id``) that matches ``matched``."""

    student: str
    grade_id: str
    matched: str  # helpers.counting.memory.kv_cache_bytes, or student:<id>
    matched_answer: str | None  # the other student's grade_id; None for the library
    similarity: float  # share of the side that makes it a copy (share_of), 0..1
    tokens: int  # copydetect tokens overlapping (normalised code, one character each)
    share_of: str  # whose share ``similarity`` is: "answer" or "matched"

    @property
    def flag(self) -> str:
        what = self.matched if self.matched_answer is None else (
            f"{self.matched}'s {self.matched_answer}")
        whose = "this answer's" if self.share_of == "answer" else "its"
        return (f"copy: {self.grade_id} matches {what} "
                f"({self.similarity:.0%} of {whose} tokens, {self.tokens} in common)")


# ------------------------------------------------------------------ normalisation

_CELL_MAGIC = re.compile(r"\A\s*%%[^\n]*\n?")
_LINE_MAGIC = re.compile(r"^([ \t]*)[%!][^\n]*$", re.M)
# Names pygments keeps as written (Name.Builtin.Pseudo) although they are only parameter
# names: a method pasted with ``self`` renamed would otherwise differ at every attribute.
_PSEUDO = frozenset({"self", "cls"})


class _Normaliser(ast.NodeTransformer):
    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None  # a docstring or a string used as a comment
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _PSEUDO:
            node.id = "v"
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        if node.arg in _PSEUDO:
            node.arg = "v"
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, (int, float, complex)) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Constant(0), node)
        return node


def _parse(source: str) -> ast.Module | None:
    for text in (source, _LINE_MAGIC.sub(r"\1pass", _CELL_MAGIC.sub("", source))):
        try:
            return parse(text)
        except Exception:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError
            continue
    return None


def normalise(source: object) -> str | None:
    """Layer 1: the answer as ``ast.unparse`` writes it, without comments, docstrings or
    numbers; None when it cannot be parsed (see the module's docstring)."""
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_CHARS:
        return None
    with AST_LOCK:
        try:
            tree = _parse(source)
            if tree is None:
                return None
            return ast.unparse(_Normaliser().visit(tree))
        except Exception:  # a tree too deep to walk
            return None


def statements(node: ast.AST) -> int:
    """Statements under ``node`` (a function: its body), nested ones included: an ``if``
    with two statements in its body is three; docstrings and string comments are not."""
    body = node.body if isinstance(node, (ast.Module, ast.FunctionDef,
                                          ast.AsyncFunctionDef, ast.ClassDef)) else [node]
    count = 0
    for top in body:
        for sub in ast.walk(top):
            if isinstance(sub, ast.stmt) and not (
                isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant)
                and isinstance(sub.value.value, str)):
                count += 1
    return count


def fingerprint(name: str, source: str, boilerplate: frozenset[int] = frozenset()
                ) -> Source | None:
    """``source`` normalised and fingerprinted, the ``boilerplate`` hashes removed; None
    when it cannot be parsed or leaves no fingerprint."""
    text = normalise(source)
    if text is None:
        return None
    try:
        with AST_LOCK:
            count = statements(parse(text))
        printed = _winnowed(name, text)
    except Exception:  # pygments or numpy on something pathological
        return None
    return without(Source(name, count, printed), boilerplate)


def _winnowed(name: str, text: str) -> CodeFingerprint:
    """copydetect's ``CodeFingerprint(name, K, WINDOW, filter=True, language="python")``
    built from copydetect's own parts (``filter_code``, ``winnow``, ``get_token_coverage``)
    but for the hash of each K-gram: copydetect takes Python's ``hash()``, which
    ``PYTHONHASHSEED`` changes in every process, so which fingerprints winnowing keeps, and
    an overlap near a threshold, would differ from one run of the grader to the next.
    Here a K-gram's hash is the first 8 bytes of its BLAKE2b: the same in every run."""
    filtered, offsets = filter_code(text, name, "python")
    grams = np.array([int.from_bytes(hashlib.blake2b(filtered[i:i + K].encode(),
                                                     digest_size=8).digest(),
                                     "little", signed=True)
                      for i in range(len(filtered) - K + 1)], dtype=np.int64)
    hashes, idx = winnow(grams, WINDOW, remove_duplicates=False)
    hash_idx: dict[int, list[int]] = {}
    for h, i in zip(hashes.tolist(), idx.tolist(), strict=True):
        hash_idx.setdefault(h, []).append(i)
    printed = CodeFingerprint.__new__(CodeFingerprint)
    printed.filename, printed.raw_code, printed.filtered_code = name, text, filtered
    printed.offsets, printed.k = offsets, K
    printed.hashes, printed.hash_idx = set(hash_idx), hash_idx
    printed.token_coverage = get_token_coverage(hash_idx, K, len(filtered))
    return printed


def without(source: Source, boilerplate: frozenset[int]) -> Source | None:
    """``source`` less the fingerprints in ``boilerplate``; None if none is left.

    Done here rather than by ``CodeFingerprint(boilerplate=...)``: copydetect 0.5.0
    intersects with ``assume_unique=True``, which also drops a fingerprint that occurs
    twice in the code although the boilerplate does not hold it."""
    printed = source.fingerprint
    if boilerplate and not printed.hashes.isdisjoint(boilerplate):
        printed = copy.copy(printed)
        printed.hash_idx = {h: i for h, i in printed.hash_idx.items() if h not in boilerplate}
        printed.hashes = set(printed.hash_idx)
        printed.token_coverage = get_token_coverage(printed.hash_idx, K,
                                                    len(printed.filtered_code))
        source = Source(source.name, source.statements, printed)
    return source if printed.hashes else None


def boilerplate_hashes(released: str | None) -> frozenset[int]:
    """The fingerprints of a released answer cell (what every student starts from)."""
    printed = fingerprint("boilerplate", released) if released else None
    return frozenset(printed.fingerprint.hashes) if printed else frozenset()


# ------------------------------------------------------------------ the library


def _functions(tree: ast.Module, module: str) -> Iterable[tuple[str, ast.AST]]:
    def walk(node: ast.AST, prefix: str) -> Iterable[tuple[str, ast.AST]]:
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.If, ast.Try, ast.With)):
                yield from walk(child, prefix)  # definitions under `if TYPE_CHECKING` etc.
    yield from walk(tree, f"{module}.")


@dataclass(frozen=True)
class Corpus:
    """Library sources and an index from each fingerprint to the sources that hold it."""

    sources: tuple[Source, ...]
    index: Mapping[int, tuple[int, ...]] = field(repr=False)

    def candidates(self, answer: Source) -> list[Source]:
        seen: set[int] = set()
        for h in answer.fingerprint.hashes:
            seen.update(self.index.get(h, ()))
        return [self.sources[i] for i in sorted(seen)]


def corpus(sources: Iterable[Source]) -> Corpus:
    kept = tuple(sources)
    index: dict[int, list[int]] = defaultdict(list)
    for i, source in enumerate(kept):
        for h in source.fingerprint.hashes:
            index[h].append(i)
    return Corpus(kept, {h: tuple(ids) for h, ids in index.items()})


def library_definitions() -> dict[str, str]:
    """helpers.module.qualname -> source of every function and method of ``helpers``."""
    found = {}
    for module, read in stubs.library().items():
        with AST_LOCK:
            tree = parse(read.source)
        # the lines split once per module: ast.get_source_segment splits the whole file
        # again for every function (two thirds of the corpus's time)
        lines = read.source.encode("utf-8").splitlines()
        for qualname, node in _functions(tree, module):
            found[qualname] = _segment(lines, node)
    return found


def _segment(lines: list[bytes], node: ast.AST) -> str:
    """``node``'s source, dedented by its column (the AST's offsets count UTF-8 bytes)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    column = node.col_offset
    text = [line[column:] if line[:column].strip() == b"" else line
            for line in lines[first:last + 1]]
    text[-1] = text[-1][:node.end_col_offset - (len(lines[last]) - len(text[-1]))]
    return b"\n".join(text).decode("utf-8")


@functools.cache
def library_corpus() -> Corpus:
    """Every function and method of the installed ``helpers``, fingerprinted once."""
    printed = (fingerprint(name, text) for name, text in library_definitions().items())
    return corpus(p for p in printed if p is not None)


# ------------------------------------------------------------------ comparing


@dataclass(frozen=True)
class Overlap:
    """What two fingerprinted sources have in common, by copydetect's ``compare_files``."""

    tokens: int  # tokens in common (the fewer of the two sides' counts)
    share_a: float  # of the first source's tokens (its token coverage)
    share_b: float  # of the second's
    statements_a: int = 0  # the first source's statements (Source.statements)
    statements_b: int = 0

    @property
    def share(self) -> float:
        return max(self.share_a, self.share_b)

    def sides(self) -> list[str]:
        """The sides ("a", "b") that make this a copy: at least MIN_TOKENS tokens in common
        covering at least SIMILARITY of a side of at least MIN_STATEMENTS statements."""
        if self.tokens < MIN_TOKENS:
            return []
        return [side for share, statements, side in
                ((self.share_a, self.statements_a, "a"), (self.share_b, self.statements_b, "b"))
                if statements >= MIN_STATEMENTS and share >= SIMILARITY]

    @property
    def copied(self) -> bool:
        """The rule: long enough to mean something, and most of one side that is more than
        a line or two."""
        return bool(self.sides())


def overlap(a: Source, b: Source) -> Overlap:
    """copydetect's ``compare_files`` of the two, as an :class:`Overlap`; symmetric."""
    if a.fingerprint.hashes.isdisjoint(b.fingerprint.hashes):
        return Overlap(0, 0.0, 0.0, a.statements, b.statements)
    _, (share_a, share_b), _ = compare_files(a.fingerprint, b.fingerprint)
    share_a, share_b = float(share_a), float(share_b)
    tokens = min(round(share_a * a.fingerprint.token_coverage),
                 round(share_b * b.fingerprint.token_coverage))
    return Overlap(int(tokens), share_a, share_b, a.statements, b.statements)


def may_be_copied(a: Source, b: Source) -> bool:
    """False when ``a`` and ``b`` cannot be :attr:`Overlap.copied`, by a bound much cheaper
    than :func:`overlap`: each shared fingerprint covers at most K tokens where it occurs,
    so the tokens in common on one side are at most K times its occurrences there."""
    if max(a.statements, b.statements) < MIN_STATEMENTS:
        return False
    shared = a.fingerprint.hashes & b.fingerprint.hashes
    if not shared:
        return False
    bound_a = K * sum(len(a.fingerprint.hash_idx[h]) for h in shared)
    bound_b = K * sum(len(b.fingerprint.hash_idx[h]) for h in shared)
    if min(bound_a, bound_b) < MIN_TOKENS:
        return False
    return (bound_a >= SIMILARITY * a.fingerprint.token_coverage
            or bound_b >= SIMILARITY * b.fingerprint.token_coverage)


def copy_flags(
    answers: Mapping[str, Mapping[str, str]],
    *,
    library: Corpus | None = None,
    boilerplate: Mapping[str, str] | None = None,
) -> dict[str, list[CopyMatch]]:
    """student -> the matches of their answers (an empty list for none), for ``answers``:
    student -> answer grade_id -> the answer cell's source.

    Each answer is compared with ``library`` (default: :func:`library_corpus`) and with the
    answers of the same grade_id of the other students; two students' matching answers flag
    each other. ``boilerplate``: grade_id -> the released answer cell
    (``Assignment.released_answers``): its fingerprints count on neither side, the library's
    included (a pasted function whose signature the release gave is still all copied).
    Never raises on an answer's content: one that cannot be parsed is not flagged.

    Cost: answers identical once normalised are compared once, and only pairs that share
    enough fingerprints (:func:`may_be_copied`, found through an index of the fingerprints)
    reach copydetect's comparison."""
    corpus_ = library_corpus() if library is None else library
    boilerplate = boilerplate or {}
    flags: dict[str, list[CopyMatch]] = {student: [] for student in answers}
    # grade_id -> normalised code -> (its fingerprint, the students who handed it in)
    by_question: dict[str, dict[str, tuple[Source, list[str]]]] = defaultdict(dict)
    scaffolding: dict[str, frozenset[int]] = {}
    printed_once: dict[tuple[str, object], Source | None] = {}  # the same cell, once
    for student, cells in answers.items():
        for grade_id, source in cells.items():
            if grade_id not in scaffolding:
                scaffolding[grade_id] = boilerplate_hashes(boilerplate.get(grade_id))
            key = (grade_id, source if isinstance(source, str) else id(source))
            if key not in printed_once:
                printed_once[key] = fingerprint(grade_id, source, scaffolding[grade_id])
            printed = printed_once[key]
            if printed is not None:
                same = by_question[grade_id].setdefault(printed.fingerprint.filtered_code,
                                                        (printed, []))
                same[1].append(student)
    for grade_id, groups in by_question.items():
        distinct = list(groups.values())
        functions: dict[str, Source | None] = {}
        for answer, students in distinct:
            for function in corpus_.candidates(answer):
                if function.name not in functions:
                    functions[function.name] = without(function, scaffolding[grade_id])
                other = functions[function.name]
                if other is None or not may_be_copied(answer, other):
                    continue
                found = overlap(answer, other)
                if found.copied:
                    for student in students:
                        flags[student].append(_match(student, grade_id, function.name, None,
                                                     found, "a"))
        for answer, students in distinct:  # the same answer handed in by several
            itself = Overlap(answer.tokens, 1.0, 1.0, answer.statements, answer.statements)
            if len(students) > 1 and itself.copied:
                for one, other in itertools.permutations(students, 2):
                    flags[one].append(_match(one, grade_id, f"student:{other}", grade_id,
                                             itself, "a"))
        for i, j in _pairs([answer for answer, _ in distinct]):
            (a, ones), (b, others) = distinct[i], distinct[j]
            if not may_be_copied(a, b):
                continue
            found = overlap(a, b)
            if found.copied:
                for one, other in itertools.product(ones, others):
                    flags[one].append(_match(one, grade_id, f"student:{other}", grade_id,
                                             found, "a"))
                    flags[other].append(_match(other, grade_id, f"student:{one}", grade_id,
                                               found, "b"))
    for matches in flags.values():
        matches.sort(key=lambda m: (m.grade_id, m.matched))
    return flags


def _match(student: str, grade_id: str, matched: str, answer: str | None, found: Overlap,
           mine: str) -> CopyMatch:
    """The flag of ``student``'s answer, side ``mine`` ("a" or "b") of ``found``: the share
    of the side that makes it a copy, the answer's own when both do equally."""
    shares = {"a": found.share_a, "b": found.share_b}
    side = max(found.sides(), key=lambda s: (shares[s], s == mine))
    return CopyMatch(student, grade_id, matched, answer, shares[side], found.tokens,
                     "answer" if side == mine else "matched")


def _pairs(printed: list[Source]) -> list[tuple[int, int]]:
    """Index pairs (i < j) of sources that share a fingerprint, found through an index of
    the fingerprints rather than by trying every pair."""
    holders: dict[int, list[int]] = defaultdict(list)
    for i, source in enumerate(printed):
        for h in source.fingerprint.hashes:
            holders[h].append(i)
    pairs: set[tuple[int, int]] = set()
    for ids in holders.values():
        pairs.update(itertools.combinations(ids, 2))
    return sorted(pairs)


def records(found: Mapping[str, list[CopyMatch]]) -> dict[str, list[dict[str, str]]]:
    """student -> each match as the grader records it: the answer's grade_id and the flag."""
    return {student: [{"grade_id": m.grade_id, "flag": m.flag} for m in matches]
            for student, matches in found.items()}  # fmt: skip


def serve() -> None:
    """``python -m grading.copies``: make the library's fingerprints at once, then read
    ``{"answers": {student: {grade_id: source}}, "released": {grade_id: source}}`` as JSON
    on stdin and write :func:`records` of :func:`copy_flags` as JSON on stdout. The grader
    starts it as a batch starts, so the fingerprints are made while the sandboxes run, in a
    process of its own (in a thread of the grader it would hold the GIL its grading threads
    need)."""
    library_corpus()
    request = json.load(sys.stdin)
    found = copy_flags(request["answers"], boilerplate=request["released"])
    json.dump(records(found), sys.stdout)


if __name__ == "__main__":
    serve()
