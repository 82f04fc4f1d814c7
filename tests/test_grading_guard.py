"""The grading add-ons in isolation (fast; no nbgrader run): the guard's integrity checks, the
fresh import that defeats monkeypatching, the restore of an edited package, and what feedback
shows of a test cell. The same defences are exercised end to end in test_bad_submissions.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from nbformat.v4 import new_code_cell, new_output

from autograde_helpers import ROOT, guard, kernel_guard, outputs


@pytest.fixture
def snapshot(tmp_path):
    package = tmp_path / "site" / "paged_helpers"
    shutil.copytree(ROOT / "paged_helpers", package, ignore=shutil.ignore_patterns("__pycache__"))
    taken = guard.HelperSnapshot(package)
    yield taken
    taken.clean_up()


def test_pristine_copy_verifies(snapshot):
    root, digest = snapshot.write_pristine_copy()
    assert kernel_guard.verify(root, digest) == root / "paged_helpers"


@pytest.mark.parametrize(
    "tamper, words",
    [
        (lambda root: (root / "paged_helpers/checks/allocator.py").write_text("pass\n"), "changed or removed"),
        (lambda root: (root / "paged_helpers/checks/allocator.py").unlink(), "changed or removed"),
        (lambda root: (root / "paged_helpers/checks/sneaky.py").write_text("pass\n"), "added"),
        (lambda root: (root / "manifest.json").write_text("{}"), "manifest"),
    ],
    ids=["edited", "deleted", "added", "manifest"],
)
def test_tampered_copy_is_refused(snapshot, tamper, words):
    root, digest = snapshot.write_pristine_copy()
    tamper(root)
    with pytest.raises(AssertionError, match=words):
        kernel_guard.verify(root, digest)


def test_edited_installed_package_is_found_and_restored(snapshot):
    allocator = snapshot.package_dir / "checks" / "allocator.py"
    original = allocator.read_bytes()
    allocator.write_text("def check_block_allocator(*a, **k):\n    pass\n")
    (snapshot.package_dir / "checks" / "extra.py").write_text("x = 1\n")
    changed = snapshot.changes_on_disk()
    assert changed == ["checks/allocator.py", "checks/extra.py"]
    snapshot.restore(changed)
    assert allocator.read_bytes() == original and not (snapshot.package_dir / "checks" / "extra.py").exists()
    assert snapshot.changes_on_disk() == []


def test_preamble_undoes_monkeypatching_in_a_fresh_process(snapshot):
    """Run in a child process: the preamble replaces paged_helpers in sys.modules."""
    root, digest = snapshot.write_pristine_copy()
    script = textwrap.dedent(
        """
        import sys, types
        import paged_helpers as ph
        import paged_helpers.checks.allocator as allocator_checks
        import paged_helpers.checks.report as report
        ph.checks.check_block_allocator = lambda *a, **k: None
        allocator_checks.check_block_allocator.__wrapped__.__code__ = (lambda *a, **k: None).__code__
        report.fail = lambda *a, **k: None
        fake = types.ModuleType("paged_helpers.checks")
        fake.check_block_allocator = lambda *a, **k: None
        sys.modules["paged_helpers.checks"] = fake
        """
    )
    script += guard.preamble(root, digest)
    script += textwrap.dedent(
        """
        from paged_helpers.checks import CheckFailed, check_block_allocator

        class NotDone:
            def __init__(self, num_blocks):
                raise NotImplementedError()

        try:
            check_block_allocator(NotDone)
        except CheckFailed as error:
            print("CAUGHT", str(error).splitlines()[0])
        print("FROM", ph.__file__)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "CAUGHT not implemented yet" in done.stdout
    assert f"FROM {root}" in done.stdout


def test_stderr_in_a_test_cell_is_shown_as_stdout():
    cell = new_code_cell("check()", metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "t"}})
    cell.outputs = [new_output("stream", name="stderr", text="warning: slow\n")]
    outputs.DemoteStderr().preprocess_cell(cell, {}, 0)
    assert cell.outputs[0].name == "stdout" and cell.outputs[0].text == "[stderr] warning: slow\n"


def test_feedback_shows_the_check_message_only(tmp_path):
    source = guard.preamble(*_fake_guard_root(tmp_path)) + "check_block_allocator(BlockAllocator)\n"
    cell = new_code_cell(source, metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "t"}})
    cell.outputs = [
        new_output(
            "error",
            ename="CheckFailed",
            evalue="two forks share block 3\n  hint: copy before writing",
            traceback=["\x1b[0;31mTraceback\x1b[0m", "check_block_allocator(BlockAllocator, seed=2026)", "..."],
        )
    ]
    outputs.StripGuard().preprocess_cell(cell, {}, 0)
    outputs.HideTestTracebacks().preprocess_cell(cell, {}, 0)
    assert cell.source == "check_block_allocator(BlockAllocator)\n"
    assert cell.outputs[0].traceback == ["CheckFailed: two forks share block 3\n  hint: copy before writing"]


def _fake_guard_root(tmp_path):
    (tmp_path / "kernel_guard.py").write_text("")
    return tmp_path, "0" * 64


def test_shards_split_a_class_without_overlap():
    import course

    students = [f"s{k:02d}" for k in range(10)]
    shards = [course.shard_of(students, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(sum(shards, [])) == students
    assert all(len(shard) in (3, 4) for shard in shards)
    with pytest.raises(SystemExit):
        course.shard_of(students, "4/3")
