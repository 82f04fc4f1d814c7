"""Checks for the paged attention kernels: notebooks 07 (decode, split-K) and 09 (prefill).

Each check builds small seeded scenarios (scrambled block tables, padded rows, lengths of 1,
on and one past a block boundary, grouped-query attention with groups of 1, 2 and 4+),
runs the learner's launcher, and compares with the gather-then-attend reference of
``paged_helpers.reference`` computed in float64. Tolerances live in ``TOLERANCES`` only.

When an answer is wrong, the check recomputes the scenario as a few classic bugs would
(logical block used as physical, no length mask, the query head used as the KV head, no
1/sqrt(head_dim), an online softmax that never rescales, a causal mask off by one) and, if
the learner's output matches one of them, names that bug.

Once every scenario passes, the kernels are also compiled for CUDA GPUs (sm_80, sm_90) at the
shapes the GPU path runs (``gpu_compile``): what a GPU's compiler rejects fails the check with
the reason in the learner's terms, and register spills are printed as advice.

With Triton's interpreter the learner's launcher runs in a forked child (see ``isolated``):
a segfault or a hang becomes a message, and the notebook's kernel survives. Sizes keep every
scenario near 100 program-iterations or fewer (about 2.8 ms each in the interpreter).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch

from ...device import DEVICE, INFO
from ...learner_view.calls import compile_for_gpu, run_watched
from ...learner_view.remote import is_remote
from ...reference import paged_decode_reference, paged_prefill_reference
from ...running import spawned
from ...running.gpu_compile import TARGETS, CompileResult, Launch, explain_failure
from ...running.guard_bands import SENTINEL
from ...running.isolated import Outcome
from ...running.kernel_source import KernelSourceRefused
from ..reading.strict import strict_allclose
from ..speaking.failure import CheckFailed, NotImplementedYet, fail, refuse
from ..speaking.report import check
from .bugs import DECODE_BUGS, PREFILL_BUGS, Bug, decode_as, prefill_as
from .scenarios import (
    DECODE_CASES,
    GPU_COMPILE_DECODE_CASES,
    GPU_COMPILE_PREFILL_CASES,
    GPU_COMPILE_SPLIT_K_CASES,
    NEGATIVE_SCORE,
    PREFILL_CASES,
    SPLIT_K_CASES,
    DecodeCase,
    decode_inputs,
    prefill_inputs,
)

__all__ = ["check_paged_decode", "check_split_k_decode", "check_paged_prefill", "TOLERANCES"]

# (atol, rtol) of the learner's output against the float64 reference, by input dtype.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (4e-2, 4e-2),
}

# Seconds one scenario may take before the learner's kernel is declared stuck. On a GPU the
# first call of each shape also compiles the kernel, hence the larger limit there.
TIME_LIMIT_S = 15.0
GPU_TIME_LIMIT_S = 60.0


def _dtypes_to_check() -> tuple[torch.dtype, ...]:
    """float32 on the CPU interpreter (it has no bfloat16); the half types a GPU serves in."""
    return (torch.float16, torch.bfloat16) if DEVICE.type == "cuda" else (torch.float32,)


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


def _last_lines(text: str, count: int = 15) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-count:])


def _crash_report(printed: str) -> str:
    """The lines of a segfault dump that point into the learner's code (not Triton's, torch's or ours)."""
    machinery = ("site-packages", "paged_helpers", "Extension modules", "Current thread", "<frozen ")
    kept = [line for line in printed.splitlines() if line.strip() and not any(m in line for m in machinery)]
    return "\n".join("    " + line.strip() for line in kept[:12])


def _band_message(scenario: str, what: str, written: dict) -> None:
    which = "the output tensor" if written["is_result"] else f"a {written['dtype']} tensor your launcher allocated"
    sides = " and ".join(
        f"{count} values {where}"
        for count, where in ((written["before"], "before its start"), (written["after"], "past its end"))
        if count
    )
    fail(
        scenario,
        f"stores only inside {which} {list(written['shape'])}",
        f"your kernel wrote {sides}",
        "every store must be masked to the elements that exist: in a tile, rows past the last new token "
        "(row < new_tokens) or positions past the length are not part of the tensor. On a GPU such a store "
        "silently overwrites whatever memory follows the tensor; here the check surrounded it with guard "
        "bands, and they changed.",
    )


