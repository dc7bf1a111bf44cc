"""Runs inside a sandbox: one submission's questions, on one side of the socket.

Started by :mod:`grading.sandbox` as ``python -I sandbox_runner.py`` with its settings
(JSON) on stdin and a control socket. Uses only the standard library and IPython (numpy
and torch when an answer returns arrays), never anything of the course.

Each grading thread runs two of these, each in a sandbox of its own: the **tester** side,
which sees the real ``helpers`` and receives the instructor's tests, and the **answer**
side, which sees no ``helpers`` at all and receives only the setup cell and the student's
answers. Each process, a **template**, imports the heavy modules once and then serves one
submission after another: for each, the grader sends the job (and, on the tester side, the
report file) plus one end of a socket pair joining the two sides, and the template forks a
**zygote**, which alone reads the job (so the template's memory, inherited by every later
zygote, holds no student's work). After the zygote ends, the template kills what is left,
removes what was written and compares its limits, its folders and the System V IPC objects
with how they were before any student code; on any difference it says so and ends, and the
grader starts a fresh sandbox.

For each question the tester zygote forks the **tester** and asks the answer zygote (over
the socket pair) to fork the **answer** process, the two joined by a socket of their own:

* the **tester** runs the instructor's setup cell, builds the answer's copy of ``helpers``
  (the real source, with every exercise reference the test cell calls turned into a stub
  *in its source*) and sends it, then runs the instructor's test cell (visible part, then
  the whole cell), where each name the answer defined is a proxy: arguments go to the
  answer process pickled (they come from the instructor); results come back as tagged
  JSON, decoded strictly into fresh objects of exactly the types sent (anything else
  arrives as an opaque stand-in that equals nothing). Student code never runs here, so it
  cannot patch the checks, forge output or reach the nonce; the tester alone writes
  ``pass`` with it.
* the **answer** process imports ``helpers`` from that copy only, runs the setup cell and
  the student's answer cell, then only serves calls to what the answer defined. Its
  process tree never imported the real ``helpers``, never held a test cell, and its
  sandbox has neither, so a reload, a fresh import, reading the file or memory all end at
  the stub, and no hidden test is within its reach. It has no report file.

The templates, the zygotes and their children are not dumpable, so the answer process
cannot ptrace them or take their file descriptors. A crash, hang or limit costs only that
question; an answer zygote killed or stopped by student code costs the question it was in,
and a fresh pair of zygotes grades the rest.
"""

import ast
import base64
import builtins
import ctypes
import dataclasses
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import pickle
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
import types

REPORT_FD = None  # the tester zygote's report file (the answer side has none)
ZYGOTE_HOME = ""  # the zygote's home; each question's answer gets a folder under it
TESTER_HOME = ""  # in the sandbox, a disk of the testers' own (else the zygote's home)
UIDS = {}  # role -> user id, when the zygote runs as root
PROCESSES = [0]  # RLIMIT_NPROC for a process that switches user
ERROR_CHARS = 2000
MAX_MESSAGE = 64 << 20
MAX_DEPTH = 64
NOT_AN_ANSWER = "is not an answer: write it yourself"  # as grading.sandbox.NOT_AN_ANSWER


def emit(record):
    """One JSON line on the report file (O_APPEND, shared by the zygote and testers)."""
    if REPORT_FD is None:  # the answer side: nothing it writes is evidence
        return
    os.write(REPORT_FD, (json.dumps(record) + "\n").encode())


def non_dumpable():
    """Same user, no Yama: stop other sandboxed processes from ptracing this one or taking
    its file descriptors. Inherited by forked children."""
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def describe(error):
    return f"{type(error).__name__}: {error}"[:ERROR_CHARS]


class AnswerCrashed(Exception):
    """The answer process died or sent something unreadable."""


class AnswerError(Exception):
    """The student's function raised an exception that is not a builtin one."""


# --- messages: 8-byte length, then the payload -------------------------------------------


def send(sock, payload):
    sock.sendall(struct.pack(">Q", len(payload)) + payload)


def receive(sock):
    header = _exactly(sock, 8)
    (size,) = struct.unpack(">Q", header)
    if size > MAX_MESSAGE:
        raise AnswerCrashed("your answer sent more data than allowed")
    return _exactly(sock, size)


