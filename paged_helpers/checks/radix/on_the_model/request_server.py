"""An engine's requests on the learner's prefix tree over the learner's paged cache, under the tiny
Qwen3: the driver notebook 10's and notebook 11's model checks share (``RequestServer``).

Also the pieces both build on: the learner's ``PagedKVCache`` for the model (``learner_paged_cache``),
the learner's tree read as block -> prefix (``tree_blocks``) and the brute-force reuse a request
should get (``longest_cached``).
"""

from __future__ import annotations

import random
from typing import Any

from ....checkpoint import tiny_qwen3
from ....device import DEVICE
from ....model import tiny_config
from ...reading.calls import call_learner
from ...reading.learner_code import read_ahead
from ...reading.model_run import ModelRun
from ...reading.strict import learner_dict, learner_int_list
from .diagnosis import LOGITS_HINT

__all__ = ["BLOCK", "DECODE_STEPS", "VOCAB", "RequestServer", "learner_paged_cache", "longest_cached", "tree_blocks"]

BLOCK = 4  # tokens per block; check_tiered_cache imports it (its trees and caches are built here too)
DECODE_STEPS = 2
VOCAB = tiny_config().vocab_size  # the model RequestServer runs: tiny_qwen3(seed) keeps this config


def longest_cached(served: list[tuple[int, ...]], probe: list[int]) -> int:
    """Brute force: the most tokens, in whole blocks, of ``probe`` that some served prefix starts with."""
    best = 0
    for sequence in served:
        same = 0
        while (same + 1) * BLOCK <= min(len(sequence), len(probe)) and (
            sequence[: (same + 1) * BLOCK] == tuple(probe[: (same + 1) * BLOCK])
        ):
            same += 1
        best = max(best, same * BLOCK)
    return best


def tree_blocks(radix: Any, scenario: str) -> dict[int, tuple[int, ...]]:
    """Each block in the learner's tree -> the tokens from the root to the end of that block (the
    tree fetched in one request when it lives in another process: ``read_ahead``)."""
    read_ahead(radix, names=("root", "children", "tokens", "blocks"), follow=("root", "children"))
    found, stack = {}, [(radix.root, ())]
    while stack:
        node, prefix = stack.pop()
        for child in learner_dict(node.children, "node.children", scenario, lambda child, _w, _s: child).values():
            tokens = tuple(learner_int_list(child.tokens, "node.tokens", scenario))
            path = prefix + tokens
            start = len(path) - len(tokens)
            for index, block in enumerate(learner_int_list(child.blocks, "node.blocks", scenario)):
                found[block] = path[: start + (index + 1) * BLOCK]
            stack.append((child, path))
    return found


def learner_paged_cache(PagedKVCache: Any, config: Any, num_blocks: int, scenario: str) -> Any:
    """The learner's PagedKVCache for the model of ``config`` (its layers, KV heads, head size):
    ``num_blocks`` blocks of BLOCK tokens on DEVICE. Both model checks on a radix cache build theirs here."""
    return call_learner(
        f"PagedKVCache(layers={config.num_hidden_layers}, num_blocks={num_blocks}, block_size={BLOCK}, ...)",
        PagedKVCache,
        config.num_hidden_layers,
        num_blocks,
        BLOCK,
        config.num_key_value_heads,
        config.head_dim,
        device=DEVICE,
        scenario=scenario,
    )


