"""Checks for the paged attention kernels of notebooks 07 (decode, split-K) and 09 (prefill).

Each notebook's kernel and its launcher are judged apart:

* **the kernel** (``check_paged_decode_kernel``, ``check_paged_prefill_kernel``): the check
  reads the kernel from the notebook's cells as text and launches it itself, in a process of
  its own (``launching.KernelUnderTest``), with the arguments the notebook states, its own grid
  and its own tensors: scrambled tables, grouped heads, partial last blocks, pools that are not
  contiguous, stale slots holding NaN, query rows past the last new token. Its output is
  compared with the gather-then-attend reference of ``paged_helpers.reference`` in float64.
  Under the interpreter every load and store is checked before it happens, so a stray access
  is named with its tensor and line. Then the same module is compiled for CUDA GPUs (sm_80,
  sm_90) at the launches the check states. Nothing the launcher does counts here.
* **the launcher** (``check_paged_decode``, ``check_paged_prefill``, for fewer points): it is
  called like any Python function: it must refuse bad input naming the argument, and return the
  reference's answer on the scenarios it accepts.

When a kernel's answer is wrong, the check recomputes the scenario as a few classic bugs would
(``bugs``) and, if the output matches one of them, names it. Tolerances live in ``TOLERANCES``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...device import DEVICE, INFO
from ...reference import paged_decode_reference, paged_prefill_reference
from ..reading.learner_code import Outcome, is_remote, run_apart, spawned
from ..reading.strict import strict_allclose
from ..registry import check
from ..speaking.failure import CheckFailed, Finding, LearnerWords, NotImplementedYet, fail, four_parts
from ..speaking.tally import count_call
from .bugs import DECODE_BUGS, PREFILL_BUGS, Bug, decode_as, prefill_as
from .launching import KernelUnderTest, Parameter, tensor_argument
from .scenarios import (
    DECODE_CASES,
    GPU_COMPILE_DECODE_CASES,
    GPU_COMPILE_PREFILL_CASES,
    KERNEL_DECODE_CASES,
    KERNEL_PREFILL_CASES,
    NEGATIVE_SCORE,
    PREFILL_CASES,
    SPLIT_K_CASES,
    DecodeCase,
    DecodeInputs,
    PrefillInputs,
    decode_inputs,
    prefill_inputs,
)

__all__ = [
    "DECODE_PARAMETERS",
    "PREFILL_PARAMETERS",
    "PREFILL_TILE",
    "TIME_LIMIT_S",
    "TOLERANCES",
    "check_paged_decode",
    "check_paged_decode_kernel",
    "check_paged_prefill",
    "check_paged_prefill_kernel",
    "check_split_k_decode",
]

# (atol, rtol) of the learner's output against the float64 reference, by input dtype.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (4e-2, 4e-2),
}

# Seconds a launcher's call may take before it is declared stuck: far above what any scenario
# needs (well under a second), so a loaded machine does not reach it. On a GPU the first call
# of each shape also compiles the kernel.
TIME_LIMIT_S = 120.0
GPU_TIME_LIMIT_S = 300.0

# What the check fills an output with before the kernel runs: a value no scenario's answer holds.
UNWRITTEN = 1234.0

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


def _dtypes_to_check() -> tuple[torch.dtype, ...]:
    """float32 on the CPU interpreter (it has no bfloat16); the half types a GPU serves in."""
    return (torch.float16, torch.bfloat16) if DEVICE.type == "cuda" else (torch.float32,)


def _plan(cases: tuple) -> list[tuple]:
    """(case, dtype) pairs to run: every case in each dtype of the device; on the CPU the second
    case once more in float16 (the interpreter runs it, and half-precision bugs show there)."""
    plan = [(case, dtype) for dtype in _dtypes_to_check() for case in cases]
    if DEVICE.type == "cpu" and len(cases) > 1:
        plan.append((cases[1], torch.float16))
    return plan


def _dtype_word(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# --------------------------------------------------------------------------- comparing


def _close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, equal_nan: bool = False) -> bool:
    atol, rtol = TOLERANCES[dtype]
    return strict_allclose(got, expected, atol=atol, rtol=rtol, equal_nan=equal_nan)


def _worst(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, str, str]) -> str:
    """Where the outputs differ most, in the learner's terms (axes names the three dimensions)."""
    error = (got - expected).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
    where = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    return (
        f"largest difference {float(error.max()):.3g} at {where}: {float(got[index]):.5g} instead of "
        f"{float(expected[index]):.5g}"
    )


