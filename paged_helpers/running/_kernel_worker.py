"""The checker's kernel process: runs a learner's validated Triton kernel module, and nothing else.

Run as a script (``python _kernel_worker.py interpreted|compiled [--zygote]``), never imported:
the parent (``kernel_process``) starts it as a zygote that imports torch and Triton once and forks
a fresh worker for each check, so nothing of the checker (its seeds, its expected values, its
references) is in a worker's memory, only the inputs it is sent, and nothing of one check's
kernel outlives it. It never imports ``paged_helpers``.

It speaks in frames on its own copies of stdin and stdout (the kernel's prints go to a file):
a 4-byte length, a JSON header, then the header's ``blobs`` (byte counts) as raw bytes::

    {"op": "load", "source": "..."}
        -> {"ok": true, "kernels": {name: {"params": [...], "constexprs": [...]}}}
    {"op": "fork"}  (to the zygote) -> a fresh worker serves the frames that follow, then
        -> {"exited": status}  (from the zygote, once that worker has ended: ``end``, a crash)
    {"op": "end"}  the worker exits
    {"op": "launch", "kernel": name, "grid": [..], "args": [{"tensor": i} | {"value": v}],
     "tensors": [{"name", "dtype", "offset", "shape", "stride", "writable"}], "cpu_budget": s,
     "options": {"num_warps": 4}, "blobs": [storage bytes of each tensor]}
        -> {"ok": true, "printed": "...", "blobs": [...]}   (the writable tensors' storages)
        -> {"ok": false, "kind": "raised" | "out of bounds", "error_type", "message",
            "frames": [[line, text], ...], "printed", "access": {...}}

Under Triton's interpreter every load, store and atomic of the kernel is checked before it
happens: an address outside every tensor the kernel was handed (or a store into a tensor it
may only read) stops the kernel with an ``out of bounds`` answer naming the tensor it came
closest to. So a stray access is a message, never a segfault or a read of this process's
memory. The source was validated by the parent (``kernel_source``) before it was sent: its
top level holds only imports of Triton and math, constants and ``@triton.jit`` functions.
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import sys
import tempfile
import traceback

import numpy as np
import torch  # torch never imports triton: the mode can still be chosen in main()

# Set by main(), never on import (a test that imports every module of the package imports this one).
MODE = "interpreted"
_IN = _OUT = _PRINTED = None

_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int32": torch.int32, "int64": torch.int64, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}  # fmt: skip

_SOURCE_NAME = "learner_kernels"


class OutOfBounds(Exception):
    """A load, store or atomic of the kernel outside what it was given; ``facts`` say where."""

    def __init__(self, facts: dict):
        super().__init__(facts["what"])
        self.facts = facts


class _Regions:
    """The byte ranges of the tensors of the running launch: [start, end), name, writable."""

    def __init__(self) -> None:
        self.items: list[tuple[int, int, str, bool]] = []

    def check(self, addresses: np.ndarray, mask: np.ndarray, width: int, store: bool) -> None:
        addresses = np.asarray(addresses, dtype=np.uint64)
        active = np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)
        wanted = addresses[active]
        if wanted.size == 0:
            return
        inside = np.zeros(wanted.shape, dtype=bool)
        writable = np.zeros(wanted.shape, dtype=bool)
        for start, end, _name, can_write in self.items:
            here = (wanted >= start) & (wanted + width <= end)
            inside |= here
            if can_write:
                writable |= here
        bad = ~inside if not store else ~writable
        if not bad.any():
            return
        stray = wanted[bad].astype(np.int64)
        facts = {"what": "store" if store else "load", "count": int(bad.sum()), "of": int(wanted.size)}
        if store and inside[bad].all():
            facts["into"] = next(
                (name for start, end, name, _ in self.items if start <= int(stray[0]) < end), "an input"
            )
        else:
            facts.update(self.nearest(stray, width))
        raise OutOfBounds(facts)

    def nearest(self, stray: np.ndarray, width: int) -> dict:
        """The tensor the stray addresses came closest to, and by how many elements before or past it."""
        best = None
        for start, end, name, _ in self.items:
            before = int(np.clip(start - stray, 0, None).max())
            after = int(np.clip(stray + width - end, 0, None).max())
            distance = max(before, after)
            if best is None or distance < best[0]:
                side = "past the end" if after >= before else "before the start"
                best = (distance, name, side)
        distance, name, side = best
        return {"near": name, "side": side, "elements": -(-distance // max(width, 1))}


_REGIONS = _Regions()


def _watch_memory() -> None:
    """Every memory operation of the interpreter checks its addresses against ``_REGIONS`` first."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    masked_load, masked_store = builder.create_masked_load, builder.create_masked_store
    atomic_rmw, atomic_cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def width(ptrs) -> int:
        return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        _REGIONS.check(ptrs.data, mask.data, width(ptrs), store=False)
        return masked_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        _REGIONS.check(ptrs.data, mask.data, width(ptrs), store=True)
        return masked_store(self, ptrs, value, mask, cache_policy)

    def rmw(self, rmw_op, ptr, val, mask, sem, scope):
        _REGIONS.check(ptr.data, mask.data, width(ptr), store=True)
        return atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope)

    def cas(self, ptr, cmp, val, sem, scope):
        _REGIONS.check(ptr.data, np.ones(np.shape(ptr.data), dtype=bool), width(ptr), store=True)
        return atomic_cas(self, ptr, cmp, val, sem, scope)

    builder.create_masked_load, builder.create_masked_store = load, store
    builder.create_atomic_rmw, builder.create_atomic_cas = rmw, cas


