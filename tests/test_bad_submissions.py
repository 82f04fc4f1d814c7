"""Fair grading under bad submissions: one class, one real grading run, every case graded as described.

All submissions are notebook 02 (the allocator: one 6-point test cell, a check that takes a
second), built from the instructor source (right) or the release (nothing done) with one
edit each. One ``course.py grade`` runs over the whole class; each test then reads the
gradebook, the autograded notebook or the integrity log. The per-cell timeout is shortened
to keep the run short.
"""

from __future__ import annotations

import nbformat
import pytest

from autograde_helpers import (
    ROOT,
    autograded_notebook,
    cell_of,
    course,
    errors_of,
    graded_course,
    insert_cell_after,
    instructor,
    isolated_site,
    released,
    replace_in_cell,
    scores_of,
    write_submission,
)

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]

A = "02_block_allocator"
TEST = "test_block_allocator"
SOLUTION = "block_allocator"
FULL = 6.0
TIMEOUT = 15

PATCHED = "patched: the check now passes anything"

EDIT_CHECK_ON_DISK = f"""\
import importlib
import pathlib
import paged_helpers.checks.allocator as target
path = pathlib.Path(target.__file__)
stub = (
    "from .report import check\\n"
    "@check(notebook='02_block_allocator', builds='BlockAllocator')\\n"
    "def check_block_allocator(*args, **kwargs):\\n    pass\\n"
)
path.write_text(stub)
importlib.reload(target)
target.check_block_allocator(None)
print({PATCHED!r})
"""

MONKEYPATCH_ATTRIBUTE = f"""\
import paged_helpers as ph
ph.checks.check_block_allocator = lambda *args, **kwargs: None
ph.checks.check_block_allocator(None)
print({PATCHED!r})
"""

MONKEYPATCH_MODULE = f"""\
import sys, types
import paged_helpers.checks.allocator as allocator_checks
import paged_helpers.checks.report as report
allocator_checks.check_block_allocator.__wrapped__.__code__ = (lambda *args, **kwargs: None).__code__
report.fail = lambda *args, **kwargs: None
fake = types.ModuleType("paged_helpers.checks")
fake.check_block_allocator = lambda *args, **kwargs: None
sys.modules["paged_helpers.checks"] = fake
allocator_checks.check_block_allocator(None)
from paged_helpers.checks import check_block_allocator
check_block_allocator(None)
print({PATCHED!r})
"""

IGNORE_INTERRUPTS = """\
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
"""


def _submissions() -> dict[str, tuple[nbformat.NotebookNode, float, str]]:
    """student -> (their notebook 02, the autograded points it must get, what it shows)."""
    right, blank = instructor(A), released(A)
    deleted_test = blank.copy()
    deleted_test.cells = [c for i, c in enumerate(blank.cells) if i != cell_of(blank, TEST)]
    deleted_test_right = right.copy()
    deleted_test_right.cells = [c for i, c in enumerate(right.cells) if i != cell_of(right, TEST)]
    fake_grade_cell = {
        "nbgrader": {
            "schema_version": 3,
            "grade": True,
            "locked": True,
            "solution": False,
            "grade_id": "bonus_points",
            "points": 100,
        }
    }
    return {
        "correct": (right, FULL, "the instructor's solution"),
        "release": (blank, 0.0, "the release as handed out"),
        "loop_in_solution": (
            replace_in_cell(
                right,
                SOLUTION,
                "        self.free = deque(range(num_blocks))",
                "        while True:\n            pass\n        self.free = deque(range(num_blocks))",
            ),
            0.0,
            "an infinite loop in __init__: the test cell times out",
        ),
        "loop_ignoring_interrupt": (
            insert_cell_after(right, SOLUTION, IGNORE_INTERRUPTS),
            FULL,
            "a cell that ignores the interrupt: kernel restarted, the test still graded",
        ),
        "os_exit_cell": (
            insert_cell_after(right, SOLUTION, "import os\nos._exit(1)"),
            FULL,
            "os._exit in a cell: kernel restarted, the test still graded",
        ),
        "os_exit_in_check": (
            replace_in_cell(
                right,
                SOLUTION,
                "        block = self.free.popleft()",
                "        import os\n        os._exit(3)\n        block = self.free.popleft()",
            ),
            0.0,
            "os._exit inside allocate(): the test cell dies, scores 0",
        ),
        "segfault": (
            insert_cell_after(right, SOLUTION, "import ctypes\nctypes.string_at(0)"),
            FULL,
            "a segfault in a cell: kernel restarted, the test still graded",
        ),
        "sys_exit_and_raise": (
            insert_cell_after(
                insert_cell_after(right, None, "raise ImportError('the learner broke the imports')"),
                None,
                "import sys\nsys.exit(1)",
            ),
            FULL,
            "sys.exit, then an exception, in cells before the imports",
        ),
        "edited_test_prints_passed": (
            insert_cell_after(
                replace_in_cell(blank, TEST, "check_block_allocator(BlockAllocator)", "print('all tests passed')"),
                TEST,
                "print('all tests passed')",
            ),
            0.0,
            "test cell replaced by a print, and another print after it: restored and run",
        ),
        "deleted_test_blank": (deleted_test, 0.0, "test cell deleted, nothing implemented: re-added and run"),
        "deleted_test_right": (
            deleted_test_right,
            FULL,
            "test cell deleted, right solution: re-added and run",
        ),
        "added_grade_cell": (
            insert_cell_after(blank, SOLUTION, "print('bonus')", metadata=fake_grade_cell),
            0.0,
            "an added cell posing as a 100-point test cell",
        ),
        "stderr_writes": (
            insert_cell_after(
                replace_in_cell(
                    right,
                    SOLUTION,
                    "        block = self.free.popleft()",
                    "        import sys\n        print('debug: allocate', file=sys.stderr)\n"
                    "        logging.getLogger('allocator').debug('allocate called')\n"
                    "        block = self.free.popleft()",
                ),
                None,
                "import logging\nlogging.basicConfig(level=logging.DEBUG, format='log: %(message)s')",
            ),
            FULL,
            "a right solution that prints and logs to stderr keeps its points",
        ),
        "monkeypatch_attribute": (
            insert_cell_after(blank, SOLUTION, MONKEYPATCH_ATTRIBUTE),
            0.0,
            "ph.checks.check_block_allocator = lambda: None",
        ),
        "monkeypatch_module": (
            insert_cell_after(blank, SOLUTION, MONKEYPATCH_MODULE),
            0.0,
            "patched __code__, report.fail and sys.modules",
        ),
        "edit_package_on_disk": (
            insert_cell_after(blank, SOLUTION, EDIT_CHECK_ON_DISK),
            0.0,
            "rewrote the installed check module on disk",
        ),
        "zz_blank_after_the_edit": (blank, 0.0, "a blank one after the edit: the stub is gone"),
    }


