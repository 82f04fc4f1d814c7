"""The learner's process of the clean run: runs INSIDE the sandbox, with the learner's view of the package.

    python learner_host.py        (a zygote: one line per graded cell on stdin)

The sandbox holds no check, reference, seed or expected value (``paged_helpers.learner_view.
package_view``), and this process never receives one: it hosts the learner's definitions and
answers the checking process (``checker``, outside the sandbox) through
``paged_helpers.learner_view``, in plain data.

For each cell, a request line ``{"notebook": path, "cwd": folder, "fresh": bool}`` makes the zygote fork a child, which:

1. moves the protocol off file descriptors 0 and 1 (what the learner's code prints goes nowhere);
2. installs an audit hook (``Watch``: it cannot be removed) that notes what student code does:
   taking frames, walking the garbage collector, ctypes, compiling code, starting processes,
   opening files for writing. These are signals for the integrity log, sent with every message;
   the verdict does not rest on them (the checks judge what the learner's objects answer);
3. loads only the submission's definitions (``load_definitions``), puts back the recorded import
   system, says ``loaded``, and serves the checking process until it says ``end``.

The zygote then kills whatever the child left (only inside the sandbox's pid namespace) and says
``{"cell_over": status}``.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import sysconfig

if __name__ == "__main__":
    # A graded run (paged_helpers.running.graded), as in the grading kernel: decided before the
    # package is imported (the GPU compile, for one, then trusts no result file on disk).
    os.environ["PAGED_HELPERS_GRADED"] = "1"

if __package__:  # imported by the grader's tests
    from ..sandbox import between_notebooks
else:  # run as a script inside the sandbox, where the grader's sandbox/ folder is bound beside this one
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "sandbox"))
    import between_notebooks

    del sys.path[0]

import paged_helpers  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
import paged_helpers.model  # noqa: F401  (imported once here, before the import system is recorded,
import paged_helpers.serving  # noqa: F401   so that every cell's fork starts with them)
from paged_helpers.learner_view import launcher_runs, subclass  # noqa: F401
from paged_helpers.learner_view.host import protocol_descriptors, serve_notebook

LEARNER_SUFFIX = " (code cells)"  # the file name notebook_loader gives a student's definitions
FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
ALWAYS_SUSPICIOUS = (
    "sys.settrace",
    "sys.setprofile",
    "sys._current_frames",
    "sys.addaudithook",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "ctypes.",
    "code.__new__",
    "os.fork",
    "os.exec",
    "os.posix_spawn",
    "os.system",
    "subprocess.Popen",
    "os.kill",
    "socket.",
    "sys.remote_exec",
)
# Standard-library modules that take frames on a caller's behalf: the caller is the actor.
FRAME_HELPERS = ("inspect", "traceback")
# Libraries whose functions take their caller's frame only to read a name or a module from it,
# never to hand it out. Any other library function that takes a frame while student code called
# it directly (``logging.currentframe()``, a debugger's helper, ...) may be returning that frame,
# whose ``f_back`` (not audited) leads to the checker: flagged like ``sys._getframe``.
INTERNAL_FRAME_USERS = {
    "collections", "typing", "typing_extensions", "enum", "dataclasses", "abc", "functools", "warnings",
    "importlib", "re", "string", "contextlib", "numpy", "torch", "triton", "paged_helpers",
}  # fmt: skip
_PRISTINE = {
    "import": builtins.__import__,
    "builtins": dict(builtins.__dict__),
    "meta_path": list(sys.meta_path),
    "path_hooks": list(sys.path_hooks),
    "path": list(sys.path),
    "modules": dict(sys.modules),
    "displayhook": sys.displayhook,
    "excepthook": sys.excepthook,
}


def _is_learner(frame) -> bool:
    """Student code: the notebook's cells, or code compiled from a string at run time (``exec``,
    ``dataclasses.make_dataclass``: a way to run one's own code under a file name that is not the
    notebook's)."""
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    return filename.endswith(LEARNER_SUFFIX) or (filename.startswith("<") and not filename.startswith("<frozen"))


STDLIB = sysconfig.get_paths()["stdlib"]


def _in_stdlib(frame) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith(("<frozen", STDLIB)) and "site-packages" not in filename


def _first_outside_stdlib(frame):
    """Whoever called into the standard library (subprocess, os, ...): that is the actor."""
    while frame is not None and _in_stdlib(frame):
        frame = frame.f_back
    return frame


def _module_of(frame) -> str:
    return frame.f_globals.get("__name__", "") if frame is not None else ""