def _exactly(sock, size):
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise AnswerCrashed("your code ended its process (exit, crash or limit)")
        data += chunk
    return bytes(data)


# --- results: encoded by the answer process, decoded strictly by the tester --------------


def encode(value, depth=0):
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": base64.b64encode(value).decode()}
    module = getattr(kind, "__module__", "") or ""
    if module.startswith("torch") and kind.__name__ in ("Tensor", "Parameter"):
        array = value.detach().cpu().contiguous()
        raw = array.view(-1).view(__import__("torch").uint8).numpy().tobytes()
        return {"tensor": [str(array.dtype).removeprefix("torch."), list(array.shape),
                           base64.b64encode(raw).decode()]}  # fmt: skip
    if module == "numpy" and kind.__name__ == "ndarray":
        return {"ndarray": [value.dtype.str, list(value.shape),
                            base64.b64encode(value.tobytes()).decode()]}  # fmt: skip
    if module == "numpy" and hasattr(value, "dtype") and hasattr(value, "tobytes"):
        return {"npscalar": [value.dtype.str, base64.b64encode(value.tobytes()).decode()]}
    if dataclasses.is_dataclass(value) and module.startswith("helpers."):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"dataclass": [module, kind.__qualname__, encode(fields, depth + 1)]}
    return {"opaque": f"{module}.{kind.__qualname__}"}


def opaque(type_name):
    """A stand-in for a value that cannot be sent: named like it, equal to nothing."""
    module, _, name = str(type_name)[:200].rpartition(".")
    stand_in = type(name or "object", (), {
        "__module__": module or "student",
        "__repr__": lambda self: f"<a {type_name} object>",
        "__eq__": lambda self, other: self is other,
        "__hash__": object.__hash__,
    })  # fmt: skip
    return stand_in()


