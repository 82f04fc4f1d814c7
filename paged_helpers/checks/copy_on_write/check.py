"""Notebook 04's checks: forks share blocks, and copy-on-write keeps their histories apart.

check_copy_on_write(PagedKVCache, seed=0)
    Drives ``create``, ``fork``, ``reserve`` and ``free`` of the learner's cache through the scenes
    of ``scenarios.SCENARIOS`` (``cow_scene.Scene``), each step followed by its expectations
    (``cow_expectations``: exact reference counts, every key and value read back).

check_fork_logits(PagedKVCache, seed=0)
    The milestone, ``scenarios.FORK_STORY`` on a ``fork_milestone.ForkRun``: every step's logits must
    equal a from-scratch run of that sequence's tokens. Runs on ``paged_helpers.DEVICE`` and prints
    which device it used.
"""

from __future__ import annotations

import random
from typing import Any

from ...device import DEVICE
from .. import copy_on_write as package  # the model loader's one place: gpu-check and tests swap it
from ..registry import check
from ..story import Story
from .fork_milestone import ForkRun, device_name
from .scenarios import FORK_STORY, SCENARIOS

__all__ = ["check_copy_on_write", "check_fork_logits"]


@check(notebook="04_fork_and_copy_on_write", builds="PagedKVCache")
def check_copy_on_write(PagedKVCache: Any, seed: int = 0) -> str | None:
    """Fork, copy-on-write and freeing, with exact reference counts and every key and value read back."""
    return Story(visible=SCENARIOS).tell(PagedKVCache, seed=seed)


@check(notebook="04_fork_and_copy_on_write", builds="PagedKVCache")
def check_fork_logits(PagedKVCache: Any, seed: int = 0) -> None:
    """After a fork, diverging sequences each give exactly their from-scratch logits (on DEVICE)."""
    device = DEVICE
    print(f"check_fork_logits: running on {device_name(device)}")
    rng = random.Random(seed)
    run = ForkRun(PagedKVCache, seed, device, load_model=package.tiny_qwen3)
    for step in FORK_STORY:
        step(run, rng)
