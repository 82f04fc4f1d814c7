"""The course's tiny Qwen3 run on the learner's cache: each forward pass's logits against a from-scratch run.

``ModelHarness`` is the batch harness with the model on top: a forward pass reserves, sets the batch
and runs the model through the learner's cache (``reading.scratch.forward_through_cache``), then every
row of logits is compared with a from-scratch run of the sequence's tokens so far (``ModelRun``, the
driver every model check shares), the lengths and tables checked after. A gather that reads the wrong
history shows here as wrong logits, even where the block-level steps passed.
"""

from __future__ import annotations

from ..reading.ledger import ceil_div
from ..reading.model_run import ModelRun
from ..reading.scratch import forward_through_cache
from ..speaking.failure import fail
from .cache_account import CacheSetup
from .kv_writes import BatchHarness

__all__ = ["ModelHarness"]


class ModelHarness(BatchHarness):
    """The harness under the tiny Qwen3: each sequence's tokens so far (``model_run.tokens``, kept by
    the driver every model check shares: ``reading.model_run``), for from-scratch runs."""

    def __init__(self, PagedKVCache: type, block_size: int) -> None:  # noqa: N803
        from ...checkpoint import tiny_qwen3

        model = tiny_qwen3(seed=0)
        config = model.config
        setup = CacheSetup(config.num_hidden_layers, 40, block_size, config.num_key_value_heads, config.head_dim)
        super().__init__(PagedKVCache, setup, model.device, "the tiny Qwen3 on your cache")
        self.model_run = ModelRun(model, self.cache, setup.num_blocks)
        self.prompts: dict = {}

    @property
    def vocab(self) -> int:
        return self.model_run.vocab

    def forward(self, new: dict) -> None:
        """One forward pass of the sequences in ``new`` (same count each), compared with from scratch."""
        seqs, b, story_step = list(new), self.cache.block_size, self.step
        lengths_before = [self.learner_length(seq) for seq in seqs]
        count = len(new[seqs[0]])
        self.step = f"{story_step}: batch {seqs} at lengths {lengths_before}, {count} new token(s) each"
        for seq in seqs:
            self.reserve(seq, count)
        self.set_batch(seqs)
        # The model starts each row where the learner's cache says the sequence ends (a wrong length
        # is named below, after the logits); the check's record of its tokens is cut there to match.
        for seq, length in zip(seqs, lengths_before, strict=True):
            self.model_run.keep_first(seq, length)
        logits = forward_through_cache(self.model_run.model, self.cache, new, lengths_before, scenario=self.where)
        self.model_run.expect_rows(
            new,
            logits,
            self.where,
            hint="the history update returned for this sequence is not its own. Check: the "
            "table_tensor row of each sequence (set_batch order), table[p // block_size] and "
            "p % block_size for every position of every row, span = highest position in the "
            "batch + 1, and lengths per sequence.",
        )
        for seq in seqs:
            full = self.model_run.tokens[seq]
            if self.learner_length(seq) != len(full):
                fail(
                    f"{self.where}: lengths[{seq!r}]",
                    len(full),
                    self.cache.lengths[seq],
                    "after a forward pass, lengths[seq] counts every token written for seq.",
                )
            self.expect_table_length(
                seq, ceil_div(len(full), b), self.where, "a sequence holds blocks_needed(length) blocks after a step."
            )
        self.expect_accounting("the forward pass")
        self.step = story_step

    def truncate(self, seq, length: int) -> None:
        super().truncate(seq, length)
        self.model_run.keep_first(seq, length)