def _isolated(launcher: Callable, args: tuple, watched: bool) -> Outcome:
    """The launcher's call in a child process: spawned on a GPU (inside a check's ``spawned.session``),
    forked under the interpreter (``isolated``)."""
    if spawned.active() and not is_remote(launcher):  # a remote launcher runs where its process runs it
        wrapper = "paged_helpers.running.launch_watch:watched" if watched else ""
        return spawned.call(launcher, args, GPU_TIME_LIMIT_S, wrapper)
    return run_watched("kernel" if watched else "plain", launcher, args, TIME_LIMIT_S)


def _learner_process() -> contextlib.AbstractContextManager:
    """On a compiled GPU, one spawned child for the whole check (a fault or a hang becomes a message
    and the notebook's CUDA context stays clean); elsewhere nothing to open."""
    if DEVICE.type == "cuda" and not INFO.triton_interpreted and not spawned.active():
        return spawned.session()
    return contextlib.nullcontext()


def _run_learner(
    what: str,
    launcher: Callable,
    args: tuple,
    scenario: str,
    expected: torch.Tensor | None = None,
    from_kernel: bool = True,
) -> torch.Tensor:
    """Run the launcher in a child process; turn every failure into a message.

    ``from_kernel``: the output must be exactly what a kernel wrote (not so for split-k, whose
    launcher merges the splits' partial results in torch).
    """
    outcome: Outcome = _isolated(launcher, args, watched=True)
    printed = (
        f"\n  what your code printed (last lines):\n{_last_lines(outcome.printed)}" if outcome.printed.strip() else ""
    )
    if outcome.kind == "crashed":
        where = _crash_report(outcome.printed)
        printed = f"\n  where it crashed (innermost first):\n{where}" if where else ""
        raise CheckFailed(
            f"{scenario}: your kernel crashed the process ({outcome.signal_name}).\n"
            "  hint: look for a load without a mask, or an address built from a wrong block number or "
            "stride: in Triton's interpreter a read outside a tensor can kill Python. The check ran your "
            "kernel in a separate process, so this notebook is still alive." + printed
        )
    if outcome.kind == "timed out":
        raise CheckFailed(
            f"{scenario}: your kernel did not finish within {TIME_LIMIT_S:g} s (this scenario needs well "
            "under a second).\n  hint: look for a loop that never ends, or a loop over far more blocks "
            "than the sequence has (its bound should be the number of blocks holding its tokens)." + printed
        )
    if outcome.not_implemented:
        raise NotImplementedYet(
            f"not implemented yet: {what} raised NotImplementedError. Replace `raise NotImplementedError()` "
            "in its cell (and in the kernel's cell) with your code, run those cells, then this check."
        )
    if outcome.kind == "raised":
        raise CheckFailed(
            f"{scenario}: {what} raised {outcome.error_type}: {outcome.error_message}\n"
            f"  where (last lines of the traceback):\n{_last_lines(outcome.error_traceback)}" + printed
        )
    result, launches, reference_calls, bands_written, provenance = outcome.value
    if reference_calls:
        fail(
            scenario,
            "an answer computed by your Triton kernel",
            "an answer from the gather-then-attend reference",
            f"{what} called the reference (paged_helpers.reference). It is there to compare against; the "
            "point of the exercise is a kernel that reads the pool through the table without that copy.",
        )
    if not launches:
        fail(
            scenario,
            "at least one Triton kernel launch (kernel[grid](...))",
            "no launch",
            f"{what} returned without launching a Triton kernel: compute the answer in your kernel.",
        )
    expected_shape = tuple(args[0].shape)
    if not isinstance(result, torch.Tensor):
        fail(
            scenario,
            f"a tensor of shape {expected_shape}",
            f"{type(result).__name__}",
            f"{what} must return the output tensor it filled.",
        )
    if tuple(result.shape) != expected_shape or result.dtype != args[0].dtype:
        fail(
            scenario,
            f"a tensor of shape {expected_shape} and dtype {args[0].dtype} (like q)",
            f"shape {tuple(result.shape)}, dtype {result.dtype}",
            "allocate the output with torch.empty_like(q) and return it.",
        )
    if type(result) is not torch.Tensor:
        refuse(
            scenario,
            "a torch.Tensor",
            f"a {type(result).__name__} (a tensor subclass)",
            f"{what} must return the plain output tensor it filled.",
        )
    if provenance["not_triton"]:
        refuse(
            scenario,
            "launches of your @triton.jit kernel",
            "a launch of an object that is not Triton's kernel (its class or its run method is not Triton's)",
            f"{what} must launch the kernel made by @triton.jit, unchanged: the answer must come from it.",
        )
    if from_kernel and not provenance["written"]:
        refuse(
            scenario,
            "an output written by your Triton kernel",
            f"the tensor {what} returned was not written by a kernel: {provenance['why']}",
            "the answer must come from your kernel: the launcher allocates the output, launches the kernel "
            "on it and returns it, without computing values itself (no torch, numpy or Python arithmetic).",
        )
    if bands_written:
        _band_message(scenario, what, bands_written[0])
    never_written = int((result == SENTINEL).sum())
    if never_written:
        fail(
            scenario,
            f"every one of the {result.numel()} output values written by your kernel",
            f"{never_written} values never written (they still hold {SENTINEL:g}, what the check filled the "
            "output with)",
            "every (sequence or new token, query head) must have a program that stores its whole row of "
            "head_dim values: compare your grid with the output's shape, and the store's mask with the rows "
            "that exist.",
        )
    if from_kernel and expected is not None and provenance["before"] is not None:
        _refuse_answer_before_launch(scenario, what, provenance["before"], expected, args[0].dtype)
    return result.double().cpu()


