"""check_block_allocator: the instructor's allocator passes; realistic wrong ones fail with a message
that names the bug; the student release fails with "not implemented yet".

Each wrong allocator is a small subclass of the instructor's (notebook 02) that changes one thing.
"""

from __future__ import annotations

from collections import deque

import pytest

from paged_helpers.checks import NotImplementedYet, check_block_allocator
from paged_helpers.checks.allocator import HIDDEN_KINDS

from conftest import SECRET_SEEDS, solution
from lying_values import EqualsAnything
from student_release import release_definition

NOTEBOOK = "02_block_allocator"


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "BlockAllocator")


@pytest.mark.parametrize("seed", [0, 1, 2026])
def test_the_instructor_solution_passes_silently(right, seed, capsys):
    check_block_allocator(right, seed=seed)
    assert capsys.readouterr().err == ""


def frees_on_any_release(base):
    class Allocator(base):
        def release(self, block):
            self.refs[block] -= 1
            self.free.append(block)

    return Allocator


def release_past_zero_is_silent(base):
    class Allocator(base):
        def release(self, block):
            if self.refs[block] == 0:
                return
            super().release(block)

    return Allocator


def release_past_zero_raises_after_decrementing(base):
    """The chapter's order: decrement first, then notice the count went negative."""

    class Allocator(base):
        def release(self, block):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free.append(block)
            elif self.refs[block] < 0:
                raise RuntimeError(f"Block {block} released more times than it was referenced")

    return Allocator


def release_past_zero_frees_again(base):
    class Allocator(base):
        def release(self, block):
            self.refs[block] = max(self.refs[block] - 1, 0)
            if self.refs[block] == 0:
                self.free.append(block)

    return Allocator


def share_does_not_increment(base):
    class Allocator(base):
        def share(self, block):
            pass

    return Allocator


def share_accepts_a_free_block(base):
    """The chapter's one-line share: counts any block, even one on the free list."""

    class Allocator(base):
        def share(self, block):
            self.refs[block] += 1

    return Allocator


def allocate_leaves_the_count_at_zero(base):
    class Allocator(base):
        def allocate(self):
            if not self.free:
                raise MemoryError("KV block pool exhausted")
            return self.free.popleft()

    return Allocator


def allocate_does_not_raise_memory_error(base):
    class Allocator(base):
        def allocate(self):
            block = self.free.popleft()  # IndexError on an empty deque
            self.refs[block] = 1
            return block

    return Allocator


def allocate_does_not_take_the_block(base):
    class Allocator(base):
        def allocate(self):
            if not self.free:
                raise MemoryError("KV block pool exhausted")
            block = self.free[0]
            self.refs[block] = 1
            return block

    return Allocator


def num_free_counts_the_pool(base):
    class Allocator(base):
        @property
        def num_free(self):
            return len(self.refs)

    return Allocator


def pool_one_block_short(base):
    class Allocator(base):
        def __init__(self, num_blocks):
            super().__init__(num_blocks)
            self.free = deque(range(num_blocks - 1))

    return Allocator


WRONG = [
    frees_on_any_release,
    release_past_zero_is_silent,
    release_past_zero_raises_after_decrementing,
    release_past_zero_frees_again,
    share_does_not_increment,
    share_accepts_a_free_block,
    allocate_leaves_the_count_at_zero,
    allocate_does_not_raise_memory_error,
    allocate_does_not_take_the_block,
    num_free_counts_the_pool,
    pool_one_block_short,
]


@pytest.mark.parametrize("make_wrong", WRONG, ids=lambda f: f.__name__)
def test_a_wrong_allocator_fails_with_a_message_naming_the_bug(right, make_wrong, failing_message, message_snapshot):
    """The snapshot is the second failure, whose two-tier hints show the concrete change."""
    first = failing_message(check_block_allocator, make_wrong(right))
    message = failing_message(check_block_allocator, make_wrong(right))
    assert message == message_snapshot
    assert ("more_hint()" in first) == ("the change (same failure again):" in message)


def test_the_first_failure_names_the_idea_and_the_second_the_line(right, failing_message):
    first = failing_message(check_block_allocator, pool_one_block_short(right))
    assert "every block free and every count at 0" in first and "deque(range" not in first
    assert "deque(range(num_blocks))" in failing_message(check_block_allocator, pool_one_block_short(right))


def test_the_student_release_says_not_implemented_yet(tmp_path):
    allocator_class = release_definition(tmp_path, NOTEBOOK, "BlockAllocator")
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_block_allocator(allocator_class)


def test_the_solution_refuses_bad_input_without_losing_anything(right):
    """The notebook's promise: a refused call changes nothing."""
    allocator = right(3)
    block = allocator.allocate()
    for bad in (-1, 3, "0"):
        with pytest.raises(ValueError, match="block must be an id"):
            allocator.release(bad)
    with pytest.raises(RuntimeError):
        allocator.share(2)
    assert allocator.refs == [1, 0, 0] and list(allocator.free) == [1, 2] and block == 0


# --------------------------------------------------------------------------- issue 12: strict values, hidden kinds


def test_values_that_equal_everything_are_refused(right):
    class FakeCount(right):
        @property
        def num_free(self):
            return EqualsAnything(0)

    class FakeRefs(right):
        def __init__(self, num_blocks):
            super().__init__(num_blocks)
            self.refs = [EqualsAnything(0)] * num_blocks

    for wrong, name in ((FakeCount, "num_free"), (FakeRefs, "refs")):
        with pytest.raises(AssertionError, match=rf"(?s){name}.*a value of type .*EqualsAnything"):
            check_block_allocator(wrong)


