"""Notebook 03's scenarios: the cache story, the model story, and the hidden kinds, as named steps.

``CACHE_STORY`` is a list of named steps on one cache (each ``step(harness, rng)`` starts where the one
before left off); ``MODEL_STORY`` the same under the tiny Qwen3 on a fresh cache of 40 blocks. The
visible call tells both at blocks of 4 tokens (``visible_story``); a hidden call runs every one of
``HIDDEN_KINDS`` in full, sized by the grader's secret seed, and a failure there names the kind and
its hint, never its numbers (``Story``: every kind, in full).

1. the pool's shapes and an empty cache (the harness's constructor);
2. ``blocks_needed`` on partial blocks and on exact block boundaries;
3. ``create`` of an existing sequence refused (ValueError);
4. a scrambled free list (one-block sequences freed in a seeded random order), so that
   tables are non-contiguous and out of order, and ``free`` returns every block;
5. ``reserve`` block counts, relative to what a table already holds;
6. ``set_batch``'s ``table_tensor`` (row order, padding with real block ids);
7. ``update`` called directly: where each key and value lands in the pool, what it returns, and
   the committed ``lengths``, for single sequences and a batch at different lengths;
8. exhaustion in the middle of a multi-block reserve: MemoryError with nothing changed, then a
   reserve that needs exactly the free blocks fits;
9. ``truncate`` back to a block boundary, then writing again;
10. the model: chunked prefills, decode steps of a batch of sequences at different lengths, a
    truncation across a block boundary, each step's logits compared with a from-scratch run;
    then everything is freed and every block must be free again.
"""

from __future__ import annotations

import random

from .cache_account import CacheSetup
from .cache_harness import CacheHarness
from .kv_writes import BatchHarness
from .model_harness import ModelHarness

__all__ = ["CACHE_STORY", "HIDDEN_KINDS", "MODEL_STORY", "play_model_story", "play_whole_story", "visible_story"]


# --------------------------------------------------------------------------- the cache story


def _blocks_needed(h: BatchHarness, rng: random.Random) -> None:
    h.expect_blocks_needed()


def _create_twice(h: BatchHarness, rng: random.Random) -> None:
    h.create("a")
    h.refused_create("a")
    h.free("a")


def _scrambled_free_list(h: CacheHarness, rng: random.Random) -> None:
    h.scramble(rng)


def _two_interleaved_tables(h: BatchHarness, rng: random.Random) -> None:
    b = h.cache.block_size
    h.create("a")
    h.create("b")
    for seq, new_tokens in (("a", b), ("b", 1), ("a", b + 1), ("a", 2 * b), ("b", 2 * b + 1), ("a", 0)):
        h.reserve(seq, new_tokens)


def _a_batch_of_two_tables(h: BatchHarness, rng: random.Random) -> None:
    h.set_batch(["b", "a"])


def _prefill_of_a(h: BatchHarness, rng: random.Random) -> None:
    h.update(["a"], 2 * h.cache.block_size - 1)


def _prefill_of_b(h: BatchHarness, rng: random.Random) -> None:
    h.update(["b"], h.cache.block_size + 1)


def _decode_at_different_lengths(h: BatchHarness, rng: random.Random) -> None:
    h.update(["b", "a"], 1)


def _decode_in_swapped_order(h: BatchHarness, rng: random.Random) -> None:
    h.update(["a", "b"], 1)


def _exhaustion(h: BatchHarness, rng: random.Random) -> None:
    """Leave exactly 2 free blocks: a reserve needing 4 more changes nothing, one needing 2 fits."""
    b = h.cache.block_size
    h.create("hog")
    h.reserve("hog", (h.learner_num_free() - 2) * b)
    length, held = h.learner_length("a"), len(h.ledger.tables["a"])
    h.refused_reserve("a", (held + 4) * b - length, free=2, needed=4)
    h.reserve("a", (held + 2) * b - length, why=" (a reserve that needs exactly the 2 free blocks fits)")
    h.free("hog")


def _truncate_to_one_full_block(h: BatchHarness, rng: random.Random) -> None:
    h.truncate("a", h.cache.block_size)


def _write_after_truncate(h: BatchHarness, rng: random.Random) -> None:
    h.update(["a", "b"], 2)


def _free_everything(h: CacheHarness, rng: random.Random) -> None:
    h.finish(f"{h.where}: after freeing every sequence")


