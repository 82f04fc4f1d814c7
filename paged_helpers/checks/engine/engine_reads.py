"""What notebook 08's engine checks read of the learner's engine, each value read strictly.

The rules (``rules``, ``reservation``, the watch, the cases and the parts) read the engine's state only
through these functions: its queues, its cache's tables, lengths and pool, its prefix cache's entries,
its metrics, each sequence's fields, and what a phase returned (a plan, step()'s outputs). The engine's
state is read through the attributes the notebook's ``EngineBase`` defines: ``running`` (oldest first),
``waiting`` (front first), ``cache``, ``prefix_cache``, ``metrics``, ``chunk_size``, ``max_step_tokens``.
None changes the engine.

Every value a rule compares or computes with is read here, strictly (checks/reading/strict.py): an int,
list or dict subclass, or an object that says it equals anything, is refused with a message
naming what was read, instead of answering the rule's comparison for itself. Sequences and
queues' members are compared by identity (``is``), which runs no learner code. The rules read
on every step, so the plain case (exact ints, lists, str keys) is taken first, without naming
what is read; anything else goes to the strict readers, which accept or refuse it by name.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from itertools import repeat
from operator import is_
from typing import Any

from ..reading.learner_code import plain, read_ahead
from ..reading.strict import (
    learner_bool,
    learner_dict,
    learner_float,
    learner_int,
    learner_int_list,
    learner_key,
    learner_list,
)
from ..speaking.failure import fail


def _all(items: Any, kind: type) -> bool:
    """Every item's type is exactly ``kind``, checked in C: no learner code runs (not even a metaclass's)."""
    return all(map(is_, map(type, items), repeat(kind)))


def _int(value: Any, what: Callable[[], str], scenario: str) -> int:
    return value if type(value) is int else learner_int(value, what(), scenario)


def _ints(value: Any, what: Callable[[], str], scenario: str) -> list[int]:
    # A learner's list read across the grader's boundary is copied first (answered from the copy that
    # came with it): naming it beforehand would ask the learner's process again and lose that copy.
    value = plain(value)
    return list(value) if type(value) is list and _all(value, int) else learner_int_list(value, what(), scenario)


# What the rules read of an engine after each of its phases: its parts, their bookkeeping, and the
# fields of every running and waiting sequence. ``read_engine_ahead`` asks for all of it in one
# request where the engine lives in the learner's process (``learner_code.read_ahead``); each read
# then goes through the strict readers as before. In one process it does nothing.
ENGINE_READS = (
    "running",
    "waiting",
    "cache",
    "prefix_cache",
    "metrics",
    "chunk_size",
    "max_step_tokens",
    "cache.tables",
    "cache.lengths",
    "cache.allocator",
    "cache.allocator.refs",
    "cache.allocator.num_free",
    "prefix_cache.entries",
    "metrics.prefix_hit_tokens",
    "metrics.prompt_tokens",
    "metrics.tokens_generated",
    "metrics.preemptions",
    "seq_id",
    "num_cached",
    "output",
    "prompt",
)


def read_engine_ahead(engine) -> None:
    """The engine's state as ``ENGINE_READS`` names it, in one request (none when read since the
    learner last ran, or when the engine lives in this process)."""
    read_ahead(engine, names=ENGINE_READS, follow=("running", "waiting"))


def _key(value: Any, what: Callable[[], str], scenario: str) -> Any:
    return value if type(value) is str else learner_key(value, what(), scenario)


def pool_refs(cache, scenario: str = "") -> list[int]:
    return _ints(cache.allocator.refs, lambda: "cache.allocator.refs", scenario)


def num_free(cache, scenario: str = "") -> int:
    return _int(cache.allocator.num_free, lambda: "cache.allocator.num_free", scenario)


def tables(cache, scenario: str = "") -> dict[Any, list[int]]:
    value = cache.tables
    if (
        type(value) is dict
        and _all(value, str)
        and all(type(table) is list and _all(table, int) for table in dict.values(value))
    ):
        return {key: list(table) for key, table in dict.items(value)}
    return learner_dict(value, "cache.tables", scenario, learner_int_list)


def lengths(cache, scenario: str = "") -> dict[Any, int]:
    value = cache.lengths
    if type(value) is dict and _all(value, str) and _all(dict.values(value), int):
        return dict(value)
    return learner_dict(value, "cache.lengths", scenario, learner_int)


def prefix_entries(prefix_cache, scenario: str = "") -> set[tuple[Any, int]] | None:
    """The prefix cache's ``entries`` as (key, block) pairs, or None when it keeps no dict of them
    (the rule that reads them is then skipped: notebook 05's check is where ``entries`` is required)."""
    value = getattr(prefix_cache, "entries", None)
    if type(value) not in (dict, OrderedDict):
        return None
    if _all(dict.values(value), int) and all(type(key) is tuple and _all(key, int) for key in value):
        return set(dict.items(value))
    return set(learner_dict(value, "prefix_cache.entries", scenario, learner_int).items())


def seq_id(seq, scenario: str = "") -> Any:
    return _key(seq.seq_id, lambda: "seq.seq_id", scenario)


def _of(seq, field: str, scenario: str) -> Callable[[], str]:
    return lambda: f"seq.{field} of {seq_id(seq, scenario)!r}"


def num_cached(seq, scenario: str = "") -> int:
    return _int(seq.num_cached, _of(seq, "num_cached", scenario), scenario)


def output(seq, scenario: str = "") -> list[int]:
    return _ints(seq.output, _of(seq, "output", scenario), scenario)


def tokens(seq, scenario: str = "") -> list[int]:
    """prompt + output, as ``seq.tokens`` computes them."""
    return _ints(seq.prompt, _of(seq, "prompt", scenario), scenario) + output(seq, scenario)


def num_pending(seq, scenario: str = "") -> int:
    """Tokens still to run through the model, as ``seq.num_pending`` computes them."""
    return len(tokens(seq, scenario)) - num_cached(seq, scenario)


def prefilling(seq, scenario: str = "") -> bool:
    """``seq.is_prefilling``: more than one token to run."""
    return num_pending(seq, scenario) > 1


def finished(seq, scenario: str = "") -> bool:
    """``seq.is_finished``: as many output tokens as asked for."""
    return len(output(seq, scenario)) >= _int(seq.max_new_tokens, _of(seq, "max_new_tokens", scenario), scenario)


_FIELDS = {
    "seq_id": learner_key,
    "request_id": learner_key,
    "prompt": learner_int_list,
    "max_new_tokens": learner_int,
    "n": learner_int,
    "sample_index": learner_int,
    "seed": learner_int,
    "temperature": learner_float,
    "output": learner_int_list,
    "num_cached": learner_int,
    "forked": learner_bool,
}


def fields(seq, names, scenario: str = "") -> dict[str, Any]:
    """The Sequence fields ``names`` of ``seq``, each read strictly ("(missing)" if absent)."""
    return {
        name: _FIELDS[name](getattr(seq, name), _of(seq, name, scenario)(), scenario)
        if hasattr(seq, name)
        else "(missing)"
        for name in names
    }


def as_is(item: Any, what: str, scenario: str) -> Any:
    """An item reader for ``learner_list`` that keeps each item as it is (a sequence, compared by identity)."""
    return item


def queue(engine, name: str, scenario: str = "") -> list:
    """``engine.running`` or ``engine.waiting`` as a plain list of its members (not read further)."""
    read_engine_ahead(engine)
    value = getattr(engine, name)
    if type(value) in (list, deque):
        return list(value)
    return learner_list(value, f"engine.{name}", scenario, as_is)


def plan_of(plan, what: str, scenario: str = "") -> list[tuple[Any, int]]:
    """A plan, [(seq, count)], as plain pairs: the sequence as it is, the count a plain int."""
    if type(plan) is list and all(type(e) is tuple and len(e) == 2 and type(e[1]) is int for e in plan):
        return list(plan)

    def chunk(entry, where, scenario):
        pair = learner_list(entry, where, scenario, as_is)
        if len(pair) != 2:
            fail(
                f"{scenario}: {what}",
                "(seq, count) pairs",
                f"an entry of {len(pair)} item(s)",
                "a plan is a list of (seq, count) tuples: the sequence and how many of its tokens run this step",
            )
        return pair[0], _int(pair[1], lambda: f"the count in {where}", scenario)

    return learner_list(plan, what, scenario, chunk)


def metric(engine, name: str, scenario: str = "") -> int:
    read_engine_ahead(engine)
    return learner_int(getattr(engine.metrics, name), f"metrics.{name}", scenario)


def step_outputs(finished, scenario: str = "") -> dict[Any, list[list[int]]]:
    """What ``step()`` returned: {request_id: [output of each sample]}, as plain values."""

    def samples(value, what, scenario):
        return learner_list(value, what, scenario, learner_int_list)

    return learner_dict(finished, "what step() returned", scenario, samples)


def same(got, expected) -> bool:
    """Two lists of sequences hold the same objects in the same order (identity: no learner __eq__)."""
    return len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True))


def names(seqs, scenario: str = "") -> list:
    return [seq_id(seq, scenario) for seq in seqs]


def evictable_blocks(cache, scenario: str = "") -> list[int]:
    """Blocks with a reference but in no table: held only by the prefix cache (or leaked)."""
    in_tables = {block for table in tables(cache, scenario).values() for block in table}
    return [block for block, refs in enumerate(pool_refs(cache, scenario)) if refs > 0 and block not in in_tables]
