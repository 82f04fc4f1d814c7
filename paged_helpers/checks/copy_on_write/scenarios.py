"""Notebook 04's scenarios as tables: the copy-on-write scenes, and the fork milestone's story.

``SCENARIOS`` are check_copy_on_write's visible steps, each a small story on a fresh ``Scene``,
seeded, in the orders where sharing bugs show: a fork written by both sides, a fork of a fork with
children writing in turn, the parent freed first, a prompt filling whole blocks, a child whose
first write runs from the shared partial block into a new one, a pool too small for a copy plus a
new block, a fork made after the parent reserved room it has not written yet (the child's write
then lands in two shared blocks, not only the one holding its length).

``FORK_STORY`` is check_fork_logits': the tiny Qwen3 prefills a prompt on the learner's cache, the
sequence is forked (and the child forked again), and the sequences continue with different
tokens, in one batch and one after the other; each step starts where the one before left off.
"""

from __future__ import annotations

import random
from typing import Any

from ...workloads import fork_prompt
from ..reading.ledger import ceil_div
from .cow_account import BLOCK
from .cow_scene import Scene
from .fork_milestone import FORK_BLOCK, ForkRun

# Lengths whose last block is partly filled: the block a fork shares and a writer must copy.
PARTIAL_PROMPTS = (5, 6, 7, 9, 10, 11)


def _forked_once(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = Scene(PagedKVCache, 16, f"a {prompt}-token parent forked once")
    scene.start("parent", prompt)
    scene.fork("parent", "child")
    scene.write("child", 1)  # copies the shared partial block
    scene.write("parent", 1)  # now the only owner: in place
    scene.write("child", BLOCK)  # crosses into a new block
    scene.finish()


def _fork_of_a_fork(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = Scene(PagedKVCache, 16, f"a {prompt}-token parent, a fork of a fork, children writing in turn")
    scene.start("parent", prompt)
    scene.fork("parent", "a")
    scene.fork("a", "b")
    scene.fork("parent", "c")
    order = ["a", "b", "c"]
    rng.shuffle(order)
    for child in order:  # the last child still copies: the parent holds the block
        scene.write(child, 1)
    scene.write("parent", 1)
    scene.finish()


def _parent_freed_first(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = Scene(PagedKVCache, 16, f"a {prompt}-token parent freed before its two children")
    scene.start("parent", prompt)
    scene.fork("parent", "x")
    scene.fork("parent", "y")
    scene.free("parent")
    scene.write("x", 1)
    scene.write("y", 1)
    scene.finish()


def _whole_blocks_forked(PagedKVCache: Any, rng: random.Random) -> None:
    full = BLOCK * rng.choice((2, 3))
    scene = Scene(PagedKVCache, 16, f"a {full}-token parent (whole blocks) forked once")
    scene.start("parent", full)
    scene.fork("parent", "child")
    scene.write("child", 1)  # nothing to copy: a fresh block
    scene.write("parent", 1)
    scene.finish()


def _first_write_runs_into_a_new_block(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = Scene(PagedKVCache, 16, f"a {prompt}-token parent forked, the child's first write crossing a block")
    scene.start("parent", prompt)
    scene.fork("parent", "child")
    scene.write("child", BLOCK - prompt % BLOCK + 1)  # fills a copy of the shared block, then one token more
    scene.write("parent", 1)  # now the only owner: in place
    scene.finish()


def _no_room_for_copy_and_block(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = Scene(
        PagedKVCache, ceil_div(prompt, BLOCK) + 1, f"a {prompt}-token parent forked in a pool with 1 spare block"
    )
    scene.start("parent", prompt)
    scene.fork("parent", "child")
    to_fill = BLOCK - prompt % BLOCK
    scene.refused_write("child", to_fill + 1, free_blocks=1, needed=2)
    scene.write("child", to_fill)  # the copy alone fits
    scene.finish()


def _forked_after_room_was_reserved(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    room = BLOCK - prompt % BLOCK + 1 + rng.randrange(BLOCK - 1)  # the partial block and part of one more
    scene = Scene(
        PagedKVCache, 16, f"a {prompt}-token parent that reserved room for {room} tokens, forked before writing them"
    )
    scene.start("parent", prompt)
    scene.reserve("parent", room)  # the engine's reserve, then (here) a fork before the forward pass
    scene.fork("parent", "child")
    scene.write("child", room)  # both blocks of the room are shared: two copies
    scene.write("parent", room)  # now the only owner of both: in place
    scene.finish()


# The scenarios check_copy_on_write runs, in order (a bug fails in the first one that shows it).
SCENARIOS = (
    _forked_once,
    _fork_of_a_fork,
    _parent_freed_first,
    _whole_blocks_forked,
    _first_write_runs_into_a_new_block,
    _no_room_for_copy_and_block,
    _forked_after_room_was_reserved,
)


# -- the milestone: each step takes the run the one before left --------------------------------------


def _prefill(run: ForkRun, rng: random.Random) -> None:
    run.prompt_length = rng.choice((9, 10, 11, 13, 14))
    scenario = f"prefill of a {run.prompt_length}-token prompt, blocks of {FORK_BLOCK}"
    run.create("parent", scenario)
    run.step({"parent": fork_prompt(run.prompt_length, run.vocab, run.seed)}, scenario)


def _fork(run: ForkRun, rng: random.Random) -> None:
    run.fork("parent", "child", "the fork")


def _diverging_continuations(run: ForkRun, rng: random.Random) -> None:
    # Two different continuations: the parent's most likely token and the child's second choice.
    best = run.last["parent"].topk(2).indices.tolist()
    steps = [
        ("one batch [parent, child]", [{"parent": [best[0]], "child": [best[1]]}]),
        (
            "the child alone, then the parent alone",
            [{"child": [rng.randrange(run.vocab)]}, {"parent": [rng.randrange(run.vocab)]}],
        ),
        (
            "the parent alone, then the child alone",
            [{"parent": [rng.randrange(run.vocab)]}, {"child": [rng.randrange(run.vocab)]}],
        ),
        (
            "one batch [child, parent], 3 tokens each",
            [
                {
                    "child": [rng.randrange(run.vocab) for _ in range(3)],
                    "parent": [rng.randrange(run.vocab) for _ in range(3)],
                }
            ],
        ),
    ]
    for label, batches in steps:
        for batch in batches:
            run.step(batch, f"after forking a {run.prompt_length}-token prompt, {label}")


def _fork_of_the_fork(run: ForkRun, rng: random.Random) -> None:
    fork_length = len(run.tokens["child"])
    scenario = f"a fork of the fork (child -> grandchild at {fork_length} tokens), then one batch of all three"
    run.fork("child", "grandchild", scenario)
    run.step({seq: [rng.randrange(run.vocab)] for seq in ("grandchild", "child", "parent")}, scenario)


def _free_every_sequence(run: ForkRun, rng: random.Random) -> None:
    run.finish()


# The milestone's story, in order: each step starts where the one before left off.
FORK_STORY = (_prefill, _fork, _diverging_continuations, _fork_of_the_fork, _free_every_sequence)
