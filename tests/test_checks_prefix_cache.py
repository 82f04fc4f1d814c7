"""check_prefix_cache: the instructor's PrefixCache passes, realistic wrong ones fail with a message
that names the bug, and the student release fails with "not implemented yet".

Wrong implementations are subclasses of the instructor's class (notebook 05) whose methods are
rebuilt by the small factories below with exactly one mistake switched on.
"""

from __future__ import annotations

import pytest

from paged_helpers.checks import NotImplementedYet, check_prefix_cache

from conftest import solution
from student_release import release_definition

NOTEBOOK = "05_prefix_caching"


def whole_prefix(tokens, end, size):
    return tuple(tokens[:end])


def block_text(tokens, end, size):
    return tuple(tokens[end - size : end])


def position_and_text(tokens, end, size):
    return (end // size, tuple(tokens[end - size : end]))


def make_attach(key=whole_prefix, keep_last_token=True, touch="tail first", share=True, stop_at_miss=True):
    """attach with one mistake: ``touch`` is "tail first" (right), "root first" (the chapter's) or None."""

    def attach(self, seq, prompt):
        self.cache.create(seq)
        size, reused, hits = self.cache.block_size, 0, []
        limit = len(prompt) - 1 if keep_last_token else len(prompt)
        for end in range(size, limit + 1, size):
            entry = key(prompt, end, size)
            block = self.entries.get(entry)
            if block is None:
                if stop_at_miss:
                    break
                continue
            if share:
                self.cache.allocator.share(block)
            self.cache.tables[seq].append(block)
            hits.append(entry)
            reused += size
        if touch:
            for entry in reversed(hits) if touch == "tail first" else hits:
                self.entries.move_to_end(entry)
        self.cache.lengths[seq] = reused
        return reused

    return attach


def make_remember(
    key=whole_prefix,
    full_only=True,
    share=True,
    skip_cached=True,
    order="tail first",
    touch_cached=True,
    skip_only_same_block=False,
):
    """remember with one mistake: ``order`` "root first" inserts block 0 first (the chapter's order)."""

    def remember(self, seq, tokens):
        size = self.cache.block_size
        count = len(tokens) // size if full_only else -(-len(tokens) // size)
        indices = reversed(range(count)) if order == "tail first" else range(count)
        for index in indices:
            entry = key(tokens, (index + 1) * size, size)
            block = self.cache.tables[seq][index]
            cached = entry in self.entries and (not skip_only_same_block or self.entries[entry] == block)
            if skip_cached and cached:
                if touch_cached:
                    self.entries.move_to_end(entry)
                continue
            if share:
                self.cache.allocator.share(block)
            self.entries[entry] = block

    return remember


def make_evict(only_unused=True, stop_when_enough=True, short="free what it can"):
    """evict with one mistake. ``short``: what it does when fewer blocks can be freed than asked, "free
    what it can" or "refuse first" (both right: MemoryError with nothing changed), "raise after" (wrong:
    MemoryError after dropping entries) or "always raise" (wrong: MemoryError whenever nothing is free)."""

    def evict(self, blocks_wanted):
        allocator = self.cache.allocator
        if short == "always raise" and allocator.num_free < blocks_wanted:
            raise MemoryError(f"only {allocator.num_free} blocks are free")
        possible = allocator.num_free + sum(1 for block in self.entries.values() if allocator.refs[block] == 1)
        if short == "refuse first" and possible < blocks_wanted:
            raise MemoryError(f"only {possible} blocks can be freed")
        for entry in list(self.entries):
            if stop_when_enough and self.cache.allocator.num_free >= blocks_wanted:
                break
            block = self.entries[entry]
            if self.cache.allocator.refs[block] == 1 or not only_unused:
                del self.entries[entry]
                self.cache.allocator.release(block)
        if short == "raise after" and allocator.num_free < blocks_wanted:
            raise MemoryError(f"only {allocator.num_free} blocks could be freed")

    return evict


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "PrefixCache"), solution(NOTEBOOK, "PagedKVCache")


def variant(right, name, **methods):
    return type(name, (right[0],), methods)


