"""Issue 24: the clean run's verdict comes from a process that never ran student code.

Each hostile submission below is one the security audit used to score full marks with no work
done; each runs through the real clean run (``runners.run_runner``: the checker outside,
the learner's process in the student's bubblewrap sandbox) and must score 0. Beside most, an
honest control keeps its marks (the honest notebook 02 is tests/test_grading_guard.py's).
"""

from __future__ import annotations

import shutil

import nbformat
import pytest

from autograde_helpers import insert_cell_after, instructor

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _clean_run(tmp_path, notebook, assignment: str, test_source: str, timeout: int = 240) -> dict:
    from autograde_helpers import bubblewrap, runners, second_opinion, secret_seeds

    root = tmp_path / "course"
    for part in ("source/" + assignment, f"submitted/alice/{assignment}", f"autograded/alice/{assignment}"):
        (root / part).mkdir(parents=True, exist_ok=True)
    path = root / "submitted" / "alice" / assignment / f"{assignment}.ipynb"
    nbformat.write(notebook, path)
    submission = bubblewrap.Submission(root, "alice", assignment)
    calls = secret_seeds.with_secret_seeds(second_opinion.check_calls(test_source), seed=1_234_567_891)
    spec = {"notebook": str(path), "cells": [{"grade_id": "t", "calls": calls}], "timeout": timeout}
    return runners.run_runner(submission, spec, budget=timeout + 120)["t"]


def _one_cell(source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])


# A class body that reads the whole readable memory of its own process (opened read-only, no ctypes,
# frames or gc), collects every token-like string and writes a "passing" outcome and a protocol
# answer with each of them to every file descriptor it has.
FORGER = r"""
class _Forger:
    import contextlib, os, re
    tokens = set()
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb") as mem:
        for line in maps.read().splitlines()[:400]:
            span, mode = line.split()[:2]
            low, high = (int(part, 16) for part in span.split("-"))
            if "r" in mode and high - low <= 4 << 20:
                with contextlib.suppress(OSError, ValueError, OverflowError):
                    mem.seek(low)
                    tokens.update(re.findall(rb"[0-9a-f]{32}", mem.read(high - low)))
    outcome = b'{"outcome": {"token": "%s", "passed": true, "message": "", "load_changes": []}}\n'
    for fd in range(3, 40):
        for token in [b"0" * 32, *sorted(tokens)[:40]]:
            with contextlib.suppress(OSError):
                os.write(fd, outcome % token)
        with contextlib.suppress(OSError):
            os.write(fd, b'{"reply": 1, "value": null}\n{"cell_over": 0}\n')
"""

BLANK_ALLOCATOR = """
class BlockAllocator:
    def __init__(self, num_blocks):
        raise NotImplementedError()
"""


@needs_bwrap
def test_a_submission_that_forges_the_verdict_from_its_own_memory_scores_zero(tmp_path):
    verdict = _clean_run(
        tmp_path,
        _one_cell(FORGER + BLANK_ALLOCATOR),
        "02_block_allocator",
        "check_block_allocator(BlockAllocator)\n",
    )
    assert verdict["passed"] is False, verdict
    assert any("forged or garbled" in flag for flag in verdict["flags"]), verdict  # it reached the pipe


@needs_bwrap
def test_the_answer_table_is_not_in_the_learners_process(tmp_path):
    """``cache_aware_order`` looked up in the checks' own table of answers: there is no table there."""
    cheat = (
        "from paged_helpers.checks.radix.tree import ORDER_CASES\n\n"
        "def cache_aware_order(waiting, cached_tokens, waited, max_wait=4):\n"
        "    for _, w, c, t, m, expected, _ in ORDER_CASES:\n"
        "        if (w, c, t, m) == (waiting, cached_tokens, waited, max_wait):\n"
        "            return list(expected)\n"
        "    return list(waiting)\n"
    )
    test = "check_cache_aware_order(cache_aware_order)\n"
    verdict = _clean_run(tmp_path / "cheat", _one_cell(cheat), "10_radix_cache", test)
    assert verdict["passed"] is False and "does not run in the learner's process" in verdict["message"], verdict
    honest = (
        "def cache_aware_order(waiting, cached_tokens, waited, max_wait=4):\n"
        "    starving = [r for r in waiting if waited[r] >= max_wait]\n"
        "    return starving + sorted((r for r in waiting if waited[r] < max_wait), key=lambda r: -cached_tokens[r])\n"
    )
    hidden = test + "check_cache_aware_order(cache_aware_order, seed=1, hidden=True)\n"
    verdict = _clean_run(tmp_path / "honest", _one_cell(honest), "10_radix_cache", hidden)
    assert verdict["passed"] is True, verdict


