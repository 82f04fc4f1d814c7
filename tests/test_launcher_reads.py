"""paged_helpers.running.launcher_reads: which torch calls of a launcher read its float inputs' values.

The grader's clean run flags those calls (tests/test_grading_guard.py runs it in a sandbox); here
the rule itself, on what honest launchers do and on the ways an answer can be read out in Python.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.overrides import TorchFunctionMode

from paged_helpers.running.launcher_reads import launcher_inputs, reads_values


class Reads(TorchFunctionMode):
    """The names of the torch calls that read marked values, as the clean run's watch sees them."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if reads_values(func, args, kwargs, result):
            self.names.append(getattr(func, "__name__", "?"))
        return result


def _inputs():
    q = torch.randn(2, 4, 8)
    k_pool = torch.randn(6, 2, 4, 8)
    v_pool = torch.randn(6, 2, 4, 8)
    tables = torch.tensor([[0, 3], [5, 1]], dtype=torch.int32)
    lengths = torch.tensor([7, 5], dtype=torch.int32)
    return q, k_pool, v_pool, tables, lengths


def honest_launcher(q, k_pool, v_pool, tables, lengths):
    if q.dim() != 3 or k_pool.shape != v_pool.shape or not k_pool.is_contiguous():
        raise ValueError("shapes")
    out = torch.empty_like(q)
    strides = (k_pool.stride(0), k_pool.stride(1), k_pool.stride(2))
    grid = (q.shape[0], q.shape[1], int(lengths.max()), tables.tolist())  # integer inputs may be read
    q = q.contiguous().view(q.shape[0], -1).reshape(q.shape)
    print(f"launching {grid} over {k_pool.numel()} values, strides {strides}")
    print(k_pool[0])  # a leftover debug print is no answer
    out.zero_()
    return out


@pytest.mark.parametrize(
    "read_out, name",
    [
        (lambda q, k, v: k.tolist(), "tolist"),
        (lambda q, k, v: float(k[0, 0, 0, 0]), "__float__"),
        (lambda q, k, v: k[torch.tensor([1, 0])], "__getitem__"),  # advanced indexing copies
        (lambda q, k, v: v.sum(), "sum"),
        (lambda q, k, v: q @ k[0, 0].mT, "matmul"),
        (lambda q, k, v: copy.deepcopy(v), "__deepcopy__"),
        (lambda q, k, v: k.clone().tolist(), "tolist"),  # the copy is marked in its turn
        (lambda q, k, v: k.to(torch.float64).flatten()[3].item(), "item"),
        (lambda q, k, v: k.mT.contiguous().numpy(), "numpy"),
    ],
    ids=[
        "tolist", "float", "advanced_index", "sum", "matmul", "deepcopy", "clone_then_tolist", "cast_then_item", "numpy"
    ],  # fmt: skip
)
def test_reading_an_inputs_values_is_seen(read_out, name):
    q, k_pool, v_pool, tables, lengths = _inputs()
    with Reads() as reads, launcher_inputs((q, k_pool, v_pool, tables, lengths)):
        read_out(q, k_pool, v_pool)
    assert name in reads.names, reads.names


def test_an_honest_launcher_reads_no_values():
    inputs = _inputs()
    with Reads() as reads, launcher_inputs(inputs):
        honest_launcher(*inputs)
    assert reads.names == []


def test_nothing_is_marked_outside_a_launcher_call():
    q, k_pool, v_pool, tables, lengths = _inputs()
    with launcher_inputs((q, k_pool, v_pool, tables, lengths)):
        pass
    with Reads() as reads:
        k_pool.tolist()
    assert reads.names == []


def test_a_marked_input_prints_as_a_placeholder_in_the_clean_run():
    """Printed text could be read back to every digit: where the clean run prints a marked input
    for student code, the text is a placeholder (its output goes nowhere anyway)."""
    from paged_helpers.running.launcher_reads import PLACEHOLDER, printed_text

    q, k_pool, v_pool, tables, lengths = _inputs()
    with launcher_inputs((q, k_pool, v_pool, tables, lengths)):
        assert printed_text(torch.Tensor.__repr__, (k_pool,)) == PLACEHOLDER
        assert printed_text(torch.Tensor.__format__, (v_pool[0], "")) == PLACEHOLDER  # a view of it
        assert printed_text(torch.Tensor.__repr__, (tables,)) is None  # integer inputs print as usual
    assert printed_text(torch.Tensor.__repr__, (k_pool,)) is None
