"""The calibration of grading/copies.py, printed from the current solutions and library.

    python -m grading.tools.copies_calibration [--timing]

Honest side: every model solution (answer cells of ``solutions/*/*.ipynb``) compared with
every function of ``helpers``, with the released answer cell as boilerplate. Copy side:
every function of ``helpers`` whose body holds >= ``PASTED_STATEMENTS`` statements, pasted
as an answer: renamed (function, parameters, locals), comments and docstring replaced, its
module's imports above it, the released cell being a stub of that same signature (the
hardest case: the signature is boilerplate). The constants of copies.py must put every
honest pair below and every pasted one above; ``--timing`` also times ``copy_flags``.
"""

from __future__ import annotations

import argparse
import ast
import random
import time

import nbformat

from grading import copies, course, release, stubs

PASTED_STATEMENTS = 8  # the line: a pasted body this long must be flagged


def model_solutions(source=release.SOURCE) -> list[tuple[str, str, str, str]]:
    """(chapter, grade_id, model solution, released answer cell) of every code answer."""
    found = []
    for chapter in release.chapters(source):
        released = course.load(chapter, source).released_answers
        nb = nbformat.read(course.source_notebook(chapter, source), as_version=4)
        for cell in nb.cells:
            info = course.meta(cell)
            if cell.cell_type == "code" and info.get("solution"):
                found.append((chapter, info["grade_id"], cell.source,
                              released.get(info["grade_id"], "")))
    return found


class _Renamer(ast.NodeTransformer):
    """Renames a function, its parameters and its local variables (what a student who
    pastes and disguises does first); globals, attributes and builtins keep their names."""

    def __init__(self, function: ast.FunctionDef | ast.AsyncFunctionDef):
        local = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
        self.names = {name: f"my_{name}_{i}" for i, name in enumerate(sorted(local))}
        self.names[function.name] = f"answer_{function.name}"

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.names.get(node.arg, node.arg)
        return node

    def visit_FunctionDef(self, node):
        node.name = self.names.get(node.name, node.name)
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef


def disguised(source: str, imports: str = "") -> str:
    """``source`` (one function) renamed, its docstring and comments replaced."""
    tree = ast.parse(source)
    function = tree.body[0]
    function = _Renamer(function).visit(function)
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    function.body = [ast.Expr(ast.Constant("My own answer, written from scratch.")), *body]
    lines = ast.unparse(ast.fix_missing_locations(tree)).splitlines()
    commented = [f"{line}  # step {i}" if i % 3 == 0 and line.strip() else line
                 for i, line in enumerate(lines)]
    return (imports + "\n\n" if imports else "") + "\n".join(commented) + "\n"


def stub_of(source: str) -> str:
    """The released cell an exercise on this function would have: signature, docstring,
    ``raise NotImplementedError()``."""
    tree = ast.parse(source)
    function = tree.body[0]
    doc = ast.get_docstring(function)
    function.body = ([ast.Expr(ast.Constant(doc))] if doc else []) + [
        ast.Raise(ast.Call(ast.Name("NotImplementedError", ast.Load()), [], []))]
    return ast.unparse(ast.fix_missing_locations(tree)).replace(
        "raise NotImplementedError()", "# YOUR CODE HERE\n    raise NotImplementedError()")


def module_imports(module: str) -> str:
    tree = ast.parse(stubs.library()[module].source)
    return "\n".join(ast.unparse(n) for n in tree.body
                     if isinstance(n, (ast.Import, ast.ImportFrom)))


def long_functions(minimum: int = PASTED_STATEMENTS) -> dict[str, tuple[str, int]]:
    """name -> (source, statements) of every library function with >= ``minimum``."""
    found = {}
    for name, text in copies.library_definitions().items():
        count = copies.statements(ast.parse(text).body[0])
        if count >= minimum:
            found[name] = (text, count)
    return found


