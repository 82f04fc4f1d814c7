"""The tiny Qwen3 on a learner's paged cache, one checked forward pass at a time: the one driver of
every check that runs the model on the learner's code.

Notebooks 03 (the cache under the model), 04 (the fork milestone), 09 (the milestone on the
learner's kernels), 10 (the radix cache) and 11 (the host tier) all tell the same story: create
sequences, fork them or hand them cached blocks, reserve room, run the model over new tokens
through the learner's cache, and hold every row of logits to a from-scratch run of the whole
sequence (``scratch.expect_from_scratch``: one tolerance policy). ``ModelRun`` is that story's
bookkeeping and nothing else.

Ownership: the model and ``tokens`` (for each sequence, every token whose keys its table holds, by
the check's own account) belong to the check and are written only here (a check cuts them through
``keep_first``); the cache belongs to the learner and is only called (``call_learner``) and read
(``CacheReads``). A check adds what its notebook is about (a table account, a radix tree's records,
the kernels' calls) around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..speaking.failure import Hint
from .cache_reads import CacheReads
from .calls import call_learner, call_learner_allowing
from .learner_code import create_holding
from .ledger import expect_all_free
from .scratch import expect_from_scratch, forward_through_cache
from .strict import learner_int

__all__ = ["ModelRun"]

# A hint, or a function that names the likely bug from the state after a wrong logit (called only then).
HintSource = str | Hint | Callable[[], str | Hint]


class ModelRun:
    """``model`` on the learner's ``cache`` of ``num_blocks`` blocks; ``tokens[seq]`` and ``last[seq]``
    (seq's logits at its last position, [vocab]) are the check's record of each live sequence."""

    def __init__(self, model: Any, cache: Any, num_blocks: int) -> None:
        self.model, self.cache, self.num_blocks = model, cache, num_blocks
        self.reads = CacheReads(cache)
        self.tokens: dict[Any, list[int]] = {}
        self.last: dict[Any, torch.Tensor] = {}

    @property
    def vocab(self) -> int:
        return self.model.config.vocab_size

    # -- sequences ------------------------------------------------------------------------------------

    def create(self, seq: Any, scenario: str) -> None:
        call_learner(f"create({seq!r})", self.cache.create, seq, scenario=scenario)
        self.tokens[seq] = []

    def create_holding(self, seq: Any, blocks: list[int], prefix: list[int], what: str, scenario: str) -> None:
        """create ``seq`` with ``blocks`` (full, cached: the keys of ``prefix``) shared into its table."""
        call_learner(f"create({seq!r}) holding {what}", create_holding, self.cache, seq, blocks, scenario=scenario)
        self.tokens[seq] = list(prefix)

    def fork(self, parent: Any, child: Any, scenario: str) -> None:
        call_learner(f"fork({parent!r}, {child!r})", self.cache.fork, parent, child, scenario=scenario)
        self.tokens[child] = list(self.tokens[parent])

    def keep_first(self, seq: Any, length: int) -> None:
        """Cut the record of ``seq``'s tokens to its first ``length`` (none yet: an empty record), for a
        check that truncates a sequence or restarts a row where the learner's cache says it ends."""
        self.tokens[seq] = self.tokens.get(seq, [])[:length]

    def reserve(self, seq: Any, count: int, scenario: str, *, when_full: Callable[[], None] | None = None) -> None:
        """``reserve(seq, count)``; on MemoryError, ``when_full()`` (an engine's eviction) makes room and
        reserve is asked once more. With no ``when_full``, MemoryError is a failure like any other."""
        what = f"reserve({seq!r}, {count})"
        if when_full is None:
            call_learner(what, self.cache.reserve, seq, count, scenario=scenario)
            return
        try:
            call_learner_allowing(MemoryError, what, self.cache.reserve, seq, count, scenario=scenario)
        except MemoryError:
            when_full()
            call_learner(f"{what} after evict", self.cache.reserve, seq, count, scenario=scenario)

    def blocks_wanted(self, seq: Any, count: int, scenario: str) -> int:
        """The free blocks ``reserve(seq, count)`` needs: num_free now + the learner's blocks_to_add."""
        what = f"blocks_to_add({seq!r}, {count})"
        to_add = call_learner(what, self.cache.blocks_to_add, seq, count, scenario=scenario)
        return self.reads.num_free(scenario) + learner_int(to_add, what, scenario)

    # -- the model ----------------------------------------------------------------------------------

    def forward(
        self, new_tokens: dict[Any, list[int]], scenario: str, *, hint: HintSource, attention: Any = None
    ) -> torch.Tensor:
        """One forward pass of ``new_tokens`` (the same count for each sequence, in batch order) on
        room already reserved; every row of every sequence's logits must equal a from-scratch run of
        its whole history. Returns the logits, [B, T, vocab]."""
        logits = self.run_model(new_tokens, scenario, attention=attention)
        self.expect_rows(new_tokens, logits, scenario, hint=hint)
        return logits

    def run_model(self, new_tokens: dict[Any, list[int]], scenario: str, *, attention: Any = None) -> torch.Tensor:
        """The first half of ``forward``: ``set_batch``, then the model over the new tokens (logits
        [B, T, vocab]); nothing is compared or recorded yet."""
        seqs = list(new_tokens)
        call_learner(f"set_batch({seqs})", self.cache.set_batch, seqs, scenario=scenario)
        starts = [len(self.tokens[seq]) for seq in seqs]
        return forward_through_cache(self.model, self.cache, new_tokens, starts, scenario=scenario, attention=attention)

    def expect_rows(
        self, new_tokens: dict[Any, list[int]], logits: torch.Tensor, scenario: str, *, hint: HintSource
    ) -> None:
        """The second half of ``forward``: record the new tokens, and hold each row to a from-scratch run."""
        seqs = list(new_tokens)
        for row, seq in enumerate(seqs):
            self.tokens[seq] = self.tokens[seq] + list(new_tokens[seq])
            self.last[seq] = logits[row, -1]
            where = f"{scenario}: the logits of {seq!r}" + (f" (row {row})" if len(seqs) > 1 else "")
            expect_from_scratch(self.model, self.tokens[seq], logits[row], scenario=where, hint=hint)

    def step(
        self, new_tokens: dict[Any, list[int]], scenario: str, *, hint: HintSource, attention: Any = None
    ) -> torch.Tensor:
        """``reserve`` each sequence's new tokens, then ``forward``: an engine's step."""
        for seq, new in new_tokens.items():
            self.reserve(seq, len(new), scenario)
        return self.forward(new_tokens, scenario, hint=hint, attention=attention)

    # -- the end ------------------------------------------------------------------------------------

    def free(self, seq: Any, scenario: str) -> None:
        call_learner(f"free({seq!r})", self.cache.free, seq, scenario=scenario)
        del self.tokens[seq]
        self.last.pop(seq, None)

    def free_all(self, hint: str | Hint, *, also: tuple = ()) -> None:
        """Free every live sequence (and ``also``, sequences the check made outside the story): then
        every block must be free again."""
        freed = [*self.tokens, *also]
        for seq in freed:
            call_learner(f"free({seq!r})", self.cache.free, seq, scenario="freeing every sequence")
        self.tokens.clear()
        self.last.clear()
        expect_all_free(self.cache.allocator, self.num_blocks, f"after freeing {', '.join(map(str, freed))}", hint)
