"""How the paged attention kernels of notebooks 07 and 09 are checked: launched by the check itself.

The check reads the kernel from the notebook's cells as text and launches it itself, in a process
of its own (``launching.KernelUnderTest``), with the arguments the notebook states (the signatures
below), its own grid and its own tensors (``scenarios``): scrambled tables, grouped heads, partial
last blocks, pools that are not contiguous, stale slots holding NaN, query rows past the last new
token. Its output is compared with the gather-then-attend reference of ``paged_helpers.reference``
in float64 (``attention_diagnosis``). Under the interpreter every load and store is checked before
it happens, so a stray access is named with its tensor and line. Then the same module is compiled
for CUDA GPUs (sm_80, sm_90) at the launches the check states. ``AttentionKernel`` is what differs
between the decode and the prefill kernel; ``check_attention_kernel`` is the one driver.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...device import DEVICE
from ...reference import paged_decode_reference, paged_prefill_reference
from .attention_diagnosis import (
    DECODE_AXES,
    DECODE_HINT,
    PAGED_ADDRESSES,
    PREFILL_AXES,
    PREFILL_HINT,
    UNWRITTEN,
    close,
    dtype_hint,
    dtype_word,
    explain_mismatch,
    judge_unwritten,
    negative_hint,
    stale_hint,
)
from .attention_inputs import DecodeInputs, PrefillInputs, decode_inputs, prefill_inputs
from .bugs import DECODE_BUGS, PREFILL_BUGS, Bug, decode_as, prefill_as
from .launching import KernelUnderTest, Parameter, tensor_argument
from .scenarios import GPU_COMPILE_DECODE_CASES, GPU_COMPILE_PREFILL_CASES, KERNEL_DECODE_CASES, KERNEL_PREFILL_CASES

# The kernels' signatures, as notebooks 07 and 09 state them: the check launches with these
# arguments, positionally (names may differ; number, order and constexprs may not).
DECODE_PARAMETERS = tuple(
    Parameter(name, constexpr=name in ("D", "BLOCK"))
    for name in (
        "q_ptr", "k_pool", "v_pool", "tables_ptr", "lengths_ptr", "out_ptr", "max_blocks", "heads", "group",
        "scale", "s_pool_block", "s_pool_head", "s_pool_slot", "D", "BLOCK",
    )
)  # fmt: skip
PREFILL_PARAMETERS = tuple(
    Parameter(name, constexpr=name in ("D", "BLOCK", "TILE"))
    for name in (
        "q_ptr", "k_pool", "v_pool", "table_ptr", "out_ptr", "start", "new_tokens", "heads", "group", "scale",
        "s_pool_block", "s_pool_head", "s_pool_slot", "D", "BLOCK", "TILE",
    )
)  # fmt: skip
# The query tile the check launches the prefill kernel with (grid: cdiv(new_tokens, TILE) x heads).
PREFILL_TILE = 16


def dtypes_to_check() -> tuple[torch.dtype, ...]:
    """float32 on the CPU interpreter (it has no bfloat16); the half types a GPU serves in."""
    return (torch.float16, torch.bfloat16) if DEVICE.type == "cuda" else (torch.float32,)


def _plan(cases: tuple) -> list[tuple]:
    """(case, dtype) pairs to run: every case in each dtype of the device; on the CPU the second
    case once more in float16 (the interpreter runs it, and half-precision bugs show there)."""
    plan = [(case, dtype) for dtype in dtypes_to_check() for case in cases]
    if DEVICE.type == "cpu" and len(cases) > 1:
        plan.append((cases[1], torch.float16))
    return plan


def _decode_args(inputs: DecodeInputs, out: torch.Tensor) -> list:
    """The kernel's arguments, as notebook 07 states them."""
    batch, heads, head_dim = inputs.q.shape
    k_pool = inputs.k_pool
    return [
        inputs.q, k_pool, inputs.v_pool, inputs.block_tables, inputs.lengths, out,
        inputs.block_tables.shape[1], heads, heads // k_pool.shape[1], 1.0 / math.sqrt(head_dim),
        k_pool.stride(0), k_pool.stride(1), k_pool.stride(2), head_dim, inputs.block_size,
    ]  # fmt: skip


