"""No way around the stubs, and no hidden test within the student's reach.

Every route a student can take from an answer cell to the reference its tests compare
against ends at the stub: reloading the library, importing it afresh, loading or executing
its file, reading its source, unpickling the function by name, or finding the function
object in memory. Each route is first shown to work where the reference is real (without
the sandbox, nothing stubbed), so a route that fails for a reason of its own cannot pass
as a defence.

And the answer process holds no part of the hidden tests: an answer that scans its whole
process (objects, frames, modules, the environment, open files, its raw memory, and what
it can read of the other processes) finds no trace of a canary planted in a hidden test.

The same tests run as an unprivileged user in ``test_grading_unprivileged.py``.
"""

from __future__ import annotations

import dataclasses
import secrets

import pytest
from grading_support import needs_bwrap

from grading import course, sandbox
from grading.release import SOURCE
from grading.sandbox import Isolation

CHAPTER, ANSWER = "02_bytes", "ch02_int4_checkpoint_bytes"
REFERENCE = "helpers.counting.memory.int4_checkpoint_bytes"
LIMITS = sandbox.Limits()  # the grader's own

# route -> code that leaves the function it found in `found`
ROUTES = {
    "importlib.reload of every helpers module": """
import importlib, sys
for name in [n for n in list(sys.modules) if n.startswith("helpers")]:
    importlib.reload(sys.modules[name])
found = sys.modules["helpers.counting.memory"].int4_checkpoint_bytes
""",
    "a fresh import_module after removing it from sys.modules": """
import importlib, sys
for name in [n for n in list(sys.modules) if n.startswith("helpers")]:
    del sys.modules[name]
found = importlib.import_module("helpers.counting.memory").int4_checkpoint_bytes
""",
    "a fresh import with the grader's import hooks removed": """
import importlib, sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "Library"]
for name in [n for n in list(sys.modules) if n.startswith("helpers")]:
    del sys.modules[name]
importlib.invalidate_caches()
found = importlib.import_module("helpers.counting.memory").int4_checkpoint_bytes
""",
    "importlib.util.spec_from_file_location on the module's file": """
import importlib.util, sys
import helpers.counting.memory
spec = importlib.util.spec_from_file_location("helpers.memory_copy",
helpers.counting.memory.__file__)
copy = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = copy
spec.loader.exec_module(copy)
found = copy.int4_checkpoint_bytes
""",
    "exec of the module's file": """
import sys, types
import helpers.counting.memory
copy = types.ModuleType("helpers.memory_exec")
sys.modules[copy.__name__] = copy
with open(helpers.counting.memory.__file__) as source:
    exec(compile(source.read(), helpers.counting.memory.__file__, "exec"), copy.__dict__)
found = copy.int4_checkpoint_bytes
""",
    "exec of inspect.getsource": """
import inspect, sys, types
import helpers.counting.memory
copy = types.ModuleType("helpers.memory_source")
sys.modules[copy.__name__] = copy
exec(compile(inspect.getsource(helpers.counting.memory), "<copy>", "exec"), copy.__dict__)
found = copy.int4_checkpoint_bytes
""",
    "pickle.loads of the function by name": """
import pickle
found = pickle.loads(b"chelpers.counting.memory\\nint4_checkpoint_bytes\\n.")
""",
    "an Unpickler whose find_class imports afresh (copyreg's route)": """
import copyreg, importlib, io, pickle, sys
class Fresh(pickle.Unpickler):
    def find_class(self, module, name):
        for loaded in [n for n in list(sys.modules) if n.startswith("helpers")]:
            del sys.modules[loaded]
        return getattr(importlib.import_module(module), name)
copyreg.pickle(type(len), lambda f: (getattr, (f.__self__, f.__name__)))
found = Fresh(io.BytesIO(b"chelpers.counting.memory\\nint4_checkpoint_bytes\\n.")).load()
""",
    "the real function found in memory with gc": """
import gc, types
found = [f for f in gc.get_objects() if isinstance(f, types.FunctionType)
         and f.__name__ == "int4_checkpoint_bytes" and (f.__module__ or "").startswith("helpers")
         and not any("is not an answer" in str(c) for c in f.__code__.co_consts)][0]
""",
}
# Without the sandbox the package's files are on disk: these routes reach them there
# (``inspect`` reads the file when there is one, and the loader's source only when not).
FILE_ROUTES = {"a fresh import with the grader's import hooks removed",
               "importlib.util.spec_from_file_location on the module's file",
               "exec of the module's file", "exec of inspect.getsource"}  # fmt: skip


