"""Check for notebook 09's last section: the tiny Qwen3 runs on the learner's cache and kernels.

check_kernel_fork_logits(paged_prefill_attention, paged_decode_attention, PagedKVCache, seed=0)
    Notebook 04's milestone on the kernel path. The tiny Qwen3 runs with
    ``attention=model.PagedAttention(decode=paged_decode_attention, prefill=paged_prefill_attention)``
    on the learner's ``PagedKVCache`` (its ``paged`` method: the pools themselves, no gather). The
    story (``STORY``), in a pool of blocks of 8 whose free list a bystander scrambled first: a
    prompt is prefilled, forked; parent and child decode different tokens in one batch; the child
    prefills a chunk that starts mid-block and crosses into a new block; then one decode batch
    whose rows have different lengths and different table widths (the shorter row padded). Every
    step's logits must equal a
    from-scratch run of that sequence's tokens (``scratch.expect_from_scratch``: the course's one
    tolerance policy), and every block must be free at the end. ``hidden=True`` runs every one of
    ``HIDDEN_KINDS`` instead (a prompt of whole blocks; a fork of a fork; the story again), sized by
    ``seed``.

What the kernel checks of notebooks 07 and 09 cannot see, this one does: the kernels are called
by the model, once per layer, on that layer's pools, with the cache's padded table and lengths
that include the token just written. When the logits go wrong, the check recomputes each kernel
call of the step with the gather-then-attend reference on the inputs the kernel was given, finds
the first call that answered wrongly, and compares its answer with the mistakes that only show in
a model (another layer's pool, every row read to the batch's longest length or to the end of its
padded table row, the new token left out, the chunk's start ignored) to name the bug. If every
call was right, the cache's write or its ``paged`` view is at fault, and the message says so
(``model_path_diagnosis``; the calls are recorded by ``model_calls``).

This check holds the model's logits; the kernels themselves are judged by the kernel checks of
notebooks 07 and 09, which launch them in a process of their own (a launcher that computes in
torch gets no kernel points there). In the lab the launchers run in this process (the model
calls them layer by layer); when grading, each call runs in a child of the learner's process.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from ...checkpoint import tiny_qwen3
from ...device import DEVICE
from ...workloads import fork_prompt
from ..reading.cache_reads import new_paged_cache
from ..reading.calls import call_learner
from ..reading.model_run import ModelRun
from ..registry import check
from ..speaking.failure import fail
from ..story import Story
from .model_calls import RecordedKernels
from .model_path_diagnosis import diagnose

__all__ = ["check_kernel_fork_logits"]

BLOCK = 8
# The bystanders take every block, alternating, then one is freed: the story's tables are scrambled.
NUM_BLOCKS = 12
# Prompts whose last block is partly filled (the fork shares it), short enough for the interpreter.
PROMPTS = (5, 6)

# -- the story ----------------------------------------------------------------------------------------


class _KernelRun(ModelRun):
    """The learner's cache under the tiny Qwen3 (``reading.model_run``) with attention on the learner's
    kernels, whose every call ``kernels`` records for the messages."""

    def __init__(self, PagedKVCache: Any, decode: Callable, prefill: Callable, seed: int) -> None:  # noqa: N803
        model = tiny_qwen3(seed, device=DEVICE)
        config = model.config
        sizes = (config.num_hidden_layers, NUM_BLOCKS, BLOCK, config.num_key_value_heads, config.head_dim)
        cache = new_paged_cache(PagedKVCache, sizes, scenario="the kernel path's cache", device=DEVICE)
        super().__init__(model, cache, NUM_BLOCKS)
        self.kernels = RecordedKernels(decode, prefill, cache)
        self.seed = seed

    def scramble(self) -> None:
        """Two bystanders take turns for every block; freeing one leaves a free list of every other block."""
        scenario = "scrambling the free list before the story"
        for seq in ("bystander", "freed"):
            call_learner(f"create({seq!r})", self.cache.create, seq, scenario=scenario)
        for blocks in range(1, NUM_BLOCKS // 2 + 1):
            for seq in ("freed", "bystander"):
                tokens = blocks * BLOCK
                call_learner(f"reserve({seq!r}, {tokens})", self.cache.reserve, seq, tokens, scenario=scenario)
        call_learner("free('freed')", self.cache.free, "freed", scenario=scenario)

    def step(self, new_tokens: dict[str, list[int]], scenario: str) -> None:  # type: ignore[override]
        """One engine step on the kernel path: the model must reach the learner's kernel for this kind of
        step, and each row's logits must equal its from-scratch run."""
        for seq, new in new_tokens.items():
            self.reserve(seq, len(new), scenario)
        self.kernels.calls, self.kernels.scenario = [], scenario
        logits = self.run_model(new_tokens, scenario, attention=self.kernels.attention())  # [B, T, V]
        wanted = "decode" if len(next(iter(new_tokens.values()))) == 1 else "prefill"
        if wanted not in {call.kind for call in self.kernels.calls}:
            fail(
                scenario,
                f"the model to call your paged_{wanted}_attention in every layer",
                "no call reached it",
                "run the model with attention=ph.model.PagedAttention(decode=paged_decode_attention, "
                "prefill=paged_prefill_attention)",
            )
        calls = self.kernels.calls
        self.expect_rows(new_tokens, logits, scenario, hint=lambda: diagnose(calls, scenario))

    def finish(self) -> None:
        self.free_all(
            "the logits were right but blocks leaked: after copy-on-write, release the shared block once",
            also=("bystander",),
        )


