"""Compile the learner's Triton kernels for CUDA GPUs, on any machine, and explain what fails.

Triton's interpreter (the CPU path) accepts kernels that a GPU rejects: a ``tl.dot`` whose inner
dimension is under the tensor cores' minimum, for example, passes every CPU check and fails on
the first GPU. Triton can compile for a GPU without one (its bundled ptxas builds the cubin), so
the kernel checks also compile the learner's kernels for sm_80 (A100) and sm_90 (H100, H200):

1. **describe**: a ``Launch`` names the kernel, its module's source and its arguments as types (a
   tensor becomes a pointer to its dtype) and values. The kernel checks describe the launches
   they state themselves (``checks.kernels.launching.gpu_launch``), on the module they read from
   the notebook's text; ``capture_launches`` records what a launcher would launch, for the
   benchmark and the course's own tests;
2. **compile**: a separate Python process without ``TRITON_INTERPRET`` (one process can't be
   both) binds those arguments with Triton's own binder and compiles (``_gpu_compile_worker``).
   Compiling runs a kernel module's Python (its top level, decorators, defaults, and calls in the
   body that are not Triton's), so only a module ``kernel_source`` accepted is ever sent there;
3. **explain**: a compile error becomes a learner's message; registers and spills come back
   as facts. Running out of time is no verdict (``timed_out``): the machine, not the kernel.

Results are cached per (Triton version, kernel source, arguments, target), in this process and,
except in a graded run, on disk (``~/.cache/paged_helpers/gpu_compile``, one small JSON each), so
a second run of a check, in any process, starts no compiler.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .graded import graded_run
from .kernel_source import validate_kernel_module

__all__ = [
    "TARGETS",
    "CompileResult",
    "Launch",
    "RecordedLaunch",
    "capture_launches",
    "describe_launch",
    "record_launches",
    "compile_launches",
    "explain_failure",
]

# Compute capabilities compiled for: sm_80 (A100, the oldest GPU with bfloat16 tensor cores)
# and sm_90 (H100/H200, the GPUs the benchmark's numbers are quoted for).
TARGETS: tuple[int, ...] = (80, 90)

# Seconds the compiling process may take in all. Running out is no verdict on the kernel (a
# loaded machine, not the learner, made it slow): the checks say so and ask to run again.
COMPILE_TIME_LIMIT_S = 600.0

_WORKER = Path(__file__).with_name("_gpu_compile_worker.py")


@dataclass(frozen=True)
class Launch:
    """One recorded ``kernel[grid](*args, **kwargs)``: enough to compile it in another process."""

    kernel: str  # the kernel's name
    module_source: str  # Python source defining the kernel and every global it reads
    args: tuple  # descriptors: {"tensor": dtype name} or {"value": number, bool, str or None}
    kwargs: tuple  # (name, descriptor) pairs, sorted

    def with_dtype(self, old: str, new: str) -> Launch:
        """The same launch with every ``old`` tensor made a ``new`` one (float16 -> bfloat16)."""

        def swap(d: dict) -> dict:
            return {"tensor": new} if d.get("tensor") == old else d

        return Launch(
            self.kernel,
            self.module_source,
            tuple(swap(d) for d in self.args),
            tuple((name, swap(d)) for name, d in self.kwargs),
        )

    def with_source(self, module_source: str) -> Launch:
        """The same launch of the same kernel, defined by ``module_source`` (the notebook's text)."""
        return Launch(self.kernel, module_source, self.args, self.kwargs)

    def constexpr_values(self) -> dict:
        """Keyword arguments that are plain values (the constexprs: D, BLOCK, TILE, num_warps)."""
        return {name: d["value"] for name, d in self.kwargs if "value" in d}


@dataclass(frozen=True)
class CompileResult:
    launch: Launch
    target: int
    ok: bool
    seconds: float
    registers: int | None = None
    spill_bytes: int | None = None
    num_warps: int | None = None
    error: str = ""
    dot: dict | None = None  # the tl.dot that broke the target's minimum shape, if one did


# --------------------------------------------------------------------------- capture


def _describe(value: object) -> dict:
    import torch

    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).removeprefix("torch.")}
    if hasattr(value, "value") and type(value).__name__ == "constexpr":
        value = value.value
    if isinstance(value, (bool, int, float, str)) or value is None:
        return {"value": value}
    raise TypeError(f"a kernel argument of type {type(value).__name__} can't be compiled for a GPU here")


