"""Runs inside the sandbox: one submission's questions.

Started by :mod:`grading.sandbox` as ``python -I sandbox_runner.py`` with its settings
(JSON) on stdin and a control socket. Uses only the standard library and IPython (numpy
and torch when an answer returns arrays), never anything of the course.

This process, the **template**, imports the heavy modules once and then serves one
submission after another: for each, the grader sends the report file and the job (two
file descriptors) and the template forks a **zygote**, which alone reads the job (so the
template's memory, inherited by every later zygote, holds no student's work). After the
zygote ends, the template kills what is left, removes what was written and compares its
limits, its folders and the System V IPC objects with how they were before any student
code; on any difference it says so and ends, and the grader starts a fresh sandbox.

For each question the zygote forks two processes joined by a socket:

* the **answer** process runs the instructor's setup cell and the student's answer cell,
  then only serves calls to what the answer defined. It has no report file, and it never
  holds the tests or the references: it reads only its own part of the job's private
  file, which holds ``helpers`` with the references as stubs in their source
  (:mod:`grading.stubs`), and closes that file before the setup cell runs.
* the **tester** process runs the setup cell and the instructor's test cell (visible part,
  then the whole cell), where each name the answer defined is a proxy: arguments go to the
  answer process pickled (they come from the instructor); results come back as tagged JSON,
  decoded strictly into fresh objects of exactly the types sent (anything else arrives as
  an opaque stand-in that equals nothing). Student code never runs here, so it cannot patch
  the checks, forge output or reach the nonce; the tester alone writes ``pass`` with it.
  The tests, the nonce and the real library come from the tester's own part of the private
  file, read after the fork: the zygote never reads that file, so no process the student's
  code runs in, or is forked from, has held them.

``helpers`` is imported from the sources the job carries (:class:`Library`), never from
disk: in the sandbox its files are hidden.

The template, the zygote and both children are not dumpable, so the answer process cannot
ptrace them or take their file descriptors. A crash, hang or limit costs only that
question; a zygote killed by student code costs the question it was in, and a fresh one
forked from the template grades the rest.
"""

import base64
import builtins
import ctypes
import dataclasses
import functools
import importlib
import importlib.util
import json
import marshal
import os
import pickle
import resource
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
import types

REPORT_FD = 3  # replaced by the job's report_fd
PRIVATE_FD = -1  # the job's private file: each tester's and answer's own part
ZYGOTE_HOME = ""  # the zygote's home; each question's answer gets a folder under it
TESTER_HOME = ""  # in the sandbox, a disk of the testers' own (else the zygote's home)
UIDS = {}  # role -> user id, when the zygote runs as root
PROCESSES = [0]  # RLIMIT_NPROC for a process that switches user
ERROR_CHARS = 2000
MAX_MESSAGE = 64 << 20
MAX_DEPTH = 64


def emit(record):
    """One JSON line on the report file (O_APPEND, shared by the zygote and testers)."""
    os.write(REPORT_FD, (json.dumps(record) + "\n").encode())


class Library:
    """Imports ``helpers`` from the sources the grader sent, and from nowhere else: a
    module it was not given is missing (even where the package's files are on disk), so
    the real body of a reference stubbed for the answer is out of its reach whichever way
    it imports, reloads or reads the module (where the sandbox hides the file, ``inspect``
    and tracebacks read these sources too). First on ``sys.meta_path`` in every process."""

    def __init__(self):
        self.modules = {}

    def serve(self, modules):
        self.modules.update(modules)

    def find_spec(self, name, path=None, target=None):
        if name != "helpers" and not name.startswith("helpers."):
            return None
        item = self.modules.get(name)
        if item is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        folder = [os.path.dirname(item["origin"])] if item["package"] else None
        return importlib.util.spec_from_file_location(
            name, item["origin"], loader=self, submodule_search_locations=folder)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        item = self.modules[module.__spec__.name]
        code = marshal.loads(base64.b64decode(item["code"]))  # compiled by the grader
        exec(code, module.__dict__)  # noqa: S102

    def get_source(self, name):
        return self.modules[name]["source"]


LIBRARY = Library()


