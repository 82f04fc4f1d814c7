"""Notebook 06's checks, the Triton warm-up: eight small kernels before the paged ones.

Each puzzle gives the learner a launcher and asks for its kernel; the check judges the kernel alone
and never calls the launcher. It reads the kernel from the notebook's cells as text, loads it in a
process of its own and launches it itself (``launching.KernelUnderTest``), with the grid and the
arguments the notebook states (the signatures below), on seeded tensors of its own (``puzzle_launches``):
a load or store that leaves a tensor is stopped and named, poison lies where a kernel should never
look, and every output starts as ``UNWRITTEN``. When an answer is wrong, the check recomputes the
case as the puzzle's classic mistakes would (``puzzle_mistakes``) and names the one the output matches
(``diagnosis``). Puzzles 5 to 8 are the moves of notebooks 07 and 09, one at a time.
"""

from __future__ import annotations

from ...registry import check
from ...story import Story
from ..launching import KernelUnderTest, Parameter
from .scenarios import (
    GATHER_ROWS_STORY,
    ROW_MAX_STORY,
    SCALE_STORY,
    SOFTMAX_STORY,
    load_block_story,
)
from .scores_scenarios import ATTENTION_STORY, BLOCK_SCORES_STORY, CAUSAL_STORY

__all__ = [
    "check_block_scores_kernel",
    "check_causal_scores_kernel",
    "check_gather_rows_kernel",
    "check_load_block_kernel",
    "check_online_attention_kernel",
    "check_row_max_kernel",
    "check_scale_kernel",
    "check_softmax_kernel",
]


def _parameters(*names: str, constexprs: tuple[str, ...]) -> tuple[Parameter, ...]:
    return tuple(Parameter(name, constexpr=name in constexprs) for name in names)


# The kernels' signatures, as notebook 06 states them: the check launches with these arguments,
# positionally (names may differ; number, order and constexprs may not).
SCALE_PARAMETERS = _parameters("x_ptr", "out_ptr", "n", "factor", "BLOCK", constexprs=("BLOCK",))
ROW_MAX_PARAMETERS = _parameters("x_ptr", "out_ptr", "cols", "stride_row", "BLOCK", constexprs=("BLOCK",))
GATHER_ROWS_PARAMETERS = _parameters("table_ptr", "index_ptr", "out_ptr", "D", constexprs=("D",))
SOFTMAX_PARAMETERS = _parameters("x_ptr", "out_ptr", "cols", "stride_row", "BLOCK", constexprs=("BLOCK",))
LOAD_BLOCK_PARAMETERS = _parameters(
    "pool_ptr", "table_ptr", "out_ptr", "length", "logical_block", "head", "s_block", "s_head", "s_slot",
    "BLOCK", "D", constexprs=("BLOCK", "D"),
)  # fmt: skip
BLOCK_SCORES_PARAMETERS = _parameters(
    "q_ptr", "k_ptr", "out_ptr", "length", "scale", "BLOCK", "D", constexprs=("BLOCK", "D")
)
ONLINE_ATTENTION_PARAMETERS = _parameters(
    "q_ptr", "k_ptr", "v_ptr", "out_ptr", "length", "scale", "BLOCK", "D", constexprs=("BLOCK", "D")
)
CAUSAL_SCORES_PARAMETERS = _parameters(
    "q_ptr", "k_ptr", "out_ptr", "start", "new_tokens", "scale", "TILE", "BLOCK", "D",
    constexprs=("TILE", "BLOCK", "D"),
)  # fmt: skip


def _tell(
    story: Story, *, kernel: object, name: str, parameters: tuple[Parameter, ...], seed: int, hidden: bool
) -> str:
    """Load the learner's ``kernel`` (named ``name`` in the notebook) and tell ``story`` on it."""
    with KernelUnderTest(kernel, name, parameters) as under_test:
        return story.tell(under_test, seed=seed, hidden=hidden)