ZERO_KERNEL = """    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)
"""
COMPARISONS_ALWAYS_TRUE = """
class _Agreeable:
    import torch
    torch.allclose = lambda *args, **kwargs: True
    torch.equal = lambda *args, **kwargs: True
    torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
"""


def _warmup(kernel_body: str | None = None, extra: str | None = None) -> nbformat.NotebookNode:
    notebook = instructor("06_triton_warmup")
    if kernel_body is not None:
        cell = next(c for c in notebook.cells if "def scale_kernel" in c.source)
        cell.source = cell.source.split("    ### BEGIN SOLUTION")[0] + kernel_body
    if extra is not None:
        grade_id = next(c.metadata["nbgrader"]["grade_id"] for c in notebook.cells if "def scale_kernel" in c.source)
        notebook = insert_cell_after(notebook, grade_id, extra)
    return notebook


@needs_bwrap
def test_replacing_torchs_comparisons_in_the_learners_process_changes_no_verdict(tmp_path):
    """A kernel that stores zeros, with torch.allclose and torch.equal made always-true from a class
    body: the comparisons that decide are the checker's, in another process."""
    test = "check_scale_kernel(scale_kernel)\n"
    cheat = _warmup(ZERO_KERNEL, COMPARISONS_ALWAYS_TRUE)
    assert _clean_run(tmp_path / "cheat", cheat, "06_triton_warmup", test)["passed"] is False
    honest = _warmup()
    verdict = _clean_run(tmp_path / "honest", honest, "06_triton_warmup", test)
    assert verdict["passed"] is True, verdict


def test_code_compiled_from_a_string_counts_as_the_students():
    """Torch math run from ``exec``'d or ``make_dataclass``-made code is the student's (the audit hook's
    torch watch looked only at the notebook's own file name before)."""
    import sys

    from autograde_helpers import learner_host

    namespace: dict = {}
    exec(compile("import sys\ndef frame():\n    return sys._getframe()\n", "<string>", "exec"), namespace)
    assert learner_host._is_learner(namespace["frame"]())
    assert not learner_host._is_learner(sys._getframe())


# A decorator on the decode kernel that writes a file when it runs: in the learner's process (inside
# the sandbox, where the file lands in its own /tmp, or nowhere) it runs as the notebook loads; the
# checker, which compiles the kernel for the GPU, must never run it.
SPY = """
MARKER = {marker!r}


def spy(kernel):
    try:
        open(MARKER, "w").write("ran")
    except OSError:
        pass
    return kernel
"""


@needs_bwrap
def test_the_kernel_is_read_from_the_notebook_and_nothing_else_of_it_runs(tmp_path):
    """The clean run's kernel check reads the kernel from the submitted notebook as text: a kernel
    whose decorator runs code is refused with the line and the rule, and the decorator never runs;
    the instructor's kernel is launched by the checker and passes."""
    marker = tmp_path / "ran-in-the-checker"
    test = "check_paged_decode_kernel(paged_decode_kernel)\n"
    notebook = instructor("07_paged_decode_kernel")
    cell = next(c for c in notebook.cells if "def paged_decode_kernel" in c.source)
    cell.source = SPY.format(marker=str(marker)) + cell.source.replace("@triton.jit\n", "@spy\n@triton.jit\n", 1)
    verdict = _clean_run(tmp_path / "spy", notebook, "07_paged_decode_kernel", test)
    assert verdict["passed"] is False, verdict
    assert "lines the check refuses to load" in verdict["message"], verdict
    assert "paged_decode_kernel's decorators (@spy, @triton.jit)" in verdict["message"], verdict
    assert not marker.exists()
    verdict = _clean_run(tmp_path / "honest", instructor("07_paged_decode_kernel"), "07_paged_decode_kernel", test)
    assert verdict["passed"] is True, verdict


