"""Every seeded check passes the instructor's solutions at random seeds from the grader's seed space.

The grader's clean run gives each hidden call a secret seed from [0, 2**31); the other tests only
ever try small fixed seeds. Each run here draws fresh seeds from the operating system (printed, and
named in any failure, with the command that replays it), a few for the model and kernel checks
(seconds each on a CPU), more for the others, within a time budget per check: the whole module stays
near a minute on a 2-core CPU. ``tools/sweep_seeds.py`` sweeps hundreds per check. The list of
seeded checks and how each is called is tools/seeded_checks.py, shared with that sweep.
"""

from __future__ import annotations

import time

import pytest

from tools.seeded_checks import SEED_SPACE, draw_seeds, hidden_seeded_calls, seeded_checks

from conftest import solution

CHECKS = seeded_checks()

# Per check: no new seed once this many seconds are spent (the first always runs), and at most
# MOST seeds. The fast checks (milliseconds a seed) get dozens; a model or kernel check (seconds a
# seed on a CPU) one or two: about a minute for all of them on a 2-core CPU.
BUDGET_SECONDS = 2.5
MOST = 40


def test_every_hidden_seeded_call_is_swept():
    """The notebooks' hidden calls with a seed are the ones the clean run reseeds: each is in the list,
    called with the notebook's keyword arguments."""
    listed = {check.name: check.kwargs for check in CHECKS}
    calls = hidden_seeded_calls()
    assert calls, "no hidden test cell in notebooks/ passes a seed"
    for name, kwargs in calls.items():
        assert listed.get(name) == kwargs, f"{name}: swept with {listed.get(name)}, the notebook calls it with {kwargs}"


@pytest.mark.parametrize("check", CHECKS, ids=[check.name for check in CHECKS])
def test_check_passes_the_solutions_at_random_seeds(check):
    for notebook, name in check.implementations:
        solution(notebook, name)  # loaded before the clock starts
    tried, failures = [], {}
    start = time.perf_counter()
    for seed in draw_seeds(MOST):
        if tried and time.perf_counter() - start > BUDGET_SECONDS:
            break
        assert 0 <= seed < SEED_SPACE
        tried.append(seed)
        message = check.call(seed, solution)
        if message is not None:
            failures[seed] = message
    print(f"{check.name}: seeds {tried}")
    assert not failures, "\n\n".join(
        f"{check.describe(seed)} failed on the instructor's solutions "
        f"(replay: .venv/bin/python tools/sweep_seeds.py --checks {check.name} --seed {seed}):\n{message}"
        for seed, message in failures.items()
    )
