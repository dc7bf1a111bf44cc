"""Runs inside the sandbox: one submission's questions, each in a forked child.

Started by :mod:`grading.sandbox` as ``python -I sandbox_runner.py`` with the job (JSON) on
stdin and the report file open on the fd the job names. Uses only the standard library and
IPython, and never imports anything from the course: it sees only what the job carries.

The zygote (this process) imports the heavy modules once, then forks one child per
question so that a crash, hang or limit costs only that question and no question sees
another's state. A child runs the instructor's setup cell, the student's answer cell, then
the instructor's test cell (visible part first, then the full cell with the hidden tests)
in a fresh IPython shell. Before the tests run it restores what the answer cell could have
patched (the setup cell's names, the guarded modules, builtins); after they run it checks
that nothing was patched meanwhile. Only then does it write ``pass`` with the question's
nonce, which the parent accepts together with a clean exit status reported by the zygote.
"""

import ctypes
import importlib
import json
import os
import resource
import signal
import sys
import time

REPORT_FD = 3  # replaced by the job's report_fd
ERROR_CHARS = 2000


def emit(record):
    """One JSON line on the report file (O_APPEND, shared by the zygote and its children)."""
    os.write(REPORT_FD, (json.dumps(record) + "\n").encode())


def non_dumpable():
    """Children run as the same user: stop them from ptracing the zygote or reading its
    memory (no Yama here)."""
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def describe(error):
    text = f"{type(error).__name__}: {error}"
    return text[:ERROR_CHARS]


def guarded_modules(names):
    return {name: sys.modules[name] for name in names if name in sys.modules}


def snapshot(modules):
    return {name: (module, dict(vars(module))) for name, module in modules.items()}


def restore(saved):
    for name, (module, contents) in saved.items():
        sys.modules[name] = module
        namespace = vars(module)
        for key in [key for key in namespace if key not in contents]:
            del namespace[key]
        namespace.update(contents)


def same(saved):
    """True if every guarded module still holds the saved functions, classes and modules.
    Lazily added names are fine (they shadow nothing), and so are data a library caches
    as it goes; a checker patched while the tests ran is not."""
    for name, (module, contents) in saved.items():
        if sys.modules.get(name) is not module:
            return False
        namespace = vars(module)
        for key, value in contents.items():
            if callable(value) or isinstance(value, type(sys)):
                if namespace.get(key, same) is not value:
                    return False
    return True


def is_guarded(name, guarded):
    """``guarded`` holds module names; ``pkg.*`` also covers the package's submodules."""
    for entry in guarded:
        if entry.endswith(".*"):
            package = entry[:-2]
            if name == package or name.startswith(package + "."):
                return True
        elif name == entry:
            return True
    return False


def run_question(index, question, guarded):
    from IPython.core.interactiveshell import InteractiveShell

    class Shell(InteractiveShell):
        def enable_gui(self, gui=None):  # `%matplotlib inline` needs no event loop here
            pass

    nonce = question.pop("nonce")

    def report(stage, error=""):
        emit({"q": index, "nonce": nonce, "stage": stage, "error": error})

    os.setpgid(0, 0)
    limits = question["limits"]
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
    scratch = os.path.join(os.environ["HOME"], f"q{index}")
    os.makedirs(scratch)
    os.chdir(scratch)

    shell = Shell.instance()
    namespace = shell.user_ns

    def run(source):
        result = shell.run_cell(source, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        return None if error is None else describe(error)

    error = run(question["setup"])
    if error:
        return report("setup", error)
    trusted_names = {k: v for k, v in namespace.items() if not k.startswith("_")}
    names = [name for name in list(sys.modules) if is_guarded(name, guarded)]
    saved = snapshot(guarded_modules(names))

    error = run(question["answer"])
    if error:
        return report("answer", error)
    restore(saved)
    namespace.update(trusted_names)  # the answer cell may not shadow the setup's names

    error = run(question["visible"])
    if error:
        return report("visible", error)
    error = run(question["full"])
    if error:
        return report("hidden")
    if not same(saved) or any(namespace.get(k) is not v for k, v in trusted_names.items()):
        return report("tampered", "the answer changed the checkers, builtins or setup names")
    report("pass")


def wait(pid, deadline):
    """Wait for the child until ``deadline``; returns (status or None on timeout)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


def main():
    global REPORT_FD
    job = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull)
    REPORT_FD = job["report_fd"]
    zygote_nonce = job["zygote_nonce"]
    non_dumpable()
    output = job["limits"]["output"]
    resource.setrlimit(resource.RLIMIT_FSIZE, (output, output))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.getuid() != 0:  # root ignores RLIMIT_NPROC
        processes = job["limits"]["processes"]
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    for name in job["preimport"]:
        try:
            importlib.import_module(name)
        except Exception:  # optional speed-up only; the setup cell reports real failures
            pass
    guarded = job["guarded"]
    questions = job["questions"]
    for index, question in enumerate(questions):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            del job, zygote_nonce, questions
            try:
                run_question(index, question, guarded)
            except BaseException as error:  # noqa: B036 - the child must always exit here
                emit({"q": index, "stage": "runner", "error": describe(error)})
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        status = wait(pid, time.monotonic() + question["limits"]["wall_s"])
        event = {"q": index, "zygote": zygote_nonce, "timeout": status is None}
        if status is not None:
            event["exit"] = os.waitstatus_to_exitcode(status)
        emit(event)


if __name__ == "__main__":
    main()