def answer(route: str) -> str:
    return ROUTES[route] + ("\ndef int4_checkpoint_bytes(cfg, group_size):\n"
                           "    return found(cfg, group_size)\n")


@pytest.fixture(scope="module")
def exercise() -> tuple[course.Assignment, course.Exercise]:
    assignment = course.load(CHAPTER, SOURCE)
    (found,) = [e for e in assignment.exercises if e.answer_id == ANSWER]
    assert REFERENCE.rpartition(".")[2] in found.names
    return assignment, found


def grade(exercise, answers: list[str], stubbed: bool,
          isolation: Isolation) -> list[sandbox.Outcome]:  # fmt: skip
    assignment, ex = exercise
    if not stubbed:  # the references as tools of the exercise: left real
        ex = dataclasses.replace(ex, tools=(*ex.tools, *ex.references))
    questions = [sandbox.Question.of(assignment.setup, ex, a) for a in answers]
    return sandbox.run(questions, LIMITS, isolation=isolation)


@pytest.fixture(scope="module")
def controls(exercise) -> dict[str, sandbox.Outcome]:
    """Each route where the reference is real: without the sandbox, nothing stubbed."""
    return dict(zip(ROUTES, grade(exercise, [answer(r) for r in ROUTES], False, Isolation.NONE),
                    strict=True))  # fmt: skip


@pytest.mark.parametrize("route", ROUTES)
def test_each_route_reaches_the_reference_where_it_is_real(controls, route):
    assert controls[route].passed, controls[route]


@pytest.fixture(scope="module")
def sandboxed(exercise) -> dict[str, sandbox.Outcome]:
    return dict(zip(ROUTES, grade(exercise, [answer(r) for r in ROUTES], True, Isolation.BWRAP),
                    strict=True))  # fmt: skip


@needs_bwrap
@pytest.mark.parametrize("route", ROUTES)
def test_every_route_ends_at_the_stub(sandboxed, route):
    outcome = sandboxed[route]
    assert outcome.status in ("failed", "error"), outcome
    if outcome.status == "failed":
        assert outcome.detail == f"calling {REFERENCE} is not an answer: write it yourself"


@pytest.fixture(scope="module")
def unsafe(exercise) -> dict[str, sandbox.Outcome]:
    routes = [r for r in ROUTES if r not in FILE_ROUTES]
    return dict(zip(routes, grade(exercise, [answer(r) for r in routes], True, Isolation.NONE),
                    strict=True))  # fmt: skip


@pytest.mark.parametrize("route", [r for r in ROUTES if r not in FILE_ROUTES])
def test_without_the_sandbox_every_route_but_the_files_ends_at_the_stub(unsafe, route):
    assert unsafe[route].status in ("failed", "error"), unsafe[route]


# --- the canary --------------------------------------------------------------------------