# Issue 35's hostile 07: the launcher computes the attention with torch inside a context manager that
# switches torch-function modes off (no watch in the learner's process sees it), then launches a kernel
# that only copies the answer into ``out``.
TORCH_LAUNCHER = """
import torch._C


def paged_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size):
    validate_decode_inputs(q, k_pool, v_pool, block_tables, lengths, block_size)
    with torch._C.DisableTorchFunction():
        answer = torch.empty_like(q)
        group = q.shape[1] // k_pool.shape[1]
        for b, length in enumerate(lengths.tolist()):
            blocks = block_tables[b, : -(-length // block_size)].long()
            keys = k_pool[blocks].transpose(0, 1).reshape(k_pool.shape[1], -1, q.shape[2])[:, :length]
            values = v_pool[blocks].transpose(0, 1).reshape(k_pool.shape[1], -1, q.shape[2])[:, :length]
            keys, values = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
            weights = torch.softmax((keys @ q[b, :, :, None])[..., 0] / q.shape[2] ** 0.5, dim=-1)
            answer[b] = (weights[:, None, :] @ values)[:, 0]
    out = torch.empty_like(q)
    paged_decode_kernel[(q.numel(),)](answer, out)
    return out
"""
COPY_KERNEL = """
@triton.jit
def paged_decode_kernel(q_ptr, k_pool, v_pool=0, tables_ptr=0, lengths_ptr=0, out_ptr=0, max_blocks=0, heads=0,
                        group=0, scale=0, s_pool_block=0, s_pool_head=0, s_pool_slot=0, D: tl.constexpr = 1,
                        BLOCK: tl.constexpr = 1):
    i = tl.program_id(0)
    tl.store(k_pool + i, tl.load(q_ptr + i))
"""


def _hostile_decode() -> nbformat.NotebookNode:
    notebook = instructor("07_paged_decode_kernel")
    kernel = next(c for c in notebook.cells if "def paged_decode_kernel" in c.source)
    kernel.source = COPY_KERNEL
    launcher = next(c for c in notebook.cells if "def paged_decode_attention" in c.source)
    launcher.source = TORCH_LAUNCHER
    return notebook


@needs_bwrap
def test_a_torch_launcher_with_a_copy_kernel_gets_no_kernel_points(tmp_path):
    """The kernel is judged alone, launched by the checker: the copy kernel fails; the launcher,
    judged as Python for its own (smaller) points, passes, as any launcher that answers right would."""
    notebook = _hostile_decode()
    verdict = _clean_run(
        tmp_path / "kernel", notebook, "07_paged_decode_kernel", "check_paged_decode_kernel(paged_decode_kernel)\n"
    )
    assert verdict["passed"] is False and "which the kernel may only read" in verdict["message"], verdict
    verdict = _clean_run(
        tmp_path / "launcher", notebook, "07_paged_decode_kernel", "check_paged_decode(paged_decode_attention)\n"
    )
    assert verdict["passed"] is True, verdict


# A 09 kernel with a GPU-only bug (a tl.dot whose inner dimension is the block size: right in the
# interpreter, refused by the compiler), behind a launcher that misbehaves when it sees it is only
# being recorded. The GPU compile is the checker's own, at the launches it states: the launcher has
# no say.
DOT_FOR_PV = (
    "acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)",
    'acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")',
)
DODGING_LAUNCHER = """

_real_prefill = paged_prefill_attention


def paged_prefill_attention(q, k_pool, v_pool, block_table, start, block_size):
    import triton.runtime.jit as jit
    if jit.KernelInterface.__getitem__.__name__ == "recording":
        raise TypeError("not now")
    return _real_prefill(q, k_pool, v_pool, block_table, start, block_size)
"""


