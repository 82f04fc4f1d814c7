"""The second opinion's worker: runs INSIDE a sandbox, with the standard library and paged_helpers.

    python opinion_runner.py SPEC.json     (prints one JSON object on stdout at the end)
    python opinion_runner.py --serve       (one student's notebooks: a SPEC per line on stdin,
                                            {"results": ...} per line on stdout; see ``serve``)

SPEC: {"notebook": path of the student's submitted notebook, "cells": [{"grade_id": ...,
"calls": [{"check": name, "args": [["name", "BlockAllocator"] | ["value", 3]], "kwargs": {...}}]}],
"timeout": seconds per cell}.

Order matters, and is the point of this file:

1. ``paged_helpers.checks`` is imported, and the check functions are taken from its registry,
   before any student code exists in the process. The state of the import system, builtins and
   ``sys.modules`` is recorded.
2. For each graded cell, the process forks. The child closes stdin/stdout/stderr, installs an
   audit hook (it cannot be removed), loads only the submission's definitions with
   ``load_definitions`` (imports, functions, classes, constants, earlier-notebook loads; never a
   top-level statement such as ``sys.meta_path.insert(...)``), puts the recorded import system
   back, calls the checks, and writes its outcome to a pipe, tagged with a token drawn before
   the fork. The parent (which never runs student code) reads the pipe with a timeout.
3. The audit hook reports, at once and through the same pipe, what student code does while it
   runs: taking frame objects (the checker's stack), walking the garbage collector, tracing,
   ctypes, compiling code, starting processes. An outcome that does not carry the token, or
   more than one outcome, is a forgery and fails.

The grader (``second_opinion``) turns this into scores outside the sandbox.
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
import select
import signal
import sys
import sysconfig
import time
import types

if __name__ == "__main__":
    # A graded run (paged_helpers.checks.report.graded_run), as in the grading kernel: decided before
    # the package is imported (the GPU compile check, for one, then trusts no result file on disk).
    os.environ["PAGED_HELPERS_GRADED"] = "1"

if __package__:  # imported by the grader's tests
    from . import sandbox_inside
else:  # run as a script inside the sandbox, from this folder
    import sandbox_inside

# The checks first, before any student code: what the cells call is fixed here.
import paged_helpers  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
from paged_helpers.checks import report
from paged_helpers.notebook_loader import load_definitions

CHECKS = {name: info.function for name, info in report.REGISTRY.items()}
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
# Torch calls that compute an answer (or write one into an output) instead of the Triton kernel.
TORCH_MATH = {
    "matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "softmax", "log_softmax", "exp",
    "scaled_dot_product_attention", "tensordot", "dot", "__matmul__", "__rmatmul__",
    "mul", "__mul__", "__rmul__", "add", "__add__", "__radd__", "sub", "__sub__", "div",
    "__truediv__", "max", "amax", "sum", "index_select", "gather", "take_along_dim",
    "copy_", "__setitem__", "from_numpy",
}  # fmt: skip
# Torch calls that hand a tensor's data to numpy (or Python) for arithmetic outside the kernel.
TORCH_TO_NUMPY = {"numpy", "__array__"}

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
    return frame is not None and frame.f_code.co_filename.endswith(LEARNER_SUFFIX)


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
    """The audit hook of one child: reports student actions as soon as they happen."""

    def __init__(self, out: int):
        self.out = out
        self.armed = False
        self.busy = False
        self.seen: set[str] = set()

    def report(self, what: str) -> None:
        if what not in self.seen:
            self.seen.add(what)
            os.write(self.out, (json.dumps({"flag": what}) + "\n").encode())

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


def _first_outside_torch(frame):
    """Whoever called into torch or the standard library (``repr``, ``copy.deepcopy`` and ``pickle``
    reach a tensor's values through Python code of torch's own): that is the actor."""
    while frame is not None and (_module_of(frame).split(".")[0] == "torch" or _in_stdlib(frame)):
        frame = frame.f_back
    return frame


def _inside(frame, codes: frozenset) -> bool:
    """Whether ``frame`` runs within a call of one of ``codes`` (the learner's launchers)."""
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _torch_math_watch(watch: Watch, launchers: frozenset):
    """A torch function mode that reports torch math called directly from student code.

    Used when the student's notebook defines Triton kernels: there the answer must come from a
    kernel, so ``out.copy_(x * factor)`` after a launch that does nothing is caught, and so is
    any value of the launcher's float inputs read out in Python (``x.tolist()``, then a kernel of
    one's own that copies a Python-made answer; see ``paged_helpers.checks.launcher_reads``).
    Only student code running within a launcher the check was handed (``launchers``: their code
    objects) is watched: the learner's cache, which a check such as ``check_kernel_fork_logits``
    runs beside the kernels, writes its pools with torch by design.
    """
    import torch
    from torch.overrides import TorchFunctionMode

    from paged_helpers.checks.launcher_reads import printed_text, reads_values

    class StudentTorchMath(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            was_busy, watch.busy = watch.busy, True  # the watch's own look at the stack is not audited
            try:
                caller = sys._getframe(1)
            finally:
                watch.busy = was_busy
            watched = _is_learner(caller) and _inside(caller, launchers)
            if name in TORCH_MATH and watched:
                watch.report(f"the attention was computed with torch.{name} in Python, outside the Triton kernel")
            elif name in TORCH_TO_NUMPY and watched:
                watch.report(
                    f"student code took a tensor's values out with Tensor.{name}() in a Triton notebook's check "
                    "(numpy or Python arithmetic outside the Triton kernel)"
                )
            actor = _first_outside_torch(caller)
            watched = _is_learner(actor) and _inside(actor, launchers)
            placeholder = printed_text(func, args)
            if placeholder is not None and watched:
                return placeholder
            result = func(*args, **(kwargs or {}))
            if reads_values(func, args, kwargs, result) and watched:
                watch.report(
                    f"student code read the values of a tensor the check gave its launcher (torch {name}) "
                    "in Python: only the Triton kernel may load them"
                )
            return result

    del torch
    return StudentTorchMath()


def _defines_triton_kernels(module) -> bool:
    return any(type(value).__module__.startswith("triton") for value in vars(module).values())


def _child(cell: dict, notebook: str, out: int, token: str) -> None:
    """Load the definitions, run the cell's checks, write the outcome. Never returns."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    watch = Watch(out)
    sys.addaudithook(watch)
    outcome = {"token": token, "passed": False, "message": "", "load_changes": [], "hidden": False}
    call = {}
    try:
        watch.armed = True
        module = load_definitions(notebook, module_name="learner_submission")
        outcome["load_changes"] = _restore_import_system()
        launchers = frozenset(
            value.__code__
            for call in cell["calls"]
            for kind, name in call["args"]
            if kind == "name" and isinstance(value := getattr(module, name, None), types.FunctionType)
        )
        mode = _torch_math_watch(watch, launchers) if _defines_triton_kernels(module) else None
        for call in cell["calls"]:
            function = CHECKS[call["check"]]
            args = [getattr(module, v) if kind == "name" else v for kind, v in call["args"]]
            if mode is None:
                function(*args, **call["kwargs"])
            else:
                with mode:
                    function(*args, **call["kwargs"])
        watch.armed = False
        outcome["passed"] = True
    except AttributeError as error:
        watch.armed = False
        outcome["message"] = f"a name the test needs is not defined: {error}"
    except BaseException as error:  # the check's verdict, or the student's code failing
        watch.armed = False
        outcome["message"] = f"{type(error).__name__}: {error}"[:2000]
        outcome["hidden"] = bool(call.get("hidden"))  # a hidden scenario failed, the visible ones passed
        if isinstance(error, report.Refused):  # built to fool a comparison, or an answer from outside the kernel
            watch.report(f"student code handed the check what it refuses: {str(error).splitlines()[0][:300]}")
    outcome["load_changes"] += [c for c in _restore_import_system() if c not in outcome["load_changes"]]
    os.write(out, (json.dumps({"outcome": outcome}) + "\n").encode())
    os._exit(0)


def _read_until_exit(pid: int, fd: int, timeout: float) -> tuple[bytes, bool]:
    data, deadline, timed_out = b"", time.monotonic() + timeout, False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
        if len(data) > 1 << 20:
            break
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    return data, timed_out


def judge(data: bytes, token: str, timed_out: bool, timeout: float) -> dict:
    """The cell's verdict from what its child wrote: flags, then exactly one genuine outcome."""
    flags, outcomes, forged = [], [], 0
    for line in data.decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            forged += 1
            continue
        if isinstance(record, dict) and "flag" in record:
            flags.append(str(record["flag"]))
        elif isinstance(record, dict) and isinstance(record.get("outcome"), dict):
            if record["outcome"].get("token") == token:
                outcomes.append(record["outcome"])
            else:
                forged += 1
        else:
            forged += 1
    if forged:
        flags.append(f"{forged} forged or garbled result line(s) came from student code")
    if timed_out:
        return {"passed": False, "message": f"the checks ran longer than {timeout:.0f} s", "flags": flags}
    if len(outcomes) != 1:
        why = "no result (the process died or was cut short)" if not outcomes else "more than one result"
        return {"passed": False, "message": why, "flags": flags}
    outcome = outcomes[0]
    flags += [f"while loading the definitions: {c}" for c in outcome.get("load_changes", [])]
    return {
        "passed": bool(outcome["passed"]) and not flags,
        "message": str(outcome["message"]),
        "flags": flags,
        "hidden": outcome.get("hidden") is True,
    }


def run_spec(spec: dict) -> dict:
    """Each cell of one notebook in a child forked from this process; their verdicts."""
    results = {}
    for cell in spec["cells"]:
        token = secrets.token_hex(16)
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                if spec.get("cwd"):
                    os.chdir(spec["cwd"])  # the notebook's autograde folder, as the kernel's
                _child(cell, spec["notebook"], write_end, token)
            finally:
                os._exit(1)
        os.close(write_end)
        data, timed_out = _read_until_exit(pid, read_end, spec["timeout"])
        os.close(read_end)
        results[cell["grade_id"]] = judge(data, token, timed_out, spec["timeout"])
    if spec.get("sandboxed"):  # only inside the sandbox's own pid namespace
        sandbox_inside.kill_everything_else()
    return results


def serve() -> int:
    """One student's notebooks, one after another: a spec per line on stdin, a result per line out.

    The process imports torch and the checks once per submission instead of once per notebook;
    it still never runs student code itself (every cell is a fresh fork of it), and whatever a
    child left running is killed before the next notebook.
    """
    sandbox_inside.non_dumpable()
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        if spec.get("sandboxed"):
            sandbox_inside.empty_tmp()  # each notebook's children start as in a sandbox of their own
        # When this notebook's clean run really began (the grader's deadline counts from here, not
        # from when it was queued): the system's monotonic clock, which the sandbox shares.
        sys.stdout.write(json.dumps({"request": spec.get("request"), "started": time.monotonic()}) + "\n")
        sys.stdout.flush()
        results = run_spec(spec)
        sys.stdout.write(json.dumps({"request": spec.get("request"), "results": results}) + "\n")
        sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--serve"]:
        return serve()
    with open(argv[1]) as f:
        spec = json.load(f)
    sandbox_inside.non_dumpable()
    sys.stdout.write(json.dumps(run_spec(spec)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
