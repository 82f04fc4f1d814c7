"""Run a learner's kernel in a child process, so that a crash or a hang can't take the notebook down.

In Triton's interpreter an out-of-bounds load is a raw read of CPU memory: it returns garbage
or kills the whole Python process with a segfault, and with it the Jupyter kernel and every
later cell. A check therefore calls the learner's launcher in a forked child:

* the child inherits the launcher (defined in the notebook's ``__main__``) and the inputs, so
  nothing has to be pickled on the way in; only the result (a tensor) or the exception comes
  back, through a pipe;
* the child's stdout and stderr (file descriptors 1 and 2, and ``sys.stdout``/``sys.stderr``)
  go to a temporary file, never to the notebook: nbgrader zeroes a cell that writes to stderr.
  What the learner's code printed is returned with the outcome, for the failure message;
* a child that doesn't answer within the time limit is killed.

Forking is only used with the interpreter on Linux (``isolation_available()``). A CUDA
context can't be used in a forked child, so on a GPU the kernel checks use a spawned child
instead (``spawned``), which initialises CUDA itself; elsewhere the call is made in this process.
"""

from __future__ import annotations

import faulthandler
import io
import os
import pickle
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Outcome", "isolation_available", "run_isolated"]


@dataclass(frozen=True)
class Outcome:
    """What happened to one call.

    ``kind`` is one of: "returned" (``value`` holds the result), "raised" (``error_type``,
    ``error_message`` and ``error_traceback`` describe the exception; ``error_chain`` names it
    and the exceptions it was raised from), "crashed" (the process died; ``signal_name`` says
    how) or "timed out". ``printed`` is everything the call wrote to stdout or stderr.
    """

    kind: str
    value: Any = None
    error_type: str = ""
    error_message: str = ""
    error_traceback: str = ""
    error_chain: tuple[str, ...] = ()
    signal_name: str = ""
    printed: str = ""

    @property
    def not_implemented(self) -> bool:
        """A stub still raising NotImplementedError, also when Triton wrapped it (an InterpreterError
        in the interpreter; a compilation error quoting the ``raise`` when compiled)."""
        if self.kind != "raised":
            return False
        return "NotImplementedError" in self.error_chain or "raise NotImplementedError" in self.error_message


def isolation_available() -> bool:
    """True where a child process can run the learner's kernel: fork exists, and no CUDA."""
    import torch

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return hasattr(os, "fork") and sys.platform.startswith("linux") and interpreted and not torch.cuda.is_initialized()


def _to_cpu(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cpu(item) for item in value)
    return value


def _run_in_this_process(function: Callable[..., Any], args: tuple) -> Outcome:
    try:
        return Outcome("returned", value=function(*args))
    except Exception as error:
        chain, cause = [], error
        while cause is not None and len(chain) < 10:
            chain.append(type(cause).__name__)
            cause = cause.__cause__ or cause.__context__
        return Outcome(
            "raised",
            error_type=type(error).__name__,
            error_message=str(error),
            error_traceback="".join(traceback.format_exception(error)),
            error_chain=tuple(chain),
        )


def _child(function: Callable[..., Any], args: tuple, *, result_fd: int, output_fd: int) -> None:
    """Body of the forked child. Never returns: it leaves through os._exit.

    The descriptors are keyword-only so that nothing can call this by position by accident: the
    no-solutions test tries every package function of a learner's arity with placeholders, and a
    call here ends the calling process.
    """
    try:
        import torch

        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        # Unbuffered: a crash or an os._exit keeps everything printed before it, a last line
        # without its newline too.
        sys.stdout = sys.stderr = io.TextIOWrapper(
            open(output_fd, "wb", buffering=0, closefd=False), write_through=True
        )
        # A segfault's traceback (pytest and ipykernel switch faulthandler on) goes to the capture too.
        faulthandler.enable(file=sys.stderr)
        # The parent's OpenMP pool did not survive the fork; one thread avoids waiting on it.
        torch.set_num_threads(1)
        outcome = _run_in_this_process(function, args)
        if outcome.kind == "returned":
            outcome = Outcome("returned", value=_to_cpu(outcome.value))
        try:
            payload = pickle.dumps(outcome)
        except Exception as error:  # an unpicklable return value
            payload = pickle.dumps(
                Outcome(
                    "raised",
                    error_type="TypeError",
                    error_message=f"the result could not be sent back: {error}",
                )
            )
        with open(result_fd, "wb", closefd=False) as pipe:
            pipe.write(payload)
        sys.stdout.flush()
    finally:
        os._exit(0)


def run_isolated(function: Callable[..., Any], args: tuple, time_limit: float) -> Outcome:
    """Call ``function(*args)`` in a forked child (see the module docstring) and report what happened.

    Where isolation is not available the call is made in this process, with no time limit.
    """
    if not isolation_available():
        return _run_in_this_process(function, args)
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as output:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _child(function, args, result_fd=write_end, output_fd=output.fileno())
        os.close(write_end)
        payload, kind = _collect(read_end, pid, time_limit)
        output.seek(0)
        printed = output.read().decode("utf-8", errors="replace")
    if kind == "timed out":
        return Outcome("timed out", printed=printed)
    if kind.startswith("signal "):
        return Outcome("crashed", signal_name=kind.removeprefix("signal "), printed=printed)
    if not payload:
        return Outcome("crashed", signal_name="exit without a result", printed=printed)
    outcome: Outcome = pickle.loads(payload)
    return Outcome(**{**outcome.__dict__, "printed": printed})


def _collect(read_end: int, pid: int, time_limit: float) -> tuple[bytes, str]:
    """Read the child's answer until it exits or the deadline passes; always reaps the child."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + time_limit
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return b"", "timed out"
            ready, _, _ = select.select([read_end], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(read_end, 1 << 20)
                if chunk:
                    chunks.append(chunk)
                    continue
                break  # end of file: the child closed its end (it exited)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return _drain(read_end, chunks), _status_kind(status)
        _, status = os.waitpid(pid, 0)
        return b"".join(chunks), _status_kind(status)
    finally:
        os.close(read_end)


def _drain(read_end: int, chunks: list[bytes]) -> bytes:
    while True:
        ready, _, _ = select.select([read_end], [], [], 0)
        chunk = os.read(read_end, 1 << 20) if ready else b""
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _status_kind(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"signal {signal.Signals(number).name}"
        except ValueError:
            return f"signal {number}"
    return "exited"