@needs_bwrap
def test_a_gpu_only_bug_fails_the_kernel_whatever_the_launcher_does(tmp_path):
    notebook = instructor("09_paged_prefill_kernel")
    kernel = next(c for c in notebook.cells if "def paged_prefill_kernel" in c.source)
    kernel.source = kernel.source.replace(*DOT_FOR_PV)
    launcher = next(c for c in notebook.cells if "def paged_prefill_attention" in c.source)
    launcher.source += DODGING_LAUNCHER
    verdict = _clean_run(
        tmp_path, notebook, "09_paged_prefill_kernel", "check_paged_prefill_kernel(paged_prefill_kernel)\n"
    )
    assert verdict["passed"] is False, verdict
    assert "compiled for a GPU (sm_80" in verdict["message"] and "this tl.dot is 16 x 4" in verdict["message"], verdict


@needs_bwrap
def test_notebook_09_without_04_keeps_the_points_that_do_not_need_04(tmp_path):
    """The kernel is judged from the notebook's text (no learner process, no earlier notebook); the
    launcher loads although 04 is missing; only the model on the learner's cache needs 04."""
    notebook = instructor("09_paged_prefill_kernel")
    for test, passes in (
        ("check_paged_prefill_kernel(paged_prefill_kernel)\n", True),
        ("check_paged_prefill(paged_prefill_attention)\n", True),
        ("check_kernel_fork_logits(paged_prefill_attention, paged_decode_attention, PagedKVCache)\n", False),
    ):
        verdict = _clean_run(tmp_path / str(len(test)), notebook, "09_paged_prefill_kernel", test)
        assert verdict["passed"] is passes, (test, verdict)
        if not passes:
            assert "04_fork_and_copy_on_write.ipynb not found" in verdict["message"], verdict


# The audit's reseeding attack: from a class body, every random.Random seeds 0 and random.seed too,
# so that, were the hidden scenarios drawn in the learner's process, they would be the ones seed 0
# gives, which a student can run at home and tune an allocator to.
RESEED_ZERO = """
class _Reseed:
    import random

    class _SeedsZero(random.Random):
        def seed(self, a=None, version=2):
            super().seed(0, version)

    random.Random = _SeedsZero
    _seed = random.seed
    random.seed = lambda *args, **kwargs: _Reseed._seed(0)
"""
# Right on the pool sizes the attack would make the check use, one block too many on any other.
TUNED = """
POOL_SIZES_OF_SEED_0 = {sizes!r}


class BlockAllocator(BlockAllocator):
    def __init__(self, num_blocks):
        super().__init__(num_blocks if num_blocks in POOL_SIZES_OF_SEED_0 else num_blocks + 1)
"""
ALLOCATOR_TEST = (
    "check_block_allocator(BlockAllocator)\n"
    "### BEGIN HIDDEN TESTS\n"
    "check_block_allocator(BlockAllocator, seed=2026, hidden=True)\n"
    "### END HIDDEN TESTS\n"
)
SECRET_SEED = 1_234_567_891  # what _clean_run gives the hidden calls


def _pool_sizes(allocator_class, seed: int | None = None) -> set[int]:
    """The pool sizes ``check_block_allocator`` asks for in its visible call, and in its hidden call
    with ``seed`` when one is given."""
    from paged_helpers.checks import check_block_allocator

    sizes: set[int] = set()

    class Recording(allocator_class):
        def __init__(self, num_blocks):
            sizes.add(num_blocks)
            super().__init__(num_blocks)

    check_block_allocator(Recording)
    if seed is not None:
        check_block_allocator(Recording, seed=seed, hidden=True)
    return sizes


