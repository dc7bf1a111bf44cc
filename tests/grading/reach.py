"""What a student could try from inside an answer cell to reach what the grader keeps from
it: the exercise's reference (routes around the delegation stubs) and the hidden tests (a
canary planted in one). Shared by the tests run as root (test_grading_reach.py) and as an
unprivileged user (test_grading_unprivileged.py).

Every route ends in a plain import of ``helpers.memory`` when its trick finds nothing, so
with the stubs in place each answer meets the stub, and without them (the control) each one
returns the real value: the routes themselves work."""

from __future__ import annotations

from grading_fixture import EXERCISES, SETUP, with_hidden_tests

from grading import build, course, sandbox

CHAPTER, ANSWER_ID = "02_bytes", "ch02_weight_bytes"
REFERENCE = "helpers.memory.weight_bytes"
REFUSED = f"calling {REFERENCE} is not an answer: write it yourself"
LIMITS = sandbox.Limits(wall_s=60, cpu_s=60)

# Where the real module may be: the checkout (the editable install maps helpers there) and
# the module's own file; each route tries them all.
PLACES = f"""
import glob, os, sys, types
def places():
    import helpers.memory
    found = [{str(build.ROOT / "helpers" / "memory.py")!r}]
    for finder in glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages",
                                         "__editable__*finder.py")):
        namespace = {{}}
        try:
            exec(open(finder).read(), namespace)
            found.append(os.path.join(namespace["MAPPING"]["helpers"], "memory.py"))
        except Exception:
            pass
    return found + [helpers.memory.__file__]
def first_that_runs(tries, cfg, dtype):
    for attempt in tries:
        try:
            return attempt(cfg, dtype)
        except Exception:
            pass
    import helpers.memory
    return helpers.memory.weight_bytes(cfg, dtype)
"""

ROUTES = {
    "importlib.reload of every helpers module": """
def via(cfg, dtype):
    import importlib, sys
    for name in [m for m in list(sys.modules) if m.startswith("helpers")]:
        importlib.reload(sys.modules[name])
    return sys.modules["helpers.memory"].weight_bytes(cfg, dtype)
""",
    "a fresh import_module after emptying sys.modules": """
def via(cfg, dtype):
    import importlib, sys
    for name in [m for m in list(sys.modules) if m == "helpers" or m.startswith("helpers.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    return importlib.import_module("helpers.memory").weight_bytes(cfg, dtype)
""",
    "a fresh import past every finder but Python's own": """
def via(cfg, dtype):
    import importlib, os, sys
    def fresh(cfg, dtype):
        saved = sys.meta_path[:], sys.path[:]
        sys.meta_path[:] = [f for f in sys.meta_path
                            if getattr(f, "__module__", "").startswith(("_frozen", "__editable",
                                                                        "_distutils"))]
        sys.path[:] = [p for p in sys.path if not p.startswith(os.path.expanduser("~"))]
        for name in [m for m in list(sys.modules) if m.startswith("helpers")]:
            del sys.modules[name]
        try:
            return importlib.import_module("helpers.memory").weight_bytes(cfg, dtype)
        finally:
            sys.meta_path[:], sys.path[:] = saved
    return first_that_runs([fresh], cfg, dtype)
""",
    "importlib.util.spec_from_file_location on the file": """
def via(cfg, dtype):
    import importlib.util
    def load(path):
        def attempt(cfg, dtype):
            spec = importlib.util.spec_from_file_location("helpers.memory_again", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.weight_bytes(cfg, dtype)
        return attempt
    return first_that_runs([load(p) for p in places()], cfg, dtype)
""",
    "exec of the file's source": """
def via(cfg, dtype):
    def load(path):
        def attempt(cfg, dtype):
            namespace = {"__name__": "helpers.memory_again"}
            exec(compile(open(path).read(), path, "exec"), namespace)
            return namespace["weight_bytes"](cfg, dtype)
        return attempt
    return first_that_runs([load(p) for p in places()], cfg, dtype)
""",
    "the loader's get_data and inspect.getsource": """
def via(cfg, dtype):
    import inspect, helpers.memory
    def run(source):
        def attempt(cfg, dtype):
            namespace = {"__name__": "helpers.memory_again"}
            exec(compile(source(), "<again>", "exec"), namespace)
            return namespace["weight_bytes"](cfg, dtype)
        return attempt
    loader = helpers.memory.__loader__
    tries = [run(lambda p=p: loader.get_data(p)) for p in places()]
    return first_that_runs(tries + [run(lambda: inspect.getsource(helpers.memory))], cfg, dtype)
""",
    "pickle by name after emptying sys.modules": """
def via(cfg, dtype):
    import pickle, sys
    for name in [m for m in list(sys.modules) if m.startswith("helpers")]:
        del sys.modules[name]
    return pickle.loads(b"chelpers.memory\\nweight_bytes\\n.")(cfg, dtype)
""",
    "copyreg: reducers that import and reload the module": """
def via(cfg, dtype):
    import copyreg, importlib, pickle
    class Module:
        pass
    class Reloaded:
        pass
    copyreg.pickle(Module, lambda m: (importlib.import_module, ("helpers.memory",)))
    copyreg.pickle(Reloaded, lambda r: (importlib.reload, (Module(),)))
    return pickle.loads(pickle.dumps(Reloaded())).weight_bytes(cfg, dtype)
""",
    "gc: any other weight_bytes function in memory": """
def via(cfg, dtype):
    import gc, types, helpers.memory
    stub = helpers.memory.weight_bytes.__code__
    found = [o for o in gc.get_objects() if isinstance(o, types.FunctionType)
             and o.__name__ == "weight_bytes" and o.__code__ is not stub
             and (o.__module__ or "").startswith("helpers")]
    return first_that_runs([lambda c, d, f=f: f(c, d) for f in found], cfg, dtype)
""",
}