class RequestServer(ModelRun):
    """An engine's requests on the learner's prefix tree over the learner's paged cache, under the tiny
    Qwen3 (``reading.model_run``): what notebook 10's and 11's model checks share.

    ``tree`` is the learner's tree (10's ``RadixCache``, or 11's ``TieredRadixCache`` around one),
    built by the subclass. The steps: ``match`` (all but the prompt's last token), ``lock``; the
    request's table (``create_holding``); ``reserve`` with eviction when the pool is short; the prefill
    and the decode steps, every row against a from-scratch run; ``publish`` (insert, lock the new node,
    unlock the matched one); ``finish`` (unlock, free). ``locks`` and ``served`` are the check's
    records: each running request's locked node, and the whole-block prefixes inserted so far. A
    subclass says what must hold after an eviction (``expect_after_evict``), where to look when a
    logit is wrong (``LOGITS_HINT``) and how many tokens each request decodes (``DECODE_STEPS``: its
    scenarios' pools are sized for that many).
    """

    LOGITS_HINT = LOGITS_HINT
    # Tokens decoded after each prefill: a scenario's pool is sized for them (``_held_by_one_request``).
    DECODE_STEPS = DECODE_STEPS

    def __init__(self, PagedKVCache: Any, num_blocks: int, scenario: str, seed: int) -> None:  # noqa: N803
        self.scenario = scenario
        model = tiny_qwen3(seed, device=DEVICE)
        super().__init__(model, learner_paged_cache(PagedKVCache, model.config, num_blocks, scenario), num_blocks)
        self.tree: Any = None
        self.locks: dict[str, Any] = {}
        self.served: list[tuple[int, ...]] = []

    def expect_after_evict(self, where: str) -> None:
        """What must hold after the tree evicted for a reserve (the subclass's account)."""

    # --- the engine's steps ------------------------------------------------------------------------
    def match(self, prompt: list[int], name: str, where: str) -> tuple[Any, list[int]]:
        """``match`` of the prompt without its last token (its logits pick the first output token): the
        node where the match ends and its blocks, read strictly. The caller locks the node."""
        node, blocks = call_learner(
            f"match({name} without its last token)", self.tree.match, prompt[:-1], scenario=where
        )
        return node, learner_int_list(blocks, "the blocks match returned", where)

    def lock(self, node: Any, what: str, where: str) -> None:
        call_learner(f"lock({what})", self.tree.lock, node, scenario=where)

    def prefill(self, seq: str, prompt: list[int], reused: int, where: str) -> None:
        """Reserve and run the model over the prompt's tokens after the ``reused`` ones."""
        self._reserve(seq, len(prompt) - reused, where)
        self._forward(
            seq, prompt[reused:], f"{where}, prefill of tokens {reused}..{len(prompt) - 1} after {reused} reused"
        )

    def publish(self, seq: str, prompt: list[int], name: str, matched: Any, table: list[int], where: str) -> None:
        """``insert`` the prompt's blocks; the request's lock moves from the matched node to the new one."""
        new = call_learner(f"insert({name}, table)", self.tree.insert, list(prompt), table, scenario=where)
        self.lock(new, f"node of {name} after insert", where)
        call_learner(f"unlock(node of {name}'s match)", self.tree.unlock, matched, scenario=where)
        self.locks[seq] = new
        self.served.append(tuple(prompt[: len(prompt) // BLOCK * BLOCK]))

    def decode(self, seq: str, where: str) -> None:
        for step in range(self.DECODE_STEPS):
            token = random.Random(len(self.tokens[seq]) * 7919 + step).randrange(self.vocab)
            self._reserve(seq, 1, where)
            self._forward(seq, [token], f"{where}, decode step {step + 1}")

    def finish(self, seq: str) -> None:
        call_learner(f"unlock(node of {seq!r})", self.tree.unlock, self.locks.pop(seq), scenario=self.scenario)
        self.free(seq, self.scenario)

    def _reserve(self, seq: str, tokens: int, where: str) -> None:
        """reserve, evicting from the tree when the pool is short (as an engine does)."""
        self.reserve(seq, tokens, where, when_full=lambda: self._evict_for(seq, tokens, where))

    def _evict_for(self, seq: str, tokens: int, where: str) -> None:
        wanted = self.blocks_wanted(seq, tokens, where)
        call_learner(f"evict({wanted})", self.tree.evict, wanted, scenario=where)
        self.expect_after_evict(f"{where}, after evict({wanted})")

    def _forward(self, seq: str, new: list[int], where: str) -> None:
        self.forward({seq: new}, where, hint=self.LOGITS_HINT)
