"""Shared test fixtures: the right implementations come from the instructor notebooks.

Tests never keep a second copy of a solution: ``solution("02_block_allocator",
"BlockAllocator")`` loads it from notebooks/ through the same loader learners use.
Wrong implementations (for proving that checks can fail) live beside each test as small
subclasses or edits of the right ones.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import random
import re
import sys
from pathlib import Path

import pytest

# Under pytest-xdist each worker is one of several busy processes on the machine's cores (CI: two
# workers on two cores, beside the grading tests' kernels): one torch thread each, set before torch is
# imported, so that no worker's thread pool spins against another's.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import paged_helpers  # noqa: E402,F401  (first: device and Triton mode)
from paged_helpers.notebook_loader import load_from_notebook  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Seeds as the grader draws its secret ones (31 bits), fixed here so that a failure replays: a hidden
# check must give every one of them the same verdict on a wrong implementation (every draw catches it).
_SEEDS = random.Random("secret seeds of the hidden tests")
SECRET_SEEDS = tuple(_SEEDS.getrandbits(31) for _ in range(12))


@functools.cache
def solution(notebook: str, name: str):
    """The instructor's definition of ``name`` from notebooks/<notebook>.ipynb.

    Quietly: the loader's "using your ... from ..." note is for learners, and would otherwise land
    in the output of whichever test loads a solution first.
    """
    with contextlib.redirect_stdout(io.StringIO()):
        return load_from_notebook(notebook, name, search=[NOTEBOOKS])


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


@pytest.fixture
def failing_message():
    """failing_message(check, impl) -> the CheckFailed message; fails the test if the check passes."""
    from paged_helpers.checks import CheckFailed

    def run(check, *impl):
        try:
            check(*impl)
        except CheckFailed as error:
            return str(error)
        pytest.fail(f"{check.__name__} passed a wrong implementation: {impl}")

    return run


@pytest.fixture(autouse=True)
def fresh_hint_tiers():
    """Each test starts with no tiered hint shown yet (the memory lasts a kernel, here a test)."""
    from paged_helpers.checks.speaking.failure import HINT_TIERS

    HINT_TIERS.forget()
    yield
    HINT_TIERS.forget()
