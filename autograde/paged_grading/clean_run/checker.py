"""The second opinion's checker: runs the checks, OUTSIDE the sandbox, and never runs student code.

    python checker.py SPEC.json     (prints one JSON object on stdout at the end)
    python checker.py --serve       (one student's notebooks: a SPEC per line on stdin,
                                     {"results": ...} per line on stdout; see ``serve``)

SPEC: {"notebook": path of the student's submitted notebook (as the sandbox sees it), "cwd": its
folder there, "host": the command that starts the learner's process (``learner_host.py`` inside
the student's sandbox), "cells": [{"grade_id": ..., "calls": [{"check": name, "args": [["name",
"BlockAllocator"] | ["value", 3]], "kwargs": {...}, "hidden": bool}]}], "timeout": seconds per
cell, "final": whether this is the grader's last run of these cells (then a cell that runs out of
time has failed; before it, it has no verdict and is run again alone)}.

The verdict comes from this process, which holds the checks, their scenario generators, the
secret seeds and the expected values, and runs no code of the student's. The student's code runs
in the learner's process (``learner_host``), a fork per cell of a zygote inside the sandbox, with
a view of the package that has no check, reference or answer in it. The two talk through
``paged_helpers.learner_view``: a check is handed ``Remote`` stand-ins of the learner's class or
launcher, and every call, attribute read or kernel run is a request answered in plain data (ints,
floats, strings, lists, dicts, tensors as bytes). Whatever the learner's process sends is data:
it may answer wrongly (the check fails), crash or hang (the cell fails, with a message), break the
protocol (the cell fails) or report what its audit watch saw (flags, which fail the cell and
reach the integrity log); it cannot write a verdict, since none is ever read from it. The GPU
compile of a kernel check runs here too, on the kernels' source read from the submitted notebook
as text and validated before any of it runs (``paged_helpers.running.kernel_source``); the
learner's process only reports which kernels its launcher launched, with what arguments.

The grader (``preprocessors.second_opinion``, through ``runners``) turns these verdicts into scores.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time

if __name__ == "__main__":
    os.environ["PAGED_HELPERS_GRADED"] = "1"  # a graded run, as in the grading kernel

# The checks: this process is theirs, and nothing of the student's is ever imported into it.
import paged_helpers  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
from paged_helpers.checks import REGISTRY
from paged_helpers.checks.speaking.failure import (
    CheckFailed,
    Finding,
    LearnerWords,
    NoVerdict,
    Refused,
    python_exception_name,
)
from paged_helpers.learner_view.connection import stop_process
from paged_helpers.learner_view.peer import LearnerError, Peer, PeerGone, ProtocolBroken
from paged_helpers.learner_view.remote import Remote
from paged_helpers.running.learner_kernel import LearnerKernel

CHECKS = {name: info.function for name, info in REGISTRY.items()}
# Seconds the learner's process may take to start (torch's import) and to load a notebook.
START_LIMIT_S = 120.0


class LearnerZygote:
    """The learner's zygote (``learner_host.py``), started on first use and again after any trouble."""

    def __init__(self, command: list[str], cwd: str | None):
        self.command, self.cwd = command, cwd
        self.process: subprocess.Popen | None = None
        self.buffer = b""

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self.cwd
        )
        self.buffer = b""

    def cell(self, request: dict, deadline: float) -> tuple[Peer, dict]:
        """A fresh learner process for one cell: its peer and its first message (loaded or not)."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        peer = Peer(
            self.process.stdout.fileno(),
            self.process.stdin.fileno(),
            serves="calls",
            make_proxy=Remote,
        )
        peer.buffer, peer.deadline = self.buffer, deadline
        return peer, peer._receive()

    def finish(self, peer: Peer) -> None:
        """End the cell's process and read the zygote's ``cell_over``; any trouble stops the zygote."""
        try:
            if not peer.broken:
                peer.deadline = time.monotonic() + 10
                peer.request("end")
            peer.deadline = time.monotonic() + 10
            while "cell_over" not in peer._receive():
                pass
            self.buffer = peer.buffer
        except (PeerGone, OSError, LearnerError):
            self.stop()

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self.process = None


def _kernel_cell(cell: dict) -> bool:
    """Whether every check of ``cell`` judges a kernel's text (then no learner process is needed)."""
    return bool(cell["calls"]) and all(REGISTRY[call["check"]].kernel for call in cell["calls"])


