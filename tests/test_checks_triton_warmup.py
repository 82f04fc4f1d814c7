"""The warm-up checks (notebook 06) pass the instructor's kernels and name each classic mistake.

Each wrong kernel runs through the notebook's own launcher (its global kernel name rebound to the
wrong kernel), so the only difference from the right answer is the kernel body.
"""

from __future__ import annotations

import types

import pytest
import triton
import triton.language as tl

from paged_helpers.checks import (
    NotImplementedYet,
    check_gather_rows_kernel,
    check_load_block_kernel,
    check_row_max_kernel,
    check_scale_kernel,
    check_softmax_kernel,
)

from conftest import solution, strip_ansi

NOTEBOOK = "06_triton_warmup"


def launcher_with(name: str, kernel_name: str, kernel) -> types.FunctionType:
    """The notebook's launcher ``name``, launching ``kernel`` in place of its ``kernel_name``."""
    right = solution(NOTEBOOK, name)
    return types.FunctionType(right.__code__, {**right.__globals__, kernel_name: kernel}, name, right.__defaults__)


# --------------------------------------------------------------------------- wrong kernels


@triton.jit
def scale_store_unmasked(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr + offsets, factor * x)


@triton.jit
def scale_without_program_offset(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, factor * tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scale_stub(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    raise NotImplementedError()


@triton.jit
def row_max_other_zero(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + row * stride_row + offsets, mask=offsets < cols)
    tl.store(out_ptr + row, tl.max(values, axis=0))


@triton.jit
def row_max_cols_as_stride(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + row * cols + offsets, mask=offsets < cols, other=-float("inf"))
    tl.store(out_ptr + row, tl.max(values, axis=0))


@triton.jit
def row_max_unmasked(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    values = tl.load(x_ptr + row * stride_row + tl.arange(0, BLOCK))
    tl.store(out_ptr + row, tl.max(values, axis=0))


@triton.jit
def gather_ignoring_index(table_ptr, index_ptr, out_ptr, D: tl.constexpr):
    i = tl.program_id(0)
    columns = tl.arange(0, D)
    tl.store(out_ptr + i * D + columns, tl.load(table_ptr + i * D + columns))


@triton.jit
def gather_row_without_width(table_ptr, index_ptr, out_ptr, D: tl.constexpr):
    i = tl.program_id(0)
    row = tl.load(index_ptr + i)
    columns = tl.arange(0, D)
    tl.store(out_ptr + i * D + columns, tl.load(table_ptr + row + columns))


@triton.jit
def softmax_without_rescale(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    m = -float("inf")
    l = 0.0
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=offsets < cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(tile, axis=0))
        l = l + tl.sum(tl.exp(tile - m), axis=0)
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        mask = offsets < cols
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=mask, other=-float("inf"))
        tl.store(out_ptr + row * cols + offsets, tl.exp(tile - m) / l, mask=mask)


@triton.jit
def softmax_other_zero(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    m = -float("inf")
    l = 0.0
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=offsets < cols, other=0.0)
        m_new = tl.maximum(m, tl.max(tile, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(tile - m_new), axis=0)
        m = m_new
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        mask = offsets < cols
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + row * cols + offsets, tl.exp(tile - m) / l, mask=mask)


@triton.jit
def softmax_without_max(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    l = 0.0
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=offsets < cols, other=-float("inf"))
        l = l + tl.sum(tl.exp(tile), axis=0)
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        mask = offsets < cols
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=mask, other=-float("inf"))
        tl.store(out_ptr + row * cols + offsets, tl.exp(tile) / l, mask=mask)


@triton.jit
def softmax_store_unmasked(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    m = -float("inf")
    l = 0.0
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=offsets < cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(tile, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(tile - m_new), axis=0)
        m = m_new
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=offsets < cols, other=-float("inf"))
        tl.store(out_ptr + row * cols + offsets, tl.exp(tile - m) / l)


@triton.jit
def softmax_store_with_input_stride(x_ptr, out_ptr, cols, stride_row, BLOCK: tl.constexpr):
    """Masked everywhere, but rows are stored where x's rows start (out is contiguous)."""
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    m = -float("inf")
    l = 0.0
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=offsets < cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(tile, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(tile - m_new), axis=0)
        m = m_new
    for start in range(0, cols, BLOCK):
        offsets = start + lanes
        mask = offsets < cols
        tile = tl.load(x_ptr + row * stride_row + offsets, mask=mask, other=-float("inf"))
        tl.store(out_ptr + row * stride_row + offsets, tl.exp(tile - m) / l, mask=mask)


@triton.jit
def load_block_logical_as_physical(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    valid = logical_block * BLOCK + slots < length
    base = pool_ptr + logical_block * s_block + head * s_head
    tile = tl.load(base + slots[:, None] * s_slot + rd[None, :], mask=valid[:, None], other=0.0)
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile)


@triton.jit
def load_block_strides_swapped(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    physical = tl.load(table_ptr + logical_block)
    valid = logical_block * BLOCK + slots < length
    base = pool_ptr + physical * s_block + head * s_head
    tile = tl.load(base + slots[:, None] + rd[None, :] * s_slot, mask=valid[:, None], other=0.0)
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile)


@triton.jit
def load_block_unmasked(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    physical = tl.load(table_ptr + logical_block)
    base = pool_ptr + physical * s_block + head * s_head
    tile = tl.load(base + slots[:, None] * s_slot + rd[None, :])
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile)


@triton.jit
def load_block_mask_without_block_start(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    """The mask compares the slot, not the token's position, with the length: true for every slot."""
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    physical = tl.load(table_ptr + logical_block)
    base = pool_ptr + physical * s_block + head * s_head
    tile = tl.load(base + slots[:, None] * s_slot + rd[None, :], mask=(slots < length)[:, None], other=0.0)
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile)


@triton.jit
def load_block_mask_on_columns(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    physical = tl.load(table_ptr + logical_block)
    valid = logical_block * BLOCK + rd < length
    base = pool_ptr + physical * s_block + head * s_head
    tile = tl.load(base + slots[:, None] * s_slot + rd[None, :], mask=valid[None, :], other=0.0)
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile)


@triton.jit
def load_block_store_masked(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    """Right rows, but the rows without a token are left as they were instead of set to 0."""
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    physical = tl.load(table_ptr + logical_block)
    valid = logical_block * BLOCK + slots < length
    base = pool_ptr + physical * s_block + head * s_head
    tile = tl.load(base + slots[:, None] * s_slot + rd[None, :], mask=valid[:, None], other=0.0)
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile, mask=valid[:, None])


@triton.jit
def load_block_head_ignored(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    physical = tl.load(table_ptr + logical_block)
    valid = logical_block * BLOCK + slots < length
    base = pool_ptr + physical * s_block
    tile = tl.load(base + slots[:, None] * s_slot + rd[None, :], mask=valid[:, None], other=0.0)
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile)


@triton.jit
def load_block_heads_packed(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    """Right for a contiguous pool, where heads lie D apart; not for a view of a wider one."""
    slots = tl.arange(0, BLOCK)
    rd = tl.arange(0, D)
    physical = tl.load(table_ptr + logical_block)
    valid = logical_block * BLOCK + slots < length
    base = pool_ptr + physical * s_block + head * D
    tile = tl.load(base + slots[:, None] * s_slot + rd[None, :], mask=valid[:, None], other=0.0)
    tl.store(out_ptr + slots[:, None] * D + rd[None, :], tile)


@triton.jit
def load_block_stub(
    pool_ptr,
    table_ptr,
    out_ptr,
    length,
    logical_block,
    head,
    s_block,
    s_slot,
    s_head,
    BLOCK: tl.constexpr,
    D: tl.constexpr,
):
    raise NotImplementedError()


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize(
    ("check", "launcher"),
    [
        (check_scale_kernel, "scale"),
        (check_row_max_kernel, "row_max"),
        (check_gather_rows_kernel, "gather_rows"),
        (check_softmax_kernel, "softmax"),
        (check_load_block_kernel, "load_block"),
    ],
)
def test_the_instructor_kernels_pass(check, launcher, capsys):
    check(solution(NOTEBOOK, launcher))
    assert capsys.readouterr().out.startswith(f"{check.__name__}: ")


WRONG = [
    (check_scale_kernel, "scale", "scale_kernel", scale_store_unmasked, ["outside `out`", "mask=offsets < n"]),
    (check_scale_kernel, "scale", "scale_kernel", scale_without_program_offset, ["never written", "pid * BLOCK"]),
    (check_row_max_kernel, "row_max", "row_max_kernel", row_max_other_zero, ["loaded as 0", "other=-float('inf')"]),
    (check_row_max_kernel, "row_max", "row_max_kernel", row_max_cols_as_stride, ["stride_row"]),
    (check_row_max_kernel, "row_max", "row_max_kernel", row_max_unmasked, ["beyond `cols`"]),
    (
        check_gather_rows_kernel,
        "gather_rows",
        "gather_rows_kernel",
        gather_ignoring_index,
        ["copied table row i", "index"],
    ),
    (check_gather_rows_kernel, "gather_rows", "gather_rows_kernel", gather_row_without_width, ["r * D"]),
    (check_softmax_kernel, "softmax", "softmax_kernel", softmax_without_rescale, ["not rescaled", "exp(m - m_new)"]),
    (check_softmax_kernel, "softmax", "softmax_kernel", softmax_other_zero, ["loaded as 0", "-inf"]),
    (check_softmax_kernel, "softmax", "softmax_kernel", softmax_without_max, ["overflows", "subtract the running max"]),
    (check_softmax_kernel, "softmax", "softmax_kernel", softmax_store_unmasked, ["outside `out`", "mask the store"]),
    (
        check_softmax_kernel,
        "softmax",
        "softmax_kernel",
        softmax_store_with_input_stride,
        ["x's row stride", "the store used stride_row", "out_ptr + row * cols + offsets"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_logical_as_physical,
        ["physical block 1, the logical block's own number", "tl.load(table_ptr + logical_block)"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_strides_swapped,
        ["strides are exchanged", "slots[:, None] * s_slot + rd[None, :]"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_unmasked,
        ["last block", "slots past the sequence's length", "mask=valid[:, None]"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_mask_without_block_start,
        ["slots past the sequence's length", "logical_block * BLOCK + slots < length"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_mask_on_columns,
        ["switched off columns instead of slots", "valid[:, None]"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_store_masked,
        ["never written", "no mask on the store"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_head_ignored,
        ["head 1", "holds pool[2, 0, 0, 0] instead of pool[2, 0, 1, 0]", "head * s_head"],
    ),
    (
        check_load_block_kernel,
        "load_block",
        "load_block_kernel",
        load_block_heads_packed,
        ["heads lie 6 apart", "as if heads were packed", "head * s_head"],
    ),
]


def test_the_wrong_stride_is_not_blamed_on_a_mask(failing_message):
    wrong = launcher_with("softmax", "softmax_kernel", softmax_store_with_input_stride)
    message = strip_ansi(failing_message(check_softmax_kernel, wrong))
    assert "mask the store" not in message, message


@pytest.mark.parametrize(
    ("check", "launcher", "kernel_name", "kernel", "phrases"), WRONG, ids=[wrong[3].__name__ for wrong in WRONG]
)
def test_a_wrong_kernel_is_named(check, launcher, kernel_name, kernel, phrases, failing_message):
    message = strip_ansi(failing_message(check, launcher_with(launcher, kernel_name, kernel)))
    for phrase in phrases:
        assert phrase in message, message


def test_a_stub_is_not_implemented_yet():
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_scale_kernel(launcher_with("scale", "scale_kernel", scale_stub))


def test_a_launcher_that_skips_the_kernel_fails():
    def torch_only(x, out, factor, block=8):
        out.copy_(factor * x)
        return out

    with pytest.raises(AssertionError, match="without launching the kernel"):
        check_scale_kernel(torch_only)


@triton.jit
def scale_does_nothing(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    tl.program_id(0)


def test_numpy_around_a_do_nothing_launch_fails():
    """The answer computed in numpy (not torch: the second opinion's torch watch would not see it),
    written after or before a launch that does nothing, or next to a launch that does half."""

    def numpy_after(x, out, factor, block=8):
        scale_does_nothing[(1,)](x, out, x.numel(), factor, BLOCK=block)
        out.numpy()[:] = x.numpy() * factor
        return out

    def numpy_before(x, out, factor, block=8):
        out.numpy()[:] = x.numpy() * factor
        scale_does_nothing[(1,)](x, out, x.numel(), factor, BLOCK=block)
        return out

    right = solution(NOTEBOOK, "scale")

    def half_then_numpy(x, out, factor, block=8):
        right(x[: x.numel() // 2], out[: x.numel() // 2], factor, block)
        out.numpy()[x.numel() // 2 :] = x.numpy()[x.numel() // 2 :] * factor
        return out

    for launcher, words in (
        (numpy_after, "changed after the kernel had finished"),
        (numpy_before, "already changed before the kernel was launched"),
        (half_then_numpy, "changed after the kernel had finished"),
    ):
        with pytest.raises(AssertionError, match=words):
            check_scale_kernel(launcher)


def test_a_kernel_object_that_computes_in_python_fails():
    """A KernelInterface of the learner's own (or Triton's with run replaced) "launches" numpy code."""
    from triton.runtime.jit import KernelInterface

    class NumpyKernel(KernelInterface):
        def run(self, x, out, n, factor, BLOCK, grid=None, warmup=False):
            out.numpy()[:] = x.numpy() * factor

    fake = NumpyKernel()

    def launcher(x, out, factor, block=8):
        fake[(1,)](x, out, x.numel(), factor, BLOCK=block)
        return out

    with pytest.raises(AssertionError, match="not Triton's kernel"):
        check_scale_kernel(launcher)

    right = solution(NOTEBOOK, "scale")
    kernel = right.__globals__["scale_kernel"]
    patched_class = type("PatchedRun", (type(kernel),), {"run": NumpyKernel.run, "__module__": type(kernel).__module__})
    patched = object.__new__(patched_class)
    patched.__dict__.update(kernel.__dict__)
    with pytest.raises(AssertionError, match="not Triton's kernel"):
        check_scale_kernel(launcher_with("scale", "scale_kernel", patched))


# --------------------------------------------------------------------------- puzzle 5 beyond the wrong kernels


def test_load_block_passes_random_seeds_visible_and_hidden():
    import random

    right = solution(NOTEBOOK, "load_block")
    for seed in random.Random().sample(range(2**31), 3) + [2026]:
        for hidden in (False, True):
            try:
                check_load_block_kernel(right, seed=seed, hidden=hidden)
            except AssertionError as error:
                pytest.fail(f"seed {seed}, hidden={hidden}: {error}")


def test_load_block_stub_is_not_implemented_yet():
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_load_block_kernel(launcher_with("load_block", "load_block_kernel", load_block_stub))


def test_the_block_picture_draws_the_kernels_addresses():
    import math

    import matplotlib

    matplotlib.use("Agg")
    import torch

    from paged_helpers.plots.warmup import offset_coded_pool, plot_block

    pool = offset_coded_pool((8, 4, 2, 4))
    out = torch.full((4, 4), math.nan)
    solution(NOTEBOOK, "load_block")(pool, torch.tensor([3, 0, 5], dtype=torch.int32), 11, 2, 1, out)
    figure = plot_block(block_size=4, heads=2, head_dim=4, physical=5, head=1, rows=3, stored=out)
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert "164" in texts and "183" in texts and "slot 3: masked: no token" in texts, texts
    red = [text.get_text() for text in figure.axes[0].texts if text.get_color() == "#C44E52"]
    assert red == [], red
    out[1, 2] = 7.0
    figure = plot_block(block_size=4, heads=2, head_dim=4, physical=5, head=1, rows=3, stored=out)
    assert [text.get_text() for text in figure.axes[0].texts if text.get_color() == "#C44E52"] == ["7"]
