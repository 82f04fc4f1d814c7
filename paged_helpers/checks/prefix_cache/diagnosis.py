"""What notebook 05's check says when something went wrong: the hints, and the functions that
name the bug from what the check saw.

Hints come in two tiers (``speaking.failure.Hint``): the idea first, the concrete change when the
same failure repeats. Nothing here calls the learner's code.
"""

from __future__ import annotations

from ..speaking.failure import Hint

WHOLE_PREFIX_HINT = Hint(
    "a block's keys and values depend on every earlier token, so a cached block may only be reused after "
    "exactly the same history: its key must cover the whole prefix, not only the block's own tokens",
    "key block i of a prompt by tuple(prompt[:(i + 1) * block_size]), in attach and in remember",
)
LAST_TOKEN_HINT = Hint(
    "always leave at least one prompt token to prefill: the last prompt position must run through "
    "the model, since its logits choose the first output token",
    "walk only while reused + block_size <= len(prompt) - 1",
)
OWN_REFERENCE_HINT = Hint(
    "the prefix cache is one more owner of every block it publishes, so the block outlives the request "
    "that computed it",
    "in remember, call cache.allocator.share(block) for each entry it adds",
)
EXTRA_REFERENCE_HINT = (
    "a block's count is one per table that holds it plus one for the prefix cache: remember shares a "
    "block only when it publishes a new entry, and attach once per block it reuses"
)
LEAK_HINT = Hint(
    "the prefix cache holds a reference it has no entry for, so evict can never give it back: it took a "
    "reference on a block and then did not keep that block as an entry",
    "in remember, when the key is already in entries (under this block or another request's copy), keep "
    "that entry and take no reference; share() only the blocks you add as new entries",
)
STOP_AT_MISS_HINT = Hint(
    "a cached block after a gap holds keys computed at later positions: reusing it puts those keys at the "
    "gap's logical block and shifts every later position, so the walk must end at the first miss",
    "in attach, break out of the loop at the first key that is not in entries (break, not continue)",
)
STRANDED_HINT = Hint(
    "evict dropped an earlier block of a prompt while its later blocks stayed cached: attach stops at the "
    "first miss, so those entries can never be reached, yet they keep their blocks out of the pool. A "
    "prompt's root must be its most recently used entry, so that eviction takes tails first",
    "in attach, move_to_end the keys it hit in reverse order (last hit first) after the walk; in remember, "
    "walk reversed(range(len(tokens) // block_size)), move_to_end keys already cached and add the others",
)
PARTIAL_HINT = Hint(
    "publish full blocks only: a partial block is still being written by its sequence, and its key would "
    "not be a whole block of prefix",
    "remember publishes len(tokens) // block_size blocks",
)
LRU_TOUCH_HINT = Hint(
    "G's blocks were the least recently used, not F's: attach must mark every entry it hits as "
    "most recently used, and evict must go from the least recently used end",
    "in attach, entries.move_to_end(key) for every hit; in evict, walk list(entries) from the start",
)
HIT_WITHOUT_PREFILL_HINT = Hint(
    "a hit makes an entry recently used the moment attach finds it, whether or not the request "
    "goes on to prefill and remember: G's entries were the least recently used",
    "in attach, entries.move_to_end(key) for every key it hits (tail first, after the walk)",
)


def reuse_hint(*, got: int, reused: int, prompt_length: int, short_hint: str | Hint) -> str | Hint:
    """Why attach reused ``got`` tokens where ``reused`` were due (``short_hint``: the scenario's word
    for reusing too few)."""
    if got > reused and got >= prompt_length:
        return LAST_TOKEN_HINT
    if got > reused:
        return WHOLE_PREFIX_HINT
    return short_hint or "attach reuses every full block whose whole prefix is cached"


def wrong_history(*, owner: tuple[str, int] | None, later: list[int], position: int) -> tuple[str, str | Hint]:
    """(what a reused block held at ``position``, hint), from who wrote the key found there.

    ``owner`` is (prompt name, position) of the write that stored it, if the check made one;
    ``later`` the later positions of this prompt whose key it is (a block mapped too early).
    """
    held = f"the keys of {owner[0]} at position {owner[1]}" if owner else "keys no request computed for this prefix"
    got = f"at position {position} it holds {held}" + (
        f" (this prompt's position {later[0]}: a later block, mapped too early)" if later else ""
    )
    return got, STOP_AT_MISS_HINT if later else WHOLE_PREFIX_HINT