def _prefill_and_fork(run: _KernelRun, rng: random.Random) -> None:
    prompt = rng.choice(PROMPTS)
    scenario = f"the kernel path: prefill of a {prompt}-token prompt (blocks of {BLOCK}, scrambled tables)"
    run.create("parent", scenario)
    run.step({"parent": fork_prompt(prompt, run.vocab, run.seed)}, scenario)
    run.fork("parent", "child", f"the kernel path: fork('parent', 'child') at {prompt} tokens")


def _diverging_decode(run: _KernelRun, rng: random.Random) -> None:
    best = run.last["parent"].topk(2).indices.tolist()  # the parent's best token, the child's second best
    length = len(run.tokens["parent"])
    scenario = f"the kernel path: after the fork, one decode batch [parent, child] at {length} tokens"
    run.step({"parent": [best[0]], "child": [best[1]]}, scenario)


def _chunk_across_a_block(run: _KernelRun, rng: random.Random) -> None:
    start = len(run.tokens["child"])
    chunk = BLOCK - start % BLOCK + 1  # fills the child's last block and runs one token into a new one
    scenario = f"the kernel path: the child alone prefills a {chunk}-token chunk from position {start}"
    run.step({"child": [rng.randrange(run.vocab) for _ in range(chunk)]}, scenario)


def _uneven_decode(run: _KernelRun, rng: random.Random) -> None:
    lengths = {seq: len(run.tokens[seq]) + 1 for seq in ("parent", "child")}
    scenario = (
        f"the kernel path: one decode batch [parent, child] at lengths {lengths['parent']} and {lengths['child']} "
        "(the parent's table row padded)"
    )
    run.step({seq: [rng.randrange(run.vocab)] for seq in ("parent", "child")}, scenario)


# The milestone's story on the kernel path, in order: each step starts where the one before left off.
STORY = (_prefill_and_fork, _diverging_decode, _chunk_across_a_block, _uneven_decode)


# -- hidden scenarios: other stories on a fresh cache, sized by the grader's seed -------------------------


def _hidden_whole_blocks(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random) -> None:  # noqa: N803
    run = _KernelRun(PagedKVCache, decode, prefill, rng.randrange(1000))
    run.scramble()
    scenario = "a hidden scenario"
    run.create("parent", scenario)
    run.step({"parent": [rng.randrange(run.vocab) for _ in range(2 * BLOCK)]}, scenario)
    run.fork("parent", "child", scenario)
    run.step({"child": [rng.randrange(run.vocab) for _ in range(rng.choice((2, 3)))]}, scenario)
    run.step({seq: [rng.randrange(run.vocab)] for seq in ("parent", "child")}, scenario)
    run.finish()


def _hidden_fork_of_a_fork(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random) -> None:  # noqa: N803
    run = _KernelRun(PagedKVCache, decode, prefill, rng.randrange(1000))
    run.scramble()
    scenario = "a hidden scenario"
    run.create("a", scenario)
    run.step({"a": [rng.randrange(run.vocab) for _ in range(rng.choice((3, 5, 7)))]}, scenario)
    run.fork("a", "b", scenario)
    run.step({"b": [rng.randrange(run.vocab) for _ in range(2)]}, scenario)
    run.fork("b", "c", scenario)
    order = ["a", "b", "c"]
    rng.shuffle(order)
    run.step({seq: [rng.randrange(run.vocab)] for seq in order}, scenario)
    run.finish()


def _story(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random, seed: int) -> None:  # noqa: N803
    run = _KernelRun(PagedKVCache, decode, prefill, seed)
    run.scramble()
    for step in STORY:
        step(run, rng)
    run.finish()


def _hidden_story(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random) -> None:  # noqa: N803
    _story(PagedKVCache, decode, prefill, rng, rng.randrange(1000))


HIDDEN_KINDS = {
    "a prompt of whole blocks forked, the child's chunk starting on a block boundary": _hidden_whole_blocks,
    "a fork of a fork, then one decode batch of all three at different lengths": _hidden_fork_of_a_fork,
    "the visible story again, its tokens drawn from the grader's seed": _hidden_story,
}


@check(
    notebook="09_paged_prefill_kernel",
    builds="paged_prefill_attention",
    partners=(("07_paged_decode_kernel", "paged_decode_attention"), ("04_fork_and_copy_on_write", "PagedKVCache")),
)
def check_kernel_fork_logits(
    paged_prefill_attention: Callable,
    paged_decode_attention: Callable,
    PagedKVCache: Any,  # noqa: N803
    seed: int = 0,
    hidden: bool = False,
) -> str | None:
    """Notebook 04's fork milestone with attention on your kernels: every step equals a from-scratch run.

    ``hidden=True`` (the hidden tests) runs every one of ``HIDDEN_KINDS`` instead, sized by ``seed``.
    """
    story = Story(visible=(functools.partial(_visible_story, seed=seed),), hidden=HIDDEN_KINDS)
    return story.tell(PagedKVCache, paged_decode_attention, paged_prefill_attention, seed=seed, hidden=hidden)


def _visible_story(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random, *, seed: int) -> None:  # noqa: N803
    _story(PagedKVCache, decode, prefill, rng, seed)