# The answer looks for this pattern; the pattern's own text is no match, so the answer's
# source never counts as a sighting.
PATTERN = "CANARY_[0-9a-f]{32}"
SCANNER = r'''
import gc, os, re, sys
CANARY = re.compile(r"%s")
CANARY_BYTES = re.compile(CANARY.pattern.encode())

def _strings(value, depth=0):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (bytes, bytearray)):
        yield value.decode("latin-1")
    elif depth < 3 and isinstance(value, dict):
        for key, item in list(value.items()):
            yield from _strings(key, depth + 1)
            yield from _strings(item, depth + 1)
    elif depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        for item in list(value):
            yield from _strings(item, depth + 1)
    elif type(value).__name__ == "code":
        yield from _strings(value.co_consts, depth + 1)

def _readable(path, offset=0, length=None):
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            return f.read() if length is None else f.read(length)
    except (OSError, ValueError, OverflowError):
        return b""

def _memory(pid):
    """What of process pid's writable memory can be read."""
    found = []
    for line in _readable(f"/proc/{pid}/maps").decode().splitlines():
        span, perms = line.split()[:2]
        if not perms.startswith("rw"):
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        found.append(_readable(f"/proc/{pid}/mem", start, end - start))
    return found

def canary_sightings(others):
    seen = set()
    for obj in gc.get_objects():
        for text in _strings(obj):
            if CANARY.search(text):
                seen.add("gc")
        if type(obj).__name__ == "function":
            for text in _strings(obj.__code__):
                if CANARY.search(text):
                    seen.add("gc")
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            if any(CANARY.search(t) for t in _strings(scope)):
                seen.add("frames")
        frame = frame.f_back
    for module in list(sys.modules.values()):
        if any(CANARY.search(t) for t in _strings(getattr(module, "__dict__", {}))):
            seen.add("sys.modules")
    if any(CANARY.search(t) for t in _strings(dict(os.environ))):
        seen.add("environment")
    for fd in os.listdir("/proc/self/fd"):
        if CANARY_BYTES.search(_readable(f"/proc/self/fd/{fd}")):
            seen.add("open files")
    if any(CANARY_BYTES.search(chunk) for chunk in _memory("self")):
        seen.add("raw memory")
    for pid in [p for p in os.listdir("/proc") if others and p.isdigit()
                and int(p) != os.getpid()]:
        texts = [_readable(f"/proc/{pid}/{n}") for n in ("environ", "cmdline")]
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        texts += [_readable(f"/proc/{pid}/fd/{fd}") for fd in fds]
        if any(CANARY_BYTES.search(t) for t in texts + _memory(pid)):
            seen.add(f"process {pid}")
    return sorted(seen)
''' % PATTERN  # noqa: UP031 - the scanner's own braces


def canary_question(canary: str, planted_by_answer: bool, others: bool) -> sandbox.Question:
    """A question whose hidden test holds ``canary`` and asks the answer's scanner what it
    sees (with ``others``, in the other processes too); with ``planted_by_answer`` the
    answer builds a match itself: the scanner's control, which must see it."""
    assignment = course.load(CHAPTER, SOURCE)
    plant = f"_planted = ''.join(['CANARY_', {canary[7:]!r}])\n" if planted_by_answer else ""
    # The scan runs in the visible part (so its findings are shown); the canary waits in
    # the hidden part, which the tester holds from the start.
    visible = f"_seen = canary_sightings({others})\nassert _seen == [], _seen\n"
    hidden = f"### BEGIN HIDDEN TESTS\n_hidden_canary = {canary!r}\n### END HIDDEN TESTS\n"
    return sandbox.Question(assignment.setup, SCANNER + plant, visible, visible + hidden,
                            ("canary_sightings",))  # fmt: skip


# Without the sandbox (as root) the answer may read the tester's memory: there it scans
# its own process only.
@pytest.mark.parametrize("isolation", [
    pytest.param(Isolation.BWRAP, marks=needs_bwrap, id="sandboxed"),
    pytest.param(Isolation.NONE, id="unsafe")])  # fmt: skip
def test_the_answer_process_holds_no_hidden_test(isolation):
    canary = "CANARY_" + secrets.token_hex(16)
    others = isolation is Isolation.BWRAP
    control, scan = sandbox.run([canary_question(canary, True, others),
                                 canary_question(canary, False, others)],
                                LIMITS, isolation=isolation)  # fmt: skip
    # the control: the scanner sees what is in its own process
    assert control.status == "failed" and "'gc'" in control.detail, control
    assert scan.passed, scan
