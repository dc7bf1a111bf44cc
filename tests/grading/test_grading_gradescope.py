"""The Gradescope autograder end to end: build autograder.zip, lay Gradescope's folders out
in a scratch root, run the zip's own ``run_autograder`` as Gradescope would (with this
venv's Python in place of the one setup.sh installs), and read results.json."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from grading_support import BWRAP, fill, hidden_lines, release_of

from grading import course, gradescope
from grading.release import RELEASE, ROOT, SOURCE
from grading.results import VERDICT, QuestionResult, StudentResult, instructor_only

CHAPTER = "02_bytes"  # the quickest real chapter to grade
TESTS = ["ch02_int4_checkpoint_bytes_test", "ch02_config_cache_bytes_test",
         "ch02_longest_context_test", "ch02_kv_count_mistake_test"]  # fmt: skip
POINTS = [3.0, 3.0, 3.0, 2.0]
SOLUTIONS = SOURCE / CHAPTER / f"{CHAPTER}.ipynb"


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory) -> Path:
    return gradescope.bundle(CHAPTER, tmp_path_factory.mktemp("zip") / "autograder.zip")


def gradescope_run(zip_path: Path, root: Path, files: dict[str, bytes], path_prefix=None,
                   python=sys.executable):  # fmt: skip
    """Unpack the zip into root/source, put ``files`` in root/submission, run
    root/run_autograder as Gradescope does (cwd root); the results.json it wrote."""
    for folder in ("source", "submission", "results"):
        (root / folder).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
        for info in archive.infolist():  # zipfile drops the mode: put it back, as unzip does
            (root / "source" / info.filename).chmod((info.external_attr >> 16) & 0o777)
    (root / "run_autograder").write_bytes((root / "source" / "run_autograder").read_bytes())
    (root / "run_autograder").chmod(0o755)
    for name, data in files.items():
        (root / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / name).write_bytes(data)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": python}
    if path_prefix:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    done = subprocess.run([str(root / "run_autograder")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "results" / "results.json").read_text())


def scores(results: dict) -> list[tuple[str, float, float, str]]:
    return [(t["name"], t["score"], t["max_score"], t["status"]) for t in results["tests"]]


def notebook_bytes(nb) -> bytes:
    return nbformat.writes(nb).encode()


def blank() -> bytes:
    return (RELEASE / CHAPTER / f"{CHAPTER}.ipynb").read_bytes()


def test_zip_layout(autograder_zip):
    """Gradescope's two scripts at the root, executable; the project, the config and the
    chapter's source notebook (hidden tests included) inside; nothing of other chapters."""
    with zipfile.ZipFile(autograder_zip) as archive:
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
        config = json.loads(archive.read(gradescope.CONFIG))
        source = archive.read(f"solutions/{CHAPTER}/{CHAPTER}.ipynb")
    assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
    for name in ("pyproject.toml", "README.md", "grading/gradescope.py",
                 "grading/sandbox_runner.py", "helpers/__init__.py", "helpers/book/checks.py"):
        assert name in modes, name
    assert source == SOLUTIONS.read_bytes()
    assert config == {"chapter": CHAPTER, "timeout": 60, "memory": 4096}
    assert not [n for n in modes if n.startswith("solutions/") and CHAPTER not in n]
    assert not [n for n in modes if "__pycache__" in n or n.endswith(".pyc")]
    assert "grading/course/" not in "".join(modes)  # a local course's grades stay home


def test_zip_installs_the_project(autograder_zip, tmp_path):
    """What setup.sh's ``pip install /autograder/source`` makes of the zip: a wheel with
    every module of helpers/ and grading/ the zip carries (built here without the network);
    and both scripts parse as bash."""
    source = tmp_path / "source"
    with zipfile.ZipFile(autograder_zip) as archive:
        archive.extractall(source)
        modules = {n for n in archive.namelist()
                   if n.endswith(".py") and n.startswith(("helpers/", "grading/"))}  # fmt: skip
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(source / script)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(source)],
                   check=True, capture_output=True)  # fmt: skip
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as built:
        assert modules <= set(built.namelist()), modules - set(built.namelist())
    assert "grading/gradescope.py" in modules and "helpers/book/checks.py" in modules


