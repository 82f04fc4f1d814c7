"""Run one stage of ``gpu_check`` in a process of its own, and record what became of it, whatever that was.

A ``Stage`` names a function ("module:function") and its JSON arguments; ``run_stage`` calls it in
a fresh interpreter, under the stage's time limit (cut to what is left of the budget), and returns
its record: passed or failed (with the figures or the error it returned), crashed (the process
died before reporting), timeout (killed with its process group) or skipped (no time was left),
its seconds, and the tail of what it printed. ``run_stages`` runs a plan in order within one budget.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIME_BUDGET_S = 8 * 60
_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Stage:
    """One stage: ``target`` ("module:function") is called in a fresh process with ``kwargs``
    (JSON values) and returns a JSON-able dict of figures; raising makes the stage failed."""

    name: str
    target: str
    kwargs: dict = field(default_factory=dict)
    timeout_s: float = 120.0


# Runs in the stage's own process: import the target, call it, write the record to a file. The
# record is written only when the call returns or raises, so a missing file means the process died.
# Its stdout and stderr are files, which Python and C would both buffer by the block: a stage that
# crashes, calls os._exit or is killed at its limit would lose its last lines, the ones that say
# why. So Python's streams are unbuffered (``-u``, and PYTHONUNBUFFERED for what the stage starts),
# C's stdout is unbuffered before anything writes to it (a CUDA printf, a library's message), and
# faulthandler writes a fatal signal's traceback to stderr.
_CHILD = r"""
import faulthandler, sys
faulthandler.enable()
try:
    import ctypes
    libc = ctypes.CDLL(None)
    for name in ("stdout", "__stdoutp"):  # glibc and musl, macOS
        try:
            libc.setvbuf(ctypes.c_void_p.in_dll(libc, name), None, 2, 0)  # 2: _IONBF
            break
        except ValueError:
            pass
except Exception:  # no C library to reach: Python's own streams are unbuffered all the same
    pass
import importlib, json, traceback
target, kwargs, result_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
module_name, _, function_name = target.partition(":")
try:
    figures = getattr(importlib.import_module(module_name), function_name)(**kwargs)
    record = {"status": "passed", "figures": figures}
except Exception as error:
    record = {"status": "failed", "error": f"{type(error).__name__}: {error}",
              "traceback": traceback.format_exc()[-3000:]}
with open(result_path, "w") as handle:
    json.dump(record, handle, default=str)
"""


def _tail(path: Path, limit: int = 3000) -> str:
    return path.read_text(errors="replace")[-limit:] if path.exists() else ""


def run_stage(stage: Stage, *, time_left_s: float | None = None, pythonpath: tuple[str, ...] = ()) -> dict:
    """Run ``stage`` in a child process; its record, whatever happened to the child.

    The time limit is the stage's own, cut to ``time_left_s`` when less is left of the budget; a
    child past its limit is killed with its process group (everything it started goes too).
    """
    limit = stage.timeout_s if time_left_s is None else min(stage.timeout_s, time_left_s)
    record: dict[str, Any] = {"stage": stage.name}
    if limit <= 0:
        return record | {"status": "skipped", "reason": "the time budget was spent before it could start"}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *pythonpath, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"  # what the stage prints survives its crash (see _CHILD), whatever the caller's env
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as folder:
        result, out, err = (Path(folder) / name for name in ("record.json", "stdout.txt", "stderr.txt"))
        command = [sys.executable, "-u", "-c", _CHILD, stage.target, json.dumps(stage.kwargs), str(result)]
        started = time.perf_counter()
        with out.open("w") as stdout, err.open("w") as stderr:
            child = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=env, start_new_session=True)
            try:
                returncode = child.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)  # the child's own group: it and what it started
                child.wait()
                returncode = None
        record["seconds"] = round(time.perf_counter() - started, 2)
        if result.exists():
            record.update(json.loads(result.read_text()))
        elif returncode is None:
            record.update(status="timeout", error=f"still running after {limit:.0f} s: killed")
        else:
            record.update(
                status="crashed", error=f"the stage's process exited with status {returncode} before reporting"
            )
        record["printed"] = _tail(out)
        record["stderr"] = _tail(err)
    return record


def run_stages(stages: list[Stage], budget_s: float = TIME_BUDGET_S, pythonpath: tuple[str, ...] = ()) -> list[dict]:
    """Every stage in order, each in its own process, within ``budget_s`` seconds in all."""
    deadline = time.monotonic() + budget_s
    return [run_stage(stage, time_left_s=deadline - time.monotonic(), pythonpath=pythonpath) for stage in stages]
