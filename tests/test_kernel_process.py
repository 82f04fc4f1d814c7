"""The checker's kernel process (``running.kernel_process``): a learner's kernel launched apart.

The process holds only the module and the inputs it is sent; every load and store of the kernel
is checked before it happens (interpreted), and a store into the gaps around the tensors is found
after the launch (compiled, tested here on the arena itself); budgets are CPU seconds, and a
process starved of the machine is "no verdict", never a failure.
"""

from __future__ import annotations

import pytest
import torch

from paged_helpers.running import _kernel_worker, kernel_process
from paged_helpers.running.kernel_process import KernelProcess
from paged_helpers.running.kernel_source import KernelSourceRefused
from paged_helpers.running.learner_kernel import LearnerKernel

from conftest import NOTEBOOKS

COPY = """
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@triton.jit
def unmasked_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


@triton.jit
def spin_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = n * 0
    while i < n + 1:
        i = i * 1
"""


def _launch(name: str, n: int = 10, budget: float = 60) -> tuple[kernel_process.KernelAnswer, torch.Tensor]:
    x, out = torch.arange(n, dtype=torch.float32), torch.zeros(n)
    with KernelProcess(COPY) as process:
        answer = process.launch(name, (-(-n // 8),), [x, out, n, 8], writable={1}, cpu_budget=budget)
    return answer, out


def test_a_launch_writes_only_the_tensors_it_may_write():
    answer, out = _launch("copy_kernel")
    assert answer.ok and out.tolist() == list(map(float, range(10)))


def test_a_load_past_a_tensor_is_stopped_and_named():
    answer, out = _launch("unmasked_copy_kernel")
    assert answer.kind == "out of bounds"
    assert answer.access == {
        "what": "load",
        "count": 6,
        "of": 8,
        "near": "x_ptr",
        "side": "past the end",
        "elements": 6,
    }
    assert out.tolist() == [0.0] * 10  # nothing came back: the launch did not finish


def test_a_kernel_past_its_cpu_budget_is_over_budget():
    answer, _ = _launch("spin_kernel", budget=2)
    assert answer.kind == "over budget"


def test_a_process_starved_of_the_machine_gives_no_verdict(monkeypatch):
    monkeypatch.setattr(kernel_process, "WALL_LIMIT_S", 2.0)
    answer, _ = _launch("spin_kernel", budget=600)
    assert answer.kind == "no verdict"


def test_a_module_that_is_not_kernel_code_never_loads():
    with pytest.raises(KernelSourceRefused):
        KernelProcess("import os\n")


def test_the_course_kernels_load_with_their_signatures():
    module = LearnerKernel.from_notebook(NOTEBOOKS / "07_paged_decode_kernel.ipynb", "paged_decode_kernel").module()
    with KernelProcess(module) as process:
        assert process.loaded().ok
        assert process.kernels["paged_decode_kernel"]["constexprs"] == ["D", "BLOCK"]


def test_a_store_into_a_gap_is_found_after_the_launch(monkeypatch):
    """What the compiled path does after each launch (no access is checked before it there): the gaps
    around each tensor hold a guard byte, and a changed one is a stray store, named by its tensor."""
    specs = [
        {"name": "x_ptr", "dtype": "float32", "offset": 0, "shape": [4], "stride": [1], "writable": False},
        {"name": "out_ptr", "dtype": "float32", "offset": 0, "shape": [4], "stride": [1], "writable": True},
    ]
    blobs = [torch.arange(4, dtype=torch.float32).numpy().tobytes(), bytes(16)]
    arena = _kernel_worker._Arena(specs, blobs)
    arena.before = arena.bytes.clone()  # as compiled: the arena as it was before the launch
    arena.tensors[1][:] = 7.0  # a store inside out: fine
    assert arena.stray_stores(specs) is None
    start, length = arena.spans[1]
    arena.bytes[start + length : start + length + 8] = 0  # two floats past the end of out
    facts = arena.stray_stores(specs)
    assert facts["near"] == "out_ptr" and facts["side"] == "past the end" and facts["count"] == 8
    assert arena.written(specs)[0] == torch.full((4,), 7.0).numpy().tobytes()


def test_after_a_worker_dies_the_next_launch_gets_a_fresh_one():
    """A worker killed by its CPU limit is reported by the zygote; the same KernelProcess forks a
    new worker, loads the module again and launches as before."""
    x, out = torch.arange(10, dtype=torch.float32), torch.zeros(10)
    with KernelProcess(COPY) as process:
        spun = process.launch("spin_kernel", (1,), [x, out, 10, 8], writable={1}, cpu_budget=1)
        copied = process.launch("copy_kernel", (2,), [x, out, 10, 8], writable={1}, cpu_budget=60)
    assert spun.kind == "over budget" and copied.ok
    assert out.tolist() == x.tolist()