class Watch:
    """The audit hook of one child: notes student actions as they happen.

    Each note goes at once into a pipe (``out``), so that one made in a process the child forked (a
    kernel's run in ``running.isolated``) is not lost; ``drain`` reads what arrived, and the child
    sends it with its next message.
    """

    def __init__(self):
        self.armed = False
        self.busy = False
        self.seen: set[str] = set()
        self.inbox, self.out = os.pipe()
        os.set_blocking(self.inbox, False)
        self.pending = b""

    def report(self, what: str) -> None:
        if what not in self.seen:
            self.seen.add(what)
            os.write(self.out, (json.dumps(what) + "\n").encode())

    def drain(self) -> list[str]:
        while True:
            try:
                chunk = os.read(self.inbox, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.pending += chunk
        lines, _, self.pending = self.pending.rpartition(b"\n")
        found = []
        for line in lines.split(b"\n") if lines else []:
            try:
                found.append(str(json.loads(line)))
            except ValueError:
                found.append("a garbled note reached the audit watch's pipe")
        return found

    def __call__(self, event: str, args: tuple) -> None:
        if not self.armed or self.busy:
            return
        self.busy = True
        try:
            self._judge(event, args)
        finally:
            self.busy = False

    def _judge(self, event: str, args: tuple) -> None:
        if event == "object.__getattr__" and (len(args) < 2 or args[1] not in FRAME_ATTRIBUTES):
            return
        interesting = event in ("sys._getframe", "object.__getattr__", "compile", "open")
        if not interesting and not event.startswith(ALWAYS_SUSPICIOUS):
            return
        caller = sys._getframe(2)  # 0: _judge, 1: __call__, 2: whoever raised the event
        actor = caller
        while actor is not None and _module_of(actor).split(".")[0] in FRAME_HELPERS:
            actor = actor.f_back
        if event == "open":
            mode = args[1] if len(args) > 1 else "r"
            if _is_learner(actor) and isinstance(mode, str) and any(m in mode for m in "wax+"):
                self.report(f"student code opened {args[0]!r} for writing during the check")
            return
        if event == "compile":
            if _is_learner(caller):
                self.report("student code compiled new code during the check (compile/exec)")
            return
        if event in ("sys._getframe", "object.__getattr__"):
            if _is_learner(actor):
                self.report(
                    "student code took a frame object during the check (sys._getframe, inspect, "
                    "a traceback's tb_frame): looking at the checker's stack"
                )
            elif event == "sys._getframe" and actor is not None and _is_learner(actor.f_back):
                module = _module_of(actor)
                if module.split(".")[0] not in INTERNAL_FRAME_USERS:
                    self.report(
                        f"student code took a frame object during the check through {module}."
                        f"{actor.f_code.co_name}() (a frame's f_back leads to the checker's stack)"
                    )
            return
        if _is_learner(_first_outside_stdlib(caller)):
            self.report(f"student code used {event} during the check")


def _restore_import_system() -> list[str]:
    """Put back what the definitions may have changed; return what was changed."""
    changed = []
    if builtins.__import__ is not _PRISTINE["import"]:
        changed.append("builtins.__import__ was replaced (an import hook)")
    for name, value in _PRISTINE["builtins"].items():
        if builtins.__dict__.get(name) is not value:
            builtins.__dict__[name] = value
            if name != "__import__":
                changed.append(f"builtins.{name} was replaced")
    if sys.meta_path != _PRISTINE["meta_path"]:
        changed.append("sys.meta_path was changed (an import finder)")
    if sys.path_hooks != _PRISTINE["path_hooks"]:
        changed.append("sys.path_hooks was changed")
    for name, module in _PRISTINE["modules"].items():
        if sys.modules.get(name) is not module:
            changed.append(f"sys.modules[{name!r}] was replaced")
            sys.modules[name] = module
    if sys.displayhook is not _PRISTINE["displayhook"] or sys.excepthook is not _PRISTINE["excepthook"]:
        changed.append("sys.displayhook or sys.excepthook was replaced")
    sys.meta_path[:] = _PRISTINE["meta_path"]
    sys.path_hooks[:] = _PRISTINE["path_hooks"]
    sys.path[:] = _PRISTINE["path"]
    sys.displayhook, sys.excepthook = _PRISTINE["displayhook"], _PRISTINE["excepthook"]
    return changed


def _child(request: dict) -> None:
    """One cell's learner process. Never returns."""
    read_fd, write_fd = protocol_descriptors(standard=(0, 1))
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    watch = Watch()
    sys.addaudithook(watch)

    def after_load(module) -> list[str]:
        return _restore_import_system()

    try:
        if request.get("cwd"):
            os.chdir(request["cwd"])  # the notebook's autograde folder, as the kernel's
        watch.armed = True
        serve_notebook(
            request["notebook"], read_fd=read_fd, write_fd=write_fd, pending_flags=watch.drain, around_load=after_load
        )
    except BaseException:  # noqa: BLE001 - the checking process sees the pipe close
        pass
    os._exit(0)


def _read_line(fd: int) -> bytes:
    """One line from ``fd``, byte by byte: nothing past it is taken from the child's protocol."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            return line
        line += byte
    return line


def serve(sandboxed: bool) -> int:
    """The zygote: a fork per cell, one at a time; the child talks on this process's stdin/stdout."""
    while True:
        line = _read_line(0)
        if not line:
            return 0
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if not isinstance(request, dict) or not isinstance(request.get("notebook"), str):
            continue
        if sandboxed and request.get("fresh"):
            between_notebooks.empty_tmp()  # each notebook's children start as in a sandbox of their own
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                _child(request)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        if sandboxed:
            between_notebooks.kill_everything_else()
        os.write(1, (json.dumps({"cell_over": status}) + "\n").encode())


def main(argv: list[str]) -> int:
    return serve(sandboxed="--sandboxed" in argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