def run_kernel_cell(cell: dict, spec: dict) -> dict:
    """A kernel cell's verdict: its checks read the kernels from the submitted notebook as text and
    launch them in processes of their own. The learner's process is never started: nothing of the
    notebook runs but the kernel's validated module, and no earlier notebook is needed."""
    verdict = {"passed": False, "message": "", "flags": [], "hidden": False}
    call: dict = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the checks' pass lines are the kernel run's
            for call in cell["calls"]:
                args = [
                    LearnerKernel.from_notebook(spec["notebook"], value) if kind == "name" else value
                    for kind, value in call["args"]
                ]
                CHECKS[call["check"]](*args, **call["kwargs"])
        verdict["passed"] = True
    except NoVerdict as error:
        verdict.update(no_verdict=True, message=f"no verdict: {error}"[:2000])
    except BaseException as error:  # the check's verdict
        verdict.update(failure_verdict(error, hidden=bool(call.get("hidden"))))
    return verdict


def failure_verdict(error: BaseException, hidden: bool) -> dict:
    """A failed call's part of the verdict, as data: ``message`` (the text the feedback shows) and
    ``failure`` (its parts: ``checks.speaking.failure.Finding.as_data``, and the exception's type).

    A hidden call's text is what ``run_hidden_scenarios`` made of it (its kind, a hint without
    numbers). Anything else a hidden call raised (the learner's exception that reached the check
    uncaught, say) is named by its type alone, if it is one of Python's own: its message could carry
    the hidden scenario's numbers.
    """
    error_type = getattr(error, "remote_type", "") or type(error).__name__
    if isinstance(error, CheckFailed):
        finding = error.finding
    elif hidden:
        raised = python_exception_name(error_type)
        finding = Finding(
            scenario="a hidden scenario failed",
            got=f"your code raised {raised}",
            learner=LearnerWords(error_type=raised),
        )
        text = f"a hidden scenario failed: your code raised {raised}"
        return {
            "message": f"CheckFailed: {text}",
            "failure": {"type": "CheckFailed", "text": text, **finding.as_data()},
            "hidden": True,
        }
    else:
        finding = Finding(scenario=str(error), learner=LearnerWords(error_type=error_type, message=str(error)))
    return {
        "message": f"{type(error).__name__}: {error}"[:2000],
        "failure": {"type": type(error).__name__[:80], "text": str(error)[:2000], **finding.as_data()},
        "hidden": hidden,
    }


