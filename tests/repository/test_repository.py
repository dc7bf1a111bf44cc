"""The repository stands alone: every file its prose points to is in the repository.

A reader's clone has nothing beside it, so a pointer to a file outside the repository, or to
one it does not have, is a broken promise. The rules, precisely:

**What is scanned.** The repository's files are what git lists as tracked, plus untracked files
that git does not ignore (so new files count before their first commit). Scanned for paths:
every such Markdown file (``*.md``) and the markdown cells of every such notebook
(``*.ipynb``). Scanned for pointers outside the repository: every such text file.

**What counts as a reference**, in Markdown and notebook markdown:

* a Markdown link or image, ``[text](target)`` or ``![alt](target)``, whose target has no URL
  scheme (``https:``, ``mailto:`` …), is not a bare ``#anchor`` and is not a notebook
  ``attachment:``; it is resolved from the document's own folder, and ``#anchor`` or
  ``?query`` is dropped;
* each whitespace-separated word inside inline backticks or a fenced code block (so the
  paths inside a command count too) that
  - starts with ``./`` or ``../``: resolved from the document's folder;
  - contains ``/`` and begins with a top-level entry of the repository (``helpers/…``,
    ``solutions/…``, ``docs/…``): resolved from the repository root;
  - is a bare file name ending in ``.md``: looked for in the document's folder, then at the
    root.

  Other backticked words are code, not paths: ``config.json`` (a Hugging Face file),
  ``flops.matmul_flops``, ``reports/<chapter>/`` (under the course folder), ``~/Downloads``.

**What is not checked**: templates, i.e. a word with any of ``< > { } * ? $ …`` or a segment
starting ``NN`` (``helpers/<topic>.py``, ``solutions/NN_name/NN_name.ipynb``); and generated
paths, i.e. a path git ignores (``.venv/``, ``grading/course/``, ``bench-results/``), which
the project's own commands create. ``PLANNED`` lists the few folders the text tells a reader
to create, each with its reason.

**What always fails**, in any text file: a path into the folder beside the checkout that
holds the design notes (``SHARED``), and the names of the design notes (``DESIGN_NOTES``)
unless the repository has a file of that name. The capitalised word ``REFERENCES`` is one of
them (shorthand for the sources note): cite ``docs/sources.md`` instead. This file spells
those names in pieces, so that it does not itself point outside the repository.
"""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = "tests/repository/test_repository.py"

# Folders the text tells a reader to create, with why; not in a fresh clone.
PLANNED = {
    "helpers/data": "the GPU edition (`make gpu-reference`) writes helpers/data/gpu/<device>/",
}
# The design notes outside the repository: naming them sends a reader nowhere.
SHARED = "../" "shared"
DESIGN_NOTES = tuple(f"{name}.md" for name in ("REFERENCES", "CHAPTERS", "GRADING", "ARCHITECTURE"))
DESIGN_NOTES += ("interview-answer.txt",)
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/design\b|\bREFERENCES\b")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
TEMPLATE = re.compile(r"[<>{}*?$…]|(^|/)NN")


