"""check_physical_slot: the instructor's function passes; realistic wrong ones fail with a message
that names the bug; the student release fails with "not implemented yet".

Each wrong version is one plausible slip in the one line notebook 01 asks for.
"""

from __future__ import annotations

import pytest

from paged_helpers.checks import NotImplementedYet, check_physical_slot

from conftest import solution
from student_release import release_definition

NOTEBOOK = "01_block_tables"


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "physical_slot")


@pytest.mark.parametrize("seed", [0, 1, 2026])
def test_the_instructor_solution_passes_silently(right, seed, capsys):
    check_physical_slot(right, seed=seed)
    assert capsys.readouterr().err == ""


def table_indexed_by_position(table, position, block_size):
    return table[position], position % block_size


def logical_block_instead_of_physical(table, position, block_size):
    return position // block_size, position % block_size


def pair_in_the_wrong_order(table, position, block_size):
    return position % block_size, table[position // block_size]


def offset_by_floor_division(table, position, block_size):
    return table[position // block_size], position // block_size


def offset_with_the_wrong_divisor(table, position, block_size):
    return table[position // block_size], position % len(table)


def off_by_one_at_the_boundary(table, position, block_size):
    return table[max(position - 1, 0) // block_size], position % block_size


def rounds_up_instead_of_down(table, position, block_size):
    return table[min(-(-position // block_size), len(table) - 1)], position % block_size


def the_chapter_line_without_bounds(table, position, block_size):
    return table[position // block_size], position % block_size


def bounds_checked_by_division(table, position, block_size):
    if position < 0 or position // block_size >= len(table):
        raise ValueError(f"position {position} is outside the table")
    return table[position // block_size], position % block_size


def only_negative_positions_checked(table, position, block_size):
    """Past the end of the table, table[...] raises IndexError by itself: no bounds check there at all."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    if position < 0:
        raise ValueError(f"position {position} is negative")
    return table[position // block_size], position % block_size


def a_value_error_naming_nothing(table, position, block_size):
    if block_size < 1 or not 0 <= position < len(table) * block_size:
        raise ValueError("out of range")
    return table[position // block_size], position % block_size


def block_size_checked_after_position(table, position, block_size):
    if not 0 <= position < len(table) * block_size:
        raise ValueError(f"position {position} is outside the table")
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    return table[position // block_size], position % block_size


def an_index_error_on_purpose(table, position, block_size):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    if not 0 <= position < len(table) * block_size:
        raise IndexError(f"position {position} is outside the table")
    return table[position // block_size], position % block_size


def returns_a_string(table, position, block_size):
    return f"{table[position // block_size]}:{position % block_size}"


WRONG = [
    table_indexed_by_position,
    logical_block_instead_of_physical,
    pair_in_the_wrong_order,
    offset_by_floor_division,
    offset_with_the_wrong_divisor,
    off_by_one_at_the_boundary,
    rounds_up_instead_of_down,
    the_chapter_line_without_bounds,
    bounds_checked_by_division,
    returns_a_string,
    only_negative_positions_checked,
    a_value_error_naming_nothing,
    an_index_error_on_purpose,
    block_size_checked_after_position,
]


@pytest.mark.parametrize("wrong", WRONG, ids=lambda f: f.__name__)
def test_a_wrong_function_fails_with_a_message_naming_the_bug(wrong, failing_message, message_snapshot):
    assert failing_message(check_physical_slot, wrong) == message_snapshot


def test_the_student_release_says_not_implemented_yet(tmp_path):
    physical_slot = release_definition(tmp_path, NOTEBOOK, "physical_slot")
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_physical_slot(physical_slot)


# --------------------------------------------------------------------------- stretch: the sweep


def test_the_sweep_passes(capsys):
    from paged_helpers.checks import check_utilization_sweep

    check_utilization_sweep(solution("01_block_tables", "utilization_sweep"))
    assert "check_utilization_sweep: 4 sets of requests" in capsys.readouterr().out


def sweep_floor_plus_one(lengths, block_sizes):
    return {s: sum(lengths) / (s * sum(n // s + 1 for n in lengths)) for s in block_sizes}


def sweep_floor(lengths, block_sizes):
    return {s: sum(lengths) / max(1, s * sum(n // s for n in lengths)) for s in block_sizes}


def sweep_rounding_the_total(lengths, block_sizes):
    return {s: sum(lengths) / (s * -(-sum(lengths) // s)) for s in block_sizes}


@pytest.mark.parametrize(
    "wrong", [sweep_floor_plus_one, sweep_floor, sweep_rounding_the_total], ids=lambda f: f.__name__
)
def test_a_wrong_sweep_is_named(wrong, failing_message, message_snapshot):
    from paged_helpers.checks import check_utilization_sweep

    assert failing_message(check_utilization_sweep, wrong) == message_snapshot


def test_an_unfinished_sweep_is_noted_not_raised(capsys):
    from paged_helpers.checks import check_utilization_sweep

    def stub(lengths, block_sizes):
        raise NotImplementedError()

    check_utilization_sweep(stub, unfinished="note")
    assert "not implemented yet" in capsys.readouterr().out