_DECODE_AXES = ("sequence", "query head", "dim")
_PREFILL_AXES = ("new token", "query head", "dim")


def _explain_mismatch(
    scenario: str,
    got: torch.Tensor,
    expected: torch.Tensor,
    dtype: torch.dtype,
    bugs: tuple[Bug, ...],
    recompute: Callable[[Bug], torch.Tensor | None],
    fallback_hint: str,
    axes: tuple[str, str, str],
    context_hint: str = "",
) -> None:
    """Fail with the name of the bug the output matches, else with the general hint.

    ``context_hint`` (what this scenario is about) opens the NaN and the general hints.
    """
    for bug in bugs:
        answer = recompute(bug)
        if (
            answer is not None
            and not _close(answer, expected, dtype, equal_nan=True)
            and _close(got, answer, dtype, equal_nan=True)
        ):
            fail(
                scenario,
                "the reference output (gather the history, then plain attention)",
                "what that computation gives with one classic mistake, named below",
                bug.diagnosis,
            )
    if not torch.isfinite(got).all():
        fail(
            scenario,
            "finite numbers",
            f"{int((~torch.isfinite(got)).sum())} NaN or inf values",
            context_hint
            + "NaN comes from exp of a huge score (subtract the running max before exp), from 0 / 0 when a "
            "row saw no valid key, from -inf - -inf when a whole block was masked before any valid key, or "
            "from a value loaded without a mask where the memory holds NaN (0 x NaN = NaN).",
        )
    fail(
        scenario,
        "the reference output (gather the history, then plain attention)",
        _worst(got, expected, axes),
        context_hint + fallback_hint,
    )


def _judge_output(scenario: str, got: torch.Tensor, who: str) -> None:
    """Every output value written (none still ``UNWRITTEN``)."""
    never_written = int((got == UNWRITTEN).sum())
    if never_written:
        fail(
            scenario,
            f"every one of the {got.numel()} output values written by {who}",
            f"{never_written} values never written (they still hold {UNWRITTEN:g}, what the check filled the "
            "output with)",
            "every (sequence or new token, query head) must have a program that stores its whole row of "
            "head_dim values: compare the grid with the output's shape, and the store's mask with the rows "
            "that exist.",
        )


def _negative_hint(case) -> str:
    if not case.negative_scores:
        return ""
    return (
        f"Every score here is far below zero (about {NEGATIVE_SCORE:g}), where exp(score) is 0 in float32. "
        "The running max must start at -inf: started at 0, exp(score - m) is 0 for every key, l stays 0 "
        "and the output is 0 / 0. "
    )


def _stale_hint(case) -> str:
    if case.stale != "nan":
        return ""
    return (
        "Here the slots past the end of the sequence hold NaN: any value loaded from them without a mask "
        "poisons the sums, even with a weight of exactly 0 (0 x NaN = NaN). "
    )