def paste(name: str, text: str) -> tuple[str, str]:
    """(the answer, the released cell) of a student who pastes library function ``name``
    (source ``text``) disguised, its module's imports above it, into an exercise whose
    released cell is a stub of that same function."""
    module = name.split(".<locals>.")[0].rsplit(".", 1)[0]
    while module not in stubs.library():
        module = module.rsplit(".", 1)[0]
    return disguised(text, module_imports(module)), stub_of(text)


def pasted(name: str, text: str) -> tuple[copies.Source | None, frozenset[int]]:
    answer, stub = paste(name, text)
    scaffolding = copies.boilerplate_hashes(stub)
    return copies.fingerprint("pasted", answer, scaffolding), scaffolding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timing", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    corpus = copies.library_corpus()
    built = time.perf_counter() - start
    print(f"copydetect K={copies.K} WINDOW={copies.WINDOW} MIN_TOKENS={copies.MIN_TOKENS} "
          f"MIN_STATEMENTS={copies.MIN_STATEMENTS} SIMILARITY={copies.SIMILARITY}")
    print(f"library: {len(copies.library_definitions())} functions and methods, "
          f"{len(corpus.sources)} fingerprinted, built in {built:.2f} s")

    solutions = model_solutions()
    honest = []  # (tokens, share, grade_id, function)
    for _, grade_id, text, released in solutions:
        answer = copies.fingerprint(grade_id, text, copies.boilerplate_hashes(released))
        if answer is None:
            continue
        scaffolding = copies.boilerplate_hashes(released)
        for function in corpus.candidates(answer):
            found = copies.overlap(answer, copies.without(function, scaffolding))
            honest.append((found.tokens, found.share, grade_id, function.name, found.copied))
    flagged = [h for h in honest if h[4]]
    print(f"\nmodel solutions: {len(solutions)}; flagged against the library: {len(flagged)}")
    sizes = [(p.tokens, p.statements, g) for _, g, t, r in solutions
             if (p := copies.fingerprint(g, t, copies.boilerplate_hashes(r)))]
    short = [f"{g} ({t} tokens, {n} statements)" for t, n, g in sorted(sizes)
             if t < copies.MIN_TOKENS or n < copies.MIN_STATEMENTS]
    print(f"model solutions that two students handing in (renamed) flag: "
          f"{len(sizes) - len(short)}; too short to: " + ", ".join(short))
    lines = [(p.tokens, g, ast.unparse(statement)) for _, g, t, _ in solutions
             for function in ast.parse(t).body if isinstance(function, ast.FunctionDef)
             for statement in function.body if not isinstance(statement, ast.Expr)
             if not hasattr(statement, "body")
             and (p := copies.fingerprint(g, ast.unparse(statement)))]
    longest = max(lines)
    print(f"longest one-statement line of a model solution: {longest[0]} tokens "
          f"({longest[1]}: {longest[2][:70]})")
    for h in flagged:
        print(f"  FLAGGED {h[2]} ~ {h[3]}: {h[0]} tokens, {h[1]:.0%}")
    print("highest overlaps (tokens, larger share):")
    for tokens, share, grade_id, name, _ in sorted(honest, reverse=True)[:5]:
        print(f"  {tokens:4d} {share:4.0%}  {grade_id} ~ {name}")
    print(f"highest shares with >= MIN_TOKENS ({copies.MIN_TOKENS}) tokens in common:")
    for tokens, share, grade_id, name, _ in sorted(
            (h for h in honest if h[0] >= copies.MIN_TOKENS), key=lambda h: -h[1])[:5]:
        print(f"  {tokens:4d} {share:4.0%}  {grade_id} ~ {name}")
    top = max(honest, key=lambda h: (h[1], h[0]))
    print(f"highest share of any pair: {top[1]:.0%} ({top[0]} tokens, {top[2]} ~ {top[3]})")

    long = long_functions()
    copied = []  # (tokens, share, name, statements)
    by_name = {s.name: s for s in corpus.sources}
    for name, (text, count) in long.items():
        answer, scaffolding = pasted(name, text)
        function = copies.without(by_name[name], scaffolding)
        found = copies.overlap(answer, function) if answer and function else None
        copied.append((found.tokens, found.share, name, count, found.copied) if found
                      else (0, 0.0, name, count, False))
    missed = [c for c in copied if not c[4]]
    print(f"\nlibrary functions with >= {PASTED_STATEMENTS} statements: {len(long)}; "
          f"pasted (renamed) and not flagged: {len(missed)}")
    for c in missed:
        print(f"  MISSED {c[2]} ({c[3]} statements): {c[0]} tokens, {c[1]:.0%}")
    print("lowest overlaps:")
    for tokens, share, name, count, _ in sorted(copied)[:5]:
        print(f"  {tokens:4d} {share:4.0%}  {name} ({count} statements)")
    print("lowest shares:")
    for tokens, share, name, count, _ in sorted(copied, key=lambda c: c[1])[:5]:
        print(f"  {tokens:4d} {share:4.0%}  {name} ({count} statements)")

    if args.timing:
        timing(solutions)