def _refuse_answer_before_launch(
    scenario: str, what: str, before: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype
) -> None:
    """The output held (part of) the answer before the kernel ran: computed outside the kernel."""
    atol, rtol = TOLERANCES[dtype]
    with torch._C.DisableTorchFunction():
        before = before.double().cpu()
        untouched = (before == 0) | (before == SENTINEL) | torch.isnan(before)
        answer = torch.isclose(before, expected, atol=atol, rtol=rtol) & ~untouched
        count = int(answer.sum())
    if count:
        refuse(
            scenario,
            "an output written by your Triton kernel",
            f"{count} of the {before.numel()} output values already held the answer before your kernel was launched",
            f"{what} computed the answer outside the kernel (torch, numpy or Python arithmetic) and launched a "
            "kernel that did not compute it: the values must come from your kernel.",
        )


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
            "row saw no valid key, or from -inf - -inf when a whole block was masked before any valid key.",
        )
    fail(
        scenario,
        "the reference output (gather the history, then plain attention)",
        _worst(got, expected, axes),
        context_hint + fallback_hint,
    )


def _expect_rejected(what: str, launcher: Callable, args: tuple, scenario: str, argument: str) -> None:
    """The launcher must refuse bad input with an error that names ``argument``."""
    outcome = _isolated(launcher, args, watched=False)
    if outcome.kind == "raised" and argument in outcome.error_message:
        return
    got = {
        "returned": "it returned normally",
        "crashed": "your kernel crashed the process",
        "timed out": "it did not finish",
        "raised": f"{outcome.error_type}: {outcome.error_message}",
    }[outcome.kind]
    fail(
        scenario,
        f"an error whose message names `{argument}`",
        got,
        f"keep the validation call at the top of {what} (it raises before the kernel reads a bad address).",
    )


# --------------------------------------------------------------------------- compiling for GPUs

# Float16 on the way in (the interpreter has no bfloat16); compiled as bfloat16, the GPU's default.
_CAPTURE_DTYPE, _GPU_DTYPE = torch.float16, "bfloat16"


def _capture(what: str, launcher: Callable, args: tuple, scenario: str) -> list[Launch] | None:
    """The launches ``launcher`` makes on ``args`` (nothing runs); None when they can't be read."""
    outcome = run_watched("capture", launcher, args, TIME_LIMIT_S)
    if outcome.kind == "returned":
        return outcome.value
    if outcome.kind == "raised" and outcome.error_type in ("OSError", "TypeError"):
        # No source to read (a kernel built by exec) or an argument a compiler can't take: the
        # GPU compile is advice here, not a verdict.
        print(f"note: {what} could not be compiled for a GPU here ({outcome.error_message})")
        return None
    raise CheckFailed(
        f"{scenario}: {what} failed when called at a GPU shape ({outcome.kind}: {outcome.error_type} "
        f"{outcome.error_message}).\n  hint: the launcher must work for any block size and head_dim that "
        "are powers of two, not only the small ones of the CPU scenarios."
    )


