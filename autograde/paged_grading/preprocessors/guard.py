"""Guarding the checks while student code runs in the grading kernel (grader side).

Threat: a learner cell replaces ``paged_helpers.checks`` functions with ones that always pass
(``ph.checks.check_block_allocator = lambda *a: None``, a patched ``report.fail``, a swapped
``__code__``), or edits the helper package on disk from a cell.

Defence, in three parts:

* ``HelperSnapshot`` (``sandbox.package_copies``) reads every file of the installed ``paged_helpers`` into memory once,
  when grading starts (the instructor's installed copy is the reference).
* ``GuardChecks`` (sanitize step, after OverwriteCells has restored the locked test cells)
  writes a pristine copy of that snapshot (its modules compiled once by the grader, so that no
  test cell compiles them again) plus ``kernel_guard.py`` and a hash manifest of sources and
  bytecode into a new private temporary folder for this notebook, and prepends to every autograded test cell
  two lines that verify the copy and re-import ``paged_helpers`` from it (see
  ``sandbox.kernel_guard``). The hashes are written literally into the cell, so editing the copy on
  disk from a learner cell makes that test fail with an integrity message instead of passing.
* ``GuardAudit`` (after execution) compares the installed package with the snapshot,
  restores any file a learner changed, added or removed (so the next student is graded with
  the real checks), writes a line to ``reports/integrity.log`` naming the student, and
  deletes the temporary folders.

The preamble is marked by ``GUARD_BEGIN`` / ``GUARD_END`` so that feedback can strip it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor

from .. import integrity
from ..sandbox.package_copies import PACKAGE, snapshot_for_this_grading_run

GUARD_BEGIN = "# >>> autograde guard: fresh, verified paged_helpers for this test (added by the grader)"
GUARD_END = "# <<< autograde guard"


def preamble(root: Path, manifest_sha256: str) -> str:
    guard = str(root / "kernel_guard.py")
    guard_sha = hashlib.sha256(Path(guard).read_bytes()).hexdigest()
    check_guard = f'__import__("hashlib").sha256(open({guard!r}, "rb").read()).hexdigest() == {guard_sha!r}'
    load = f'__import__("runpy").run_path({guard!r})["fresh_helpers"]({str(root)!r}, {manifest_sha256!r})'
    return (
        f"{GUARD_BEGIN}\n"
        f'assert {check_guard}, "autograde guard: the guard file was modified"\n'
        f"ph = {load}\n"
        f"{GUARD_END}\n"
    )


def is_autograded_test(cell) -> bool:
    return cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell)


class GuardChecks(NbGraderPreprocessor):
    """Prepend the guard preamble to every autograded test cell (sanitize step)."""

    def preprocess(self, nb, resources):
        snapshot = snapshot_for_this_grading_run()
        root, manifest_sha = snapshot.write_pristine_copy()
        text = preamble(root, manifest_sha)
        for cell in nb.cells:
            if is_autograded_test(cell) and GUARD_BEGIN not in cell.source:
                cell.source = text + cell.source
        return nb, resources


class GuardAudit(NbGraderPreprocessor):
    """After execution: restore the installed package if a learner changed it, and log who did."""

    def preprocess(self, nb, resources):
        snapshot = snapshot_for_this_grading_run()
        changed = snapshot.changes_on_disk()
        if changed:
            line = f"modified installed {PACKAGE}: {', '.join(changed)} (restored)"
            self.log.warning(line)
            integrity.log(resources.get("nbgrader", {}), "package", line)
            snapshot.restore(changed)
        snapshot.clean_up()
        return nb, resources