@pytest.fixture(scope="module")
def bad_class(tmp_path_factory):
    root = graded_course("bad-submissions", **{"FairExecute.timeout": TIMEOUT, "FairExecute.responsive_grace": 5})
    submissions = _submissions()
    folder = tmp_path_factory.mktemp("class")
    for student, (notebook, _, _) in submissions.items():
        write_submission(folder, student, {A: notebook})
    course(root, "collect", str(folder))
    done = course(root, "grade", A, check=False)
    course(root, "feedback", A)
    return root, submissions, done


def test_the_run_completes_and_grades_everyone(bad_class):
    root, submissions, done = bad_class
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scores = scores_of(root)
    assert sorted(student for student, _ in scores) == sorted(submissions)


def _cases():
    return [(student, expected) for student, (_, expected, _) in _submissions().items()]


@pytest.mark.parametrize("student,expected", _cases(), ids=[s for s, _ in _cases()])
def test_each_submission_gets_what_it_earned(bad_class, student, expected):
    root, submissions, _ = bad_class
    cells = scores_of(root)[(student, A)]
    assert set(cells) == {TEST}, f"{student}: graded cells {sorted(cells)} (an added cell must not count)"
    assert cells[TEST] == (expected, FULL), f"{student} ({submissions[student][2]})"


def test_timeouts_and_crashes_say_what_happened(bad_class):
    root = bad_class[0]
    assert any("CellTimeoutError" in e for e in errors_of(autograded_notebook(root, "loop_in_solution", A), TEST))
    assert any("KernelDied" in e for e in errors_of(autograded_notebook(root, "os_exit_in_check", A), TEST))
    for student, ename in [
        ("os_exit_cell", "KernelDied"),
        ("segfault", "KernelDied"),
        ("loop_ignoring_interrupt", "KernelUnresponsive"),
    ]:
        notebook = autograded_notebook(root, student, A)
        crashed = [c for c in notebook.cells if any(o.get("ename") == ename for o in c.get("outputs", []))]
        assert len(crashed) == 1 and not crashed[0].metadata.get("nbgrader"), student


def test_monkeypatching_and_disk_edits_meet_the_real_check(bad_class):
    root = bad_class[0]
    for student in ("monkeypatch_attribute", "monkeypatch_module", "edit_package_on_disk"):
        attack = autograded_notebook(root, student, A).cells[
            cell_of(autograded_notebook(root, student, A), SOLUTION) + 1
        ]
        attack_text = "".join(o.get("text", "") for o in attack.outputs)
        assert PATCHED in attack_text, (student, attack.outputs)  # the attack worked in its own cell
        messages = errors_of(autograded_notebook(root, student, A), TEST)
        assert any("not implemented yet" in m for m in messages), (student, messages)


def test_a_disk_edit_is_restored_and_logged(bad_class):
    root = bad_class[0]
    log = (root / "reports" / "integrity.log").read_text()
    assert "edit_package_on_disk" in log and "checks/allocator.py" in log
    assert [line.split("\t")[1] for line in log.splitlines()] == ["edit_package_on_disk"]
    installed = isolated_site() / "paged_helpers" / "checks" / "allocator.py"
    assert installed.read_text() == (ROOT / "paged_helpers" / "checks" / "allocator.py").read_text()


def test_stderr_is_shown_not_punished(bad_class):
    root = bad_class[0]
    notebook = autograded_notebook(root, "stderr_writes", A)
    cell = notebook.cells[cell_of(notebook, TEST)]
    streams = [o for o in cell.outputs if o.output_type == "stream"]
    assert streams and all(o.name == "stdout" for o in streams)
    text = "".join(o.text for o in streams)
    assert "debug: allocate" in text  # sys.stderr inside a check: the check sends it to stdout
    assert "[stderr] log: allocate called" in text  # a logging handler holds the kernel's stderr


def test_feedback_hides_the_guard_and_the_hidden_tests(bad_class):
    from autograde_helpers import feedback_text

    root = bad_class[0]
    for student in ("release", "monkeypatch_module", "loop_in_solution"):
        text = feedback_text(root, student, A)
        assert "autograde guard" not in text and "seed=2026" not in text and "HIDDEN TESTS" not in text
