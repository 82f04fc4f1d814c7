"""The check's own account of a radix tree run, and the invariants the learner's tree must keep with it.

``TreeAccount`` owns what the check knows, never what the learner's code decides: the prefix whose
keys the check "prefilled" into each block (``ledger.contents``), the live requests' tables
(``ledger.tables``), each running request's locked node and its prefix (``locked``), and each
inserted sequence's name in messages (``names``). Only the check writes these records. After every
step ``verify`` walks the learner's tree (``TreeReads``) and holds it to them:

* every edge is a whole number of blocks, and each block holds the keys of the prefix ending at its
  place in the tree;
* each block's count is one for the cache (if it is in the tree) plus one per request table holding
  it, and the free count is the number of blocks nobody holds;
* each node's lock count is the number of live locks on it or below it.
"""

from __future__ import annotations

from typing import Any

from ..reading.ledger import Ledger
from ..speaking.failure import fail
from .diagnosis import LEAF_HINT, LOCK_HINT, RELEASE_HINT, SHARE_HINT, SPLIT_KEEPS_HINT, SPLIT_KEEPS_NODE_HINT
from .tree_reads import BLOCK, TreeReads

__all__ = ["TreeAccount"]


class TreeAccount:
    """What the check knows of one tree over a pool of ``num_blocks`` blocks (see the module)."""

    def __init__(self, reads: TreeReads, num_blocks: int) -> None:
        self.reads, self.num_blocks = reads, num_blocks
        # ledger.tables: the live requests' block tables; ledger.contents[block]: the prefix whose keys
        # the check wrote in it
        self.ledger = Ledger(num_blocks)
        self.locked: dict[str, tuple[Any, tuple[int, ...]]] = {}  # request -> (node it locked, prefix)
        self.names: dict[tuple[int, ...], str] = {}  # inserted sequence -> its name in messages

    def describe(self, block: int) -> str:
        """What ``block`` holds by the check's account, in words for a message."""
        prefix = self.ledger.contents.get(block)
        if prefix is None:
            return "nothing written by this check"
        for sequence, name in self.names.items():
            if sequence[: len(prefix)] == prefix:
                return f"the keys of {name}'s tokens 0..{len(prefix) - 1}"
        return f"the keys of another prompt's first {len(prefix)} tokens"

    def verify(self, where: str) -> None:
        """Structure, blocks at their positions, reference counts, lock counts."""
        in_tree = self._blocks_in_tree(where)
        self._expect_counts(in_tree, where)
        self.verify_locks(where)

    def _blocks_in_tree(self, where: str) -> dict[int, int]:
        """Every edge whole blocks, each block holding its prefix's keys: how many nodes hold each block."""
        in_tree: dict[int, int] = {}
        for node, path in self.reads.nodes():
            tokens, blocks = self.reads.tokens(node), self.reads.blocks(node)
            if not tokens or len(tokens) % BLOCK or len(blocks) != len(tokens) // BLOCK:
                fail(
                    where,
                    f"every edge a whole number of blocks of {BLOCK} tokens, one block per {BLOCK} tokens",
                    f"the node ending after {len(path)} tokens holds {len(tokens)} tokens, blocks {blocks}",
                    SPLIT_KEEPS_HINT,
                )
            start = len(path) - len(tokens)
            for index, block in enumerate(blocks):
                end = start + (index + 1) * BLOCK
                if self.ledger.contents.get(block) != path[:end]:
                    fail(
                        where,
                        f"block {index} of the node ending after {len(path)} tokens holding the keys of its "
                        f"path's tokens 0..{end - 1}",
                        f"block {block}, which holds {self.describe(block)}",
                        SPLIT_KEEPS_HINT,
                    )
                in_tree[block] = in_tree.get(block, 0) + 1
        return in_tree

    def _expect_counts(self, in_tree: dict[int, int], where: str) -> None:
        """Each block's count: one for the cache if in the tree, one per table; the free count to match."""
        in_tables: dict[int, int] = {}
        for table in self.ledger.tables.values():
            for block in table:
                in_tables[block] = in_tables.get(block, 0) + 1
        refs = self.reads.refs()
        for block in range(self.num_blocks):
            cached = in_tree.get(block, 0)
            expected = cached + in_tables.get(block, 0)
            got = refs[block]
            if got != expected:
                who = f"{cached} for the cache + {in_tables.get(block, 0)} request table(s)"
                if got > expected and not cached:
                    hint = (
                        f"block {block} holds {self.describe(block)} but is not in the tree: "
                        "evict must release every block of each node it removes; " + LEAF_HINT
                    )
                else:
                    hint = SHARE_HINT
                fail(where, f"block {block}: refcount {expected} ({who})", f"refcount {got}", hint)
        expected_free = sum(1 for block in range(self.num_blocks) if not refs[block])
        if self.reads.num_free() != expected_free:
            fail(where, f"{expected_free} free blocks", f"{self.reads.num_free()}", RELEASE_HINT)

    def verify_locks(self, where: str) -> None:
        """Each locked node still in the tree, ending where it did; each node's count its live locks."""
        expected: dict[int, int] = {}
        for request, (node, prefix) in self.locked.items():
            if self.reads.path(node, where) != prefix:
                fail(
                    where,
                    f"the node request {request!r} locked still ending after its {len(prefix)} tokens",
                    f"it ends after {len(self.reads.path(node, where))} tokens",
                    SPLIT_KEEPS_NODE_HINT,
                )
            if id(node) not in {id(other) for other, _ in self.reads.nodes()}:
                fail(where, f"the node request {request!r} locked still in the tree", "it was removed", LOCK_HINT)
            while node is not None:
                expected[id(node)] = expected.get(id(node), 0) + 1
                node = node.parent
        for node, path in self.reads.nodes():
            if self.reads.lock_count(node) != expected.get(id(node), 0):
                fail(
                    where,
                    f"the node ending after {len(path)} tokens: lock_count {expected.get(id(node), 0)} "
                    "(live locks on it or below it)",
                    f"lock_count {self.reads.lock_count(node)}",
                    LOCK_HINT + "; a split gives the new upper node the lower node's count",
                )

    def expect_empty(self, where: str) -> None:
        """After every request finished and evict(all): no node left, every block free."""
        refs = self.reads.refs()
        stuck = [block for block in range(self.num_blocks) if refs[block]]
        if stuck or self.reads.children(self.reads.radix.root):
            fail(
                where,
                f"an empty tree and all {self.num_blocks} blocks free",
                f"{len(self.reads.nodes())} node(s) left, block(s) {stuck} in use",
                "with nothing locked every node becomes a leaf in turn: " + LOCK_HINT,
            )
