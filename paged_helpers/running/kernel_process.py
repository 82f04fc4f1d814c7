"""The checker launches the learner's kernel itself: in a fresh process that runs nothing else.

A kernel check hands ``KernelProcess`` the kernel module it read as text (``kernel_source``:
validated first, so loading it runs only imports of Triton and math and ``@triton.jit``
definitions) and then launches a kernel of it with its own grid and its own tensors::

    with KernelProcess(module) as kernels:
        answer = kernels.launch("paged_decode_kernel", grid, args, writable={5}, cpu_budget=20)

The process (``_kernel_worker.py``) is forked afresh for each check from a zygote that imported
torch and Triton once (and never runs a kernel), and holds only what it is sent: the module and
each launch's tensors (their whole storages, so views with strides and offsets arrive as views).
It never sees a reference, an expected value or a seed; nothing of one check's kernel outlives it. The
tensors it may write come back and are copied into the checker's own tensors; nothing else
of it is read but plain, bounded data (a kind, a message, line numbers).

What can go wrong becomes a ``KernelAnswer`` kind, never an exception of the check's:

* ``raised``: the kernel raised (a Triton error, an assertion) with its lines in the module;
* ``out of bounds``: under the interpreter, a load, store or atomic outside every tensor the
  kernel was handed, or a store into one it may only read, stopped before it happened;
* ``crashed``: the process died of a signal;
* ``over budget``: it used more CPU time than ``cpu_budget`` (a limit in work done, not in
  wall-clock time, so a loaded machine does not change it);
* ``no verdict``: it ran past the wall-clock backstop (``WALL_LIMIT_S``, far above any budget)
  without using its CPU: the machine, not the kernel, was too slow to judge it.

When grading, the grader may ask for the process to run inside a sandbox: a command prefix in
``PAGED_HELPERS_KERNEL_PREFIX`` (JSON list; set by the grader for its checker: the zygote and
its workers run inside it).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..device import INFO
from .kernel_source import KernelModule, validate_kernel_module

__all__ = ["KernelAnswer", "KernelProcess", "KernelProcessFailed", "WALL_LIMIT_S"]

_WORKER = Path(__file__).with_name("_kernel_worker.py")

# The wall-clock backstop of one launch or load, in seconds. CPU budgets decide verdicts; this
# only ends a process that made no progress at all (a machine starved for minutes).
WALL_LIMIT_S = 600.0
# CPU seconds a module's loading may take (imports of Triton and math, definitions).
LOAD_CPU_BUDGET_S = 60.0
PREFIX_VARIABLE = "PAGED_HELPERS_KERNEL_PREFIX"


class KernelProcessFailed(RuntimeError):
    """The kernel process itself could not be started or broke its protocol (not the learner's fault)."""


@dataclass(frozen=True)
class KernelAnswer:
    """What one launch (or the module's load) came to. ``kind``: see the module docstring."""

    kind: str
    printed: str = ""
    error_type: str = ""
    message: str = ""
    lines: tuple[tuple[int, str], ...] = ()  # (line in the module, its text), innermost last
    access: dict = field(default_factory=dict)  # out of bounds: what, count, near/into, side, elements
    signal_name: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "returned"


def _mode() -> str:
    return "interpreted" if INFO.triton_interpreted or not torch.cuda.is_available() else "compiled"


def _prefix() -> list[str]:
    text = os.environ.get(PREFIX_VARIABLE, "")
    if not text:
        return []
    prefix = json.loads(text)
    if not isinstance(prefix, list) or not all(isinstance(item, str) for item in prefix):
        raise KernelProcessFailed(f"{PREFIX_VARIABLE} is not a JSON list of strings")
    return prefix


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _storage_bytes(tensor: torch.Tensor) -> bytes:
    whole = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
    return whole.cpu().numpy().tobytes()


class _Zygote:
    """A process that imported torch and Triton once and forks a fresh worker per ``KernelProcess``
    (``_kernel_worker.py --zygote``); one at a time, so the worker owns the pipes while it lives."""

    def __init__(self, mode: str, prefix: list[str]):
        environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            self.process = subprocess.Popen(
                [*prefix, sys.executable, str(_WORKER), mode, "--zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=environment,
                start_new_session=True,
            )
        except OSError as error:
            raise KernelProcessFailed(f"the kernel process could not start: {error}") from error
        self.busy = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            _kill(self.process)
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


# One zygote per (mode, sandbox prefix) for this process's checks, started on first use; a busy
# one (a check inside a check) or a dead one is replaced.
_ZYGOTES: dict[tuple[str, str], _Zygote] = {}


def _zygote() -> _Zygote:
    key = (_mode(), json.dumps(_prefix()))
    zygote = _ZYGOTES.get(key)
    if zygote is None or zygote.busy or not zygote.alive():
        if zygote is not None and not zygote.busy:
            zygote.stop()
        zygote = _ZYGOTES[key] = _Zygote(key[0], json.loads(key[1]))
    return zygote


@atexit.register
def _stop_zygotes() -> None:
    for zygote in _ZYGOTES.values():
        zygote.stop()
    _ZYGOTES.clear()


class KernelProcess:
    """One fresh process for one kernel module (see the module docstring). A context manager."""

    def __init__(self, module: KernelModule | str):
        self.module = KernelModule(module) if isinstance(module, str) else module
        validate_kernel_module(self.module)  # never load what a kernel module may not hold
        self.zygote: _Zygote | None = None  # while a worker of it runs this module
        self.kernels: dict[str, dict] = {}
        self.load_answer: KernelAnswer | None = None

    def __enter__(self) -> KernelProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the process ------------------------------------------------------------------------------

    def _start(self) -> KernelAnswer:
        """Fork a worker and load the module: the load's answer (``returned`` when it loaded)."""
        self.zygote = _zygote()
        self.zygote.busy = True
        answer, _ = self._ask({"op": "fork"}, [], 0, expect_answer=False)
        if answer.kind != "returned":
            return answer
        answer, _ = self._ask({"op": "load", "source": self.module.source}, [], LOAD_CPU_BUDGET_S)
        if answer.kind == "returned":
            self.kernels = self._last_header.get("kernels", {})
        self.load_answer = answer
        return answer

    def close(self) -> None:
        """End the worker (the zygote lives on for the next check)."""
        if self.zygote is None:
            return
        zygote = self.zygote
        try:
            self._send({"op": "end"}, [])
            reader = _Reader(zygote.process.stdout.fileno(), time.monotonic() + 10)
            while "exited" not in self._read(reader)[0]:
                pass
        except (_WallLimit, EOFError, OSError, ValueError, TypeError, struct.error):
            zygote.stop()
        finally:
            self.zygote = None
            zygote.busy = False

    def loaded(self) -> KernelAnswer:
        """The module's load in a worker, forked afresh when the last one died: ``returned``, or why
        it did not load."""
        if self.zygote is None:
            return self._start()
        return self.load_answer

    # -- frames ---------------------------------------------------------------------------------

    def _send(self, header: dict, blobs: list[bytes]) -> None:
        text = json.dumps({**header, "blobs": [len(blob) for blob in blobs]}).encode()
        stdin = self.zygote.process.stdin
        stdin.write(struct.pack(">I", len(text)) + text)
        for blob in blobs:
            stdin.write(blob)
        stdin.flush()

    def _read(self, reader: _Reader) -> tuple[dict, list[bytes]]:
        (length,) = struct.unpack(">I", reader.read(4))
        if length > 10_000_000:
            raise ValueError("a header too large")
        header = json.loads(reader.read(length))
        sizes = header.get("blobs", []) if isinstance(header, dict) else None
        if not isinstance(sizes, list) or sum(int(size) for size in sizes) > reader.most:
            raise ValueError("answer blobs larger than what was sent")
        return header, [reader.read(int(size)) for size in sizes]

    def _ask(
        self, header: dict, blobs: list[bytes], cpu_budget: float, expect_answer: bool = True
    ) -> tuple[KernelAnswer, list[bytes]]:
        """Send one request to the worker and read its answer (or, for ``fork``, nothing)."""
        try:
            self._send({**header, "cpu_budget": cpu_budget}, blobs)
        except (BrokenPipeError, OSError):
            return self._died(None), []
        if not expect_answer:
            return KernelAnswer("returned"), []
        reader = _Reader(self.zygote.process.stdout.fileno(), time.monotonic() + WALL_LIMIT_S)
        reader.most = 4 * sum(map(len, blobs)) + 1024
        try:
            answer, out = self._read(reader)
        except _WallLimit:
            self.zygote.stop()
            self.zygote = None
            return KernelAnswer("no verdict", message=f"no answer within {WALL_LIMIT_S:g} s of wall-clock time"), []
        except EOFError:
            return self._died(None), []
        except (ValueError, TypeError, struct.error) as error:
            self.zygote.stop()
            self.zygote = None
            raise KernelProcessFailed(f"the kernel process broke its protocol: {error}") from None
        if "exited" in answer:  # the worker ended before it answered: the zygote says how
            return self._died(answer["exited"]), []
        self._last_header = answer
        if answer.get("ok"):
            return KernelAnswer("returned", printed=str(answer.get("printed", ""))[-20000:]), out
        return (
            KernelAnswer(
                kind="out of bounds" if answer.get("kind") == "out of bounds" else "raised",
                printed=str(answer.get("printed", ""))[-20000:],
                error_type=str(answer.get("error_type", ""))[:80],
                message=str(answer.get("message", ""))[:3000],
                lines=tuple((int(line), str(text)[:200]) for line, text in answer.get("frames", [])[-6:]),
                access=answer.get("access") if isinstance(answer.get("access"), dict) else {},
            ),
            [],
        )

    def _died(self, code: object) -> KernelAnswer:
        """The worker ended without answering: ``code`` its exit status as the zygote saw it (a signal
        negative), or None when the zygote itself is gone."""
        zygote, self.zygote = self.zygote, None
        zygote.busy = False
        if not isinstance(code, int):  # the zygote is gone: its worker with it
            zygote.stop()
            code = zygote.process.returncode if zygote.process.returncode is not None else -signal.SIGKILL
        # A signal arrives as a negative status, or through a sandbox's launcher as 128 + signal.
        number = -code if code < 0 else code - 128 if code > 128 else 0
        if number == signal.SIGXCPU:  # the CPU limit set for the launch
            return KernelAnswer("over budget")
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else ""
        return KernelAnswer("crashed", signal_name=name or f"exit status {code}")

    # -- launches -------------------------------------------------------------------------------

    def launch(
        self,
        kernel: str,
        grid: Sequence[int],
        args: Sequence[object],
        *,
        writable: set[int],
        cpu_budget: float,
        options: dict | None = None,
    ) -> KernelAnswer:
        """``kernel[grid](*args, **options)`` in the process. Tensors in ``args`` at the indices in
        ``writable`` get what the kernel left in their storages; the others are only read."""
        loaded = self.loaded()
        if not loaded.ok:
            return loaded
        names = self.kernels.get(kernel, {}).get("params", [])
        tensors: list[torch.Tensor] = []
        specs, described = [], []
        for index, value in enumerate(args):
            if isinstance(value, torch.Tensor):
                name = names[index] if index < len(names) else f"argument {index}"
                specs.append({
                    "name": name,
                    "dtype": _dtype_name(value.dtype),
                    "offset": value.storage_offset(),
                    "shape": list(value.shape),
                    "stride": list(value.stride()),
                    "writable": index in writable,
                })  # fmt: skip
                described.append({"tensor": len(tensors)})
                tensors.append(value)
            else:
                described.append({"value": value})
        header = {
            "op": "launch",
            "kernel": kernel,
            "grid": [int(size) for size in grid],
            "args": described,
            "tensors": specs,
            "options": dict(options or {}),
        }
        answer, out = self._ask(header, [_storage_bytes(tensor) for tensor in tensors], cpu_budget)
        if answer.ok:
            written = [tensor for spec, tensor in zip(specs, tensors, strict=True) if spec["writable"]]
            for tensor, blob in zip(written, out, strict=True):
                whole = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
                if len(blob) != whole.numel():
                    raise KernelProcessFailed("the kernel process sent back a storage of another size")
                whole.copy_(torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(tensor.device))
        return answer


class _WallLimit(Exception):
    pass


class _Reader:
    def __init__(self, fd: int, deadline: float):
        self.fd, self.deadline = fd, deadline
        self.most = 1 << 20  # bytes of blobs an answer may hold

    def read(self, count: int) -> bytes:
        chunks, left = [], count
        while left:
            wait = self.deadline - time.monotonic()
            if wait <= 0:
                raise _WallLimit
            ready, _, _ = select.select([self.fd], [], [], min(wait, 5.0))
            if not ready:
                continue
            chunk = os.read(self.fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()
