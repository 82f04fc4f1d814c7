"""Reading a paged cache into plain data the widgets draw: no drawing, no widgets here.

Works with any cache that has the chapter's attributes, the learner's as well as the
instructor's: ``tables`` (seq -> list of physical blocks), ``lengths`` (seq -> tokens),
``block_size``, ``allocator.refs`` (one count per block), ``allocator.free`` (the free list)
and ``k_pool[0].shape[0]`` (the number of blocks). Reading never changes the cache.

Sequences are named by ``str(seq)`` (their *label*) so every piece of state is plain JSON.

Invariants the reader checks, because a learner's cache may break them (each broken one
becomes a ``problem`` on the block, shown in the picture, never an exception):
  * a block's refcount is never below the number of table entries (and prefix-cache entries)
    pointing at it; more than that means someone else holds it ("other holders");
  * a block is on the free list exactly when its refcount is 0, and at most once (the pool's own
    invariant, ``paged_helpers.pool_invariant``, for the checks and the widgets alike).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..pool_invariant import PoolReading
from ..prefix_interface import cached_entries


class UnreadableCache(ValueError):
    """The object lacks an attribute the chapter's cache has. The message names it."""


@dataclass(frozen=True)
class BlockState:
    """One physical block as the picture shows it.

    ``users`` lists the label of every table entry pointing here, in table order (a label
    appears twice if one table holds the block twice, which is a bug worth seeing).
    ``cached`` counts prefix-cache entries holding the block; ``others`` counts references
    nobody visible accounts for (refs minus users minus cached, when positive).
    ``filled`` is the number of token slots written, the most any user has written.
    """

    index: int
    refs: int
    users: tuple[str, ...]
    cached: int
    others: int
    filled: int
    free: bool
    problem: str = ""

    @property
    def shared(self) -> bool:
        return self.refs > 1

    @property
    def cached_only(self) -> bool:
        """Held by the prefix cache and by no sequence: reusable, or evictable when the pool runs low."""
        return self.cached > 0 and not self.users


@dataclass(frozen=True)
class PoolState:
    """The whole pool and every block table, read at one moment."""

    num_blocks: int
    block_size: int
    blocks: tuple[BlockState, ...]
    tables: dict[str, list[int]]
    lengths: dict[str, int]
    free_list: list[int]
    problems: tuple[str, ...] = field(default=())

    @property
    def num_free(self) -> int:
        return len(self.free_list)

    @property
    def shared(self) -> list[int]:
        return [b.index for b in self.blocks if b.shared]

    @property
    def cached_only(self) -> list[int]:
        return [b.index for b in self.blocks if b.cached_only]


@dataclass(frozen=True)
class Copy:
    """Logical block ``logical`` of ``seq`` moved from physical ``source`` to ``target``:
    in the chapter's cache this happens only when reserve copies a shared block (copy-on-write)."""

    seq: str
    logical: int
    source: int
    target: int


def _attribute(obj: Any, path: str) -> Any:
    value = obj
    for part in path.split("."):
        if not hasattr(value, part):
            raise UnreadableCache(
                f"the cache has no `{path}`: the picture needs the chapter's attributes "
                "(tables, lengths, block_size, allocator.refs, allocator.free, k_pool)"
            )
        value = getattr(value, part)
    return value


def read_tables(cache: Any) -> dict[str, list[int]]:
    """A copy of the cache's block tables, keyed by label."""
    return {str(seq): [int(b) for b in table] for seq, table in _attribute(cache, "tables").items()}