def run_cell(cell: dict, spec: dict, zygote: LearnerZygote, fresh: bool) -> dict:
    """One cell's verdict: its checks run here, on the learner's objects in their own process."""
    if _kernel_cell(cell):
        return run_kernel_cell(cell, spec)
    timeout = float(spec["timeout"])
    deadline = time.monotonic() + timeout + START_LIMIT_S
    request = {"notebook": spec["notebook"], "cwd": spec.get("cwd"), "fresh": fresh}
    verdict = {"passed": False, "message": "", "flags": [], "hidden": False}
    try:
        peer, hello = zygote.cell(request, deadline)
    except (PeerGone, OSError) as error:
        # The machine's doing (a loaded grader, a starved sandbox), never judged as the learner's: no
        # verdict, so the grader runs the cell again alone; if it still cannot start there, the cell
        # stays without one (``preprocessors.second_opinion``: 0, with a note, never a failure or an accusation).
        zygote.stop()
        verdict.update(no_verdict=True, message=f"no verdict: the learner's process did not start: {error}")
        return verdict
    call: dict = {}
    try:
        if not isinstance(hello.get("loaded"), bool):  # not the learner process's first word: written by its code
            peer.flags.append("a forged or garbled message came from the learner's process (before it loaded)")
        changes = hello.get("changes") if isinstance(hello.get("changes"), list) else []
        verdict["flags"] += [f"while loading the definitions: {str(change)[:300]}" for change in changes[:20]]
        if hello.get("loaded") is not True:
            error = hello.get("error") if isinstance(hello.get("error"), dict) else {}
            verdict["message"] = f"{str(error.get('type', 'Error'))[:80]}: {str(error.get('message', ''))[:1500]}"
            return verdict
        peer.deadline = time.monotonic() + timeout
        with contextlib.redirect_stdout(io.StringIO()):  # the checks' pass lines are the kernel run's
            for call in cell["calls"]:
                args = [_learner_name(peer, value) if kind == "name" else value for kind, value in call["args"]]
                CHECKS[call["check"]](*args, **call["kwargs"])
        verdict["passed"] = True
    except _MissingName as error:
        verdict["message"] = f"a name the test needs is not defined: {error}"
    except PeerGone as error:
        if isinstance(error, ProtocolBroken):
            peer.flags.append(f"a forged or garbled message came from the learner's process ({error})")
        over = peer.deadline is not None and time.monotonic() >= peer.deadline
        if over and not isinstance(error, ProtocolBroken) and not spec.get("final"):
            # Out of time beside the kernel's run or other students' grading: the grader runs the cell
            # again alone (``"final"``), and only a timeout there is the student's.
            verdict.update(no_verdict=True, message=f"no verdict: the checks did not finish within {timeout:.0f} s")
        else:
            verdict["message"] = (
                f"the checks ran longer than {timeout:.0f} s" if over else f"the learner's process failed: {error}"
            )
    except NoVerdict as error:
        verdict.update(no_verdict=True, message=f"no verdict: {error}"[:2000])
    except BaseException as error:  # the check's verdict, or the student's code failing
        # hidden: a hidden scenario failed, the visible ones passed
        verdict.update(failure_verdict(error, hidden=bool(call.get("hidden"))))
        if isinstance(error, Refused):  # built to fool a comparison, or an answer from outside the kernel
            peer.flags.append(f"student code handed the check what it refuses: {str(error).splitlines()[0][:300]}")
    finally:
        verdict["flags"] += [flag for flag in peer.flags if flag not in verdict["flags"]]
        zygote.finish(peer)
    verdict["passed"] = verdict["passed"] and not verdict["flags"]
    return verdict


class _MissingName(Exception):
    pass


def _learner_name(peer: Peer, name: str):
    try:
        return peer.request("global", name=name)
    except NameError as error:
        raise _MissingName(str(error)) from None


def run_spec(spec: dict, zygotes: dict) -> dict:
    """Each cell of one notebook on the learner's zygote for ``spec["host"]``; their verdicts."""
    key = json.dumps(spec["host"])
    if key not in zygotes:
        for old in zygotes.values():
            old.stop()
        zygotes.clear()
        zygotes[key] = LearnerZygote(spec["host"], spec.get("cwd"))
    zygote = zygotes[key]
    results = {}
    for index, cell in enumerate(spec["cells"]):
        results[cell["grade_id"]] = run_cell(cell, spec, zygote, fresh=index == 0)
    return results


def serve() -> int:
    """One student's notebooks, one after another: a spec per line on stdin, a result per line out.

    The checks and torch are imported once per submission, and so is the learner's zygote (which
    forks a fresh learner process for every cell).
    """
    zygotes: dict = {}
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        # When this notebook's clean run really began (the grader's deadline counts from here, not
        # from when it was queued): the system's monotonic clock.
        out.write(json.dumps({"request": spec.get("request"), "started": time.monotonic()}) + "\n")
        out.flush()
        results = run_spec(spec, zygotes)
        out.write(json.dumps({"request": spec.get("request"), "results": results}) + "\n")
        out.flush()
    for zygote in zygotes.values():
        zygote.stop()
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--serve"]:
        return serve()
    with open(argv[1]) as f:
        spec = json.load(f)
    zygotes: dict = {}
    try:
        results = run_spec(spec, zygotes)
    finally:
        for zygote in zygotes.values():
            zygote.stop()
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