def _spill_advice(result: CompileResult) -> str:
    shape = ", ".join(f"{k}={v}" for k, v in result.launch.constexpr_values().items())
    return (
        f"advice: {result.launch.kernel} ({shape}) on sm_{result.target} uses {result.registers} registers "
        f"per thread and spills {result.spill_bytes} bytes to local memory: on a GPU it will be slower "
        "than it could be. Pass num_warps=8 in the launch for large tiles (more threads share the tile), "
        "or hold fewer values per program."
    )


def _check_gpu_compile(what: str, launcher: Callable, cases: tuple, make_args: Callable) -> None:
    """Compile the learner's kernels for every target at ``cases`` (see the module docstring)."""
    launches: list[Launch] = []
    for case in cases:
        captured = _capture(what, launcher, make_args(case), f"{case.scenario} [compiled for a GPU]")
        if captured is None:
            return
        launches += [launch.with_dtype(str(_CAPTURE_DTYPE).removeprefix("torch."), _GPU_DTYPE) for launch in captured]
    try:
        results = compile_for_gpu(launcher, launches, TARGETS)
    except KernelSourceRefused as error:  # compiling it would run what a kernel's module may not hold
        fail(
            f"{what}, compiled for a GPU (sm_{TARGETS[-1]}, {_GPU_DTYPE})",
            "kernels whose module holds only what a Triton kernel needs, so that compiling them runs nothing else",
            f"a kernel source the compile refuses:\n{error}",
            "keep a kernel's cell to imports of triton, triton.language and math, constants and "
            "@triton.jit functions with literal defaults; do the rest in the launcher",
        )
    except RuntimeError as error:  # the compiler's toolchain, not the learner's kernel
        print(f"note: the GPU compile could not run here: {str(error).splitlines()[0]}")
        return
    for result in results:
        if not result.ok:
            fail(
                f"{what}, compiled for a GPU (sm_{result.target}, {_GPU_DTYPE})",
                "a kernel that also compiles for CUDA GPUs (the course runs unchanged on one)",
                "a compile error",
                explain_failure(result),
            )
    for result in results:
        if result.spill_bytes:
            print(_spill_advice(result))


# --------------------------------------------------------------------------- the checks

_DECODE_HINT = (
    "Compare your kernel with the reference on this scenario alone. Check, in order: the physical block "
    "from the table, the key/value addresses (block * stride0 + kv_head * stride1 + slot * stride2 + dim), "
    "the mask of the last block, the scale, and the online-softmax update (m, l, acc)."
)


def _plan(cases: tuple) -> list[tuple]:
    """(case, dtype) pairs to run: every case in each dtype of the device; on the CPU the second
    case once more in float16 (the interpreter runs it, and half-precision bugs show there)."""
    plan = [(case, dtype) for dtype in _dtypes_to_check() for case in cases]
    if DEVICE.type == "cpu" and len(cases) > 1:
        plan.append((cases[1], torch.float16))
    return plan


