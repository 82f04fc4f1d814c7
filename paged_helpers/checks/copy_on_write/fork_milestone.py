"""The driver of check_fork_logits: the tiny Qwen3 on the learner's cache, with the fork under test.

Every step's logits must equal a from-scratch run of that sequence's tokens (``ModelRun``, through
``scratch.expect_from_scratch``: one tolerance policy, by device and dtype). A wrong logit is
diagnosed from the two tables of the latest fork (``diagnosis.diagnose_fork``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..reading.cache_reads import new_paged_cache
from ..reading.model_run import ModelRun
from .diagnosis import LEAKED_AFTER_LOGITS, diagnose_fork

FORK_BLOCK = 4


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return "cpu (no GPU found)"


class ForkRun(ModelRun):
    """The learner's cache under the tiny Qwen3 (``reading.model_run``), with the fork under test.

    ``forked`` is (parent, child, tokens at the fork) of the latest fork: a wrong logit is diagnosed
    from the state of those two tables. ``load_model(seed, device=...)`` loads the model (the
    package's ``tiny_qwen3``, which gpu-check and the tests swap for one in bfloat16).
    """

    def __init__(
        self,
        PagedKVCache: Any,  # noqa: N803
        seed: int,
        device: torch.device,
        *,
        load_model: Callable[..., Any],
    ) -> None:
        model, num_blocks = load_model(seed, device=device), 24
        config = model.config
        sizes = (config.num_hidden_layers, num_blocks, FORK_BLOCK, config.num_key_value_heads, config.head_dim)
        super().__init__(model, new_paged_cache(PagedKVCache, sizes, scenario="", device=device), num_blocks)
        self.seed = seed
        self.forked = ("parent", "child", 0)
        self.prompt_length = 0

    def fork(self, parent: str, child: str, scenario: str) -> None:
        super().fork(parent, child, scenario)
        self.forked = (parent, child, len(self.tokens[child]))

    def step(self, new_tokens: dict[str, list[int]], scenario: str) -> None:  # type: ignore[override]
        """One engine step of ``new_tokens``: every row must equal a from-scratch run of its sequence."""
        super().step(new_tokens, scenario, hint=lambda: diagnose_fork(self.cache, *self.forked, block_size=FORK_BLOCK))

    def finish(self) -> None:
        self.free_all(LEAKED_AFTER_LOGITS)