def test_zip_refuses_unknown_chapter(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "grading", "gradescope", "99_nothing",
         "--output", str(tmp_path / "a.zip")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no chapter 99_nothing" in done.stderr
    assert not (tmp_path / "a.zip").exists()


@pytest.mark.slow
def test_perfect_and_blank(autograder_zip, tmp_path):
    """The solutions notebook gets every point; the release none. Written answers are left
    out of the tests and named in the output; hidden detail never shows."""
    perfect = gradescope_run(autograder_zip, tmp_path / "perfect" / "autograder",
                             {f"{CHAPTER}.ipynb": SOLUTIONS.read_bytes()})  # fmt: skip
    assert perfect["score"] == 11.0
    assert scores(perfect) == [(t, p, p, "passed") for t, p in zip(TESTS, POINTS, strict=True)]
    assert all(t["visibility"] == "visible" and t["output"] == "passed"
               for t in perfect["tests"])  # fmt: skip
    assert "ch02_written_gqa (3)" in perfect["output"]
    assert perfect["extra_data"]["written"] == {"ch02_written_gqa": 3.0}

    empty = gradescope_run(autograder_zip, tmp_path / "blank" / "autograder",
                           {f"{CHAPTER}.ipynb": blank()})  # fmt: skip
    assert empty["score"] == 0.0
    assert scores(empty) == [(t, 0.0, p, "failed") for t, p in zip(TESTS, POINTS, strict=True)]
    assert {t["output"] for t in empty["tests"]} == {
        "failed: not answered yet (the function raises NotImplementedError)"}
    assert empty["extra_data"]["flags"] == []


def hostile_answer(results_dir: Path) -> str:
    """Prints a forged Gradescope result, tries to write one (and a marker) into the
    results folder, then ends its process."""
    forged = json.dumps({"score": 1000, "tests": []})
    return f"""
import os
print({forged!r})
for name in ("results.json", "forged.txt"):
    try:
        with open({str(results_dir)!r} + "/" + name, "w") as out:
            out.write({forged!r})
    except OSError:
        pass
os._exit(0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sandbox", "no-bwrap"] if BWRAP else ["no-bwrap"])
def test_hostile(autograder_zip, tmp_path, mode, shared_python):
    """An answer cell that forges results and exits costs its own question only, with or
    without bubblewrap (Gradescope's Docker forbids its namespaces: a ``bwrap`` that fails,
    first on PATH, stands in for that). Without it, grading as root, student code runs as a
    user of its own, so it cannot write into the results folder."""
    root = tmp_path / "autograder"
    release = release_of(RELEASE, CHAPTER)
    answers = {course.meta(c)["grade_id"]: c.source
               for c in nbformat.read(SOLUTIONS, as_version=4).cells
               if course.meta(c).get("solution") and c.cell_type == "code"}  # fmt: skip
    answers["ch02_int4_checkpoint_bytes"] = hostile_answer(root / "results")
    prefix, python = None, sys.executable
    if mode == "no-bwrap":
        python = shared_python
        fake = tmp_path / "bin" / "bwrap"
        fake.parent.mkdir()
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                        "exit 1\n")  # fmt: skip
        fake.chmod(0o755)
        prefix = str(fake.parent)
    results = gradescope_run(autograder_zip, root,
                             {f"{CHAPTER}.ipynb": notebook_bytes(fill(release, answers))},
                             prefix, python)  # fmt: skip
    assert results["score"] == 8.0
    assert scores(results) == [(TESTS[0], 0.0, 3.0, "failed")] + [
        (t, p, p, "passed") for t, p in zip(TESTS[1:], POINTS[1:], strict=True)]
    assert results["tests"][0]["output"] == (
        "crashed: your code ended its process (exit, crash or limit)")
    assert "1000" not in json.dumps(results)
    if os.geteuid() == 0:  # as an ordinary user it could; the parent's last write still wins
        assert sorted(p.name for p in (root / "results").iterdir()) == ["results.json"]


FLOORED = """def int4_checkpoint_bytes(cfg, group_size):
    shapes = cfg.linear_shapes()
    del shapes["lm_head"]
    per_layer = quantized = 0
    for k, n in shapes.values():
        groups = n * (k // group_size)
        per_layer += -(-k * n // 2) + 2 * groups + -(-groups // 2)
        quantized += k * n
    return cfg.layers * per_layer + 2 * (param_count(cfg) - cfg.layers * quantized)
"""  # right on the visible tests (whole groups), wrong on hidden ones (a short last group)


@pytest.mark.slow
def test_two_notebooks_and_hidden(autograder_zip, tmp_path):
    """Two notebooks: the one named for the chapter is graded, and the output says which.
    An answer that fails only hidden tests is told so, and nothing of those tests shows."""
    graded = fill(release_of(RELEASE, CHAPTER), {"ch02_int4_checkpoint_bytes": FLOORED})
    files = {f"{CHAPTER}.ipynb": notebook_bytes(graded), "copy.ipynb": SOLUTIONS.read_bytes()}
    results = gradescope_run(autograder_zip, tmp_path / "autograder", files)
    assert results["score"] == 0.0
    assert scores(results) == [(t, 0.0, p, "failed") for t, p in zip(TESTS, POINTS, strict=True)]
    assert results["tests"][0]["output"] == VERDICT["hidden"]
    assert f"duplicate submission: graded {CHAPTER}.ipynb, ignored copy.ipynb" in results["output"]
    text = json.dumps(results)
    for line in hidden_lines(SOURCE, CHAPTER):
        assert json.dumps(line)[1:-1] not in text, line


def test_hidden_detail_and_instructor_flags_never_shown():
    """Whatever detail a hidden failure carries, and an instructor-only flag, stay out of
    results.json; the student's own flags are in its output."""
    assignment = course.load(CHAPTER, SOURCE)
    questions = [QuestionResult(TESTS[0], 3.0, 0.0, "hidden", "assert secret == 42"),
                 QuestionResult(TESTS[1], 3.0, 0.0, "failed", "expected 7, got 8"),
                 QuestionResult("ch02_written_gqa", 3.0, None, "manual")]  # fmt: skip
    flags = ["wrong file name: mine.ipynb (expected 02_bytes.ipynb)",
             instructor_only("ch02_int4_checkpoint_bytes matches "
                             "helpers.counting.memory.int4_checkpoint_bytes")]
    result = StudentResult("s", CHAPTER, questions, flags)
    data = gradescope.results(result, assignment)
    assert "secret" not in json.dumps(data) and "matches" not in json.dumps(data)
    assert f"Note: {flags[0]}" in data["output"] and data["extra_data"]["flags"] == flags[:1]
    assert [t["output"] for t in data["tests"]] == [VERDICT["hidden"],
                                                    "failed: expected 7, got 8"]  # fmt: skip
    assert data["score"] == 0.0 and [t["max_score"] for t in data["tests"]] == [3.0, 3.0]


NONE = "no answer found: no notebook submitted"


@pytest.mark.parametrize("files, expected, each", [
    ({}, "missing notebook: no 02_bytes.ipynb", NONE),
    ({"notes.txt": b"my answers are in my head"}, "missing notebook: no 02_bytes.ipynb "
                                                   "(found: notes.txt)", NONE),
    ({"02_bytes.ipynb": b'{"cells": [tru'}, "corrupt notebook 02_bytes.ipynb: NotJSONError",
     "the notebook could not be read"),
    ({"a/02_bytes.ipynb": b"{}", "b/02_bytes.ipynb": b"{}"},
     "cannot tell which notebook to grade: found a/02_bytes.ipynb, b/02_bytes.ipynb", NONE),
])  # fmt: skip
def test_broken_submission(autograder_zip, tmp_path, files, expected, each):
    """No notebook, corrupt JSON, two candidates: a results.json of zeros that says why."""
    results = gradescope_run(autograder_zip, tmp_path / "autograder", files)
    assert results["score"] == 0.0
    assert scores(results) == [(t, 0.0, p, "failed") for t, p in zip(TESTS, POINTS, strict=True)]
    assert expected in results["output"]
    assert {t["output"] for t in results["tests"]} == {each}


def test_misconfigured_zip(autograder_zip, tmp_path):
    """A zip whose chapter cannot be read still leaves results.json, saying so."""
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    (root / "source" / gradescope.CONFIG).write_text('{"chapter": "99_nothing"}')
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    script = root / "run_autograder"
    with zipfile.ZipFile(autograder_zip) as archive:
        script.write_bytes(archive.read("run_autograder"))
    script.chmod(0o755)
    subprocess.run([str(script)], cwd=root, env=env, check=True, capture_output=True)
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and results["tests"] == []
    assert "misconfigured" in results["output"]

    env["AUTOGRADER_PYTHON"] = str(tmp_path / "no-python")  # setup.sh never ran
    (root / "results" / "results.json").unlink()
    subprocess.run([str(script)], cwd=root, env=env, check=True, capture_output=True)
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and "failed to start (exit status 127)" in results["output"]
