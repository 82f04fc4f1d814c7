"""What each of the learner's tree calls must give, checked right after the call (``check_radix_cache``).

``TreeEngine`` (``tree``) makes the call; these functions compare what came back, and what changed
in the tree, with the check's account (``TreeAccount``), and fail naming the rule broken:

* ``expect_match``: no block left the tree; a (node, blocks) pair; the node ends exactly where the
  match ends; each matched block holds the keys of the probe's prefix ending with it;
* ``expect_evicted``: only unlocked nodes left the tree, and the cache released each of their blocks;
* ``expect_inserted``: insert's node ends where the inserted whole blocks end.
"""

from __future__ import annotations

from typing import Any

from ..reading.strict import learner_int_list
from ..speaking.failure import fail
from .diagnosis import (
    INSERT_NODE_HINT,
    LEAF_HINT,
    LOCK_HINT,
    MATCH_SHAPE_HINT,
    SPLIT_HINT,
    SPLIT_KEEPS_HINT,
    SPLIT_LOSES_HINT,
)
from .tree_account import TreeAccount
from .tree_reads import BLOCK

__all__ = ["expect_evicted", "expect_inserted", "expect_match"]


def expect_match(
    account: TreeAccount, tokens: list[int], got: Any, cached: set[int], what: str
) -> tuple[Any, list[int]]:
    """``got`` from ``match(tokens)``, with ``cached`` the tree's blocks before it: (node, blocks)."""
    reads = account.reads
    where = f"{reads.scenario}, match({what})"
    lost = sorted(cached - reads.tree_blocks())
    if lost:  # before the blocks match returned are read: a lost tail would be blamed on them, or on evict
        fail(
            where,
            "every block cached before the match still in the tree (match may split a node, never drop one)",
            f"the split lost the rest of the edge: block(s) {lost} left the tree ("
            + "; ".join(f"block {block} holds {account.describe(block)}" for block in lost)
            + ")",
            SPLIT_LOSES_HINT,
        )
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], (list, tuple))):
        fail(where, "a pair (node, list of blocks)", repr(got), MATCH_SHAPE_HINT)
    node, blocks = got[0], learner_int_list(got[1], f"the blocks match({what}) returned", reads.scenario)
    reused = len(blocks) * BLOCK
    path = reads.path(node, where)
    if path != tuple(tokens[:reused]):
        # The learner's blocks may claim more than the probe shares: then say where the path leaves it.
        differ_at = (n for n, (a, b) in enumerate(zip(path, tokens, strict=False)) if a != b)
        shared = next(differ_at, min(len(path), len(tokens)))
        left_the_probe = f", only the first {shared} of them the probe's" if shared < len(path) else ""
        returned = f"the {len(blocks)} {'block' if len(blocks) == 1 else 'blocks'} returned"
        claimed = (
            f"the returned node's path equal to the probe's first {reused} tokens ({returned})"
            if reused <= len(tokens)
            else f"a match of at most the probe's {len(tokens)} tokens ({returned} cover {reused})"
        )
        fail(
            where,
            claimed,
            f"it ends after {len(path)} tokens{left_the_probe}",
            SPLIT_HINT,
        )
    for index, block in enumerate(blocks):
        wanted = tuple(tokens[: (index + 1) * BLOCK])
        if account.ledger.contents.get(block) != wanted:
            fail(
                where,
                f"block {index} of the match holding the keys of tokens 0..{(index + 1) * BLOCK - 1} of this probe",
                f"block {block}, which holds {account.describe(block)}",
                SPLIT_KEEPS_HINT,
            )
    return node, blocks


def expect_evicted(
    account: TreeAccount, before: dict[int, tuple[Any, tuple[int, ...], int]], refs: list[int], where: str
) -> None:
    """After evict: only unlocked leaves left the tree (a cascade of them), each releasing its blocks.
    ``before``: id(node) -> (node, its path, its lock count) before the call; ``refs``: the counts then."""
    reads = account.reads
    remaining = {id(node) for node, _ in reads.nodes()}
    removed = [entry for key, entry in before.items() if key not in remaining]
    for _, path, locks in removed:
        if locks:
            fail(
                where,
                "every locked node kept: a running request uses it",
                f"the node ending after {len(path)} tokens (lock_count {locks}) left the tree",
                LOCK_HINT,
            )
    dropped = {}
    for node, _, _ in removed:
        for block in reads.blocks(node):
            dropped[block] = dropped.get(block, 0) + 1
    refs_now = reads.refs()
    for node, path, _ in removed:
        kept = [block for block in reads.blocks(node) if refs[block] - refs_now[block] != dropped[block]]
        if kept:
            fail(
                where,
                f"the blocks of every node that left the tree released once by the cache (the node "
                f"ending after {len(path)} tokens: blocks {reads.blocks(node)})",
                f"block(s) {kept} still hold the cache's reference, though no match can reach them",
                LEAF_HINT,
            )


def expect_inserted(account: TreeAccount, new: Any, full: tuple[int, ...], name: str, where: str) -> None:
    """insert's node ``new`` ends where ``name``'s ``full`` whole blocks end."""
    if account.reads.path(new, where) != full:
        fail(
            where,
            f"the node where {name}'s {len(full)} tokens of whole blocks end",
            f"a node ending after {len(account.reads.path(new, where))} tokens",
            INSERT_NODE_HINT,
        )