def test_an_allocate_returning_an_odd_int_is_refused(right):
    class OddBlock(right):
        def allocate(self):
            return EqualsAnything(super().allocate())

    with pytest.raises(AssertionError, match="int subclass"):
        check_block_allocator(OddBlock)


def _capped_share(right):
    class CappedShare(right):
        """Counts held in a small counter: the eighth table sharing a block is not counted."""

        def share(self, block):
            self._check_block(block)
            if self.refs[block] == 0:
                raise RuntimeError(f"block {block} is free")
            self.refs[block] = min(self.refs[block] + 1, 7)

    return CappedShare


def test_hidden_scenarios_catch_what_the_visible_ones_miss_in_every_draw(right, capsys):
    """A share() that stops counting at 7 passes the visible scenarios; every hidden draw catches it
    (the seed sizes the kinds, never which run or how far), and the message shows no number of it."""
    wrong = _capped_share(right)
    for seed in (0, 2026):
        check_block_allocator(wrong, seed=seed)  # the visible scenarios and the kernel's hidden seed pass
    kinds = tuple(f"a hidden scenario failed: {kind}" for kind in HIDDEN_KINDS)
    for seed in SECRET_SEEDS:  # as a grader's secret seeds would be
        with pytest.raises(AssertionError) as caught:
            check_block_allocator(wrong, seed=seed, hidden=True)
        message = str(caught.value)
        assert message.startswith(kinds), message
        assert str(seed) not in message and "pool of" not in message and "expected:" not in message, message
        assert "add 1 to its count" in message


@pytest.mark.parametrize("make_wrong", [*WRONG, _capped_share], ids=lambda f: f.__name__)
def test_every_wrong_allocator_fails_every_hidden_draw(right, make_wrong):
    """The hidden kinds run in full whatever the seed, so a bug they catch at one secret seed they catch
    at all of them: resubmitting until a draw misses it gains nothing."""
    wrong = make_wrong(right)
    passed = []
    for seed in SECRET_SEEDS:
        try:
            check_block_allocator(wrong, seed=seed, hidden=True)
        except AssertionError as error:
            assert str(error).startswith("a hidden scenario failed: "), error
        else:
            passed.append(seed)
    assert not passed, f"{make_wrong.__name__} passed the hidden scenarios at seeds {passed}"


def test_the_instructor_solution_passes_the_hidden_scenarios(right):
    for seed in (5, 77, 2026, 123457):
        check_block_allocator(right, seed=seed, hidden=True)


# --------------------------------------------------------------------------- issue 25: a wrong container is no trick


def _free_as_a_set(right):
    class SetAllocator(right):
        """An honest allocator on a set of free ids: the notebook asks for a deque."""

        def __init__(self, num_blocks):
            super().__init__(num_blocks)
            self.free = set(range(num_blocks))

        def allocate(self):
            if not self.free:
                raise MemoryError("pool exhausted")
            block = self.free.pop()
            self.refs[block] = 1
            return block

        def release(self, block):
            self._check_block(block)
            if self.refs[block] == 0:
                raise RuntimeError(f"block {block} is free")
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free.add(block)

    return SetAllocator


@pytest.mark.parametrize("container", [set, frozenset, dict.fromkeys])
def test_a_free_list_of_the_wrong_container_is_a_plain_failure(right, container):
    """A set (or dict) where the notebook asks for a deque fails like any other mistake, naming what was
    expected and what was found: it is not `Refused`, which the grader reports as a cheating attempt."""
    from paged_helpers.checks.speaking.failure import CheckFailed, Refused

    class Wrong(_free_as_a_set(right)):
        def __init__(self, num_blocks):
            super().__init__(num_blocks)
            self.free = container(range(num_blocks))

    with pytest.raises(CheckFailed) as caught:
        check_block_allocator(Wrong)
    assert not isinstance(caught.value, Refused)
    message = str(caught.value)
    assert "`free`" in message and "collections.deque" in message, message
    assert f"a value of type {type(container(range(1))).__name__}" in message, message


def test_a_set_free_list_is_named_as_a_set(right):
    from paged_helpers.checks.speaking.failure import Refused

    with pytest.raises(AssertionError) as caught:
        check_block_allocator(_free_as_a_set(right))
    assert not isinstance(caught.value, Refused)
    assert "got:      a value of type set" in str(caught.value) and "popleft" not in str(caught.value)


def test_a_look_alike_free_list_is_still_refused(right):
    from paged_helpers.checks.speaking.failure import Refused

    class SaysItHoldsEverything:
        def __eq__(self, other):
            return True

        def __iter__(self):
            return iter(())

    class Wrong(right):
        def __init__(self, num_blocks):
            super().__init__(num_blocks)
            self.free = SaysItHoldsEverything()

    with pytest.raises(Refused, match="SaysItHoldsEverything"):
        check_block_allocator(Wrong)


def test_strict_readers_refuse_only_look_alikes():
    from paged_helpers.checks.reading.strict import learner_int, learner_int_list
    from paged_helpers.checks.speaking.failure import CheckFailed, Refused

    for plain in ({1, 2}, {1: 2}, frozenset({3})):
        with pytest.raises(CheckFailed) as caught:
            learner_int_list(plain, "the table", "a scenario")
        assert not isinstance(caught.value, Refused), plain
        assert f"a value of type {type(plain).__name__}" in str(caught.value)
    with pytest.raises(CheckFailed) as caught:
        learner_int(2.0, "the count", "a scenario")
    assert not isinstance(caught.value, Refused) and "a value of type float" in str(caught.value)
    with pytest.raises(Refused):
        learner_int(EqualsAnything(2), "the count", "a scenario")
    with pytest.raises(Refused):
        learner_int_list({EqualsAnything(2)}, "the table", "a scenario")