def decode(data, depth=0):
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise ValueError("malformed result")
    ((tag, body),) = data.items()
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](
            decode(v, depth + 1) for v in _list(body)
        )
    if tag == "dict":
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in _list(body)}
    if tag == "bytes":
        return base64.b64decode(str(body))
    if tag == "tensor":
        import torch

        name, shape, raw = _list(body)
        dtype = getattr(torch, str(name), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError("unknown dtype")
        flat = torch.frombuffer(bytearray(base64.b64decode(str(raw))) or bytearray(1),
                                dtype=torch.uint8)  # fmt: skip
        count = 1
        for size in shape:
            count *= int(size)
        return flat[: count * dtype.itemsize].view(dtype).reshape([int(s) for s in shape]).clone()
    if tag in ("ndarray", "npscalar"):
        import numpy

        dtype = numpy.dtype(str(_list(body)[0]))
        if dtype.hasobject:
            raise ValueError("object arrays cannot be sent")
        raw = base64.b64decode(str(_list(body)[-1]))
        if tag == "npscalar":
            return numpy.frombuffer(raw, dtype=dtype)[0]
        shape = [int(s) for s in _list(body)[1]]
        return numpy.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if tag == "dataclass":
        module, qualname, fields = _list(body)
        if not str(module).startswith("helpers."):
            raise ValueError("only helpers' dataclasses can be sent")
        cls = importlib.import_module(str(module))
        for part in str(qualname).split("."):
            cls = getattr(cls, part)
        fields = decode(fields, depth + 1)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise ValueError("not a dataclass")
        if type(fields) is not dict:
            raise ValueError("malformed fields")
        return cls(**fields)
    if tag == "opaque":
        return opaque(body)
    raise ValueError("malformed result")


def _list(body):
    if type(body) is not list:
        raise ValueError("malformed result")
    return body


def raise_from(name, message):
    """Re-raise the student's exception in the tester: builtin types as themselves."""
    kind = getattr(builtins, str(name), None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        raise kind(str(message))
    raise AnswerError(f"{name}: {message}")


# --- the two processes ---------------------------------------------------------------------


def make_shell(home):
    """An IPython shell of this process alone: its own IPython directory under ``home`` and
    an in-memory history. A shared ``history.sqlite`` let the answer and tester processes
    race IPython's corrupt-database rename, which killed whichever lost."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class Shell(InteractiveShell):
        def enable_gui(self, gui=None):  # `%matplotlib inline` needs no event loop here
            pass

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    return Shell.instance(config=config, ipython_dir=os.path.join(home, ".ipython"))


def run(shell, source):
    """Run one cell; the exception it raised, or None."""
    result = shell.run_cell(source, store_history=False)
    return result.error_before_exec or result.error_in_exec


def scratch_roots(index):
    return {"answer": os.path.join(ZYGOTE_HOME, f"q{index}"),
            "tester": os.path.join(TESTER_HOME or ZYGOTE_HOME, f"q{index}")}  # fmt: skip


def private(index, role):
    """This process's own home, temporary folder, working folder and output file, so that
    nothing on disk is shared between the answer and the tester (nor with other
    questions: the zygote removes them after the question). As root, it then becomes
    the role's own user."""
    home = os.path.join(scratch_roots(index)[role], role)
    tmp = os.path.join(home, "tmp")
    os.makedirs(tmp, exist_ok=True)
    uid = UIDS.get(role)
    if uid is not None:
        for folder in (home, tmp):
            os.chown(folder, uid, uid)
        os.chmod(home, 0o700)
    os.environ.update({"HOME": home, "TMPDIR": tmp, "IPYTHONDIR": os.path.join(home, ".ipython")})
    tempfile.tempdir = None  # computed again from TMPDIR
    os.chdir(home)
    # stdout and stderr: a file of its own (bounded by RLIMIT_FSIZE), so a flood by the
    # answer cannot fill the output that the tester and later questions write to
    output = os.open(os.path.join(home, "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # and with it every capability goes
        non_dumpable()  # a change of user resets it
        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESSES[0], PROCESSES[0]))
    return home


def limit(question, index, role):
    limits = question["limits"]
    home = private(index, role)
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
    return home


def answer_process(index, question, sock):
    """Import ``helpers`` from the copy the tester sends, run setup and the student's
    answer, then serve calls to what the answer defined."""
    home = limit(question, index, "answer")
    shell = make_shell(home)  # while the tester runs its setup
    install_helpers(pickle.loads(receive(sock))["helpers"], home)  # from the tester: trusted
    error = run(shell, question["setup"])
    if error is not None:
        return send(sock, json.dumps({"stage": "setup", "error": describe(error)}).encode())
    before = dict(shell.user_ns)
    error = run(shell, question["answer"])
    if error is not None:
        return send(sock, json.dumps({"stage": "answer", "error": describe(error)}).encode())
    defined = {}
    for name, value in list(shell.user_ns.items()):
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if name in before and before[name] is value:
            continue
        defined[name] = {"callable": True} if callable(value) else {"value": safe_encode(value)}
    send(sock, json.dumps({"defined": defined}).encode())
    while True:
        name, args, kwargs = pickle.loads(receive(sock))  # from the tester: trusted
        try:
            reply = {"value": safe_encode(shell.user_ns[name](*args, **kwargs))}
        except BaseException as error:  # noqa: B036 - the student's exception goes back
            reply = {"raise": [type(error).__name__, str(error)[:ERROR_CHARS]]}
        send(sock, json.dumps(reply).encode())


# --- the answer's copy of helpers: the exercise references are stubs in its source -------

HELPERS = {}  # path relative to the folder above helpers -> bytes, read by the tester zygote


class StubError(Exception):
    """A reference the grader cannot turn into a stub: the instructor must know."""


def helpers_files():
    """Every file of the real ``helpers`` package, each module with its bytecode beside it
    (so that the answer's imports of the copy cost no compiling): read and compiled once
    by the tester's template."""
    if not HELPERS:
        package = importlib.import_module("helpers")
        root = os.path.dirname(os.path.abspath(package.__file__))
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if not name.endswith((".pyc", ".pyo")):
                    path = os.path.join(folder, name)
                    with open(path, "rb") as source:
                        HELPERS.update(with_bytecode(os.path.relpath(path, os.path.dirname(
                            root)), source.read()))  # fmt: skip
    return HELPERS


def with_bytecode(rel, source):
    """``{rel: source}``, and for a module its compiled form where Python looks for it
    (unchecked: the copy is never edited, so nothing stats the source)."""
    if not rel.endswith(".py"):
        return {rel: source}
    code = compile(source, rel, "exec", dont_inherit=True)
    pyc = importlib._bootstrap_external._code_to_hash_pyc(
        code, importlib.util.source_hash(source), checked=False)  # fmt: skip
    return {rel: source, importlib.util.cache_from_source(rel): bytes(pyc)}


def references(namespace, dotted_names):
    """The helpers functions among what the tests call and the solution does not, as
    ``{module: {qualname: full name}}``: resolved in the tester's namespace after the setup
    cell (so ``memory.weight_bytes`` and ``from helpers.memory import weight_bytes`` alike).
    Checkers, the notebook's setup and lookups of a named config stay real."""
    found = {}
    for dotted in dotted_names:
        head, *rest = str(dotted).split(".")
        value = namespace.get(head)
        for part in rest:
            value = getattr(value, part, None)
        module = getattr(value, "__module__", None) or ""
        if (isinstance(value, types.FunctionType) and module.startswith("helpers.")
                and module not in ("helpers.checks", "helpers.notebook")
                and not _lookup(value)):  # fmt: skip
            found.setdefault(module, {})[value.__qualname__] = f"{module}.{value.__qualname__}"
    return found


def imported_names(setup, dotted_names):
    """The names the references start with, as the setup's imports bind them, without
    running it (so the copy can go to the answer while both run their setup); None when
    any such name is bound otherwise, or more than once."""
    try:
        tree = ast.parse(setup)
    except SyntaxError:
        return None
    binds, counts = {}, {}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                target = alias.name if alias.asname else alias.name.split(".")[0]
                binds[name] = (target, None)
                names.append(name)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                binds[alias.asname or alias.name] = (node.module, alias.name)
                names.append(alias.asname or alias.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names += node.names
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    namespace = {}
    for head in {str(d).split(".")[0] for d in dotted_names}:
        if head not in binds or counts.get(head) != 1:
            if head in counts:  # a name the setup binds another way: run it to know
                return None
            continue  # a builtin, or a name the answer defines: not the setup's
        module, attribute = binds[head]
        try:
            value = importlib.import_module(module)
            if attribute is not None:
                value = (getattr(value, attribute) if hasattr(value, attribute)
                         else importlib.import_module(f"{module}.{attribute}"))  # fmt: skip
        except Exception:  # the setup will say what is wrong
            return None
        namespace[head] = value
    return namespace


def _lookup(function):
    """``get(name: str) -> SomeConfig``: finds the tests' inputs by name, answers nothing."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    params = list(signature.parameters.values())
    returns = signature.return_annotation
    return (bool(params) and params[0].annotation in (str, "str")
            and isinstance(returns, (type, str)) and returns not in (str, "str")
            and function.__name__ == "get")  # fmt: skip


def helpers_copy(stubs):
    """The files of ``helpers`` with each function in ``stubs`` (see :func:`references`)
    reduced, in its module's source, to a ``raise`` that says it is not an answer."""
    files = dict(helpers_files())
    above = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["helpers"].__file__)))
    for module, functions in stubs.items():
        path = importlib.import_module(module).__file__
        rel = os.path.relpath(os.path.abspath(path), above)
        if rel not in files:
            raise StubError(f"cannot stub {module}: {path} is not in the helpers package")
        files.update(with_bytecode(rel, stubbed(files[rel], functions)))
    return files