def read_pool(cache: Any, prefix_cache: Any = None) -> PoolState:
    """Everything the picture needs, read from ``cache`` (and ``prefix_cache``, if given)."""
    tables = read_tables(cache)
    lengths = {str(seq): int(n) for seq, n in _attribute(cache, "lengths").items()}
    block_size = int(_attribute(cache, "block_size"))
    refs = [int(r) for r in _attribute(cache, "allocator.refs")]
    free_list = [int(b) for b in _attribute(cache, "allocator.free")]
    pools = _attribute(cache, "k_pool")
    num_blocks = int(pools[0].shape[0]) if len(pools) else len(refs)
    cached = Counter(block for _, block in cached_entries(prefix_cache)) if prefix_cache is not None else Counter()

    problems: list[str] = []
    users: dict[int, list[str]] = {}
    filled: dict[int, int] = {}
    for label, table in tables.items():
        length = lengths.get(label, 0)
        for logical, block in enumerate(table):
            if not 0 <= block < num_blocks:
                problems.append(f"{label}'s table points at block {block}, outside the pool of {num_blocks}")
                continue
            users.setdefault(block, []).append(label)
            tokens = min(max(length - logical * block_size, 0), block_size)
            filled[block] = max(filled.get(block, 0), tokens)
    if len(refs) != num_blocks:
        problems.append(f"allocator.refs has {len(refs)} counts for a pool of {num_blocks} blocks")

    on_free_list = Counter(free_list)
    reading = PoolReading(tuple(refs), tuple(free_list), len(free_list))
    blocks = []
    for index in range(num_blocks):
        count = refs[index] if index < len(refs) else 0
        holders = users.get(index, [])
        held_by_cache = cached.get(index, 0)
        blocks.append(
            BlockState(
                index=index,
                refs=count,
                users=tuple(holders),
                cached=held_by_cache,
                others=max(count - len(holders) - held_by_cache, 0),
                filled=filled.get(index, block_size if held_by_cache else 0),
                free=on_free_list[index] > 0,
                problem=_problem(reading, index, len(holders) + held_by_cache),
            )
        )
    return PoolState(num_blocks, block_size, tuple(blocks), tables, lengths, free_list, tuple(problems))


def _problem(reading: PoolReading, block: int, visible_holders: int) -> str:
    """What is wrong with one block's bookkeeping, in a few words; "" when nothing is.

    The free-list part is the pool's own invariant (pool_invariant); a leak is reported only when
    the count is not also below the holders the picture can see.
    """
    problem = reading.block_problem(block)
    if problem and not problem.endswith("(leaked)"):
        return problem
    refs = reading.refs[block] if block < len(reading.refs) else 0
    if refs < visible_holders:
        return f"refcount {refs} but {visible_holders} holders point here"
    return problem


def find_copies(before: dict[str, list[int]], after: dict[str, list[int]]) -> list[Copy]:
    """Table entries that now point at a different physical block: the copies copy-on-write made."""
    copies = []
    for label, old in before.items():
        new = after.get(label)
        if new is None:
            continue
        for logical, (source, target) in enumerate(zip(old, new, strict=False)):
            if source != target:
                copies.append(Copy(label, logical, source, target))
    return copies


@dataclass(frozen=True)
class SlotWords:
    """The token in every written slot of the pool, as words, from the tokens each sequence says it has.

    The cache holds keys and values, not tokens, so the words come from the caller: ``words[b][s]``
    holds the label of the token in slot s of block b (empty where no sequence's tokens reach),
    read through each table. Where two sequences put different tokens in one slot, it holds both and
    ``clashes`` says so: one physical slot holds one token's keys, so one of them was overwritten
    (a write into a shared block without copy-on-write).
    """

    words: dict[int, list[tuple[str, ...]]]
    clashes: tuple[str, ...] = ()


def slot_words(state: PoolState, tokens: Any, token_text: Any = str) -> SlotWords:
    """``tokens``: sequence label -> token ids (only sequences in ``state.tables`` are read)."""
    size = state.block_size
    first: dict[tuple[int, int], tuple[str, int]] = {}  # (block, slot) -> (first label there, its token)
    words: dict[int, list[tuple[str, ...]]] = {}
    clashes: list[str] = []
    for label, table in state.tables.items():
        ids = tokens.get(label)
        if ids is None:
            continue
        written = min(len(ids), state.lengths.get(label, 0), len(table) * size)
        for position in range(written):
            block, slot = table[position // size], position % size
            if not 0 <= block < state.num_blocks:
                continue
            token, word = int(ids[position]), str(token_text(int(ids[position])))
            labels = words.setdefault(block, [()] * size)
            earlier = first.setdefault((block, slot), (label, token))
            if word not in labels[slot]:
                labels[slot] = (*labels[slot], word)
            if earlier[1] != token and len(labels[slot]) == 2:
                clashes.append(
                    f"block {block}, slot {slot}: {earlier[0]}'s token there is {labels[slot][0]!r}, {label}'s is "
                    f"{word!r}; one slot holds one token's keys, so one of them was overwritten (a write into a "
                    "shared block without copy-on-write)"
                )
    return SlotWords(words, tuple(clashes))