WRONG = {
    "key_without_history": dict(attach=make_attach(key=block_text), remember=make_remember(key=block_text)),
    "key_by_position": dict(attach=make_attach(key=position_and_text), remember=make_remember(key=position_and_text)),
    "last_token_reused": dict(attach=make_attach(keep_last_token=False)),
    "evicts_block_in_use": dict(evict=make_evict(only_unused=False)),
    "remember_publishes_partial": dict(remember=make_remember(full_only=False)),
    "no_lru_touch": dict(attach=make_attach(touch=None), remember=make_remember(touch_cached=False)),
    "attach_never_touches": dict(attach=make_attach(touch=None)),
    "chapter_root_first_order": dict(
        attach=make_attach(touch="root first"), remember=make_remember(order="root first", touch_cached=False)
    ),
    "attach_touches_root_first": dict(attach=make_attach(touch="root first")),
    "remember_inserts_root_first": dict(remember=make_remember(order="root first")),
    "remember_leaves_cached_entries_untouched": dict(remember=make_remember(touch_cached=False)),
    "attach_continues_past_a_miss": dict(attach=make_attach(stop_at_miss=False)),
    "remember_replaces_another_copy": dict(remember=make_remember(skip_only_same_block=True)),
    "no_own_reference": dict(remember=make_remember(share=False)),
    "attach_without_share": dict(attach=make_attach(share=False)),
    "remember_shares_again": dict(remember=make_remember(skip_cached=False)),
    "evicts_everything": dict(evict=make_evict(stop_when_enough=False)),
    "evict_raises_after_dropping": dict(evict=make_evict(short="raise after")),
    "evict_raises_when_it_could_free_enough": dict(evict=make_evict(short="always raise")),
}


def test_right_implementation_passes(right):
    for seed in (0, 1, 2026):
        check_prefix_cache(*right, seed=seed)


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_check_names_the_bug(bug, right, failing_message, message_snapshot):
    """The snapshot is the second failure, whose hint also shows the concrete change."""
    wrong = variant(right, bug, **WRONG[bug])
    first = failing_message(check_prefix_cache, wrong, right[1])
    message = failing_message(check_prefix_cache, wrong, right[1])
    assert message == message_snapshot
    if "more_hint()" in first:  # a two-tier hint: the change only the second time
        assert "the change" not in first.replace("the concrete change", "")
        assert "the change (same failure again):" in message


TIERED = {
    "chapter_root_first_order": "move_to_end the keys it hit in reverse order",
    "attach_continues_past_a_miss": "break, not continue",
    "remember_replaces_another_copy": "keep that entry and take no reference",
    "key_without_history": "tuple(prompt[:(i + 1) * block_size])",
}


@pytest.mark.parametrize("bug", sorted(TIERED))
def test_the_concrete_change_waits_for_a_second_failure_or_more_hint(bug, right, failing_message, capsys):
    from paged_helpers.checks import more_hint

    wrong = variant(right, bug, **WRONG[bug])
    first = failing_message(check_prefix_cache, wrong, right[1])
    assert TIERED[bug] not in first and "more_hint()" in first
    assert TIERED[bug] in more_hint()
    assert TIERED[bug] in capsys.readouterr().out
    assert TIERED[bug] in failing_message(check_prefix_cache, wrong, right[1])


def test_release_says_not_implemented_yet(tmp_path, right):
    finished = ("02_block_allocator", "03_paged_kv_cache", "04_fork_and_copy_on_write")
    released = release_definition(tmp_path, NOTEBOOK, "PrefixCache", finished=finished)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_prefix_cache(released, right[1])


# --------------------------------------------------------------------------- issue 12: hidden scenario kinds


def test_hidden_scenarios_catch_an_attach_that_looks_at_three_blocks_only():
    prefix_cache = solution("05_prefix_caching", "PrefixCache")
    cache = solution("04_fork_and_copy_on_write", "PagedKVCache")

    class ShortSighted(prefix_cache):
        def attach(self, seq, prompt):
            return super().attach(seq, list(prompt)[:13])

    check_prefix_cache(ShortSighted, cache, seed=0)  # the visible prompts reuse at most 3 blocks
    messages = []
    for seed in range(4242, 4250):
        check_prefix_cache(prefix_cache, cache, seed=seed, hidden=True)
        try:
            check_prefix_cache(ShortSighted, cache, seed=seed, hidden=True)
        except AssertionError as error:
            messages.append((seed, str(error)))
    assert messages, "no hidden prompt reused more than 3 blocks"
    seed, message = messages[0]
    assert message.startswith("a hidden scenario failed: prompts "), message
    assert str(seed) not in message and "expected:" not in message, message


def test_evict_may_refuse_what_it_cannot_free_with_nothing_changed(right):
    """Notebook 05: when fewer blocks can be freed than asked, evict frees what it can and returns, or
    raises MemoryError having changed nothing. Both designs pass (issue 25)."""
    refusing = variant(right, "refuses_first", evict=make_evict(short="refuse first"))
    for seed in (0, 1, 2026):
        check_prefix_cache(refusing, right[1], seed=seed)
    check_prefix_cache(refusing, right[1], seed=77, hidden=True)
