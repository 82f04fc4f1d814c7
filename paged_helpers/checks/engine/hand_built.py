"""The states notebook 08's stage checks build by hand, on the learner's own classes.

A stage check needs a small engine in a given state: sequences placed in a pool as if a forward pass
had written them, a prompt left in the prefix cache as if a finished request had prefilled it. These
helpers make that state through the learner's notebook 04 cache and notebook 05 prefix cache (so a
failure while setting up names those notebooks: ``SETTING_UP``), on a watched engine (``watch.build``).
They own no rule: what the engine does next is held to ``rules`` by the watch and by each case.

Every engine check serves the same sizes: blocks of ``BLOCK_SIZE`` tokens, prefill chunks of
``CHUNK_SIZE``, ``STEP_TOKENS`` tokens a step (a case may ask for other chunk sizes and budgets).
"""

from __future__ import annotations

from ...serving import Sequence
from ..reading.calls import call_learner
from ..reading.learner_code import transfer
from ..reading.strict import learner_int
from .watch import Watch, build

BLOCK_SIZE = 4
CHUNK_SIZE = 8
STEP_TOKENS = 24
NOTEBOOK = "08_continuous_batching"
PARTNERS = (("04_fork_and_copy_on_write", "PagedKVCache"), ("05_prefix_caching", "PrefixCache"))

# The stages are set up on the learner's own notebook 04 and 05 classes: a failure there names them.
SETTING_UP = "setting up the scenario with your PagedKVCache (notebook 04) and PrefixCache (notebook 05)"


def token_range(start: int, count: int) -> list[int]:
    """``count`` token ids from ``start`` on: each case's prompts and outputs, distinct where it needs."""
    return list(range(start, start + count))


def engine_for(engine_class, cache_class, prefix_class, num_blocks: int, scenario: str, **sizes):
    """A watched engine of ``num_blocks`` blocks for ``scenario``: (engine, cache, prefix cache).
    ``sizes``: ``chunk_size`` and ``max_step_tokens`` other than the defaults."""
    watch = Watch(scenario)
    chunk, budget = sizes.get("chunk_size", CHUNK_SIZE), sizes.get("max_step_tokens", STEP_TOKENS)
    return build(engine_class, cache_class, prefix_class, watch, num_blocks, BLOCK_SIZE, chunk, budget)


def leave_in_prefix_cache(cache, prefix, seq_id: str, prompt: list[int]) -> None:
    """A finished request whose prompt's full blocks stay in the prefix cache (as after its prefill)."""
    reused = learner_int(
        call_learner(f"prefix_cache.attach({seq_id!r}, ...)", prefix.attach, seq_id, prompt, scenario=SETTING_UP),
        f"prefix_cache.attach({seq_id!r}, ...)",
        SETTING_UP,
    )
    call_learner(f"cache.reserve({seq_id!r}, ...)", cache.reserve, seq_id, len(prompt) - reused, scenario=SETTING_UP)
    cache.lengths[seq_id] = len(prompt)  # as if the forward pass had written them
    call_learner(f"prefix_cache.remember({seq_id!r}, ...)", prefix.remember, seq_id, prompt, scenario=SETTING_UP)
    call_learner(f"cache.free({seq_id!r})", cache.free, seq_id, scenario=SETTING_UP)


def place(engine, seq: Sequence, computed: int) -> Sequence:
    """seq running, with its first ``computed`` tokens in the cache (as if a forward pass wrote them)."""
    cache = engine.cache
    seq = transfer(engine, seq)
    call_learner(f"cache.create({seq.seq_id!r})", cache.create, seq.seq_id, scenario=SETTING_UP)
    call_learner(f"cache.reserve({seq.seq_id!r}, {computed})", cache.reserve, seq.seq_id, computed, scenario=SETTING_UP)
    cache.lengths[seq.seq_id] = computed
    seq.num_cached = computed
    engine.running.append(seq)
    return seq


def decoding(seq_id: str, prompt: int, output: int, start: int = 1) -> Sequence:
    """A sequence in decode: prompt and output known, all but the last sampled token cached."""
    seq = Sequence(
        seq_id, seq_id, token_range(start, prompt), max_new_tokens=output + 8, output=token_range(900, output)
    )
    seq.num_cached = prompt + output - 1
    return seq


def prefilling(seq_id: str, prompt: int, cached: int = 0, output: int = 0, start: int = 1) -> Sequence:
    """A sequence with ``cached`` tokens computed and more than one pending (a prompt, or a readmitted
    sequence's prompt and ``output``)."""
    seq = Sequence(
        seq_id, seq_id, token_range(start, prompt), max_new_tokens=output + 8, output=token_range(900, output)
    )
    seq.num_cached = cached
    return seq
