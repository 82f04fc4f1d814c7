"""The seeded checks, and how to call each one on the instructor's solutions with a given seed.

The one list that ``tests/test_seed_space.py`` and ``tools/sweep_seeds.py`` share. Nothing in it
is kept by hand: a check is seeded when its signature takes ``seed`` (the checks' ``REGISTRY``),
its implementations are the definitions the registry says it is handed (``builds``, then
``partners``), loaded from ``notebooks/``, and its keyword arguments are those of the notebook's
hidden-test call, the call whose seed the grader's clean run replaces with a secret 31-bit one
(``autograde/paged_grading/clean_run/secret_seeds.py``). A seeded check with no hidden call (an optional
exercise) is swept with ``hidden=True`` if it takes that keyword. A check with several hidden calls
is swept with the keyword arguments they all share.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import io
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import paged_helpers  # noqa: E402,F401  (first: device and Triton mode)
from paged_helpers.checks import REGISTRY, CheckFailed  # noqa: E402
from paged_helpers.notebook_loader import load_from_notebook  # noqa: E402

# The grader's secret seeds are HMAC digests taken modulo 2**31 (clean_run.secret_seeds.secret_seed).
SEED_SPACE = 2**31
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"

# A check whose seed takes longer than this is a model or kernel check (the tiny Qwen3, Triton's
# interpreter on a CPU): sweeps give it fewer seeds. Measured, so that a new check needs no entry.
SLOW_SECONDS = 1.0


@functools.cache  # loading a notebook takes about a second: once per sweep, not once per seed
def _quiet_load(notebook: str, name: str) -> Any:
    """The instructor's ``name`` from notebooks/ (the loader's "using your ..." note kept out of the way)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return load_from_notebook(notebook, name, search=[NOTEBOOKS])


@dataclass(frozen=True)
class SeededCheck:
    """One seeded check: called as ``function(*implementations, seed=seed, **kwargs)``."""

    name: str
    function: Callable[..., Any]
    implementations: tuple[tuple[str, str], ...]  # (notebook, definition), in the check's order
    kwargs: dict[str, Any] = field(default_factory=dict)

    def call(self, seed: int, load: Callable[[str, str], Any] = _quiet_load) -> str | None:
        """Run the check on the solutions at ``seed``: None if it passed, else its message.

        The check's success line goes nowhere (a sweep prints its own table); a failure's message is
        returned, and any other exception (the check's own bug) propagates.
        """
        implementations = [load(notebook, name) for notebook, name in self.implementations]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                self.function(*implementations, seed=seed, **self.kwargs)
        except CheckFailed as error:
            return str(error)
        return None

    def describe(self, seed: int) -> str:
        """The call as a learner's hidden test cell would write it."""
        names = ", ".join(name for _, name in self.implementations)
        extra = "".join(f", {key}={value!r}" for key, value in self.kwargs.items())
        return f"{self.name}({names}, seed={seed}{extra})"


def hidden_seeded_calls() -> dict[str, dict[str, Any]]:
    """check name -> keyword arguments (seed left out) of its hidden-test call in notebooks/ that passes a seed."""
    calls: dict[str, dict[str, Any]] = {}
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or BEGIN_HIDDEN not in source:
                continue
            hidden = source[source.index(BEGIN_HIDDEN) : source.index(END_HIDDEN)]
            for node in ast.walk(ast.parse(hidden)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REGISTRY:
                    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
                    if "seed" in kwargs:
                        kwargs = {k: v for k, v in kwargs.items() if k not in ("seed", "unfinished")}
                        # Several hidden calls of one check (check_engine, one part per cell): swept with
                        # the keyword arguments they share (all parts), so no call goes unswept.
                        earlier = calls.get(node.func.id, kwargs)
                        calls[node.func.id] = {k: v for k, v in kwargs.items() if k in earlier and earlier[k] == v}
    return calls


def seeded_checks() -> list[SeededCheck]:
    """Every registered check whose signature takes ``seed``, in the registry's order."""
    hidden = hidden_seeded_calls()
    found = []
    for name, info in REGISTRY.items():
        parameters = inspect.signature(info.function).parameters
        if "seed" not in parameters:
            continue
        kwargs = hidden.get(name, {"hidden": True} if "hidden" in parameters else {})
        implementations = ((info.notebook, info.builds), *info.partners)
        found.append(SeededCheck(name, info.function, implementations, kwargs))
    return found


def draw_seeds(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct seeds from the grader's seed space, from the operating system's randomness."""
    rng = rng or random.SystemRandom()
    seeds: list[int] = []
    while len(seeds) < count:
        seed = rng.randrange(SEED_SPACE)
        if seed not in seeds:
            seeds.append(seed)
    return seeds


@dataclass
class Sweep:
    """What one check did over a list of seeds."""

    check: SeededCheck
    seeds: list[int] = field(default_factory=list)
    failures: dict[int, str] = field(default_factory=dict)  # seed -> the check's message
    seconds: float = 0.0


def sweep(
    check: SeededCheck,
    seeds: list[int],
    load: Callable[[str, str], Any] = _quiet_load,
    slow_count: int | None = None,
    on_seed: Callable[[int, str | None], None] | None = None,
) -> Sweep:
    """Run ``check`` on the solutions at every seed of ``seeds`` (the solutions loaded before the clock
    starts); only the first ``slow_count`` of them when the first seed took over ``SLOW_SECONDS``.
    ``on_seed(seed, message or None)`` hears of each seed as soon as it is done."""
    for notebook, name in check.implementations:
        load(notebook, name)
    result = Sweep(check)
    start = time.perf_counter()
    first_seconds = 0.0
    for seed in seeds:
        if slow_count is not None and len(result.seeds) >= slow_count and first_seconds > SLOW_SECONDS:
            break
        message = check.call(seed, load)
        if not result.seeds:
            first_seconds = time.perf_counter() - start
        result.seeds.append(seed)
        if message is not None:
            result.failures[seed] = message
        if on_seed is not None:
            on_seed(seed, message)
    result.seconds = time.perf_counter() - start
    return result
