"""The decode benchmark (``paged_helpers.demos.kernel``) times device work only, every contender alike.

No GPU is needed to check its structure: on the CPU the same contenders are built at a tiny
shape (the kernel runs in Triton's interpreter), and each timed callable is called with every
host synchronisation and every validation turned into an error.
"""

from __future__ import annotations

import pytest
import torch

from paged_helpers import kernel_inputs
from paged_helpers.demos import kernel as kernel_demo
from paged_helpers.reference import attention, paged_decode_reference

from conftest import solution

SHAPE = {"batch": 2, "length": 11, "block_size": 4, "q_heads": 4, "kv_heads": 2, "head_dim": 16}


class HostSync(AssertionError):
    pass


@pytest.fixture
def contenders():
    calls = {"launcher": 0}
    kernel = solution("07_paged_decode_kernel", "paged_decode_attention")

    def counted(*args):
        calls["launcher"] += 1
        return kernel(*args)

    built = kernel_demo.build_contenders(counted, **SHAPE, dtype=torch.float32)
    return built, calls


def _forbid(monkeypatch, names: tuple[str, ...]) -> None:
    def refuse(*args, **kwargs):
        raise HostSync("a host synchronisation or a validation inside the timed region")

    for name in names:
        monkeypatch.setattr(torch.Tensor, name, refuse)
    monkeypatch.setattr(kernel_inputs, "validate_decode_inputs", refuse)
    monkeypatch.setattr(kernel_inputs, "_validate_table_rows", refuse)
    monkeypatch.setattr(attention, "gather_history", refuse)
    monkeypatch.setattr(torch.cuda, "synchronize", refuse)


def test_every_contender_is_timed_and_the_answer_is_checked_outside(contenders):
    built, calls = contenders
    assert set(built.timed) == {"paged", "gather", "sdpa"}
    assert calls["launcher"] == 2  # once for the answer, once to record its launches: both outside
    assert built.max_abs_error_vs_sdpa < 1e-4
    assert len(built.kernel_launches) == 1


def test_the_timed_torch_contenders_hold_no_host_sync(contenders, monkeypatch):
    built, _ = contenders
    _forbid(monkeypatch, ("item", "tolist", "cpu", "__int__", "__bool__", "__float__", "numpy"))
    for name in ("gather", "sdpa"):
        out = built.timed[name]()
        assert out.shape == (SHAPE["batch"], SHAPE["q_heads"], 1, SHAPE["head_dim"])


def test_the_timed_paged_contender_only_replays_the_kernel_launch(contenders, monkeypatch):
    """The replay launches the recorded kernel and nothing else: not the launcher, not its validation.
    (The interpreter itself moves tensors to numpy, so host methods can't be forbidden here.)"""
    built, calls = contenders
    launch = built.kernel_launches[0]
    out = launch.args[5]  # the instructor's kernel: (q, k_pool, v_pool, tables, lengths, out, ...)
    out.fill_(float("nan"))
    monkeypatch.setattr(kernel_inputs, "validate_decode_inputs", lambda *a: pytest.fail("validation was timed"))
    built.timed["paged"]()
    assert calls["launcher"] == 2
    q, k_pool, v_pool, tables, lengths = launch.args[:5]
    expected = paged_decode_reference(q, k_pool, v_pool, tables, lengths, 4, compute_dtype=torch.float64)
    assert torch.allclose(out.double(), expected.double(), atol=1e-4)


def test_peak_bandwidth_has_no_table_by_name():
    assert not hasattr(kernel_demo, "_KNOWN_PEAKS_GBS")
    assert kernel_demo.peak_bandwidth_gbs(1000.0) == 1000.0
    if not torch.cuda.is_available():
        assert kernel_demo.peak_bandwidth_gbs() is None