def exercise() -> tuple[course.Assignment, course.Exercise]:
    assignment = course.load(CHAPTER, build.SOURCE)
    (found,) = [e for e in assignment.exercises if e.answer_id == ANSWER_ID]
    return assignment, found


def route_answer(route: str) -> str:
    return PLACES + ROUTES[route] + "\ndef weight_bytes(cfg, dtype):\n    return via(cfg, dtype)\n"


def control_answer() -> str:
    """Every route in one answer, each checked against the others: run without stubs, it
    passes only if every route reaches the real function."""
    body = PLACES
    for i, route in enumerate(ROUTES):
        body += ROUTES[route].replace("def via(", f"def via{i}(")
    calls = ", ".join(f"via{i}(cfg, dtype)" for i in range(len(ROUTES)))
    return body + (f"\ndef weight_bytes(cfg, dtype):\n    values = [{calls}]\n"
                   "    assert len(set(values)) == 1, values\n    return values[0]\n")  # fmt: skip


def route_questions() -> list[sandbox.Question]:
    """One question per route with the stubs, then the control without them."""
    assignment, ex = exercise()
    questions = [sandbox.Question(assignment.setup, route_answer(route), ex.visible, ex.full,
                                  ex.names, ex.references) for route in ROUTES]  # fmt: skip
    return questions + [sandbox.Question(assignment.setup, control_answer(), ex.visible,
                                         ex.full, ex.names, ())]  # fmt: skip


# --- the canary ---------------------------------------------------------------------------

# Spelled in parts, joined only by the patterns below (which spell the hyphen \x2d), so that
# no process but the tester ever holds the canary's characters in a row.
CANARY = ("hidden", "canary", "4f1c")
MARKER = ("answer", "marker", "93ab")  # in the answer cell: what the scans must find
_, _, _, VISIBLE, HIDDEN = EXERCISES["ch99_square"]
PLANTED = HIDDEN + f"\ncheck_int(square(7), 49, {'-'.join(CANARY)!r})"

# Scans the answer process: objects (gc), frames, modules, the environment, its open files,
# its whole memory and the files it can read; ``found`` maps each place to what it found.
SCAN = r"""
import ctypes, gc, os, re, sys, types
def scan(**wanted):  # name=parts: where the parts, joined by hyphens, were seen
    patterns = {name: (re.compile(r"\x2d".join(re.escape(p) for p in parts)),
                       re.compile(rb"\x2d".join(re.escape(p.encode()) for p in parts)))
                for name, parts in wanted.items()}
    hits = {name: set() for name in wanted}
    def look(place, value):
        for name, (text, raw) in patterns.items():
            if isinstance(value, str) and text.search(value):
                hits[name].add(place)
            elif isinstance(value, (bytes, bytearray)) and raw.search(value):
                hits[name].add(place)
    for o in gc.get_objects():
        try:
            if isinstance(o, dict):
                for k, v in list(o.items()):
                    look("gc", k)
                    look("gc", v)
            elif isinstance(o, (list, tuple, set, frozenset)):
                for v in list(o):
                    look("gc", v)
            elif isinstance(o, types.CodeType):
                for v in o.co_consts:
                    look("gc", v)
            else:
                look("gc", o)
        except Exception:  # an object that will not be read
            pass
    frame = sys._getframe()
    while frame is not None:
        for v in list(frame.f_locals.values()) + list(frame.f_code.co_consts):
            look("frames", v)
        frame = frame.f_back
    for name, module in list(sys.modules.items()):
        for v in list(getattr(module, "__dict__", {}).values()):
            look("modules", v)
    for k, v in os.environ.items():
        look("environment", k + "=" + v)
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("/") and os.path.isfile(target):
                look("open files", open(target, "rb").read(1 << 24))
        except OSError:
            pass
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again: its own /proc/self/mem
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or (len(fields) > 5 and fields[5].startswith("/")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            for at in range(start, end, 1 << 24):
                try:
                    mem.seek(at)
                    look("memory", mem.read(min(1 << 24, end - at) + 64))
                except (OSError, ValueError, OverflowError):
                    break
    roots = ["/home", "/tmp", "/run", "/opt", "/dev/shm", "/var", "/etc", "/root", "/srv",
             "/mnt", "/media", os.path.dirname(sys.prefix)]
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.join(folder, d) not in (sys.prefix,)]
            for name in files:
                try:
                    with open(os.path.join(folder, name), "rb") as f:
                        look("files", f.read(1 << 22))
                except OSError:
                    pass
    return {name: sorted(places) for name, places in hits.items()}
"""


def canary_answer() -> str:
    marker = "-".join(MARKER)
    return (f"# {marker}\n"  # the answer cell's own text: the scans must find it
            f"open('/tmp/answer-file', 'w').write({marker!r})\n" + SCAN
            + f"found = scan(canary={CANARY!r}, marker={MARKER!r})\n"
            "def square(n):\n    return n * n\n")  # fmt: skip


CANARY_TEST = ("assert found['canary'] == [], found\n"
               "assert {'gc', 'memory', 'files'} <= set(found['marker']), found\n"
               + VISIBLE)  # fmt: skip


def canary_question() -> sandbox.Question:
    full = with_hidden_tests(CANARY_TEST, PLANTED)
    return sandbox.Question(SETUP, canary_answer(), CANARY_TEST, full, ("square", "found"))
