"""Checks for the paged attention kernels of notebooks 07 (decode, split-K) and 09 (prefill).

Each notebook's kernel and its launcher are judged apart:

* **the kernel** (``check_paged_decode_kernel``, ``check_paged_prefill_kernel``): launched by the
  check itself, in a process of its own, on its own tensors, compared with the float64 reference,
  then compiled for CUDA GPUs (``attention_kernels``). Nothing the launcher does counts here.
* **the launcher** (``check_paged_decode``, ``check_paged_prefill``, for fewer points): it is
  called like any Python function: it must refuse bad input naming the argument, and return the
  reference's answer on the scenarios it accepts.

When a kernel's answer is wrong, the check recomputes the scenario as a few classic bugs would
(``bugs``) and, if the output matches one of them, names it (``attention_diagnosis``, where the
tolerances live: ``TOLERANCES``). This module holds the five ``@check`` entries and the driver that
calls a launcher (in a child process, with ``TIME_LIMIT_S``); the kernels' driver is
``attention_kernels``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from ...device import DEVICE, INFO
from ...reference import paged_decode_reference, paged_prefill_reference
from ..reading.learner_code import Outcome, is_remote, run_apart, spawned
from ..registry import check
from ..speaking.failure import CheckFailed, Finding, LearnerWords, NotImplementedYet, fail, four_parts
from ..speaking.tally import count_call
from .attention_diagnosis import (
    DECODE_AXES,
    LAUNCHER_HINT,
    PREFILL_AXES,
    PREFILL_LAUNCHER_HINT,
    TOLERANCES,
    close,
    dtype_word,
    explain_mismatch,
    negative_hint,
    split_hint,
)
from .attention_inputs import decode_inputs, prefill_inputs
from .attention_kernels import (
    DECODE,
    DECODE_PARAMETERS,
    PREFILL,
    PREFILL_PARAMETERS,
    PREFILL_TILE,
    check_attention_kernel,
    dtypes_to_check,
)
from .bugs import DECODE_BUGS, PREFILL_BUGS, decode_as, prefill_as
from .scenarios import DECODE_CASES, PREFILL_CASES, SPLIT_K_CASES

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

# Seconds a launcher's call may take before it is declared stuck: far above what any scenario
# needs (well under a second), so a loaded machine does not reach it. On a GPU the first call
# of each shape also compiles the kernel.
TIME_LIMIT_S = 120.0
GPU_TIME_LIMIT_S = 300.0


# --------------------------------------------------------------------------- the kernels


@check(notebook="07_paged_decode_kernel", builds="paged_decode_kernel", kernel=True)
def check_paged_decode_kernel(paged_decode_kernel: object, seed: int = 0) -> None:
    """paged_decode_kernel, launched by the check with grid (B, heads), against the reference."""
    check_attention_kernel(paged_decode_kernel, spec=DECODE, seed=seed)


@check(notebook="09_paged_prefill_kernel", builds="paged_prefill_kernel", kernel=True)
def check_paged_prefill_kernel(paged_prefill_kernel: object, seed: int = 0) -> None:
    """paged_prefill_kernel, launched by the check with TILE = 16 and grid (cdiv(T, 16), heads)."""
    check_attention_kernel(paged_prefill_kernel, spec=PREFILL, seed=seed)


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


def _check_launcher_cases(what: str, launcher: Callable, cases: tuple, seed: int, split: bool) -> None:
    for case in cases:
        dtype = dtypes_to_check()[0]
        inputs = decode_inputs(case, dtype, seed)
        scenario = f"{case.scenario} [{dtype_word(dtype)}]"
        args = inputs.args() + ((case.splits,) if split else ())
        got = _launcher_result(what, launcher, args, scenario)
        expected = paged_decode_reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
        if not close(got, expected, dtype):
            explain_mismatch(
                scenario,
                got,
                expected,
                dtype,
                DECODE_BUGS,
                lambda bug, inputs=inputs: decode_as(bug, inputs),
                LAUNCHER_HINT if not split else "",
                DECODE_AXES,
                (split_hint(case) + " " if split else "") + negative_hint(case),
            )


def _rejects_bad_decode_inputs(what: str, launcher: Callable, extra: tuple) -> None:
    inputs = decode_inputs(DECODE_CASES[0], dtypes_to_check()[0])
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


@check(notebook="07_paged_decode_kernel", builds="split_k_decode_attention", graded=False)
def check_split_k_decode(split_k_decode_attention: Callable, seed: int = 0) -> None:
    """split_k_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size, num_splits)."""
    what = "split_k_decode_attention"
    with _learner_process():
        _check_launcher_cases(what, split_k_decode_attention, SPLIT_K_CASES, seed, split=True)
        _rejects_bad_decode_inputs(what, split_k_decode_attention, (2,))


@check(notebook="09_paged_prefill_kernel", builds="paged_prefill_attention")
def check_paged_prefill(paged_prefill_attention: Callable, seed: int = 0) -> None:
    """paged_prefill_attention(q, k_pool, v_pool, block_table, start, block_size): validates, launches, returns."""
    what = "paged_prefill_attention"
    dtype = dtypes_to_check()[0]
    with _learner_process():
        for case in (PREFILL_CASES[2], PREFILL_CASES[3]):
            inputs = prefill_inputs(case, dtype, seed)
            scenario = f"{case.scenario} [{dtype_word(dtype)}]"
            got = _launcher_result(what, paged_prefill_attention, inputs.args(), scenario)
            expected = paged_prefill_reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
            if not close(got, expected, dtype):
                explain_mismatch(
                    scenario,
                    got,
                    expected,
                    dtype,
                    PREFILL_BUGS,
                    lambda bug, inputs=inputs: prefill_as(bug, inputs),
                    PREFILL_LAUNCHER_HINT,
                    PREFILL_AXES,
                )
        q, k_pool, v_pool, table, start, block_size = prefill_inputs(PREFILL_CASES[1], dtype).args()
        _expect_rejected(
            what,
            paged_prefill_attention,
            (q, k_pool, v_pool, table[:2].clone(), start, block_size),
            "a block table too short for start + new tokens (blocks not reserved)",
            "block_table",
        )
