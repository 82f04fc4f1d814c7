"""check_radix_logits: the radix cache on the model (notebook 10).

``check_radix_cache`` proves the tree's bookkeeping with blocks the check only pretends to fill.
This check fills them for real: the course's tiny Qwen3 runs on the learner's ``PagedKVCache``
(notebook 04) with the learner's ``RadixCache`` on that cache's allocator, and every request is
served the way an engine serves it:

1. ``match`` all but the last prompt token (the last one is always prefilled: its logits pick the
   first output token), ``lock`` the node;
2. create the request with the matched blocks shared into its table, ``reserve`` the rest of the
   prompt (``evict`` first when the pool is short);
3. prefill only the tokens after the match, ``insert`` the prompt's whole blocks, lock the new
   node and unlock the matched one; decode two tokens; unlock and ``free`` at the end.

Every prefilled and decoded row of logits must equal a from-scratch run of the whole sequence
(one tolerance policy, ``checks/reading/scratch.py``). Before a request's forward pass the check
compares what it knows with what the learner's code handed out, so that a wrong logit comes with
its cause: each matched block must hold the keys written for exactly that prefix and be unchanged
since, and no freshly reserved block may still be in the tree or in another running request's
table. Scenarios: a multi-turn chat plus a second chat sharing its system prompt (the reuse must
equal a brute-force longest match), prompts branching inside a cached edge (splits), and several
chats running side by side in a small pool (eviction while requests hold locks).
"""

from __future__ import annotations

import functools
import random
from typing import Any, NamedTuple

import torch

from ...checkpoint import tiny_qwen3
from ...device import DEVICE
from ...model import tiny_config
from ...workloads import multi_turn_chats, random_tokens
from ..reading.calls import call_learner
from ..reading.learner_code import read_ahead
from ..reading.ledger import ceil_div
from ..reading.model_run import ModelRun
from ..reading.strict import learner_dict, learner_int_list, learner_tensor, strict_equal
from ..registry import check
from ..speaking.failure import fail
from ..story import Story

__all__ = ["check_radix_logits"]

BLOCK = 4  # tokens per block; check_tiered_cache imports it (its trees and caches are built here too)
DECODE_STEPS = 2
VOCAB = tiny_config().vocab_size  # the model _ModelServer runs: tiny_qwen3(seed) keeps this config

MATCHED_WRONG_HINT = (
    "match may only return blocks whose keys and values belong to exactly the probe's prefix: walk "
    "children by whole blocks of tokens, and when a split cuts an edge, cut its blocks at the same "
    "place (tokens[:cut] with blocks[:cut // block_size])"
)
OVERWRITTEN_HINT = (
    "a block in the tree must never go back to the free list while the tree holds it: insert takes "
    "the cache's own reference (allocator.share) on each new leaf block, and evict releases only "
    "the blocks of the leaves it removes"
)
REUSE_HINT = (
    "match walks down from the root while the next whole block of the prompt equals the edge's, "
    "into the middle of an edge if need be, and returns every block it walked over"
)
LOGITS_HINT = (
    "the cached keys and values were right, so look at what the request's table holds after the "
    "matched blocks: the matched blocks first, in order, then the blocks reserve added; and the "
    "prefill starts at the first position after the match"
)


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


