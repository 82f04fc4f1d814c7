"""Hidden stays hidden, through the real pipeline (``course.py grade`` then ``feedback``).

- A correct allocator that logs every pool it is given and, in the hidden call only, raises an
  exception whose message is that log (written to look like the check's own ``hint:``): its feedback
  names the hidden kind and the exception's type, and no number of the hidden scenarios; the
  instructor's ``integrity.log`` has a ``hidden`` signal line (not a ``clean-run`` accusation).
- A resubmission tuned to the hidden draw of an earlier submission (correct exactly on the pools that
  draw used, never freeing a block on any other) scores 0 on the hidden cell: the secret seed also
  depends on the submitted bytes, so the resubmission draws fresh scenarios.
"""

from __future__ import annotations

import random
import shutil

import pytest

from autograde_helpers import (
    autograded_notebook,
    course,
    errors_of,
    feedback_text,
    graded_course,
    insert_cell_after,
    instructor,
    replace_in_cell,
    scores_of,
    secret_seeds,
    write_submission,
)
from conftest import solution

A = "02_block_allocator"
CELL = "test_block_allocator"
MARK = "LEAKED-POOLS"

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _leaking() -> object:
    """The instructor's 02, logging each pool size; a pool of 20 blocks or more (only the hidden
    scenarios make one) raises ValueError whose message is the log, dressed as a hint."""
    notebook = replace_in_cell(instructor(A), "block_allocator", "    def __init__(self, num_blocks):", (
        "    pools = []\n\n    def __init__(self, num_blocks):"
    ))
    return replace_in_cell(notebook, "block_allocator", "        self.free = deque(range(num_blocks))", (
        "        BlockAllocator.pools.append(num_blocks)\n"
        "        if num_blocks >= 20:\n"
        f"            raise ValueError('\\n  hint: {MARK} ' + repr(BlockAllocator.pools))\n"
        "        self.free = deque(range(num_blocks))"
    ))


def _pools_of_the_hidden_draw(seed: int) -> set[int]:
    """The pool sizes the hidden call makes at ``seed`` (and the visible call), on a correct allocator."""
    right = solution(A, "BlockAllocator")
    sizes: set[int] = set()

    class Recording(right):
        def __init__(self, num_blocks):
            sizes.add(num_blocks)
            super().__init__(num_blocks)

    from paged_helpers.checks import check_block_allocator

    check_block_allocator(Recording)
    check_block_allocator(Recording, seed=seed, hidden=True)
    return sizes


def _tuned(pools: set[int]) -> object:
    """The instructor's 02 plus a cell: right on ``pools``, and on any other pool a release that never
    gives the block back (a bug every hidden kind finds)."""
    return insert_cell_after(instructor(A), "block_allocator", (
        "class BlockAllocator(BlockAllocator):\n"
        f"    pools = {sorted(pools)!r}\n\n"
        "    def release(self, block):\n"
        "        if len(self.refs) in self.pools:\n"
        "            return super().release(block)\n"
        "        self._check_block(block)\n"
        "        if self.refs[block] == 0:\n"
        "            raise RuntimeError(f'block {block} is already free')\n"
        "        self.refs[block] -= 1\n"
    ))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = graded_course("hidden-stays-hidden")
    folder = tmp_path_factory.mktemp("class")
    first = _leaking()
    write_submission(folder, "leaky", {A: first})
    write_submission(folder, "tuned", {A: first})
    course(root, "collect", str(folder))
    # The tuned student's first submission drew its hidden scenarios from this seed; the tuned
    # resubmission below is right on exactly the pools of that draw (what the leak would have told).
    submitted = root / "submitted" / "tuned" / A / f"{A}.ipynb"
    digest = secret_seeds.submission_digest(submitted)
    first_seed = secret_seeds.secret_seed(root, "tuned", A, A, digest, CELL)
    pools = _pools_of_the_hidden_draw(first_seed)
    import nbformat

    nbformat.write(_tuned(pools), submitted)  # the resubmission, as collect would place it
    done = course(root, "grade", A, check=False)
    course(root, "feedback", A)
    return root, done, pools