def _prefill_args(inputs: PrefillInputs, out: torch.Tensor) -> list:
    """The kernel's arguments, as notebook 09 states them (TILE: ``PREFILL_TILE``)."""
    new_tokens, heads, head_dim = inputs.q.shape
    k_pool = inputs.k_pool
    return [
        inputs.q, k_pool, inputs.v_pool, inputs.block_table, out,
        inputs.start, new_tokens, heads, heads // k_pool.shape[1], 1.0 / math.sqrt(head_dim),
        k_pool.stride(0), k_pool.stride(1), k_pool.stride(2), head_dim, inputs.block_size, PREFILL_TILE,
    ]  # fmt: skip


@dataclass(frozen=True)
class AttentionKernel:
    """What one attention kernel's check states: its signature, how it is launched, what it is held to."""

    name: str
    parameters: tuple[Parameter, ...]
    cases: tuple  # the scenarios, drawn by ``inputs(case, dtype, seed)``
    gpu_cases: tuple  # the shapes it is compiled at for CUDA targets
    inputs: Callable  # (case, dtype, seed) -> DecodeInputs | PrefillInputs
    args: Callable  # (inputs, out) -> the arguments, in the signature's order
    grid: Callable  # inputs -> the grid the notebook states
    table_width: Callable  # inputs -> blocks a program may walk (its budget's measure)
    reference: Callable
    bugs: tuple[Bug, ...]
    replay: Callable  # (bug, inputs) -> the answer with that bug
    hint: str
    axes: tuple[str, str, str]


DECODE = AttentionKernel(
    "paged_decode_kernel",
    DECODE_PARAMETERS,
    KERNEL_DECODE_CASES,
    GPU_COMPILE_DECODE_CASES,
    decode_inputs,
    _decode_args,
    lambda inputs: tuple(inputs.q.shape[:2]),  # (B, heads)
    lambda inputs: inputs.block_tables.shape[1],
    paged_decode_reference,
    DECODE_BUGS,
    decode_as,
    DECODE_HINT,
    DECODE_AXES,
)
PREFILL = AttentionKernel(
    "paged_prefill_kernel",
    PREFILL_PARAMETERS,
    KERNEL_PREFILL_CASES,
    GPU_COMPILE_PREFILL_CASES,
    prefill_inputs,
    _prefill_args,
    lambda inputs: (-(-inputs.q.shape[0] // PREFILL_TILE), inputs.q.shape[1]),  # (cdiv(T, TILE), heads)
    lambda inputs: inputs.block_table.shape[0],
    paged_prefill_reference,
    PREFILL_BUGS,
    prefill_as,
    PREFILL_HINT,
    PREFILL_AXES,
)

# Compiled as bfloat16, the GPU's serving dtype (the interpreter has no bfloat16).
_GPU_DTYPE = "bfloat16"


def check_attention_kernel(learner_kernel: object, *, spec: AttentionKernel, seed: int) -> None:
    """Launch the learner's kernel on every scenario of ``spec``, compare, name the bug; then compile it."""
    with KernelUnderTest(learner_kernel, spec.name, spec.parameters) as kernel:
        for case, dtype in _plan(spec.cases):
            inputs = spec.inputs(case, dtype, seed)
            scenario = f"{case.scenario} [{dtype_word(dtype)}]"
            out = torch.full_like(inputs.q, UNWRITTEN)
            grid, args = spec.grid(inputs), spec.args(inputs, out)
            kernel.launch(
                scenario,
                grid,
                args,
                writable={next(index for index, arg in enumerate(args) if arg is out)},
                iterations=math.prod(grid) * max(1, spec.table_width(inputs)),
                stray_hint=PAGED_ADDRESSES,
            )
            got = out.double().cpu()
            expected = spec.reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
            if close(got, expected, dtype):
                continue
            judge_unwritten(scenario, got, "your kernel")
            explain_mismatch(
                scenario,
                got,
                expected,
                dtype,
                spec.bugs,
                lambda bug, inputs=inputs: spec.replay(bug, inputs),
                spec.hint + dtype_hint(dtype),
                spec.axes,
                negative_hint(case) + stale_hint(case),
            )
        launches = []
        for case in spec.gpu_cases:
            inputs = spec.inputs(case, torch.float16)
            described = [tensor_argument(a) if isinstance(a, torch.Tensor) else a for a in spec.args(inputs, inputs.q)]
            launches.append(kernel.gpu_launch([_GPU_DTYPE if a == "float16" else a for a in described]))
        kernel.compile_for_gpu(launches)
