"""The proof a check with hidden kinds owes (issue 36), written once: the right definition passes the
hidden call at every secret-like seed; a wrong one fails it at every seed with a hidden failure (the
kind and a hint, never an expected or returned value); and each kind meant for a mistake catches it
alone, in every draw.

    hidden_proof.passes_every_seed(check_kv_router, right)
    hidden_proof.fails_at_every_seed(check_kv_router, wrong, failing_message)
    hidden_proof.each_kind_catches(routing.STORY.hidden, CAUGHT_BY[bug], wrong, failing_message)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from paged_helpers.checks.speaking.hidden import run_hidden_scenarios

from conftest import SECRET_SEEDS


def passes_every_seed(check: Callable, *learner: Any) -> None:
    for seed in SECRET_SEEDS:
        check(*learner, seed=seed, hidden=True)


def fails_at_every_seed(check: Callable, wrong: Any, failing_message: Callable) -> None:
    for seed in SECRET_SEEDS:
        message = failing_message(functools.partial(check, seed=seed, hidden=True), wrong)
        assert "a hidden scenario failed" in message and "hint:" in message, f"seed {seed}: {message}"
        assert "expected:" not in message, f"seed {seed}: {message}"


def each_kind_catches(
    kinds: Mapping[str, Callable], meant: Iterable[str], wrong: Any, failing_message: Callable
) -> None:
    for kind in meant:
        for seed in SECRET_SEEDS:
            message = failing_message(run_hidden_scenarios, {kind: kinds[kind]}, seed, wrong)
            assert f"a hidden scenario failed: {kind}." in message, f"{kind}, seed {seed}: {message}"
