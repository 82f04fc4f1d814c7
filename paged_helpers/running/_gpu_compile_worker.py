"""Compile Triton kernels for CUDA targets, in a process of its own; no GPU needed.

Run as a script (``python _gpu_compile_worker.py``), never imported: importing ``paged_helpers``
would switch on Triton's interpreter, and one process can't be both interpreted and compiling.
The parent (``gpu_compile``) starts it with ``TRITON_INTERPRET`` removed from the environment.

Reads one JSON request on stdin::

    {"modules": {id: python source defining the kernel and what it uses},
     "jobs": [{"key": str, "module": id, "kernel": name, "target": 80 | 90,
               "args": [descriptor, ...], "kwargs": {name: descriptor}}]}

where a descriptor is ``{"tensor": "float16"}`` (a pointer to that dtype) or ``{"value": v}``.
Writes one JSON answer on stdout, a list with one entry per job::

    {"key", "ok", "seconds", "registers", "spill_bytes", "error", "dot"}

``dot`` is set when a ``tl.dot`` broke the target's minimum shape: the operand shapes and the
minimum (m, n, k). The arguments are bound and specialised exactly as a launch on a GPU would
(Triton's own binder: integer 1 and divisibility by 16 specialised, pointers 16-byte aligned),
so the compiled code is the code a GPU would run. Triton's on-disk cache makes repeats cheap.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def _load_module(module_id: str, source: str, folder: str):
    """Triton reads a kernel's source with inspect, so the module lives in a real file."""
    path = os.path.join(folder, f"learner_kernels_{module_id}.py")
    with open(path, "w") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location(f"learner_kernels_{module_id}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class _TorchDtypeName:
    """What Triton's binder reads of a torch dtype: its name, printed as ``torch.<name>``."""

    __module__ = "torch"

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


# One object per dtype, alive for the whole process, as torch's are: Triton's binder caches what
# it learnt of a dtype by the object's identity, so a dtype freed and another made at its address
# would be read as the first.
_DTYPES: dict[str, _TorchDtypeName] = {}


class _Pointer:
    """A tensor as the binder sees it: a dtype and a 16-byte-aligned address (as torch allocates).

    The worker never imports torch (it would cost more than most compiles): the binder reads
    only ``dtype`` and ``data_ptr()`` of a tensor argument.
    """

    def __init__(self, dtype_name: str):
        self.dtype = _DTYPES.setdefault(dtype_name, _TorchDtypeName(dtype_name))

    @staticmethod
    def data_ptr() -> int:
        return 1 << 12


def _argument(descriptor: dict):
    if "tensor" in descriptor:
        return _Pointer(descriptor["tensor"])
    return descriptor["value"]


_RESOURCES = re.compile(r"REG:(\d+) STACK:(\d+).*?LOCAL:(\d+)")
_SPILLS = re.compile(r"(\d+) bytes spill stores")


def _run_tool(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def _resources(compiled, capability: int) -> tuple[int | None, int | None]:
    """(registers per thread, bytes of register spills per thread) of a compiled kernel.

    cuobjdump reads both off the cubin (no recompiling, so it works on Triton's cache hits);
    its stack figure also counts a stack frame without spills, so only when it is not zero is
    ptxas run again, verbosely, for the exact spill stores.
    """
    from triton import knobs
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as folder:
        cubin, ptx = os.path.join(folder, "k.cubin"), os.path.join(folder, "k.ptx")
        with open(cubin, "wb") as handle:
            handle.write(compiled.asm["cubin"])
        found = _RESOURCES.search(_run_tool([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", cubin]))
        if not found:
            return None, None
        registers, stack = int(found.group(1)), int(found.group(2)) + int(found.group(3))
        if not stack:
            return registers, 0
        with open(ptx, "w") as handle:
            handle.write(compiled.asm["ptx"])
        arch = sm_arch_from_capability(capability)
        log = _run_tool([get_ptxas(capability).path, "-v", f"--gpu-name={arch}", ptx, "-o", cubin + ".2"])
        spills = _SPILLS.search(log)
        return registers, int(spills.group(1)) if spills else stack


def _compile(job: dict, modules: dict, dot_seen: list) -> dict:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = getattr(modules[job["module"]], job["kernel"])
    target = GPUTarget("cuda", int(job["target"]), 32)
    backend = make_backend(target)
    args = [_argument(d) for d in job["args"]]
    kwargs = {name: _argument(d) for name, d in job["kwargs"].items()}
    kwargs["debug"] = kwargs.get("debug", kernel.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)
    registers, spills = _resources(compiled, int(job["target"]))
    return {"registers": registers, "spill_bytes": spills, "num_warps": compiled.metadata.num_warps}


def _watch_dot_bounds(dot_seen: list) -> None:
    """Record the operand shapes each tl.dot asks the target about: the compiler's own error
    names only the minimum, and the learner needs to see which shapes broke it."""
    from triton.backends.nvidia import compiler as nvidia

    original = nvidia.min_dot_size

    def recording(target):
        check = original(target)

        def bounds(lhs_type, rhs_type):
            minimum = check(lhs_type, rhs_type)
            dot_seen.append(
                {
                    "lhs": [int(d) for d in lhs_type.shape],
                    "rhs": [int(d) for d in rhs_type.shape],
                    "dtype": str(lhs_type.scalar),
                    "minimum": list(minimum),
                }
            )
            return minimum

        return bounds

    nvidia.min_dot_size = recording


def main() -> int:
    request = json.load(sys.stdin)
    answers = []
    dot_seen: list = []
    _watch_dot_bounds(dot_seen)
    with tempfile.TemporaryDirectory() as folder:
        modules = {}
        for module_id, source in request["modules"].items():
            modules[module_id] = _load_module(module_id, source, folder)
        for job in request["jobs"]:
            dot_seen.clear()
            started = time.perf_counter()
            noise = io.StringIO()
            answer = {"key": job["key"], "ok": True, "error": "", "dot": None}
            try:
                with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise):
                    answer.update(_compile(job, modules, dot_seen))
            except Exception as error:  # every compile error becomes an answer, never a crash
                answer["ok"] = False
                answer["error"] = f"{type(error).__name__}: {error}"
                broken = [d for d in dot_seen if _breaks(d)]
                answer["dot"] = broken[-1] if broken else None
            answer["seconds"] = round(time.perf_counter() - started, 3)
            answers.append(answer)
    sys.stdout.write(json.dumps(answers))
    return 0


def _breaks(dot: dict) -> bool:
    m, n, k = dot["minimum"]
    return dot["lhs"][-2] < m or dot["rhs"][-1] < n or dot["lhs"][-1] < k


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    sys.exit(main())