class _ModelServer(RequestServer):
    """The learner's radix cache on the learner's paged cache, under the tiny Qwen3, one request at a time.

    The check keeps its own record of every full block it prefilled: the prefix whose keys it
    holds (``written``) and a copy of its layer-0 keys (``keys``). Only the check writes these
    records; the learner's code is judged against them.
    """

    def __init__(self, RadixCache: Any, PagedKVCache: Any, num_blocks: int, scenario: str, seed: int) -> None:  # noqa: N803
        super().__init__(PagedKVCache, num_blocks, scenario, seed)
        self.tree = self.radix = call_learner(
            f"RadixCache(cache.allocator, block_size={BLOCK})",
            RadixCache,
            self.cache.allocator,
            BLOCK,
            scenario=scenario,
        )
        self.written: dict[int, tuple[int, ...]] = {}
        self.keys: dict[int, torch.Tensor] = {}

    # --- one request --------------------------------------------------------------------------
    def serve(self, seq: str, prompt: list[int], name: str, expect_reuse: bool) -> None:
        """match, lock, table, prefill (checked), insert, decode (checked). The request keeps running."""
        where = f"{self.scenario}: {name} ({len(prompt)} tokens)"
        node, blocks = self.match(prompt, name, where)
        reused = len(blocks) * BLOCK
        if expect_reuse:
            wanted = longest_cached(self.served, prompt[:-1])
            if reused != wanted:
                fail(where, f"{wanted} tokens reused from the cache", f"{reused} ({len(blocks)} blocks)", REUSE_HINT)
        self._expect_matched_blocks(blocks, prompt, where)
        self.lock(node, f"node of {name}'s match", where)
        # create, then the matched blocks shared into the new table (the request's own references)
        self.create_holding(seq, blocks, prompt[:reused], "match's blocks", where)
        self.locks[seq] = node
        self.prefill(seq, prompt, reused, where)
        for index, block in enumerate(self._table(seq)[len(blocks) : len(prompt) // BLOCK], start=len(blocks)):
            self.written[block] = tuple(prompt[: (index + 1) * BLOCK])
            self.keys[block] = self._layer0_keys(block).clone()
        self.publish(seq, prompt, name, node, self._table(seq), where)
        self.decode(seq, where)

    def drain(self) -> None:
        for seq in list(self.locks):
            self.finish(seq)
        call_learner(f"evict({self.num_blocks})", self.radix.evict, self.num_blocks, scenario=self.scenario)
        self._expect_tree_held(f"{self.scenario}, after every request finished and evict({self.num_blocks})")
        free = self._num_free()
        if free != self.num_blocks:
            fail(
                f"{self.scenario}, after every request finished and evict({self.num_blocks})",
                f"all {self.num_blocks} blocks free",
                f"{free} free",
                "the logits were right but blocks stayed in use; check_radix_cache walks the tree after every "
                "step and names where a reference or a lock is lost",
            )

    # --- the engine's steps --------------------------------------------------------------------
    def _reserve(self, seq: str, tokens: int, where: str) -> None:
        """Every block reserve adds must be free: in no table and not in the tree."""
        before = len(self._table(seq))
        super()._reserve(seq, tokens, where)
        self._expect_fresh(seq, self._table(seq)[before:], where)

    def expect_after_evict(self, where: str) -> None:
        self._expect_tree_held(where)

    # --- what the check knows -----------------------------------------------------------------

    # Read strictly (reading.cache_reads): a learner's int or tensor subclass cannot answer for itself.
    def _refs(self, where: str) -> list[int]:
        return self.reads.refs(where)

    def _table(self, seq: str) -> list[int]:
        return self.reads.table(seq, self.scenario)

    def _num_free(self) -> int:
        return self.reads.num_free(self.scenario)

    def _layer0_keys(self, block: int) -> torch.Tensor:
        return learner_tensor(self.cache.k_pool[0], "cache.k_pool[0]", self.scenario)[block]

    def _expect_matched_blocks(self, blocks: list[int], prompt: list[int], where: str) -> None:
        refs = self._refs(where)
        for index, block in enumerate(blocks):
            wanted = tuple(prompt[: (index + 1) * BLOCK])
            written = self.written.get(block)
            if written != wanted:
                what = "nothing this check prefilled" if written is None else self._describe(written)
                fail(
                    where,
                    f"match's block {index} holding the keys of this prompt's tokens 0..{len(wanted) - 1}",
                    f"block {block}, which holds {what}",
                    MATCHED_WRONG_HINT,
                )
            if not refs[block]:
                fail(
                    where,
                    f"block {block} (match's block {index}) held by the tree: refcount at least 1",
                    "refcount 0: the block is on the free list, though match still hands it out",
                    OVERWRITTEN_HINT,
                )
            if not strict_equal(self._layer0_keys(block), self.keys[block]):
                fail(
                    where,
                    f"block {block} (match's block {index}) unchanged since its prefill wrote it",
                    "its keys were overwritten: the block went back to the free list while the tree held it",
                    OVERWRITTEN_HINT,
                )

    def _expect_tree_held(self, where: str) -> None:
        refs = self._refs(where)
        for block, prefix in tree_blocks(self.radix, where).items():
            if not refs[block]:
                fail(
                    where,
                    f"block {block}, which the tree still holds for tokens 0..{len(prefix) - 1} of a cached prefix, "
                    "kept out of the free list",
                    "refcount 0: the next reserve may hand it out and overwrite its keys",
                    OVERWRITTEN_HINT + "; a leaf whose blocks evict releases leaves the tree",
                )

    def _expect_fresh(self, seq: str, added: list[int], where: str) -> None:
        in_tree = tree_blocks(self.radix, where)
        for block in added:
            if block in in_tree:
                fail(
                    where,
                    f"reserve for {seq!r} given free blocks only",
                    f"block {block}, which the tree still holds "
                    f"for tokens 0..{len(in_tree[block]) - 1} of a cached prefix",
                    OVERWRITTEN_HINT,
                )
            others = [other for other in list(self.cache.tables) if other != seq and block in self._table(other)]
            if others:
                fail(
                    where,
                    f"reserve for {seq!r} given free blocks only",
                    f"block {block}, which running request {others[0]!r} still uses",
                    OVERWRITTEN_HINT,
                )

    def _describe(self, written: tuple[int, ...]) -> str:
        for number, sequence in enumerate(self.served):
            if sequence[: len(written)] == written:
                return f"the keys of tokens 0..{len(written) - 1} of request {number + 1} served"
        return f"the keys of another prefix of {len(written)} tokens"


# --- scenarios valid by construction -----------------------------------------------------------
# A scenario is a plan: ("serve", seq, prompt, name, expect_reuse) steps and ("finish", seq) steps,
# run in order. Its pool is sized from the plan by the account below before anything runs, so that
# what the plan asks for is possible for any correct implementation, whatever it evicts first.

Plan = list[tuple]


def _held_by_one_request(prompt: list[int], earlier: list[list[int]]) -> int:
    """The most blocks a correct implementation holds on one running request's behalf.

    Its table: the prompt plus DECODE_STEPS tokens, in whole blocks. Plus one when the prompt ends
    on a block boundary and an earlier prompt starts with all of it: match (which leaves out the
    last token) cannot hand that last block over, so insert keeps the tree's copy, locked, beside
    the table's own. Nothing is assumed shared with other requests (a correct tree may have evicted
    what they could have shared).
    """
    duplicate = len(prompt) % BLOCK == 0 and any(other[: len(prompt)] == prompt for other in earlier)
    return ceil_div(len(prompt) + DECODE_STEPS, BLOCK) + duplicate


def _account(plan: Plan) -> tuple[int, int, int]:
    """(running, unevicted, tree) blocks of ``plan`` for any correct implementation.

    ``running``: the most blocks the requests running at one time hold (tables and locked tree
    blocks): every other block is an unlocked tree block that evict can free, so a pool of at least
    this many blocks can serve the plan. ``unevicted``: a bound on the blocks in use if nothing is
    ever evicted (every distinct whole-block prefix served so far in the tree, plus the running
    requests): a pool of at least this many never runs short. ``tree``: the distinct whole-block
    prefixes of all the plan's prompts, which a tree that never evicts holds at the end: a pool of
    fewer blocks forces evictions.
    """
    held: dict[str, int] = {}
    served: list[list[int]] = []
    prefixes: set[tuple[int, ...]] = set()
    running = unevicted = 0
    for step in plan:
        if step[0] == "finish":
            del held[step[1]]
            continue
        _, seq, prompt, _, _ = step
        held[seq] = _held_by_one_request(prompt, served)
        served.append(prompt)
        prefixes |= {tuple(prompt[:end]) for end in range(BLOCK, len(prompt) + 1, BLOCK)}
        running = max(running, sum(held.values()))
        unevicted = max(unevicted, len(prefixes) + sum(held.values()))
    return running, unevicted, len(prefixes)


class _Scenario(NamedTuple):
    """A scenario's name in messages, its pool, and the plan to run in it."""

    name: str
    pool: int
    plan: Plan


def _without_pressure(what: str, plan: Plan) -> _Scenario:
    """A pool that never runs short (the account's ``unevicted`` bound, and at least 48 blocks): these
    scenarios expect the brute-force reuse, which counts every prompt served as still cached."""
    pool = max(48, _account(plan)[1])
    return _Scenario(f"{what} (pool of {pool})", pool, plan)


def _chat_and_neighbour(rng: random.Random) -> _Scenario:
    """Three turns of a chat, then a second chat's first turn sharing the system prompt; no pressure."""
    chats = multi_turn_chats(2, 3, 8, (3, 6), (4, 8), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    for turn, prompt in enumerate(chats[0]):
        plan += [("serve", f"chat0-turn{turn}", prompt, f"chat 0, turn {turn}", True), ("finish", f"chat0-turn{turn}")]
    plan.append(("serve", "chat1-turn0", chats[1][0], "chat 1, turn 0", True))
    return _without_pressure("a 3-turn chat, then a second chat", plan)


def _branches_inside_edges(rng: random.Random) -> _Scenario:
    """A 5-block prompt, then prompts leaving it after 2 and 3 blocks (splits), then it again."""
    base = random_tokens(21, VOCAB, rng)
    prompts = [
        ("the 21-token prompt", base),
        ("a prompt leaving it after 2 blocks", base[:8] + random_tokens(7, VOCAB, rng)),
        ("a prompt leaving it after 3 blocks", base[:12] + random_tokens(6, VOCAB, rng)),
        ("the 21-token prompt again", base),
    ]
    plan: Plan = []
    for number, (name, prompt) in enumerate(prompts):
        plan.append(("serve", f"request{number}", prompt, name, True))
        if number % 2:
            plan += [("finish", f"request{number - 1}"), ("finish", f"request{number}")]
    return _without_pressure("prompts branching inside a cached edge", plan)


def _side_by_side_under_pressure(rng: random.Random) -> _Scenario:
    """Three chats of four turns, two requests running at once, in a pool that forces evictions.

    The pool is 18 blocks, or fewer when the chats are short (one block fewer than their tree would
    hold, so that evictions are still forced), or more when two requests running side by side hold
    more (the account's ``running`` bound: never a plan that a correct implementation cannot serve).
    """
    chats = multi_turn_chats(3, 4, 4, (2, 5), (3, 6), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    running: list[str] = []
    for turn in range(4):
        for chat in rng.sample(range(3), 3):
            seq = f"chat{chat}-turn{turn}"
            plan.append(("serve", seq, chats[chat][turn], f"chat {chat}, turn {turn}", False))
            running.append(seq)
            if len(running) > 1:
                plan.append(("finish", running.pop(0)))
    held, _, tree = _account(plan)
    pool = max(held, min(18, tree - 1))
    return _Scenario(f"three chats of four turns, two requests at once (pool of {pool})", pool, plan)


# Each draws its prompts from the check's rng, in this order, before any model runs.
SCENARIOS = (_chat_and_neighbour, _branches_inside_edges, _side_by_side_under_pressure)


def _run(RadixCache: Any, PagedKVCache: Any, scenario: _Scenario, seed: int) -> None:
    server = _ModelServer(RadixCache, PagedKVCache, scenario.pool, scenario.name, seed)
    for step in scenario.plan:
        if step[0] == "serve":
            _, seq, prompt, name, expect_reuse = step
            server.serve(seq, prompt, name, expect_reuse=expect_reuse)
        else:
            server.finish(step[1])
    server.drain()


@check(
    notebook="10_radix_cache",
    builds="RadixCache",
    partners=(("04_fork_and_copy_on_write", "PagedKVCache"),),
)
def check_radix_logits(RadixCache: Any, PagedKVCache: Any, seed: int = 0) -> str:
    """Requests reusing the tree's blocks on the tiny Qwen3 give their from-scratch logits."""
    story = Story(
        visible=tuple(functools.partial(_planned, make, seed=seed) for make in SCENARIOS),
        told=f"{len(SCENARIOS)} scenarios, every prefilled and decoded row equal to a from-scratch run",
    )
    return story.tell(RadixCache, PagedKVCache, seed=seed)


def _planned(make: Any, RadixCache: Any, PagedKVCache: Any, rng: random.Random, *, seed: int) -> None:  # noqa: N803
    """One scenario: planned from ``rng`` before any model runs (``make``), then served."""
    _run(RadixCache, PagedKVCache, make(rng), seed)