@check(notebook="06_triton_warmup", builds="scale_kernel", kernel=True)
def check_scale_kernel(scale_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 1: `scale_kernel`, launched by the check with grid (cdiv(n, BLOCK),): out[i] = factor * x[i].

    Lengths: 1, exactly one tile, one tile and a bit, several tiles with a ragged end; hidden: lengths,
    tile sizes and factors drawn from the grader's seed.
    """
    return _tell(
        SCALE_STORY, kernel=scale_kernel, name="scale_kernel", parameters=SCALE_PARAMETERS, seed=seed, hidden=hidden
    )


@check(notebook="06_triton_warmup", builds="row_max_kernel", kernel=True)
def check_row_max_kernel(row_max_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 2: `row_max_kernel`, launched by the check with grid (rows,) and BLOCK =
    next_power_of_2(cols): out[r] = max of row r, rows strided."""
    return _tell(
        ROW_MAX_STORY,
        kernel=row_max_kernel,
        name="row_max_kernel",
        parameters=ROW_MAX_PARAMETERS,
        seed=seed,
        hidden=hidden,
    )


@check(notebook="06_triton_warmup", builds="gather_rows_kernel", kernel=True)
def check_gather_rows_kernel(gather_rows_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 3: `gather_rows_kernel`, launched by the check with grid (m,): out[i] = table[index[i]].

    The table's row r holds r + 0.01 * column, so a wrong row is named by the values it brought back.
    """
    return _tell(
        GATHER_ROWS_STORY,
        kernel=gather_rows_kernel,
        name="gather_rows_kernel",
        parameters=GATHER_ROWS_PARAMETERS,
        seed=seed,
        hidden=hidden,
    )


@check(notebook="06_triton_warmup", builds="softmax_kernel", kernel=True)
def check_softmax_kernel(softmax_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 4: `softmax_kernel`, launched by the check with grid (rows,): a row softmax computed
    tile by tile with a running max and sum."""
    return _tell(
        SOFTMAX_STORY,
        kernel=softmax_kernel,
        name="softmax_kernel",
        parameters=SOFTMAX_PARAMETERS,
        seed=seed,
        hidden=hidden,
    )


@check(notebook="06_triton_warmup", builds="load_block_kernel", kernel=True)
def check_load_block_kernel(load_block_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 5: `load_block_kernel`, launched by the check with grid (1,) and the pool's strides
    (block, head, slot), copies one [BLOCK, D] block of a pool [num_blocks, heads, block_size,
    head_dim], found through the block table, into out; slots without a token give 0.

    Each pool element holds its own offset + 0.5, so a wrong value says which address was loaded;
    the stale slots past the sequence's length hold NaN. ``hidden=True`` (the hidden tests) runs every one
    of ``HIDDEN_BLOCK_KINDS``, sized by ``seed``, in place of the visible block drawn
    from ``seed``.
    """
    return _tell(
        load_block_story(seed),
        kernel=load_block_kernel,
        name="load_block_kernel",
        parameters=LOAD_BLOCK_PARAMETERS,
        seed=seed,
        hidden=hidden,
    )


@check(notebook="06_triton_warmup", builds="block_scores_kernel", kernel=True)
def check_block_scores_kernel(block_scores_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 6: `block_scores_kernel`, launched by the check with grid (cdiv(length, BLOCK),): program b
    stores the scores scale * (q . k) of the BLOCK keys of block b, -inf for the slots past the length."""
    return _tell(
        BLOCK_SCORES_STORY,
        kernel=block_scores_kernel,
        name="block_scores_kernel",
        parameters=BLOCK_SCORES_PARAMETERS,
        seed=seed,
        hidden=hidden,
    )


@check(notebook="06_triton_warmup", builds="online_attention_kernel", kernel=True)
def check_online_attention_kernel(online_attention_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 7: `online_attention_kernel`, launched by the check with grid (1,): one query's attention
    over keys and values read BLOCK rows at a time, with a running max, sum and accumulator."""
    return _tell(
        ATTENTION_STORY,
        kernel=online_attention_kernel,
        name="online_attention_kernel",
        parameters=ONLINE_ATTENTION_PARAMETERS,
        seed=seed,
        hidden=hidden,
    )


@check(notebook="06_triton_warmup", builds="causal_scores_kernel", kernel=True)
def check_causal_scores_kernel(causal_scores_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 8: `causal_scores_kernel`, launched by the check with grid (cdiv(T, TILE), cdiv(start + T,
    BLOCK)): program (t, b) stores the [TILE, BLOCK] tile of scale * q . k, -inf where the key's position
    is past the query's (start + row); rows past T and keys past start + T are neither loaded nor stored."""
    return _tell(
        CAUSAL_STORY,
        kernel=causal_scores_kernel,
        name="causal_scores_kernel",
        parameters=CAUSAL_SCORES_PARAMETERS,
        seed=seed,
        hidden=hidden,
    )