def _raw_function(kernel: object) -> types.FunctionType:
    """The Python function behind a @triton.jit object (interpreted or compiled)."""
    return kernel.fn  # both InterpretedFunction and JITFunction keep it there


def _is_jit(value: object) -> bool:
    return hasattr(value, "fn") and type(value).__name__ in ("JITFunction", "InterpretedFunction")


def _names_used(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


def _importable_from(value: object) -> str | None:
    """``module`` when ``value`` (a function or class) can be imported from a real .py module."""
    module = getattr(value, "__module__", None)
    loaded = sys.modules.get(module or "")
    if module in (None, "__main__") or not str(getattr(loaded, "__file__", "")).endswith(".py"):
        return None
    return module if getattr(loaded, getattr(value, "__name__", ""), None) is value else None


def _global_line(name: str, value: object) -> str | None:
    """A line of source that recreates global ``name``, or None when it is not data a kernel can use."""
    import torch

    if isinstance(value, types.ModuleType):
        module = value.__name__
        return f"import {module} as {name}" if "." in module or module != name else f"import {module}"
    if type(value).__name__ == "constexpr" and hasattr(value, "value"):
        return f"{name} = triton.language.constexpr({value.value!r})"  # the bundle imports triton.language
    if isinstance(value, (bool, int, float, str)) or value is None:
        return f"{name} = {value!r}"
    if isinstance(value, torch.device):
        return f"{name} = __import__('torch').device({str(value)!r})"
    module = _importable_from(value)
    if module is not None:
        return f"from {module} import {value.__name__} as {name}"
    return None


def bundle_source(entry: object) -> str:
    """Python source defining ``entry`` (a @triton.jit kernel or a plain function, such as a
    launcher written in a notebook) and everything it reads: modules, constants, importable
    functions, and the @triton.jit or notebook functions it calls (recursively, as source), in an
    order that runs. Raises OSError when a function's source can't be read."""
    lines: list[str] = []
    functions: list[str] = []
    seen: set[str] = set()

    def visit(obj: object) -> None:
        fn = _raw_function(obj) if _is_jit(obj) else obj
        if fn.__name__ in seen:
            return
        seen.add(fn.__name__)
        for name in sorted(_names_used(fn.__code__)):
            if name not in fn.__globals__ or name == fn.__name__:
                continue
            value = fn.__globals__[name]
            if _is_jit(value) or (isinstance(value, types.FunctionType) and _importable_from(value) is None):
                visit(value)
                continue
            line = _global_line(name, value)
            if line is not None and line not in lines:
                lines.append(line)
        functions.append(textwrap.dedent(inspect.getsource(fn)))

    visit(entry)
    header = ["import triton", "import triton.language as tl"]
    return "\n".join([*header, *lines, "", *functions]) + "\n"


@dataclass(frozen=True)
class RecordedLaunch:
    """One ``kernel[grid](*args, **kwargs)`` as it was asked for, with the live objects:
    ``replay()`` makes the same launch again (what a benchmark times)."""

    kernel: object
    grid: object
    args: tuple
    kwargs: dict

    def replay(self, **overrides: object) -> None:
        self.kernel[self.grid](*self.args, **{**self.kwargs, **overrides})


def record_launches(launcher: Callable, args: tuple) -> tuple[object, list[RecordedLaunch]]:
    """Call ``launcher(*args)`` with every Triton launch recorded and skipped: (its result, the launches).

    The launcher's own Python runs (validation, allocation, merging); its kernels don't, so the
    inputs can have GPU shapes on a CPU, and the result is meaningless until the launches are
    replayed.
    """
    from triton.runtime import jit

    launches: list[RecordedLaunch] = []
    original = jit.KernelInterface.__getitem__

    def recording(kernel, grid):
        def launch(*launch_args, **launch_kwargs):
            launches.append(RecordedLaunch(kernel, grid, launch_args, launch_kwargs))

        return launch

    jit.KernelInterface.__getitem__ = recording
    try:
        result = launcher(*args)
    finally:
        jit.KernelInterface.__getitem__ = original
    return result, launches


def _same_specialisation(value: object) -> object:
    """An integer kernel argument as Triton specialises it: 1, a multiple of 16, another int32,
    or an int64. The compiled code depends on that class only, so launches that differ in a
    length or a table width share one compile (and one cache entry)."""
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        return value
    if value == 1:
        return 1
    return 16 if value % 16 == 0 else 3


def describe_launch(recorded: RecordedLaunch, **overrides: object) -> Launch:
    """A recorded launch as a ``Launch`` another process can compile (``overrides``: num_warps=8, ...).

    Integer arguments that are not constexprs are replaced by a representative of their
    specialisation class (see ``_same_specialisation``); constexprs and options are kept as given.
    """
    parameters = list(inspect.signature(_raw_function(recorded.kernel)).parameters.values())
    args = []
    for index, value in enumerate(recorded.args):
        constexpr = index < len(parameters) and "constexpr" in str(parameters[index].annotation)
        args.append(_describe(value if constexpr else _same_specialisation(value)))
    kwargs = {**recorded.kwargs, **overrides}
    return Launch(
        kernel=_raw_function(recorded.kernel).__name__,
        module_source=bundle_source(recorded.kernel),
        args=tuple(args),
        kwargs=tuple(sorted((k, _describe(v)) for k, v in kwargs.items())),
    )


def capture_launches(launcher: Callable, args: tuple) -> list[Launch]:
    """The launches ``launcher(*args)`` makes, described for compiling (none of them runs)."""
    _, recorded = record_launches(launcher, args)
    return [describe_launch(launch) for launch in recorded]


# --------------------------------------------------------------------------- compile

_CACHE: dict[str, CompileResult] = {}

# The disk cache is the learner's convenience. In a graded run the learner's code shares the file
# system with the check, and a result file it wrote (the key is public) would pass a kernel that
# never compiled: there only this process's own compiles count. Decided when the package is
# imported, before any learner code runs (the grader imports it afresh for every test cell).
_DISK_CACHE = not graded_run()


def _cache_folder() -> Path:
    """Where compile results are kept between processes (a second run of a check starts no compiler)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "paged_helpers" / "gpu_compile"


def _key(launch: Launch, target: int) -> str:
    import triton

    text = json.dumps(
        [triton.__version__, launch.module_source, launch.kernel, launch.args, launch.kwargs, target], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _module_id(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _load_cached(key: str, launch: Launch, target: int) -> CompileResult | None:
    if not _DISK_CACHE:
        return None
    try:
        facts = json.loads((_cache_folder() / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return CompileResult(launch=launch, target=target, **facts)


def _store_cached(key: str, result: CompileResult) -> None:
    facts = {
        name: getattr(result, name) for name in CompileResult.__dataclass_fields__ if name not in ("launch", "target")
    }
    if not _DISK_CACHE:
        return
    try:
        _cache_folder().mkdir(parents=True, exist_ok=True)
        (_cache_folder() / f"{key}.json").write_text(json.dumps(facts))
    except OSError:  # a read-only home: the in-process cache still holds it
        pass


def compile_launches(launches: list[Launch], targets: tuple[int, ...] = TARGETS) -> list[CompileResult]:
    """Compile each launch for each target (in a separate process), cached; one result per pair.

    Raises ``kernel_source.KernelSourceRefused`` before anything compiles when a launch's module
    holds what a compile would run and a kernel module may not hold."""
    for source in dict.fromkeys(launch.module_source for launch in launches):
        validate_kernel_module(source)
    wanted = [(launch, target) for launch in launches for target in targets]
    missing = {}
    for launch, target in wanted:
        key = _key(launch, target)
        if key not in _CACHE:
            cached = _load_cached(key, launch, target)
            if cached is not None:
                _CACHE[key] = cached
            else:
                missing[key] = (launch, target)
    if missing:
        fresh = _run_worker(missing)
        for key, result in fresh.items():
            if not timed_out(result):  # a timeout says nothing of the kernel: never kept
                _CACHE[key] = result
                _store_cached(key, result)
        return [_CACHE.get(key) or fresh[key] for key in (_key(launch, target) for launch, target in wanted)]
    return [_CACHE[_key(launch, target)] for launch, target in wanted]


_WORKER_TIMEOUT = "the compiler did not finish in time"


def timed_out(result: CompileResult) -> bool:
    """The compile ran out of wall-clock time: the machine's doing, no verdict on the kernel."""
    return result.error == _WORKER_TIMEOUT


def _run_worker(jobs: dict[str, tuple[Launch, int]]) -> dict[str, CompileResult]:
    modules = {_module_id(launch.module_source): launch.module_source for launch, _ in jobs.values()}
    request = {
        "modules": modules,
        "jobs": [
            {
                "key": key,
                "module": _module_id(launch.module_source),
                "kernel": launch.kernel,
                "target": target,
                "args": list(launch.args),
                "kwargs": dict(launch.kwargs),
            }
            for key, (launch, target) in jobs.items()
        ],
    }
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    environment.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    try:
        done = subprocess.run(
            [sys.executable, str(_WORKER)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=environment,
            timeout=COMPILE_TIME_LIMIT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {
            key: CompileResult(launch, target, False, COMPILE_TIME_LIMIT_S, error=_WORKER_TIMEOUT)
            for key, (launch, target) in jobs.items()
        }
    try:
        answers = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"the GPU compile process failed (exit {done.returncode}):\n{tail}") from None
    results = {}
    for answer in answers:
        launch, target = jobs[answer["key"]]
        results[answer["key"]] = CompileResult(
            launch=launch,
            target=target,
            ok=answer["ok"],
            seconds=answer["seconds"],
            registers=answer.get("registers"),
            spill_bytes=answer.get("spill_bytes"),
            num_warps=answer.get("num_warps"),
            error=answer.get("error", ""),
            dot=answer.get("dot"),
        )
    return results


# --------------------------------------------------------------------------- explain


def _shape_words(launch: Launch) -> str:
    values = launch.constexpr_values()
    return ", ".join(f"{name}={value}" for name, value in values.items()) or "its arguments"


def explain_failure(result: CompileResult) -> str:
    """What went wrong compiling for ``result.target``, in the learner's terms (one paragraph)."""
    where = f"{result.launch.kernel} compiled for a GPU (sm_{result.target}) with {_shape_words(result.launch)}"
    if result.error == _WORKER_TIMEOUT:
        return (
            f"{where} did not finish compiling within {COMPILE_TIME_LIMIT_S:g} s. hint: a tile of "
            "[rows, keys, head_dim] products held at once (a 3-D broadcast) is large at real shapes; "
            "keep two dimensions per product, or use smaller tiles."
        )
    if result.dot is not None:
        (m, k), (_, n) = result.dot["lhs"][-2:], result.dot["rhs"][-2:]
        low_m, low_n, low_k = result.dot["minimum"]
        dtype = result.dot["dtype"]
        return (
            f"{where}: this tl.dot is {m} x {k} times {k} x {n} (M x K times K x N) in {dtype}; on a GPU, "
            f"Triton needs M >= {low_m}, N >= {low_n} and the inner dimension K >= {low_k} for {dtype} "
            "operands (tensor cores multiply tiles of at least that size). Triton's interpreter on the "
            "CPU does not check this, so the kernel passed there. hint: use tl.dot only where the inner "
            "dimension is large enough at every shape the course runs (blocks of 2 and 4 tokens are "
            "among them), or compute that product with a broadcast and tl.sum."
        )
    first_line = result.error.strip().splitlines()[0] if result.error.strip() else "an unknown error"
    detail = _last_lines(result.error)
    return f"{where} fails to compile: {first_line}\n{detail}"


def _last_lines(text: str, count: int = 8) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-count:])