def _dtype_hint(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return ""
    return (
        f" In {_dtype_word(dtype)}: convert what you load with .to(tl.float32), keep m, l and acc in float32, "
        "and convert only the stored output to the output's dtype."
    )


# --------------------------------------------------------------------------- the kernels

_PAGED_ADDRESSES = (
    "In a paged kernel a key's address is block * s_pool_block + kv_head * s_pool_head + slot * s_pool_slot + "
    "dim, with the block read from this sequence's row of the table."
)

_DECODE_HINT = (
    "Compare your kernel with the reference on this scenario alone. Check, in order: the physical block "
    "from the table, the key/value addresses (block * s_pool_block + kv_head * s_pool_head + slot * "
    "s_pool_slot + dim), the mask of the last block (for K and V), the scale, and the online-softmax "
    "update (m, l, acc)."
)

_PREFILL_HINT = (
    "Compare your kernel with the reference on this scenario alone. Check, in order: the query positions "
    "(start + row), the loop over blocks from logical block 0 up to the block of the tile's last position, "
    "the causal mask (key_position <= query_position), the rows past the last new token (masked on load "
    "and store), the scale, and the online-softmax update."
)


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
class _AttentionKernel:
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


_DECODE = _AttentionKernel(
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
    _DECODE_HINT,
    _DECODE_AXES,
)
_PREFILL = _AttentionKernel(
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
    _PREFILL_HINT,
    _PREFILL_AXES,
)

# Compiled as bfloat16, the GPU's serving dtype (the interpreter has no bfloat16).
_GPU_DTYPE = "bfloat16"


def _check_attention_kernel(learner_kernel: object, spec: _AttentionKernel, seed: int) -> None:
    """Launch the learner's kernel on every scenario of ``spec``, compare, name the bug; then compile it."""
    with KernelUnderTest(learner_kernel, spec.name, spec.parameters) as kernel:
        for case, dtype in _plan(spec.cases):
            inputs = spec.inputs(case, dtype, seed)
            scenario = f"{case.scenario} [{_dtype_word(dtype)}]"
            out = torch.full_like(inputs.q, UNWRITTEN)
            grid, args = spec.grid(inputs), spec.args(inputs, out)
            kernel.launch(
                scenario,
                grid,
                args,
                writable={next(index for index, arg in enumerate(args) if arg is out)},
                iterations=math.prod(grid) * max(1, spec.table_width(inputs)),
                stray_hint=_PAGED_ADDRESSES,
            )
            got = out.double().cpu()
            expected = spec.reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
            if _close(got, expected, dtype):
                continue
            _judge_output(scenario, got, "your kernel")
            _explain_mismatch(
                scenario,
                got,
                expected,
                dtype,
                spec.bugs,
                lambda bug, inputs=inputs: spec.replay(bug, inputs),
                spec.hint + _dtype_hint(dtype),
                spec.axes,
                _negative_hint(case) + _stale_hint(case),
            )
        launches = []
        for case in spec.gpu_cases:
            inputs = spec.inputs(case, torch.float16)
            described = [tensor_argument(a) if isinstance(a, torch.Tensor) else a for a in spec.args(inputs, inputs.q)]
            launches.append(kernel.gpu_launch([_GPU_DTYPE if a == "float16" else a for a in described]))
        kernel.compile_for_gpu(launches)


@check(notebook="07_paged_decode_kernel", builds="paged_decode_kernel", kernel=True)
def check_paged_decode_kernel(paged_decode_kernel: object, seed: int = 0) -> None:
    """paged_decode_kernel, launched by the check with grid (B, heads), against the reference."""
    _check_attention_kernel(paged_decode_kernel, _DECODE, seed)


@check(notebook="09_paged_prefill_kernel", builds="paged_prefill_kernel", kernel=True)
def check_paged_prefill_kernel(paged_prefill_kernel: object, seed: int = 0) -> None:
    """paged_prefill_kernel, launched by the check with TILE = 16 and grid (cdiv(T, 16), heads)."""
    _check_attention_kernel(paged_prefill_kernel, _PREFILL, seed)


# --------------------------------------------------------------------------- the launchers


def _learner_process() -> contextlib.AbstractContextManager:
    """On a compiled GPU, one spawned child for the whole check (a fault or a hang becomes a message
    and the notebook's CUDA context stays clean); elsewhere nothing to open."""
    if DEVICE.type == "cuda" and not INFO.triton_interpreted and not spawned.active():
        return spawned.session()
    return contextlib.nullcontext()


def _time_limit(launcher: Callable) -> float:
    return GPU_TIME_LIMIT_S if spawned.active() and not is_remote(launcher) else TIME_LIMIT_S


def _call(launcher: Callable, args: tuple) -> Outcome:
    """The launcher's call in a child process: spawned on a GPU (inside ``_learner_process``),
    forked under the interpreter, or in the learner's own process when grading."""
    if spawned.active() and not is_remote(launcher):
        return spawned.call(launcher, args, _time_limit(launcher))
    return run_apart(launcher, args, _time_limit(launcher))


def _last_lines(text: str, count: int = 15) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-count:])


def _launcher_failed(outcome: Outcome, scenario: str, expected: str, got: str, hint: str) -> None:
    """Fail with the four parts, then what the learner's launcher said (its traceback, what it printed)
    after them, as theirs: kept apart in the failure's ``learner`` part, never in the check's hint."""
    theirs = ""
    if outcome.kind == "raised":
        theirs += f"\n  where (last lines of the traceback):\n{_last_lines(outcome.error_traceback)}"
    if outcome.printed.strip():
        theirs += f"\n  what your code printed (last lines):\n{_last_lines(outcome.printed)}"
    learner = LearnerWords(
        error_type=outcome.error_type if outcome.kind == "raised" else "",
        message=outcome.error_message if outcome.kind == "raised" else "",
        printed=outcome.printed,
    )
    finding = Finding(scenario, expected, got, hint, learner=learner)
    raise CheckFailed(four_parts(scenario, expected, got, hint) + theirs, finding=finding)