def stubbed(source, functions):
    """``source`` (bytes) with the body of each ``def`` named in ``functions`` (qualname
    -> full name) replaced by ``raise RuntimeError("calling … is not an answer…")``."""
    tree = ast.parse(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits = []
    for qualname, name in functions.items():
        nodes = _defs(tree.body, qualname.split("."))
        if not nodes:
            raise StubError(f"cannot stub {name}: no `def {qualname}` in its module's source")
        for node in nodes:  # ast offsets are in bytes of UTF-8: so is `source`
            first, last = node.body[0], node.body[-1]
            begin = starts[first.lineno - 1] + first.col_offset
            end = starts[last.end_lineno - 1] + last.end_col_offset
            message = f"calling {name} {NOT_AN_ANSWER}"
            edits.append((begin, end, f"raise RuntimeError({message!r})".encode()))
    for begin, end, text in sorted(edits, reverse=True):
        source = source[:begin] + text + source[end:]
    return source


def _defs(body, parts):
    """The definitions of the qualname ``parts`` in ``body`` (module or class level, and
    inside ``if``/``try`` blocks there)."""
    found = []
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            blocks = [node.body, node.orelse, getattr(node, "finalbody", [])]
            blocks += [handler.body for handler in getattr(node, "handlers", [])]
            for block in blocks:
                found += _defs(block, parts)
        elif getattr(node, "name", None) == parts[0]:
            if len(parts) == 1 and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(node)
            elif len(parts) > 1 and isinstance(node, ast.ClassDef):
                found += _defs(node.body, parts[1:])
    return found


class HelpersCopy:
    """Finds ``helpers`` and its submodules in the answer's copy only, ahead of any other
    finder (an editable install maps ``helpers`` to the checkout, which the answer's
    sandbox does not have)."""

    def __init__(self, root):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if name != "helpers" and not name.startswith("helpers."):
            return None
        return importlib.machinery.PathFinder.find_spec(name, [self.root] if path is None
                                                        or name == "helpers" else path)


def install_helpers(files, home):
    """Write the copy under ``home`` and make it the only ``helpers`` this process finds."""
    root = os.path.join(home, "lib")
    for rel, data in files.items():
        path = os.path.normpath(os.path.join(root, rel))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
    sys.meta_path.insert(0, HelpersCopy(root))
    sys.path.insert(0, root)
    importlib.invalidate_caches()


def safe_encode(value):
    try:
        return encode(value)
    except Exception:  # too deep, or a value that cannot be read: send what it is
        return {"opaque": f"{type(value).__module__}.{type(value).__qualname__}"}


def tester_process(index, question, sock, nonce):
    """Run setup, send the answer its copy of helpers, run the instructor's tests against
    proxies; report with the nonce."""

    def report(stage, error=""):
        emit({"q": index, "nonce": nonce, "stage": stage, "error": error})

    home = limit(question, index, "tester")
    wanted = question.get("references", ())
    early = imported_names(question["setup"], wanted)
    sent = None
    try:
        if early is not None:  # the copy goes before the setup runs, so both run at once
            sent = references(early, wanted)
            send(sock, pickle.dumps({"helpers": helpers_copy(sent)}))
        shell = make_shell(home)
        error = run(shell, question["setup"])
        if error is not None:
            return report("setup", describe(error))
        found = references(shell.user_ns, wanted)
        if sent is None:
            send(sock, pickle.dumps({"helpers": helpers_copy(found)}))
        elif found != sent:  # the setup rebound a reference after importing it
            return report("setup", f"the grader stubbed {sent} but the tests call {found}")
    except (StubError, SyntaxError, ImportError) as bad:
        return report("setup", f"the grader cannot stub this exercise's reference: {bad}")
    except OSError:
        return report("crash", "your code ended its process (exit, crash or limit)")
    try:
        ready = json.loads(receive(sock))
        if "error" in ready:  # the answer process chose these words: only two stages exist
            stage = "setup" if ready.get("stage") == "setup" else "answer"
            return report(stage, str(ready["error"])[:ERROR_CHARS])
        defined = ready["defined"]
        values = {}
        for name, item in defined.items():
            values[str(name)] = proxy(sock, str(name)) if "callable" in item else decode(
                item["value"]
            )
    except AnswerCrashed as crash:
        return report("crash", str(crash))
    except OSError:
        return report("crash", "your code ended its process (exit, crash or limit)")
    except Exception as bad:
        return report("crash", f"your answer sent something unreadable ({describe(bad)})")
    for name, value in values.items():
        # The tests see what the exercise asks for (which may replace a setup name), never
        # a replacement for a checker, a setup name or a builtin.
        wanted = question["names"]
        if name in wanted or not (wanted or name in shell.user_ns or hasattr(builtins, name)):
            shell.user_ns[name] = value
    for stage, source in (("visible", question["visible"]), ("hidden", question["full"])):
        error = run(shell, source)
        if isinstance(error, AnswerCrashed):
            return report("crash", str(error))
        if error is not None:
            return report(stage, describe(error) if stage == "visible" else "")
    report("pass")


def proxy(sock, name):
    """Stands in the tester for the student's function ``name``."""

    def call(*args, **kwargs):
        try:
            request = pickle.dumps((name, args, kwargs))
        except Exception as error:
            raise TypeError(f"these arguments cannot be sent to {name}: {error}") from None
        send(sock, request)
        raw = receive(sock)
        try:
            reply = json.loads(raw)
            if type(reply) is dict and "raise" in reply:
                failure = _list(reply["raise"])
            else:
                return decode(reply["value"])
        except Exception as bad:
            unreadable = f"your answer sent something unreadable ({describe(bad)})"
            raise AnswerCrashed(unreadable) from None
        raise_from(*failure[:2])

    call.__name__ = call.__qualname__ = name
    return call


# --- the zygotes ---------------------------------------------------------------------------

STARTUP_S = 110.0  # for a fresh answer sandbox to start (the grader waits 120 s)
START_S = 10.0  # for the answer zygote to fork a question's answer process
STOP_S = 8.0  # for it to stop that process, sweep and clean (a fork bomb takes seconds)
ANSWER_ENDS_S = 0.2  # an answer ends by itself once the tester has gone: its status is wanted


def wait_for(pid, deadline, poll=0.01):
    """Wait for the child ``pid`` until ``deadline``, then kill its session. Returns its
    status, or None if it was still running (so stopped by us)."""
    status = None
    while True:
        done, found = os.waitpid(pid, os.WNOHANG)
        if done:
            status = found
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(poll)
    for kill in (os.killpg, os.kill):  # the group, and the child before its setsid
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if status is None:
        os.waitpid(pid, 0)
    return status


def ask(sync, command, timeout, fd=None):
    """Send ``command`` to the answer zygote; its reply, None if it has gone, or "stopped"
    if it made none within ``timeout`` seconds."""
    try:
        message = json.dumps(command).encode()
        if fd is None:
            sync.send(message)
        else:
            socket.send_fds(sync, [message], [fd])
        ready, _, _ = select.select([sync], [], [], timeout)
        if not ready:
            return "stopped"
        data = sync.recv(1 << 16)
        return json.loads(data) if data else None
    except (OSError, ValueError):
        return None


def fork(body, index):
    """Run ``body`` in a child, in a session of its own (so a timeout kills all of it, and
    signals meant for the zygote's group never reach it)."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        try:
            body()
        except BaseException as error:  # noqa: B036 - a child must always end here
            try:
                emit({"q": index, "stage": "runner", "error": describe(error)})
            except OSError:
                pass
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    return pid


def leftovers(sandboxed):
    """Live processes left over from a question: in the sandbox's PID namespace, every one
    but its init, this process and its parents (the zygote's template); without a sandbox,
    this process's descendants (orphans come back to it, a subreaper)."""
    me, parents, states = os.getpid(), {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry)], states[int(entry)] = int(fields[1]), fields[0]
    spare, up = {1, me}, os.getppid()
    while sandboxed and up > 1 and up not in spare:
        spare.add(up)
        up = parents.get(up, 0)
    found = []
    for pid in parents:
        if pid in spare or states[pid] in ("Z", "X"):
            continue
        if sandboxed:
            found.append(pid)
            continue
        seen, up = set(), parents.get(pid)
        while up and up not in seen and up != me:
            seen.add(up)
            up = parents.get(up)
        if up == me:
            found.append(pid)
    return found


def sweep(sandboxed):
    """Kill and reap whatever a question left running (a daemon that escaped its session,
    a fork bomb), so it cannot slow or attack the next question. True when none is left."""
    for _ in range(500):
        pids = leftovers(sandboxed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not pids:
            return True
        time.sleep(0.01)
    return False


def clean(keep, index=None):
    """Remove the question's folders and anything else left in the home and /tmp."""
    for root in scratch_roots(index).values() if index is not None else ():
        shutil.rmtree(root, ignore_errors=True)
    for folder, names in keep.items():
        for name in set(os.listdir(folder)) - names:
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def answer_child(index, question, own, sync):
    sync.close()  # the student's process never holds the zygotes' channel
    answer_process(index, question, own)


def tester_child(index, question, own, sync, nonce):
    sync.close()
    tester_process(index, question, own, nonce)


def preimport(names):
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # optional speed-up only; the setup cell reports real failures
            pass


def subreaper():
    try:
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here
    except (OSError, AttributeError):
        pass


def state(folders):
    """What could carry over from one submission to the next: this process's limits (an
    answer running as the same user can lower them), every entry under the folders, and
    System V IPC objects (they outlive their processes)."""
    found = [tuple(resource.getrlimit(getattr(resource, name)))
             for name in sorted(dir(resource)) if name.startswith("RLIMIT_")]  # fmt: skip
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            for name in sorted(dirs + files):
                try:
                    info = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                found.append((root, name, info.st_mode, info.st_uid, info.st_size,
                              info.st_mtime_ns))  # fmt: skip
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                found.append((kind, len(table.read().splitlines())))
        except OSError:
            pass
    return found


def warm_up():
    """Create and drop one IPython shell that turns on inline figures, so each question's
    shells find IPython's magics registered once and their modules imported (a few tenths
    of a second per process). Only the instructor's words run here, in a folder removed
    before any question."""
    from IPython.core.interactiveshell import InteractiveShell

    folder = tempfile.mkdtemp(dir=ZYGOTE_HOME)
    try:
        shell = make_shell(folder)
        run(shell, "%matplotlib inline\n%config InlineBackend.figure_formats = ['png']")
        type(shell).clear_instance()
        InteractiveShell.clear_instance()
    except Exception:  # a speed-up only
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def serve(config):
    """The template: import the heavy modules once, then for each submission the grader
    asks for, fork a fresh zygote and, once it has ended, kill what it left, remove what it
    wrote and check that nothing else changed. It never reads a submission (the zygote
    alone reads the job), so no zygote's memory holds another student's work; when
    anything did change, it says so and ends, and the grader starts a fresh sandbox. A
    zygote that student code stops is killed at once (and the reply says so)."""
    global ZYGOTE_HOME, TESTER_HOME
    control = socket.socket(fileno=config["control_fd"])
    ZYGOTE_HOME = os.environ["HOME"]
    TESTER_HOME = config.get("tester_home") or ""
    sandboxed, role = config["sandboxed"], config["role"]
    non_dumpable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    preimport(config["preimport"])
    if role == "tester":
        helpers_files()  # every zygote and tester inherits it
    warm_up()
    subreaper()
    if sandboxed and os.getuid() == 0:  # the answer's own user writes its /tmp
        os.chmod("/tmp", 0o1777)
    folders = [ZYGOTE_HOME]
    if sandboxed:
        folders += [f for f in ("/tmp", TESTER_HOME, "/dev/shm") if f and os.path.isdir(f)]
    # What the template has in its folders before any student code: the rest is removed
    # after each question, so a disk filled by one costs only that one.
    keep = {folder: set(os.listdir(folder)) for folder in folders}
    clean_state = state(folders)
    wanted = 3 if role == "tester" else 2  # the job, (the report,) the zygotes' channel
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, wanted)
        except OSError:
            return
        if not message or len(fds) != wanted:  # the grader has gone
            return
        preimport(json.loads(message).get("preimport", []))  # the instructor's modules
        pid = os.fork()
        if pid == 0:
            control.close()
            os.setsid()  # apart from the template: a kill of the zygote's group spares it
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            try:
                (tester_zygote if role == "tester" else answer_zygote)(*fds, keep, sandboxed)
            except BaseException:  # noqa: B036 - the parent decides from the report
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)  # no interpreter teardown (a second of torch's)
        for fd in fds:
            os.close(fd)
        stopped = False
        while True:
            _, status = os.waitpid(pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                break
            stopped = True
            os.kill(pid, signal.SIGKILL)
        pristine = sweep(sandboxed)
        clean(keep)
        pristine = pristine and state(folders) == clean_state
        reply = {"exit": os.waitstatus_to_exitcode(status), "pristine": pristine,
                 "stopped": stopped}  # fmt: skip
        try:
            control.send(json.dumps(reply).encode())
        except OSError:
            return
        if not pristine:
            return


def start_zygote(job_fd):
    """Read the job (this zygote alone does) and set what binds every question."""
    with os.fdopen(job_fd, "rb") as job_file:
        job = json.loads(job_file.read())
    output = job["limits"]["output"]
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    if os.getuid() != 0:  # root ignores RLIMIT_NPROC
        processes = job["limits"]["processes"]
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    preimport(job["preimport"])
    if job.get("uids"):  # grading as root: the processes get users of their own
        UIDS.update(job["uids"])
        PROCESSES[0] = job["limits"]["processes"]
    subreaper()
    return job


def tester_zygote(job_fd, report_fd, sync_fd, keep, sandboxed):
    """One submission's questions: for each, fork the tester and have the answer zygote
    fork the answer process; record the outcome. Ends when the answer zygote has gone
    (the question it was in is then lost, and the grader goes on with a fresh pair)."""
    global REPORT_FD
    REPORT_FD = report_fd
    job = start_zygote(job_fd)
    sync = socket.socket(fileno=sync_fd)
    helpers_files()  # read once: every tester inherits it
    zygote_nonce, wait_s = job["zygote_nonce"], STARTUP_S  # its template may be starting
    for index, question in enumerate(job["questions"]):
        if index < job.get("first", 0):
            continue
        nonce = question.pop("nonce")
        tester_end, answer_end = socket.socketpair()
        started = ask(sync, {"do": "start", "q": index}, wait_s, answer_end.fileno())
        wait_s = START_S
        answer_end.close()
        if not isinstance(started, dict):  # no student code ran in this question yet
            tester_end.close()
            return emit({"q": index, "zygote": zygote_nonce, "answer_zygote": started})
        emit({"q": index, "zygote": zygote_nonce, "start": True})
        if "broken" in started:  # an earlier answer broke it: the parent starts a fresh pair
            tester_end.close()
            return emit({"q": index, "zygote": zygote_nonce, "broken": started["broken"]})
        try:
            pid = fork(functools.partial(tester_child, index, question, tester_end, sync,
                                         nonce), index)  # fmt: skip
        except OSError as error:
            emit({"q": index, "zygote": zygote_nonce, "broken": describe(error)})
            return
        finally:
            tester_end.close()
        status = wait_for(pid, time.monotonic() + question["limits"]["wall_s"])
        stopped = ask(sync, {"do": "stop", "q": index}, STOP_S)
        sweep(sandboxed)
        clean(keep, index)
        if not isinstance(stopped, dict):  # the answer killed or stopped its zygote
            return emit({"q": index, "zygote": zygote_nonce, "answer_zygote": stopped})
        event = {"q": index, "zygote": zygote_nonce, "timeout": status is None}
        if stopped.get("answer_exit") is not None:
            event["answer_exit"] = stopped["answer_exit"]
        if status is not None:
            event["exit"] = os.waitstatus_to_exitcode(status)
        emit(event)


def answer_zygote(job_fd, sync_fd, keep, sandboxed):
    """The answer side of one submission: fork each question's answer process when the
    tester zygote asks, and stop it (reporting how it ended) when the tester is done."""
    job = start_zygote(job_fd)
    sync = socket.socket(fileno=sync_fd)
    pid = None
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sync, 1 << 16, 1)
        except OSError:
            return
        if not message:  # the tester zygote is done, or gone
            return
        command = json.loads(message)
        index = command["q"]
        if command["do"] == "start" and len(fds) == 1:
            own = socket.socket(fileno=fds[0])
            try:
                pid = fork(functools.partial(answer_child, index, job["questions"][index],
                                             own, sync), index)  # fmt: skip
            except OSError as error:  # an earlier answer broke this zygote
                sync.send(json.dumps({"broken": describe(error)}).encode())
                return
            finally:
                own.close()
            sync.send(json.dumps({"started": index}).encode())
        elif command["do"] == "stop" and pid is not None:
            status = wait_for(pid, time.monotonic() + ANSWER_ENDS_S, poll=0.005)
            pid = None
            sweep(sandboxed)
            clean(keep, index)
            code = None if status is None else os.waitstatus_to_exitcode(status)
            sync.send(json.dumps({"answer_exit": code}).encode())
        else:
            return


def main():
    config = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull)
    serve(config)


if __name__ == "__main__":
    main()