# -- frames -----------------------------------------------------------------------------------


def _read_exactly(count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = _IN.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive() -> tuple[dict, list[bytes]]:
    (length,) = struct.unpack(">I", _read_exactly(4))
    header = json.loads(_read_exactly(length))
    return header, [_read_exactly(int(size)) for size in header.get("blobs", [])]


def _send(header: dict, blobs: list[bytes] = ()) -> None:
    header = {**header, "blobs": [len(blob) for blob in blobs]}
    text = json.dumps(header).encode()
    _OUT.write(struct.pack(">I", len(text)) + text + b"".join(blobs))


def _printed() -> str:
    sys.stdout.flush()
    _PRINTED.seek(0)
    text = _PRINTED.read()[-20000:].decode(errors="replace")
    _PRINTED.seek(0)
    _PRINTED.truncate()
    return text


# -- the operations ---------------------------------------------------------------------------

_MODULE = None


def _load(header: dict) -> dict:
    global _MODULE
    import importlib.util
    import inspect

    folder = tempfile.mkdtemp(prefix="learner-kernels-")
    path = os.path.join(folder, f"{_SOURCE_NAME}.py")  # Triton reads a kernel's source with inspect
    with open(path, "w") as handle:
        handle.write(header["source"])
    spec = importlib.util.spec_from_file_location(_SOURCE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_SOURCE_NAME] = module
    spec.loader.exec_module(module)
    _MODULE = module
    kernels = {}
    for name, value in vars(module).items():
        fn = getattr(value, "fn", None)
        if fn is None or not callable(fn) or getattr(fn, "__module__", None) != _SOURCE_NAME:
            continue
        parameters = list(inspect.signature(fn).parameters.values())
        kernels[name] = {
            "params": [p.name for p in parameters],
            "constexprs": [p.name for p in parameters if "constexpr" in str(p.annotation)],
        }
    return {"ok": True, "kernels": kernels}


# Space left between two tensors in the arena: a stray access near a tensor falls in a gap
# (reported out of bounds), not in the next tensor. The gaps hold ``_GUARD_BYTE``: compiled, where
# no access is checked before it happens, a store into a gap is found after the launch.
_GAP = 1 << 16
_GUARD_BYTE = 0xA5


class _Arena:
    """The launch's tensors, each a view (shape, strides, offset) of its own span of one buffer,
    spans ``_GAP`` bytes apart; the buffer is on the GPU when compiled."""

    def __init__(self, specs: list[dict], blobs: list[bytes]):
        self.spans: list[tuple[int, int]] = []  # (start, length) of each tensor's storage, in bytes
        size = _GAP
        for blob in blobs:
            self.spans.append((size, len(blob)))
            size += -(-len(blob) // 64) * 64 + _GAP
        arena = bytearray([_GUARD_BYTE]) * size
        for (start, length), blob in zip(self.spans, blobs, strict=True):
            arena[start : start + length] = blob
        self.bytes = torch.frombuffer(arena, dtype=torch.uint8)
        if MODE == "compiled":
            self.bytes = self.bytes.cuda()
        self.tensors = []
        for spec, (start, _) in zip(specs, self.spans, strict=True):
            dtype = _DTYPES[spec["dtype"]]
            whole = self.bytes.view(dtype)  # spans start at multiples of 64 bytes: whole elements
            offset = start // whole.element_size() + spec["offset"]
            self.tensors.append(whole.as_strided(spec["shape"], spec["stride"], offset))
        self.before = self.bytes.cpu().clone() if MODE == "compiled" else None

    def regions(self, specs: list[dict]) -> list[tuple[int, int, str, bool]]:
        """(first byte, byte past the last, name, writable) of each tensor's storage, as addresses."""
        base = self.bytes.data_ptr()
        return [
            (base + start, base + start + length, spec["name"], spec["writable"])
            for spec, (start, length) in zip(specs, self.spans, strict=True)
        ]

    def stray_stores(self, specs: list[dict]) -> dict | None:
        """Compiled: the facts of a store that changed a gap (None when every gap is as it was)."""
        if self.before is None:
            return None
        inside = torch.zeros(self.before.shape, dtype=torch.bool)
        for start, length in self.spans:
            inside[start : start + length] = True
        changed = (self.bytes.cpu() != self.before) & ~inside
        if not bool(changed.any()):
            return None
        stray = torch.nonzero(changed).flatten().numpy().astype(np.int64)
        probe = _Regions()
        probe.items = [
            (start, start + length, spec["name"], False)
            for spec, (start, length) in zip(specs, self.spans, strict=True)
        ]
        facts = {"what": "store", "count": int(stray.size), "of": int(stray.size), "unit": "bytes"}
        facts.update(probe.nearest(stray, 1))
        return facts

    def written(self, specs: list[dict]) -> list[bytes]:
        """The storages of the tensors the kernel may write, as they are now."""
        now = self.bytes.cpu()
        return [
            now[start : start + length].numpy().tobytes()
            for spec, (start, length) in zip(specs, self.spans, strict=True)
            if spec["writable"]
        ]


def _learner_frames(error: BaseException) -> list[list]:
    frames = []
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.basename(frame.filename) == f"{_SOURCE_NAME}.py":
            frames.append([frame.lineno, (frame.line or "").strip()])
    cause = error.__cause__ or error.__context__
    if not frames and cause is not None and cause is not error:
        return _learner_frames(cause)
    return frames[-6:]


def _innermost(error: BaseException) -> BaseException:
    """The error under Triton's wrapping (InterpreterError, CompilationError keep it as the cause)."""
    seen = set()
    while (error.__cause__ or error.__context__) is not None and id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__
        if isinstance(inner, OutOfBounds) or type(error).__name__ in ("InterpreterError",):
            error = inner
            continue
        break
    return error


def _launch(header: dict, blobs: list[bytes]) -> tuple[dict, list[bytes]]:
    kernel = getattr(_MODULE, header["kernel"])
    specs = header["tensors"]
    arena = _Arena(specs, blobs)
    _REGIONS.items = arena.regions(specs)
    args = [arena.tensors[item["tensor"]] if "tensor" in item else item["value"] for item in header["args"]]
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(spent + float(header["cpu_budget"])) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    try:
        kernel[tuple(header["grid"])](*args, **header.get("options", {}))
        if MODE == "compiled":
            torch.cuda.synchronize()
    except BaseException as error:  # the learner's kernel failed: its answer says how
        inner = _innermost(error)
        answer = {
            "ok": False,
            "kind": "out of bounds" if isinstance(inner, OutOfBounds) else "raised",
            "error_type": type(inner).__name__,
            "message": str(inner)[:3000],
            "frames": _learner_frames(error),
            "printed": _printed(),
        }
        if isinstance(inner, OutOfBounds):
            answer["access"] = inner.facts
        return answer, []
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    stray = arena.stray_stores(specs)
    if stray is not None:
        return {
            "ok": False,
            "kind": "out of bounds",
            "error_type": "OutOfBounds",
            "message": "a store outside every tensor, found after the launch",
            "frames": [],
            "printed": _printed(),
            "access": stray,
        }, []
    return {"ok": True, "printed": _printed()}, arena.written(specs)


def _set_up(mode: str) -> None:
    """The mode (before the first import of triton), and the protocol's own descriptors: fd 1 and 2
    then go to a file, so nothing printed (by the kernel, numpy or Triton) can garble a frame."""
    global MODE, _IN, _OUT, _PRINTED
    MODE = mode
    if mode == "interpreted":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    _IN = os.fdopen(os.dup(0), "rb", buffering=0)
    _OUT = os.fdopen(os.dup(1), "wb", buffering=0)
    _PRINTED = tempfile.TemporaryFile()
    os.dup2(_PRINTED.fileno(), 1)
    os.dup2(_PRINTED.fileno(), 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
    sys.stderr = sys.stdout


def _serve() -> int:
    """Answer load and launch requests until ``end`` or the end of the input."""
    while True:
        try:
            header, blobs = _receive()
        except EOFError:
            return 0
        try:
            if header["op"] == "end":
                return 0
            if header["op"] == "load":
                _send(_load(header))
            elif header["op"] == "launch":
                answer, out = _launch(header, blobs)
                _send(answer, out)
            else:
                _send({"ok": False, "kind": "raised", "error_type": "ValueError", "message": "no such operation"})
        except BaseException as error:  # loading the module failed, or a request was malformed
            _send({
                "ok": False,
                "kind": "raised",
                "error_type": type(_innermost(error)).__name__,
                "message": str(_innermost(error))[:3000],
                "frames": _learner_frames(error),
                "printed": _printed(),
            })  # fmt: skip


def _zygote() -> int:
    """Fork a fresh worker for each ``fork`` request and wait for it: the child serves the same
    descriptors until ``end``; then this process says how it ended (``{"exited": status}``: a
    signal as a negative number). Torch and Triton are imported once, here, never learner code."""
    import triton.language  # noqa: F401  (imported before the forks: each child starts with it)

    while True:
        try:
            header, _ = _receive()
        except EOFError:
            return 0
        if header.get("op") != "fork":
            _send({"ok": False, "kind": "raised", "error_type": "ValueError", "message": "the zygote only forks"})
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _serve()
            finally:
                sys.stdout.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        _send({"exited": os.waitstatus_to_exitcode(status)})


def main(argv: list[str]) -> int:
    _set_up(argv[1] if len(argv) > 1 else "interpreted")
    if MODE == "interpreted":
        _watch_memory()
    return _zygote() if "--zygote" in argv else _serve()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
