"""Shared test fixtures: the right implementations come from the instructor notebooks.

Tests never keep a second copy of a solution: ``solution("02_block_allocator",
"BlockAllocator")`` loads it from notebooks/ through the same loader learners use.
Wrong implementations (for proving that checks can fail) live beside each test as small
subclasses or edits of the right ones; the message each one gets is compared whole with its reviewed
snapshot (``message_snapshot``, below) in tests/__snapshots__/<test file>.ambr.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import random
import re
import sys
import tempfile
from pathlib import Path

import pytest
from syrupy.extensions.amber import AmberSnapshotExtension

# Under pytest-xdist each worker is one of several busy processes on the machine's cores (CI: two
# workers on two cores, beside the grading tests' kernels): one torch thread each, set before torch is
# imported, so that no worker's thread pool spins against another's (the processes a test starts inherit it,
# as the grader's own processes get one thread each: ``course.py``'s ``ONE_THREAD_EACH``).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _pool in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_pool, "1")

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


# --------------------------------------------------------------------------- snapshots of the learner's messages

_TEMP = re.escape(str(Path(tempfile.gettempdir()).resolve()))
# Order matters: the checkout first (it may itself lie in the temporary folder), then pytest's per-test
# folders (their numbering and the user's name change each run), then any other temporary path.
_MACHINE_SPECIFIC = (
    (re.compile(re.escape(str(ROOT))), "<repo>"),
    (re.compile(_TEMP + r"/pytest-of-[^/\s]+/pytest-\d+/[^/\s'\"]+"), "<tmp>"),
    (re.compile(_TEMP + r"(?=/)"), "<tmp>"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x…"),
    (re.compile(r"(test_\w+\.py\"?,? (?:line )?|test_\w+\.py:)\d+"), r"\1N"),
    # logits compared with a from-scratch run: the tolerance is the device's (CPU 1e-4, GPU 2e-3) and the
    # gap its arithmetic's (BLAS, kernels): a snapshot written on a CPU must hold on a GPU too
    (re.compile(r"\(within [0-9.e+-]+\)"), "(within <tolerance>)"),
    # (a gap of nan, inf or 0 is no device's arithmetic: it stays in the snapshot, where it would show)
    (re.compile(r"max \|difference\| (?!0(?![.\d])|nan|inf)[0-9.e+-]+"), "max |difference| <gap>"),
)


def machine_neutral(text: str) -> str:
    """``text`` as it reads on any machine, from any folder, on any run.

    Replaced: the checkout's path (``<repo>``); pytest's per-test temporary folders and any other path in
    the temporary folder (``<tmp>``); object addresses (``0x…``); the line number in a test file where a
    wrong implementation is defined (``test_x.py", line N``, ``test_x.py:N``: it moves whenever the test
    file is edited); the tolerance and the measured gap of logits compared with a from-scratch run
    (``(within <tolerance>)``, ``max |difference| <gap>``: the device's and its arithmetic's); ANSI colours
    (removed). Nothing else: a check's own wording, numbers and block ids are what the snapshot is for,
    and fixed-seed runs draw the same ones everywhere.
    """
    text = strip_ansi(text)
    for pattern, replacement in _MACHINE_SPECIFIC:
        text = pattern.sub(replacement, text)
    return text


class LearnerMessageSnapshot(AmberSnapshotExtension):
    """Syrupy's amber files (one per test file, in tests/__snapshots__/), each string first made
    machine-neutral (``machine_neutral``), in a dict or list too. A multi-line message is stored as the
    learner reads it, between ``'''`` lines."""

    def serialize(self, data, **kwargs):
        return super().serialize(_neutral(data), **kwargs)


def _neutral(data):
    if isinstance(data, str):
        return machine_neutral(data)
    if isinstance(data, dict):
        return {key: _neutral(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_neutral(value) for value in data)
    return data


@pytest.fixture
def message_snapshot(snapshot):
    """``assert message == message_snapshot``: the whole message a learner gets, compared with its
    reviewed copy. A new or changed message fails with a diff; ``pytest --snapshot-update`` (one test
    file at a time, without -n) writes it after you have read it as a learner would."""
    return snapshot.use_extension(LearnerMessageSnapshot)