def timing(solutions, chapter: str = "02_bytes") -> None:
    cells = {g: (t, r) for c, g, t, r in solutions if c == chapter}
    boilerplate = {g: r for g, (_, r) in cells.items()}
    for n in (20, 300):
        for kind in ("mixed", "all copies"):
            rng = random.Random(n)
            answers = {}
            for s in range(n):
                # mixed: a third hand in the model solution renamed with one statement
                # added (no two alike), the others an answer of their own; all copies: the
                # worst case, every pair of submissions a match to measure
                answers[f"s{s:03d}"] = {
                    g: (disguised_cell(t, s, rng) if kind != "mixed" or rng.random() < 1 / 3
                        else own_answer(rng)) for g, (t, _) in cells.items()}
            start = time.perf_counter()
            flags = copies.copy_flags(answers, boilerplate=boilerplate)
            took = time.perf_counter() - start
            print(f"copy_flags, {chapter}, {n} submissions x {len(cells)} answers, {kind}: "
                  f"{took:.2f} s ({took / n * 1000:.1f} ms per submission), "
                  f"{sum(map(len, flags.values()))} flags")


def disguised_cell(text: str, seed: int, rng: random.Random | None = None) -> str:
    """A model solution's cell renamed and recommented (and, given ``rng``, with one
    statement of its own added at random in each function)."""
    tree = ast.parse(text)
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if rng is not None:
                extra = ast.parse(f"unused = {rng.randrange(9)} {rng.choice('+-*')} "
                                  f"{rng.choice(['len', 'abs', 'int', 'str'])}(0)").body[0]
                node.body.insert(rng.randrange(len(node.body) + 1), extra)
            out.append(disguised(ast.unparse(node)).replace("my_", f"v{seed}_"))
        else:
            out.append(ast.unparse(node))
    return "\n\n".join(out)


def own_answer(rng: random.Random) -> str:
    """A random function of a few statements: an answer of the student's own."""
    names = ["cfg", "dtype", "tokens"]
    lines = []
    for _ in range(rng.randrange(2, 8)):
        kind = rng.randrange(4)
        a, b = rng.choice(names), rng.choice(names)
        new = f"t{len(names)}"
        if kind == 0:
            lines.append(f"{new} = {a} {rng.choice('+-*/%')} {rng.randrange(99)}")
        elif kind == 1:
            lines.append(f"{new} = {rng.choice(['math.ceil', 'int', 'max', 'abs'])}({a}, {b})")
        elif kind == 2:
            lines.append(f"{new} = {a}.{rng.choice(['layers', 'hidden', 'heads'])} ** 2")
        else:
            lines.append(f"{new} = [{a} for _ in range({rng.randrange(9)}) if {b}]")
        names.append(new)
    body = "\n    ".join(lines)
    return f"def answer(cfg, dtype, tokens):\n    {body}\n    return {names[-1]}\n"


if __name__ == "__main__":
    main()
