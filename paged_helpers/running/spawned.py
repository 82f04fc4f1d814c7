"""On a GPU, run the learner's launcher in a spawned child process that initialises CUDA itself.

A forked child can't use CUDA (the parent's context does not survive a fork), and a compiled
kernel's fault, an illegal address, poisons the CUDA context of the process it ran in: every
later cell of the notebook would fail. A hang has no time limit. So on a GPU a check opens a
``session()``: one child started with ``spawn`` (a fresh interpreter; it imports torch and
initialises CUDA on its own), which serves the check's calls one by one:

* the launcher crosses as source (``gpu_compile.bundle_source``: the launcher, its kernels and
  what they read), since functions defined in a notebook can't be pickled; tensors cross on the
  CPU and go to the child's GPU there;
* the child's stdout and stderr go to a file, returned with each answer (never the notebook's
  stderr);
* a child that dies (a fault) or does not answer in time (a hang) is killed and reported as
  "crashed" or "timed out"; the next call starts a fresh one.

Outside a session, or where there is no GPU, ``call`` is not used (see ``checks.kernels.paged_attention``:
the launcher checks). A kernel check never runs the learner's launcher: it launches the kernel
itself (``kernel_process``).
"""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from .isolated import Outcome

__all__ = ["active", "call", "session"]

# Seconds a fresh child may take to import torch and paged_helpers and initialise CUDA.
STARTUP_LIMIT_S = 120.0

_SESSION: contextvars.ContextVar[_Child | None] = contextvars.ContextVar("spawned_session", default=None)


class _Child:
    """One spawned process and the pipe to it; restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self.process = None
        self.connection = None

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.connection, child_end = context.Pipe()
        self.process = context.Process(target=_serve, args=(child_end,), daemon=True)
        self.process.start()
        child_end.close()
        # Importing torch and initialising CUDA is not the learner's time: wait for it apart.
        if not self.connection.poll(STARTUP_LIMIT_S) or self.connection.recv() != "ready":
            self.stop()
            raise RuntimeError(f"the child process for your kernel did not start within {STARTUP_LIMIT_S:g} s")

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(5)
        self.process = self.connection = None

    def ask(self, request: dict, time_limit: float) -> Outcome:
        if self.process is None or not self.process.is_alive():
            self.stop()
            self.start()
        with tempfile.NamedTemporaryFile(suffix=".out") as printed:
            self.connection.send({**request, "printed_to": printed.name})
            ready = self.connection.poll(time_limit)
            try:
                answer = self.connection.recv() if ready else None
            except EOFError:
                answer = None
            text = open(printed.name, errors="replace").read()  # noqa: SIM115
        if answer is not None:
            return Outcome(**{**answer.__dict__, "printed": text})
        exit_code = self.process.exitcode if self.process is not None else None
        self.stop()
        if not ready:
            return Outcome("timed out", printed=text)
        return Outcome("crashed", signal_name=f"exit code {exit_code}", printed=text)


def _serve(connection) -> None:
    """The child's loop: run each request, answer with an Outcome (tensors on the CPU)."""
    import torch

    import paged_helpers  # noqa: F401  (first: device and Triton mode)

    from .isolated import _run_in_this_process, _to_cpu

    if paged_helpers.DEVICE.type == "cuda":
        torch.cuda.init()
    connection.send("ready")
    modules: dict[str, Any] = {}
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        with open(request["printed_to"], "w") as printed:
            os.dup2(printed.fileno(), 1)
            os.dup2(printed.fileno(), 2)
            sys.stdout = sys.stderr = open(printed.fileno(), "w", buffering=1, closefd=False)  # noqa: SIM115
            launcher = _launcher(request, modules)
            device = paged_helpers.DEVICE
            args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in request["args"])
            outcome = _run_in_this_process(launcher, args)
            if outcome.kind == "returned":
                if device.type == "cuda":
                    torch.cuda.synchronize()  # a fault surfaces here, inside the child
                outcome = Outcome("returned", value=_to_cpu(outcome.value))
            sys.stdout.flush()
        connection.send(outcome)


def _launcher(request: dict, modules: dict) -> Callable:
    import hashlib
    import importlib.util

    key = hashlib.sha256(request["source"].encode()).hexdigest()[:16]
    if key not in modules:
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, f"learner_launcher_{key}.py")
        with open(path, "w") as handle:
            handle.write(request["source"])
        spec = importlib.util.spec_from_file_location(f"learner_launcher_{key}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules[key] = module
    return getattr(modules[key], request["name"])


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Within the block, ``call`` runs launchers in one spawned child (started on first use)."""
    child = _Child()
    token = _SESSION.set(child)
    try:
        yield
    finally:
        _SESSION.reset(token)
        child.stop()


def active() -> bool:
    return _SESSION.get() is not None


def call(launcher: Callable, args: tuple, time_limit: float) -> Outcome:
    """Run ``launcher(*args)`` in the session's child."""
    import torch

    from .gpu_compile import bundle_source

    child = _SESSION.get()
    if child is None:
        raise RuntimeError("spawned.call needs an open spawned.session()")
    try:
        source = bundle_source(launcher)
    except (OSError, TypeError) as error:
        return Outcome("raised", error_type=type(error).__name__, error_message=f"source not readable: {error}")
    request = {
        "source": source,
        "name": launcher.__name__,
        "args": tuple(a.detach().cpu() if isinstance(a, torch.Tensor) else a for a in args),
    }
    return child.ask(request, time_limit)