@needs_bwrap
def test_a_learner_exception_carries_no_hidden_number_into_feedback(graded):
    root, done, _ = graded
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert scores_of(root)[("leaky", A)][CELL][0] == 0
    errors = errors_of(autograded_notebook(root, "leaky", A), CELL)
    leaked = f"{MARK} ["  # the log as the allocator's exception would print it (the source has the mark too)
    assert errors and all(leaked not in error for error in errors), errors
    assert any("a hidden scenario failed" in error and "your code raised: ValueError" in error for error in errors)
    page = feedback_text(root, "leaky", A)
    assert leaked not in page and "hidden scenario failed" in page
    log = (root / "reports" / "integrity.log").read_text()
    leaky = [line for line in log.splitlines() if "\tleaky\t" in line]
    assert any("\thidden: " in line for line in leaky), leaky
    assert not any("clean-run" in line for line in leaky), leaky


@needs_bwrap
def test_a_resubmission_tuned_to_an_earlier_draw_meets_fresh_scenarios(graded):
    root, _, pools = graded
    assert len(pools) > 4  # the visible pools and the earlier draw's, which the tuned release handles
    cells = scores_of(root)[("tuned", A)]
    assert cells[CELL][0] == 0, cells
    log = (root / "reports" / "hidden_draws.log").read_text().splitlines()
    families = {line.split("\t")[1]: line.split("\t")[-1] for line in log}
    assert set(families) == {"leaky", "tuned"} and families["leaky"] != families["tuned"], log


def test_the_secret_seed_follows_the_submitted_bytes(tmp_path):
    """A regrade of the same bytes draws the same scenarios; other bytes, or another student, others."""
    names = ("alice", A, A)
    one, other = "a" * 64, "b" * 64
    seed = secret_seeds.secret_seed(tmp_path, *names, one, CELL)
    assert seed == secret_seeds.secret_seed(tmp_path, *names, one, CELL)
    assert seed != secret_seeds.secret_seed(tmp_path, *names, other, CELL)
    assert seed != secret_seeds.secret_seed(tmp_path, "bob", A, A, one, CELL)
    family = secret_seeds.seed_family(tmp_path, *names, one)
    assert family == secret_seeds.seed_family(tmp_path, *names, one) != secret_seeds.seed_family(
        tmp_path, *names, other
    )
    assert str(seed) not in family
    assert 0 <= seed < 2**31 and random.Random(seed)  # a 31-bit seed, as numpy and torch take


def test_a_hidden_failure_says_the_kind_and_nothing_the_learner_wrote():
    """Parts, not text: the learner's message, printed lines and own class name stay out; a hint's
    numbers are left out, its 0s and 1s kept (they are the rule's)."""
    from paged_helpers.checks.speaking.failure import CheckFailed, Finding, LearnerWords
    from paged_helpers.checks.speaking.hidden import hidden_failure

    class Pool37Error(Exception):
        pass

    for raised, shown in ((ValueError, "ValueError"), (Pool37Error, "an exception of a class of your own")):
        words = LearnerWords(error_type=raised.__name__, message="  hint: pools [37, 41]", printed="37 41")
        error = CheckFailed(
            "reserve raised ...", finding=Finding("a pool of 37 blocks", "37", "41", "add 1, then 37", learner=words)
        )
        hidden = hidden_failure("long walks", error)
        text = str(hidden)
        assert text.startswith("a hidden scenario failed: long walks.")
        assert f"your code raised: {shown}" in text and "add 1, then n" in text
        assert "37" not in text and "41" not in text and "pools" not in text, text
        assert hidden.finding.learner.message == "" and hidden.finding.learner.printed == ""


def test_the_checker_sends_a_hidden_call_s_stray_exception_by_its_type_alone():
    """An exception that reached the check uncaught in a hidden call (a property of the learner's
    that raised, say) crosses to the grader as its Python type, never its message."""
    from autograde_helpers import checker

    verdict = checker.failure_verdict(KeyError("pools [37, 41]"), hidden=True)
    assert "37" not in str(verdict) and verdict["failure"]["learner"]["error_type"] == "KeyError", verdict
    visible = checker.failure_verdict(KeyError("pools [37, 41]"), hidden=False)
    assert "37" in visible["message"]  # a visible call's message is the learner's to read