@cache
def repo_files() -> frozenset[str]:
    """Tracked files and untracked ones git does not ignore, as root-relative paths."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell the repository's files from others")
    return frozenset(p for p in listed.decode().split("\0") if p and (ROOT / p).exists())


@cache
def repo_dirs() -> frozenset[str]:
    return frozenset(str(parent) for f in repo_files() for parent in PurePosixPath(f).parents)


def top_level() -> set[str]:
    return {PurePosixPath(f).parts[0] for f in repo_files()}


def exists(path: str) -> bool:
    path = path.rstrip("/") or "."
    return path in repo_files() or path in repo_dirs()


def ignored(path: str) -> bool:
    """git ignores it (a generated path); tried also as a folder, for dir-only patterns."""
    for candidate in (path, path.rstrip("/") + "/"):
        check = subprocess.run(["git", "check-ignore", "-q", "--no-index", candidate], cwd=ROOT)
        if check.returncode == 0:
            return True
    return False


def normalise(folder: str, target: str) -> str | None:
    """``target`` seen from ``folder`` (both root-relative), or None if it leaves the root."""
    parts: list[str] = []
    for part in PurePosixPath(folder, target).parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts) or "."


def markdown_texts() -> list[tuple[str, str]]:
    """(where, markdown) for every Markdown file and every notebook markdown cell."""
    texts = []
    for name in sorted(repo_files()):
        if name.endswith(".md"):
            texts.append((name, (ROOT / name).read_text(encoding="utf-8")))
        elif name.endswith(".ipynb"):
            cells = json.loads((ROOT / name).read_text(encoding="utf-8"))["cells"]
            for number, cell in enumerate(cells):
                if cell["cell_type"] == "markdown":
                    source = cell["source"]
                    text = "".join(source) if isinstance(source, list) else source
                    texts.append((f"{name} (cell {number})", text))
    return texts


def references(text: str) -> list[tuple[str, str]]:
    """(kind, target) of every link target and backticked word in a Markdown text."""
    found = [("link", m) for m in LINK.findall(text) + REFERENCE_LINK.findall(text)]
    fenced = [m.group(0) for m in FENCE.finditer(text)]
    spans = [span for _, span in INLINE_CODE.findall(FENCE.sub("", text))]
    for span in fenced + spans:
        for word in span.split():
            found.append(("code", word.strip("\"'()[],;:")))
    return found


LEAVES = "(outside the repository)"


def resolve(where: str, kind: str, target: str) -> str | None:
    """The root-relative path a reference names; None when it names no repository file;
    ``LEAVES`` when a relative path climbs above the root."""
    folder = str(PurePosixPath(where.split(" (cell ")[0]).parent)
    if kind == "link":
        if SCHEME.match(target) or target.startswith("#"):
            return None
        target = re.split(r"[#?]", target)[0]
        return (normalise(folder, target) or LEAVES) if target else None
    if not target or TEMPLATE.search(target):
        return None
    if target.startswith(("./", "../")):
        return normalise(folder, target) or LEAVES
    if "/" in target:
        first = target.split("/")[0]
        return normalise(".", target) if first in top_level() else None
    if target.endswith(".md"):
        beside = normalise(folder, target)
        return beside if beside and exists(beside) else target
    return None


def problems_in(where: str, text: str) -> list[str]:
    problems = []
    for kind, target in references(text):
        path = resolve(where, kind, target)
        if SHARED in target or "shared/design" in target or path == LEAVES:
            problems.append(f"{where}: {target!r} points outside the repository")
        elif path is None or exists(path) or ignored(path):
            continue
        elif not any(path == p or path.startswith(p + "/") for p in PLANNED):
            problems.append(f"{where}: {target!r} names {path}, which the repository does not have")
    return problems


def text_files() -> list[str]:
    names = []
    for name in sorted(repo_files()):
        if name == THIS:
            continue
        try:
            (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        names.append(name)
    return names


def test_every_referenced_path_exists():
    problems = [p for where, text in markdown_texts() for p in problems_in(where, text)]
    assert not problems, "references to files the repository does not have:\n" + "\n".join(problems)


def test_nothing_points_outside_the_repository():
    have = {PurePosixPath(f).name for f in repo_files()}
    problems = []
    for name in text_files():
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1):
            hits = OUTSIDE.findall(line) + [n for n in DESIGN_NOTES if n in line and n not in have]
            if hits:
                problems.append(f"{name}:{number}: {', '.join(sorted(set(hits)))}: {line.strip()}")
    assert not problems, (
        "pointers to the design notes outside the repository (cite docs/ instead):\n"
        + "\n".join(problems)
    )


@pytest.mark.parametrize(
    "where, text, expected",
    [
        ("README.md", f"see `{SHARED}/design/{DESIGN_NOTES[1]}`", ["points outside"]),
        ("README.md", "see [the plan](docs/nowhere.md)", ["docs/nowhere.md"]),
        ("README.md", "run `python -m grading check notebooks/99_none/99_none.ipynb`",
         ["notebooks/99_none/99_none.ipynb"]),
        ("docs/a.md", "[up](../README.md), [it](#top), [web](https://example.org/x.md)", []),
        ("README.md", "`helpers/<topic>.py`, `solutions/NN_name/NN_name.ipynb`, `config.json`", []),
        ("README.md", "`.venv/bin/pip`, `grading/course/gradebook.db`, `reports/<chapter>/`", []),
        ("README.md", "```sh\ncat helpers/nothing.py  # `x`\n```", ["helpers/nothing.py"]),
        ("grading/README.md", "`../solutions/01_flops/01_flops.ipynb`", []),
        ("README.md", "`CONTRIBUTING.md`, `NOPE.md`", ["NOPE.md"]),
    ],
)  # fmt: skip
def test_the_rule(where, text, expected):
    problems = problems_in(where, text)
    assert len(problems) == len(expected), problems
    for problem, word in zip(problems, expected, strict=True):
        assert word in problem


def test_no_test_file_sits_directly_in_tests():
    """pytest puts a test file's folder on sys.path. For a file directly in tests/ that is
    tests/, where tests/helpers/ (no __init__.py) shadows the helpers package as an empty
    namespace package; the grader, which binds ``helpers.__path__`` into its sandbox, then
    bound the wrong folder and every sandboxed setup failed ("No module named 'helpers'")
    whenever such a file was collected first. Each test file lives in a subfolder."""
    loose = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert not loose, f"test files directly in tests/: {loose}; move them into a subfolder"


def test_no_chapter_names_a_file_of_the_test_suite():
    """The chapters teach the subject: how the project checks itself (a file under tests/)
    belongs in the docs and docstrings, not in a chapter's text or code."""
    suite = re.compile(r"\btests/[\w/.-]+")
    found = []
    for name in sorted(f for f in repo_files() if f.startswith("solutions/")
                       and f.endswith(".ipynb")):  # fmt: skip
        cells = json.loads((ROOT / name).read_text(encoding="utf-8"))["cells"]
        for number, cell in enumerate(cells):
            found += [f"{name} cell {number}: {hit}"
                      for hit in suite.findall("".join(cell["source"]))]  # fmt: skip
    assert not found, "chapters naming test files:\n" + "\n".join(found)
