"""No released notebook answers one of its own exercises, before or after it.

A chapter's worked examples call the library. A function defined in a release code cell
outside the graded cells (a table's helper, a worked example) that earned an exercise's
points would hand the learner the answer to copy. So each such function with as many
parameters as an exercise's function is renamed to it, submitted as that exercise's answer
and graded as the grader grades (its sandbox, the references stubbed): it must score nothing.
A helper that calls the library's reference is stopped by the stub, as a student's copy of
it would be; one that needs the chapter's other variables fails on a NameError, as a copy
without them would.
"""

from __future__ import annotations

import ast

import nbformat
import pytest
from grading_support import SANDBOX, solutions_of

from grading import course, sandbox
from grading.release import RELEASE, SOURCE, chapters


def parameters(node: ast.FunctionDef) -> int:
    return len(node.args.posonlyargs) + len(node.args.args) + len(node.args.kwonlyargs)


def answer_functions(source: str) -> dict[str, int]:
    """The functions an answer cell defines, by name, with their parameter counts."""
    return {node.name: parameters(node) for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef)}  # fmt: skip


def release_functions(chapter: str) -> list[tuple[int, ast.FunctionDef]]:
    """(cell index, definition) of every top-level function in the release's ungraded cells."""
    nb = nbformat.read(course.source_notebook(chapter, RELEASE), as_version=4)
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or course.meta(cell):
            continue
        lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith("%")]
        found += [(index, node) for node in ast.parse("\n".join(lines)).body
                  if isinstance(node, ast.FunctionDef)]  # fmt: skip
    return found


def renamed(node: ast.FunctionDef, name: str) -> str:
    copy = ast.parse(ast.unparse(node)).body[0]
    copy.name = name
    return ast.unparse(copy)


@pytest.mark.parametrize("chapter", chapters())
def test_no_release_cell_answers_an_exercise(chapter):
    assignment = course.load(chapter, SOURCE)
    solutions = solutions_of(SOURCE, chapter)
    defined = release_functions(chapter)
    tried, questions = [], []
    for exercise in assignment.exercises:
        for name, count in answer_functions(solutions[exercise.answer_id]).items():
            for index, node in defined:
                if parameters(node) == count:
                    tried.append(f"cell {index}: {node.name} as {name} ({exercise.answer_id})")
                    questions.append(sandbox.Question.of(
                        assignment.setup, exercise, renamed(node, name)))
    if not questions:
        return
    outcomes = sandbox.run(questions, sandbox.Limits(), isolation=SANDBOX)
    answers = [what for what, outcome in zip(tried, outcomes, strict=True) if outcome.passed]
    assert not answers, "the release hands out answers:\n" + "\n".join(answers)