def _launcher_result(what: str, launcher: Callable, args: tuple, scenario: str) -> torch.Tensor:
    """The launcher's output on ``args`` (checked to be a tensor like q); every failure a message."""
    count_call(scenario)
    outcome = _call(launcher, args)
    if outcome.not_implemented:
        raise NotImplementedYet(
            f"not implemented yet: {what} raised NotImplementedError. Replace `raise NotImplementedError()` "
            "in its cell (and in the kernel's cell) with your code, run those cells, then this check."
        )
    if outcome.kind == "crashed":
        _launcher_failed(
            outcome,
            scenario,
            f"{what} to return",
            f"the process died ({outcome.signal_name})",
            "the check ran your launcher in a separate process, so this notebook is still alive; if your kernel "
            "passes its own check, look at the arguments the launcher passes it (grid, strides, sizes)",
        )
    if outcome.kind == "timed out":
        _launcher_failed(
            outcome,
            scenario,
            f"{what} to return within {_time_limit(launcher):g} s (this scenario needs well under a second)",
            "it did not",
            "look for a loop that never ends, in the launcher or in the kernel",
        )
    if outcome.kind == "raised":
        _launcher_failed(
            outcome,
            scenario,
            f"{what} to return",
            f"{what} raised {outcome.error_type}: {outcome.error_message}",
            "the last lines of the traceback below show where",
        )
    result, expected_shape, dtype = outcome.value, tuple(args[0].shape), args[0].dtype
    if type(result) is not torch.Tensor:
        fail(
            scenario,
            f"a tensor of shape {expected_shape}",
            type(result).__name__,
            f"{what} must return the output tensor it filled.",
        )
    if tuple(result.shape) != expected_shape or result.dtype != dtype:
        fail(
            scenario,
            f"a tensor of shape {expected_shape} and dtype {dtype} (like q)",
            f"shape {tuple(result.shape)}, dtype {result.dtype}",
            "allocate the output with torch.empty_like(q) and return it.",
        )
    return result.double().cpu()


def _expect_rejected(what: str, launcher: Callable, args: tuple, scenario: str, argument: str) -> None:
    """The launcher must refuse bad input with an error that names ``argument``."""
    count_call(scenario)
    outcome = _call(launcher, args)
    if outcome.kind == "raised" and argument in outcome.error_message:
        return
    got = {
        "returned": "it returned normally",
        "crashed": "the process died",
        "timed out": "it did not finish",
        "raised": f"{outcome.error_type}: {outcome.error_message}",
    }[outcome.kind]
    fail(
        scenario,
        f"an error whose message names `{argument}`",
        got,
        f"keep the validation call at the top of {what} (it raises before the kernel reads a bad address).",
    )


_LAUNCHER_HINT = (
    "Your kernel is judged by its own check; this one calls your launcher. If the kernel's check passes, "
    "look at what the launcher hands it: the grid (one program per (sequence, query head)), the group "
    "(q_heads // kv_heads), the scale (1 / sqrt(head_dim)), the strides (k_pool.stride(0), (1), (2)) and "
    "the constexprs D and BLOCK."
)


def _check_launcher_cases(what: str, launcher: Callable, cases: tuple, seed: int, split: bool) -> None:
    for case in cases:
        dtype = _dtypes_to_check()[0]
        inputs = decode_inputs(case, dtype, seed)
        scenario = f"{case.scenario} [{_dtype_word(dtype)}]"
        args = inputs.args() + ((case.splits,) if split else ())
        got = _launcher_result(what, launcher, args, scenario)
        expected = paged_decode_reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
        if not _close(got, expected, dtype):
            _explain_mismatch(
                scenario,
                got,
                expected,
                dtype,
                DECODE_BUGS,
                lambda bug, inputs=inputs: decode_as(bug, inputs),
                _LAUNCHER_HINT if not split else "",
                _DECODE_AXES,
                (_split_hint(case) + " " if split else "") + _negative_hint(case),
            )