# Named steps of one story on one cache, in order: each starts where the one before left off.
CACHE_STORY = (
    ("blocks_needed", _blocks_needed),
    ("create of an existing sequence", _create_twice),
    ("scrambling the free list", _scrambled_free_list),
    ("growing two interleaved tables", _two_interleaved_tables),
    ("two sequences with tables of 3 and 2 blocks", _a_batch_of_two_tables),
    ("prefill of 'a'", _prefill_of_a),
    ("prefill of 'b'", _prefill_of_b),
    ("one decode step of a batch at different lengths", _decode_at_different_lengths),
    ("a second decode step, batch order swapped", _decode_in_swapped_order),
    ("exhaustion in the middle of a multi-block reserve", _exhaustion),
    ("rolling 'a' back to exactly one full block", _truncate_to_one_full_block),
    ("writing again after truncate", _write_after_truncate),
    ("freeing everything", _free_everything),
)


# --------------------------------------------------------------------------- the model story


def _four_prompts(run: ModelHarness, rng: random.Random) -> None:
    b, vocab = run.cache.block_size, run.vocab
    lengths = {"s0": 2 * b + 1, "s1": b, "s2": 3 * b - 1, "s3": 1}
    run.prompts = {seq: [rng.randrange(vocab) for _ in range(n)] for seq, n in lengths.items()}
    for seq in run.prompts:
        run.create(seq)
        run.model_run.keep_first(seq, 0)


def _chunked_prefills(run: ModelHarness, rng: random.Random) -> None:
    """Interleaved and in chunks, so that tables are non-contiguous and chunks end mid-block."""
    b, prompts = run.cache.block_size, run.prompts
    for label, new in (
        ("prefill of s2, first chunk", {"s2": prompts["s2"][: b + 2]}),
        ("prefill of s0", {"s0": prompts["s0"]}),
        ("prefill of s1 (exactly one full block)", {"s1": prompts["s1"]}),
        ("prefill of s2, second chunk (starts mid-block)", {"s2": prompts["s2"][b + 2 :]}),
        ("prefill of s3 (one token)", {"s3": prompts["s3"]}),
    ):
        run.step = label
        run.forward(new)


def _decode_steps(run: ModelHarness, rng: random.Random) -> None:
    vocab = run.vocab
    order = [["s2", "s0", "s3", "s1"], ["s3", "s2", "s0"], ["s1", "s0", "s2", "s3"], ["s0", "s1", "s2", "s3"]]
    for index, batch in enumerate(order):
        run.step = f"decode step {index + 1}"
        run.forward({seq: [rng.randrange(vocab)] for seq in batch})


def _truncate_across_a_boundary(run: ModelHarness, rng: random.Random) -> None:
    run.truncate("s2", 2 * run.cache.block_size - 1)


def _decode_after_truncate(run: ModelHarness, rng: random.Random) -> None:
    vocab = run.vocab
    for index in range(2):
        run.step = f"decode step {index + 1} after truncate"
        run.forward({seq: [rng.randrange(vocab)] for seq in ["s0", "s2"]})


MODEL_STORY = (
    ("scrambling the free list", _scrambled_free_list),
    ("four prompts created", _four_prompts),
    ("chunked prefills", _chunked_prefills),
    ("decode steps", _decode_steps),
    ("rolling s2 back across a block boundary", _truncate_across_a_boundary),
    ("decode steps after truncate", _decode_after_truncate),
    ("freeing every sequence at the end", _free_everything),
)


def play_model_story(PagedKVCache: type, rng: random.Random, block_size: int) -> None:  # noqa: N803
    """The model story on a fresh cache of 40 blocks (a check of its own: wrong gathers show as logits)."""
    run = ModelHarness(PagedKVCache, block_size)
    for step, scenario in MODEL_STORY:
        run.step = step
        scenario(run, rng)


# --------------------------------------------------------------------------- hidden scenarios


def _hidden_harness(PagedKVCache: type, rng: random.Random, block_size: int) -> CacheHarness:  # noqa: N803
    from ...device import DEVICE

    setup = CacheSetup(layers=1, num_blocks=rng.randint(10, 30), block_size=block_size, kv_heads=1, head_dim=2)
    return CacheHarness(PagedKVCache, setup, DEVICE, "a hidden scenario")


def _grown(h: CacheHarness, seq, new_tokens: int) -> None:
    """reserve, then count the tokens as written (as a forward pass would), without writing them."""
    length = h.learner_length(seq)
    h.reserve(seq, new_tokens)
    h.cache.lengths[seq] = length + new_tokens


