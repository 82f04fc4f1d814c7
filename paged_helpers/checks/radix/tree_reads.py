"""The learner's radix tree and allocator as ``check_radix_cache`` reads them, strictly.

``TreeReads`` owns no state of its own: every answer is read from the learner's objects (``root``,
each node's ``tokens``, ``blocks``, ``children``, ``parent``, ``lock_count``; the allocator's ``refs``
and ``num_free``), through ``checks/reading/strict.py`` so that a learner's int, list or dict subclass
cannot answer for itself. When the learner's objects live in another process the whole tree is
fetched in one request (``read_ahead``) and the reads are answered from it until the learner's code
runs again.
"""

from __future__ import annotations

from typing import Any

from ..reading.learner_code import read_ahead
from ..reading.strict import learner_dict, learner_int, learner_int_list
from ..speaking.failure import fail

__all__ = ["BLOCK", "TreeReads"]

BLOCK = 4  # tokens per block of every tree check_radix_cache builds

# What the check reads of the tree and the pool after a step: asked in one request when the learner's
# objects live in another process (read_ahead), each read as before.
TREE_READS = ("root", "children", "tokens", "blocks", "lock_count", "parent", "refs", "num_free")


class TreeReads:
    """Reads of the learner's ``radix`` tree and its ``allocator``; failures name ``scenario``."""

    def __init__(self, radix: Any, allocator: Any, scenario: str) -> None:
        self.radix, self.allocator, self.scenario = radix, allocator, scenario

    def read_ahead(self) -> None:
        """The tree's nodes and the pool's counts, fetched at once (the reads below are answered
        from it until the learner's code runs again; in one process this does nothing)."""
        read_ahead(self.radix, self.allocator, names=TREE_READS, follow=("root", "children"))

    def path(self, node: Any, where: str) -> tuple[int, ...]:
        """The tokens from the root to ``node``."""
        self.read_ahead()
        parts, seen = [], 0
        while node is not None and node is not self.radix.root:
            parts.append(self.tokens(node))
            node, seen = node.parent, seen + 1
            if seen > 10_000:
                fail(where, "parent links that lead to the root", "a cycle", "each node's parent is the node above it")
        if node is None:
            fail(
                where,
                "a node in the tree (its parents lead to cache.root)",
                "a node whose parents never reach the root",
                "keep parent links right when splitting: the lower part's parent is the new upper node",
            )
        return tuple(token for part in reversed(parts) for token in part)

    def tree_blocks(self) -> set[int]:
        """Every block some node of the tree holds."""
        return {block for node, _ in self.nodes() for block in self.blocks(node)}

    def nodes(self) -> list[tuple[Any, tuple[int, ...]]]:
        """(node, tokens from the root to its end) for every node but the root."""
        self.read_ahead()
        found, stack = [], [(self.radix.root, ())]
        while stack:
            node, prefix = stack.pop()
            for child in self.children(node):
                path = prefix + self.tokens(child)
                found.append((child, path))
                stack.append((child, path))
        return found

    def tokens(self, node: Any) -> tuple[int, ...]:
        return tuple(learner_int_list(node.tokens, "node.tokens", self.scenario))

    def blocks(self, node: Any) -> list[int]:
        return learner_int_list(node.blocks, "node.blocks", self.scenario)

    def lock_count(self, node: Any) -> int:
        return learner_int(node.lock_count, "node.lock_count", self.scenario)

    def children(self, node: Any) -> list[Any]:
        return list(learner_dict(node.children, "node.children", self.scenario, lambda child, _w, _s: child).values())

    def refs(self) -> list[int]:
        self.read_ahead()
        return learner_int_list(self.allocator.refs, "allocator.refs", self.scenario)

    def num_free(self) -> int:
        self.read_ahead()
        return learner_int(self.allocator.num_free, "allocator.num_free", self.scenario)