def _dtype_hint(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return ""
    return (
        f" In {str(dtype).removeprefix('torch.')}: convert what you load with .to(tl.float32), keep m, l and "
        "acc in float32, and convert only the stored output to the output's dtype."
    )


def _check_decode_cases(what: str, launcher: Callable, cases: tuple[DecodeCase, ...], seed: int, split: bool) -> None:
    for case, dtype in _plan(cases):
        inputs = decode_inputs(case, dtype, seed)
        args = inputs.args() + ((case.splits,) if split else ())
        scenario = f"{case.scenario} [{str(dtype).removeprefix('torch.')}]"
        expected = paged_decode_reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
        got = _run_learner(what, launcher, args, scenario, expected, from_kernel=not split)
        if _close(got, expected, dtype):
            continue
        context = (_split_hint(case) + " " if split else "") + _negative_hint(case)
        _explain_mismatch(
            scenario,
            got,
            expected,
            dtype,
            DECODE_BUGS,
            lambda bug, inputs=inputs: decode_as(bug, inputs),
            _DECODE_HINT + _dtype_hint(dtype),
            _DECODE_AXES,
            context,
        )


def _negative_hint(case) -> str:
    if not case.negative_scores:
        return ""
    return (
        f"Every score here is far below zero (about {NEGATIVE_SCORE:g}), where exp(score) is 0 in float32. "
        "The running max must start at -inf: started at 0, exp(score - m) is 0 for every key, l stays 0 "
        "and the output is 0 / 0. "
    )


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


def _rejects_baddecode_inputs(what: str, launcher: Callable, extra: tuple) -> None:
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
    """paged_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size) against the reference."""
    what = "paged_decode_attention"
    with _learner_process():
        _check_decode_cases(what, paged_decode_attention, DECODE_CASES, seed, split=False)
        _rejects_baddecode_inputs(what, paged_decode_attention, ())
    _check_gpu_compile(
        what,
        paged_decode_attention,
        GPU_COMPILE_DECODE_CASES,
        lambda case: decode_inputs(case, _CAPTURE_DTYPE).args(),
    )


@check(notebook="07_paged_decode_kernel", builds="split_k_decode_attention", graded=False)
def check_split_k_decode(split_k_decode_attention: Callable, seed: int = 0) -> None:
    """split_k_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size, num_splits)."""
    what = "split_k_decode_attention"
    with _learner_process():
        _check_decode_cases(what, split_k_decode_attention, SPLIT_K_CASES, seed, split=True)
        _rejects_baddecode_inputs(what, split_k_decode_attention, (2,))
    _check_gpu_compile(
        what,
        split_k_decode_attention,
        GPU_COMPILE_SPLIT_K_CASES,
        lambda case: decode_inputs(case, _CAPTURE_DTYPE).args() + (case.splits,),
    )


_PREFILL_HINT = (
    "Compare your kernel with the reference on this scenario alone. Check, in order: the query positions "
    "(start + row), the loop over blocks from logical block 0 up to the block of the tile's last position, "
    "the causal mask (key_position <= query_position), the rows past the last new token (masked on load "
    "and store), the scale, and the online-softmax update."
)


def _check_prefill_cases(what: str, launcher: Callable, seed: int) -> None:
    for case, dtype in _plan(PREFILL_CASES):
        inputs = prefill_inputs(case, dtype, seed)
        scenario = f"{case.scenario} [{str(dtype).removeprefix('torch.')}]"
        expected = paged_prefill_reference(*inputs.args(), compute_dtype=torch.float64).double().cpu()
        got = _run_learner(what, launcher, inputs.args(), scenario, expected)
        if _close(got, expected, dtype):
            continue
        _explain_mismatch(
            scenario,
            got,
            expected,
            dtype,
            PREFILL_BUGS,
            lambda bug, inputs=inputs: prefill_as(bug, inputs),
            _PREFILL_HINT + _dtype_hint(dtype),
            _PREFILL_AXES,
            _negative_hint(case),
        )


@check(notebook="09_paged_prefill_kernel", builds="paged_prefill_attention")
def check_paged_prefill(paged_prefill_attention: Callable, seed: int = 0) -> None:
    """paged_prefill_attention(q, k_pool, v_pool, block_table, start, block_size) against the reference."""
    what = "paged_prefill_attention"
    with _learner_process():
        _check_prefill_cases(what, paged_prefill_attention, seed)
        q, k_pool, v_pool, table, start, block_size = prefill_inputs(PREFILL_CASES[1], _dtypes_to_check()[0]).args()
        _expect_rejected(
            what,
            paged_prefill_attention,
            (q, k_pool, v_pool, table[:2].clone(), start, block_size),
            "a block table too short for start + new tokens (blocks not reserved)",
            "block_table",
        )
    _check_gpu_compile(
        what,
        paged_prefill_attention,
        GPU_COMPILE_PREFILL_CASES,
        lambda case: prefill_inputs(case, _CAPTURE_DTYPE).args(),
    )