def _rejects_bad_decode_inputs(what: str, launcher: Callable, extra: tuple) -> None:
    inputs = decode_inputs(DECODE_CASES[0], _dtypes_to_check()[0])
    q, k_pool, v_pool, tables, lengths, block_size = inputs.args()
    _expect_rejected(
        what,
        launcher,
        (q, k_pool, v_pool, tables, torch.zeros_like(lengths), block_size, *extra),
        "a sequence of length 0 (lengths = [0])",
        "lengths",
    )
    outside = tables.clone()
    outside[0, 0] = k_pool.shape[0]  # one block past the pool: caught by validation, harmless if not
    _expect_rejected(
        what,
        launcher,
        (q, k_pool, v_pool, outside, lengths, block_size, *extra),
        "a block table entry past the end of the pool",
        "block_tables",
    )


@check(notebook="07_paged_decode_kernel", builds="paged_decode_attention")
def check_paged_decode(paged_decode_attention: Callable, seed: int = 0) -> None:
    """paged_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size): validates, launches, returns."""
    what = "paged_decode_attention"
    with _learner_process():
        _check_launcher_cases(what, paged_decode_attention, DECODE_CASES[1:3], seed, split=False)
        _rejects_bad_decode_inputs(what, paged_decode_attention, ())


def _split_hint(case: DecodeCase) -> str:
    if case.splits == 1:
        return "With one split the answer is plain decode attention, so the bug is in the per-split kernel."
    merge = (
        "Merging splits: with per-split (m_s, l_s, acc_s) and m = max over s of m_s, "
        "out = sum(exp(m_s - m) acc_s) / sum(exp(m_s - m) l_s). Averaging per-split outputs is not the same."
    )
    # Fewer blocks than splits: however the blocks are shared out, some splits get none.
    if any(-(-length // case.block_size) < case.splits for length in case.lengths):
        return (
            f"{merge} Here some splits own no block: their m is -inf and l is 0, so they must get weight "
            "exp(m_s - m) = 0 in the merge (never compute exp(-inf - -inf))."
        )
    return merge


@check(notebook="07_paged_decode_kernel", builds="split_k_decode_attention", graded=False)
def check_split_k_decode(split_k_decode_attention: Callable, seed: int = 0) -> None:
    """split_k_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size, num_splits)."""
    what = "split_k_decode_attention"
    with _learner_process():
        _check_launcher_cases(what, split_k_decode_attention, SPLIT_K_CASES, seed, split=True)
        _rejects_bad_decode_inputs(what, split_k_decode_attention, (2,))


_PREFILL_LAUNCHER_HINT = (
    "Your kernel is judged by its own check; this one calls your launcher. If the kernel's check passes, "
    "look at what the launcher hands it: the grid (cdiv(new_tokens, TILE) tiles x query heads), start and "
    "new_tokens, the group, the scale, the strides and the constexprs D, BLOCK and TILE."
)


@check(notebook="09_paged_prefill_kernel", builds="paged_prefill_attention")
def check_paged_prefill(paged_prefill_attention: Callable, seed: int = 0) -> None:
    """paged_prefill_attention(q, k_pool, v_pool, block_table, start, block_size): validates, launches, returns."""
    what = "paged_prefill_attention"
    dtype = _dtypes_to_check()[0]
    with _learner_process():
        for case in (PREFILL_CASES[2], PREFILL_CASES[3]):
            inputs = prefill_inputs(case, dtype, seed)
            scenario = f"{case.scenario} [{_dtype_word(dtype)}]"
            got = _launcher_result(what, paged_prefill_attention, inputs.args(), scenario)
            expected = paged_prefill_reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
            if not _close(got, expected, dtype):
                _explain_mismatch(
                    scenario,
                    got,
                    expected,
                    dtype,
                    PREFILL_BUGS,
                    lambda bug, inputs=inputs: prefill_as(bug, inputs),
                    _PREFILL_LAUNCHER_HINT,
                    _PREFILL_AXES,
                )
        q, k_pool, v_pool, table, start, block_size = prefill_inputs(PREFILL_CASES[1], dtype).args()
        _expect_rejected(
            what,
            paged_prefill_attention,
            (q, k_pool, v_pool, table[:2].clone(), start, block_size),
            "a block table too short for start + new tokens (blocks not reserved)",
            "block_table",
        )