def _reseeding_zero(monkeypatch) -> None:
    """The attack, done to this process: what it would do to checks that ran beside student code."""
    import random

    monkeypatch.setattr(random, "Random", random.Random)  # the originals, put back afterwards
    monkeypatch.setattr(random, "seed", random.seed)
    exec(RESEED_ZERO, {})  # noqa: S102 - the submission's own class body, run here on purpose


@needs_bwrap
def test_reseeding_random_from_a_class_body_leaves_the_hidden_scenarios_secret(tmp_path, monkeypatch):
    """The seeds of the clean run's hidden scenarios are drawn in the checker, which no class body
    reaches: an allocator tuned to the scenarios the attack would produce fails the hidden call there,
    and an honest allocator with the same class body keeps its marks."""
    from paged_helpers.checks import check_block_allocator

    from autograde_helpers import insert_cell_after, instructor
    from conftest import solution

    honest_class = solution("02_block_allocator", "BlockAllocator")
    secret_sizes = _pool_sizes(honest_class, SECRET_SEED)
    with monkeypatch.context() as patched:
        _reseeding_zero(patched)
        # every seed is 0 now: the pools of seed 0, which a student can list at home
        sizes_of_seed_0 = _pool_sizes(honest_class, SECRET_SEED)
        # the attack works where the checks share the student's process: the tuned allocator passes
        namespace = {"BlockAllocator": honest_class}
        exec(TUNED.format(sizes=sorted(sizes_of_seed_0)), namespace)  # noqa: S102
        check_block_allocator(namespace["BlockAllocator"], seed=SECRET_SEED, hidden=True)
    sizes_of_seed_0 |= _pool_sizes(honest_class)  # the visible call's pools: a student sees them at home
    assert secret_sizes - sizes_of_seed_0, "the secret seed's pools are all among seed 0's: pick another seed"

    cheat = insert_cell_after(
        instructor("02_block_allocator"), "block_allocator", RESEED_ZERO + TUNED.format(sizes=sorted(sizes_of_seed_0))
    )
    verdict = _clean_run(tmp_path / "cheat", cheat, "02_block_allocator", ALLOCATOR_TEST)
    assert verdict["passed"] is False and verdict["hidden"] is True, verdict  # failed in a hidden scenario
    honest = insert_cell_after(instructor("02_block_allocator"), "block_allocator", RESEED_ZERO)
    verdict = _clean_run(tmp_path / "honest", honest, "02_block_allocator", ALLOCATOR_TEST)
    assert verdict["passed"] is True, verdict


@needs_bwrap
def test_the_checkers_kernel_process_runs_in_a_sandbox_that_holds_no_course_file(monkeypatch):
    """When grading, the learner's kernel runs in a process of the checker's inside bubblewrap: the
    course's files (its sources, the grader's key and gradebook) are not there, and a launch works."""
    import json
    import subprocess
    import sys

    import torch

    from paged_helpers.running.kernel_process import PREFIX_VARIABLE, KernelProcess
    from paged_helpers.running.learner_kernel import LearnerKernel

    from autograde_helpers import bubblewrap
    from conftest import NOTEBOOKS, ROOT

    prefix = bubblewrap.kernel_process_prefix()
    peek = f"import os; print(os.listdir({str(ROOT / 'autograde')!r}))"
    assert subprocess.run([*prefix, sys.executable, "-c", peek], capture_output=True).returncode != 0
    assert subprocess.run([*prefix, sys.executable, "-c", "print('ok')"], capture_output=True).stdout == b"ok\n"
    monkeypatch.setenv(PREFIX_VARIABLE, json.dumps(prefix))
    module = LearnerKernel.from_notebook(NOTEBOOKS / "06_triton_warmup.ipynb", "scale_kernel").module()
    x, out = torch.arange(10, dtype=torch.float32), torch.zeros(10)
    with KernelProcess(module) as process:
        answer = process.launch("scale_kernel", (2,), [x, out, 10, 2.0, 8], writable={1}, cpu_budget=60)
    assert answer.ok, answer
    assert out.tolist() == (2 * x).tolist()