def read_part(where):
    """One part of the private file, by its (offset, length) in the job; nothing else of
    the file is read into this process."""
    offset, length = where
    data = b""
    while len(data) < length:
        chunk = os.pread(PRIVATE_FD, length - len(data), offset + len(data))
        if not chunk:
            raise EOFError("the job's private file is shorter than its index")
        data += chunk
    return json.loads(data)


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
    # (unlinked at once: the tester's output, which can show a hidden test's values, is
    # then not readable by path from the answer process, even as the same user)
    output_path = os.path.join(home, "output.txt")
    output = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.unlink(output_path)
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
    """Run setup and the student's answer, then serve calls to what the answer defined."""
    shell = make_shell(limit(question, index, "answer"))
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
        versions = tensor_versions(args, kwargs)
        try:
            reply = {"value": safe_encode(shell.user_ns[name](*args, **kwargs)),
                     "written": written_back(args, kwargs, versions)}  # fmt: skip
        except BaseException as error:  # noqa: B036 - the student's exception goes back
            reply = {"raise": [type(error).__name__, str(error)[:ERROR_CHARS]]}
        send(sock, json.dumps(reply).encode())


def _tensor_arguments(args, kwargs):
    """(position or keyword, tensor) for each argument that is a torch tensor."""
    items = list(enumerate(args)) + list(kwargs.items())
    return [(key, value) for key, value in items
            if type(value).__module__.startswith("torch") and hasattr(value, "_version")]


def tensor_versions(args, kwargs):
    return {key: value._version for key, value in _tensor_arguments(args, kwargs)}


def written_back(args, kwargs, versions):
    """The tensor arguments the answer wrote into (torch bumps a tensor's ``_version`` on
    every in-place write), so the tester's own tensors can take the same writes: an answer
    that must fill a buffer in place is checked on the buffer, across the two processes."""
    return [[key, safe_encode(value)] for key, value in _tensor_arguments(args, kwargs)
            if value._version != versions.get(key)]  # fmt: skip


def safe_encode(value):
    try:
        return encode(value)
    except Exception:  # too deep, or a value that cannot be read: send what it is
        return {"opaque": f"{type(value).__module__}.{type(value).__qualname__}"}


def tester_process(index, question, sock, nonce):
    """Run setup and the instructor's tests against proxies; report with the nonce."""

    def report(stage, error=""):
        emit({"q": index, "nonce": nonce, "stage": stage, "error": error})

    shell = make_shell(limit(question, index, "tester"))
    error = run(shell, question["setup"])
    if error is not None:
        return report("setup", describe(error))
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


def write_back(args, kwargs, written):
    """Copy what the answer wrote into its copies of the tensor arguments into the tester's
    own (same shape and dtype only: anything else stays as the tester made it)."""
    import torch

    for key, data in written:
        original = kwargs.get(key) if type(key) is str else (
            args[key] if type(key) is int and 0 <= key < len(args) else None)  # fmt: skip
        if not isinstance(original, torch.Tensor):
            continue
        value = decode(data)
        if (isinstance(value, torch.Tensor) and value.shape == original.shape
                and value.dtype == original.dtype):  # fmt: skip
            with torch.no_grad():
                original.copy_(value)


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
                value = decode(reply["value"])
                write_back(args, kwargs, _list(reply.get("written", [])))
                return value
        except Exception as bad:
            unreadable = f"your answer sent something unreadable ({describe(bad)})"
            raise AnswerCrashed(unreadable) from None
        raise_from(*failure[:2])

    call.__name__ = call.__qualname__ = name
    return call


# --- the zygote ----------------------------------------------------------------------------


def wait(pids, deadline):
    """Wait for the tester (pids[0]) until ``deadline``, then stop the answer process.
    Returns the tester's status (None: timed out) and the answer's (None: still running
    when the tester ended, so stopped by us)."""
    tester, answer = pids
    status = None
    while time.monotonic() < deadline:
        done, found = os.waitpid(tester, os.WNOHANG)
        if done:
            status = found
            break
        time.sleep(0.01)
    done, answer_status = os.waitpid(answer, os.WNOHANG)
    for pid in pids:
        for kill in (os.killpg, os.kill):  # the group, and the child before its setsid
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    if not done:
        os.waitpid(answer, 0)
        answer_status = None
    if status is None:
        os.waitpid(tester, 0)
    return status, answer_status


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