# Every kind runs in full in every draw: the seed picks pool sizes, names, orders and amounts,
# never which block sizes, which moves or how many of them (a bug one draw catches, every draw does).
_CHURN_MOVES = ("create",) * 10 + ("grow",) * 30 + ("truncate",) * 10 + ("free",) * 10


def _hidden_churn(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """Sequences created, grown, truncated and freed in a secret order, at blocks of 1, 3 and 8 tokens."""
    for block_size in rng.sample((1, 3, 8), 3):
        h = _hidden_harness(PagedKVCache, rng, block_size)
        names = [f"s{k}" for k in range(rng.randint(3, 7))]
        live: list[str] = []
        for move in rng.sample(_CHURN_MOVES, len(_CHURN_MOVES)):
            if move == "create" or not live:
                fresh = [name for name in names if name not in live]
                if fresh:
                    live.append(rng.choice(fresh))
                    h.create(live[-1])
                continue
            seq = rng.choice(live)
            length, held = h.learner_length(seq), len(h.ledger.tables[seq])
            if move == "grow":
                room = (held + h.learner_num_free()) * block_size - length
                if room > 0:
                    _grown(h, seq, rng.randint(1, min(room, 3 * block_size)))
            elif move == "truncate":
                h.truncate(seq, rng.randint(0, length))
            else:
                h.free(seq)
                live.remove(seq)
        for seq in list(live):
            h.free(seq)


def _hidden_token_by_token(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """One sequence grown a token at a time across three block boundaries, rolled back to half and to
    nothing, grown again: at every block size from 1 to 7 tokens."""
    for block_size in rng.sample((1, 2, 3, 4, 7), 5):
        h = _hidden_harness(PagedKVCache, rng, block_size)
        h.create("t")
        for back_to_half in rng.sample((True, False), 2):
            for _ in range(min(3 * block_size + 1, h.num_blocks * block_size)):
                _grown(h, "t", 1)
            h.truncate("t", h.learner_length("t") // 2 if back_to_half else 0)
        h.free("t")


def _hidden_full_pool(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """The whole pool handed out to several sequences, then a refused reserve, then everything freed."""
    for block_size in rng.sample((2, 3, 4), 3):
        h = _hidden_harness(PagedKVCache, rng, block_size)
        seqs = [f"f{k}" for k in range(rng.randint(2, 4))]
        for seq in seqs:
            h.create(seq)
        while h.learner_num_free():
            _grown(h, rng.choice(seqs), rng.randint(1, h.learner_num_free()) * block_size)
        h.refused_reserve(rng.choice(seqs), block_size, free=0, needed=1)
        for seq in rng.sample(seqs, len(seqs)):
            h.free(seq)


def _hidden_story(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """The visible call's whole story and model run again, at blocks of 2, 3 and 8 tokens (the visible
    call uses 4), its tensors drawn from the seed."""
    for block_size in rng.sample((2, 3, 8), 3):
        play_whole_story(PagedKVCache, rng, block_size, rng.getrandbits(31))


HIDDEN_KINDS = {
    "sequences created, grown, truncated and freed in a random order": _hidden_churn,
    "a sequence grown one token at a time, rolled back and grown again": _hidden_token_by_token,
    "the whole pool handed out, a refused reserve, then everything freed": _hidden_full_pool,
    "the visible scenarios and the model again, at block sizes other than 4": _hidden_story,
}


# --------------------------------------------------------------------------- the visible call


def play_whole_story(PagedKVCache: type, rng: random.Random, block_size: int, seed: int) -> None:  # noqa: N803
    """``CACHE_STORY`` then the model on a cache of 24 blocks of ``block_size`` tokens."""
    from ...device import DEVICE

    setup = CacheSetup(layers=2, num_blocks=24, block_size=block_size, kv_heads=2, head_dim=8)
    h = BatchHarness(PagedKVCache, setup, DEVICE, f"a cache of {setup.num_blocks} blocks of {block_size} tokens")
    h.generator.manual_seed(seed)
    for step, scenario in CACHE_STORY:
        h.step = step
        scenario(h, rng)
    play_model_story(PagedKVCache, rng, block_size)


def visible_story(PagedKVCache: type, rng: random.Random, *, seed: int) -> None:  # noqa: N803
    """The visible call's story: at blocks of 4 for the notebook's own seed, of a drawn size for another."""
    play_whole_story(PagedKVCache, rng, 4 if seed == 0 else rng.choice([2, 3, 4, 8]), seed)