def answer_child(index, question, own, other):
    other.close()
    os.close(REPORT_FD)  # the student's process never holds the report file
    part = read_part(question["answer_part"])  # the library, with this question's stubs
    os.close(PRIVATE_FD)  # nor the private file, where the tests are
    LIBRARY.serve(part["library"])
    answer_process(index, question, own)


def tester_child(index, question, own, other, library):
    other.close()
    part = read_part(question["tester_part"])  # the tests and the nonce
    LIBRARY.serve(read_part(library))  # the real library
    os.close(PRIVATE_FD)
    # The zygote imported the modules that every answer of the job gets stubbed the same
    # way: the tests import the whole library afresh, real.
    for name in [n for n in sys.modules if n == "helpers" or n.startswith("helpers.")]:
        del sys.modules[name]
    tester_process(index, {**question, **part}, own, part["nonce"])


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
    anything did change, it says so and ends, and the grader starts a fresh sandbox."""
    global ZYGOTE_HOME, TESTER_HOME
    control = socket.socket(fileno=config["control_fd"])
    ZYGOTE_HOME = os.environ["HOME"]
    TESTER_HOME = config.get("tester_home") or ""
    sandboxed = config["sandboxed"]
    non_dumpable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    preimport(config["preimport"])
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
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 3)
        except OSError:
            return
        if not message or len(fds) != 3:  # the grader has gone
            return
        preimport(json.loads(message).get("preimport", []))  # the instructor's modules
        pid = os.fork()
        if pid == 0:
            control.close()
            os.setsid()  # apart from the template: a kill of the zygote's group spares it
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            try:
                zygote(fds[0], fds[1], fds[2], keep, sandboxed)
            except BaseException:  # noqa: B036 - the parent decides from the report
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)  # no interpreter teardown (a second of torch's)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        pristine = sweep(sandboxed)
        clean(keep)
        pristine = pristine and state(folders) == clean_state
        reply = {"exit": os.waitstatus_to_exitcode(status), "pristine": pristine}
        try:
            control.send(json.dumps(reply).encode())
        except OSError:
            return
        if not pristine:
            return


def zygote(job_fd, private_fd, report_fd, keep, sandboxed):
    """One submission's questions: for each, fork the tester and the answer process. The
    zygote reads the job (the setup, the answers and the part of the library no question
    stubs) but never the private file, which its children read their parts of."""
    global REPORT_FD, PRIVATE_FD
    with os.fdopen(job_fd, "rb") as job_file:
        job = json.loads(job_file.read())
    REPORT_FD, PRIVATE_FD = report_fd, private_fd
    LIBRARY.serve(job["library"])
    output = job["limits"]["output"]
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    if os.getuid() != 0:  # root ignores RLIMIT_NPROC
        processes = job["limits"]["processes"]
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    preimport(job["preimport"])
    if job.get("uids"):  # grading as root: the two processes get users of their own
        UIDS.update(job["uids"])
        PROCESSES[0] = job["limits"]["processes"]
    subreaper()
    for index, question in enumerate(job["questions"]):
        if index < job.get("first", 0):
            continue
        emit({"q": index, "zygote": job["zygote_nonce"], "start": True})
        tester_end, answer_end = socket.socketpair()

        try:
            pids = (
                fork(functools.partial(tester_child, index, question, tester_end, answer_end,
                                       job["tester_library"]), index),
                fork(functools.partial(answer_child, index, question, answer_end, tester_end),
                     index),
            )  # fmt: skip
        except OSError as error:  # an earlier answer broke this zygote: the parent restarts
            emit({"q": index, "zygote": job["zygote_nonce"], "broken": describe(error)})
            return
        tester_end.close()
        answer_end.close()
        status, answer_status = wait(pids, time.monotonic() + question["limits"]["wall_s"])
        event = {"q": index, "zygote": job["zygote_nonce"], "timeout": status is None}
        if answer_status is not None:
            event["answer_exit"] = os.waitstatus_to_exitcode(answer_status)
        if status is not None:
            event["exit"] = os.waitstatus_to_exitcode(status)
        sweep(sandboxed)
        clean(keep, index)
        emit(event)


def main():
    sys.meta_path.insert(0, LIBRARY)  # before anything imports helpers
    config = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull)
    serve(config)


if __name__ == "__main__":
    main()
