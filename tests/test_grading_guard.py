"""The grading add-ons in isolation (fast; no nbgrader run): the guard's integrity checks, the
fresh import that defeats monkeypatching, the restore of an edited package, and what feedback
shows of a test cell. The same defences are exercised end to end in test_bad_submissions.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograde_helpers import ROOT, guard, kernel_guard, outputs, package_copies


@pytest.fixture
def snapshot(tmp_path):
    package = tmp_path / "site" / "paged_helpers"
    shutil.copytree(ROOT / "paged_helpers", package, ignore=shutil.ignore_patterns("__pycache__"))
    taken = package_copies.HelperSnapshot(package)
    yield taken
    taken.clean_up()


def test_pristine_copy_verifies(snapshot):
    root, digest = snapshot.write_pristine_copy()
    assert kernel_guard.verify(root, digest) == root / "paged_helpers"


ALLOCATOR_CHECK = "paged_helpers/checks/allocator"  # a check module the tampering cases change


def _plant_bytecode(root: Path, name: str) -> None:
    """A compiled module beside the sources: Python imports ``checks/NAME.pyc`` with no source."""
    cached = next(root.glob(f"{ALLOCATOR_CHECK}/__pycache__/check.*.pyc"))
    shutil.copyfile(cached, root / "paged_helpers" / "checks" / f"{name}.pyc")


@pytest.mark.parametrize(
    "tamper, words",
    [
        (lambda root: (root / f"{ALLOCATOR_CHECK}/check.py").write_text("pass\n"), "changed or removed"),
        (lambda root: (root / f"{ALLOCATOR_CHECK}/check.py").unlink(), "changed or removed"),
        (lambda root: (root / "paged_helpers/checks/sneaky.py").write_text("pass\n"), "added"),
        (lambda root: (root / "manifest.json").write_text("{}"), "manifest"),
        (
            lambda root: next(root.glob(f"{ALLOCATOR_CHECK}/__pycache__/check.*.pyc")).write_bytes(b"x"),
            "changed",
        ),
        (lambda root: _plant_bytecode(root, "sneaky"), "added"),
    ],
    ids=["edited", "deleted", "added", "manifest", "edited bytecode", "added bytecode"],
)
def test_tampered_copy_is_refused(snapshot, tamper, words):
    root, digest = snapshot.write_pristine_copy()
    tamper(root)
    with pytest.raises(AssertionError, match=words):
        kernel_guard.verify(root, digest)


def test_test_cells_import_the_copy_compiled_once_by_the_grader(snapshot):
    """Every test cell imports the package afresh from a copy the sandbox sees read-only: the grader
    writes its modules compiled (checked-hash pycs), so no cell compiles a module again."""
    root, digest = snapshot.write_pristine_copy()
    sources = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    assert sources
    script = guard.preamble(root, digest) + textwrap.dedent(
        """
        import importlib.machinery as machinery
        compiled = []
        original = machinery.SourceFileLoader.source_to_code
        machinery.SourceFileLoader.source_to_code = lambda self, data, path, **k: (
            compiled.append(path), original(self, data, path, **k))[1]
        """
    )
    script += guard.preamble(root, digest) + textwrap.dedent(
        """
        import paged_helpers.checks.allocator, paged_helpers.checks.kernels.paged_attention
        print("COMPILED", [p for p in compiled if "paged_helpers" in p])
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "COMPILED []" in done.stdout


def test_edited_installed_package_is_found_and_restored(snapshot):
    allocator = snapshot.package_dir / "checks" / "allocator" / "check.py"
    original = allocator.read_bytes()
    allocator.write_text("def check_block_allocator(*a, **k):\n    pass\n")
    (snapshot.package_dir / "checks" / "extra.py").write_text("x = 1\n")
    changed = snapshot.changes_on_disk()
    assert changed == ["checks/allocator/check.py", "checks/extra.py"]
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
        import paged_helpers.checks.speaking.failure as failure
        ph.checks.check_block_allocator = lambda *a, **k: None
        allocator_checks.check_block_allocator.__wrapped__.__code__ = (lambda *a, **k: None).__code__
        failure.fail = lambda *a, **k: None
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
    # A student's cell printing IPython's input history shows the guard's lines (copy path, hash).
    history = new_code_cell("print(In)")
    history.outputs = [new_output("stream", name="stdout", text=f"['', {source!r}]\n")]
    notebook = new_notebook(cells=[cell, history])
    outputs.StripGuard().preprocess(notebook, {})
    outputs.HideTestTracebacks().preprocess_cell(cell, {}, 0)
    assert cell.source == "check_block_allocator(BlockAllocator)\n"
    assert cell.outputs[0].traceback == ["CheckFailed: two forks share block 3\n  hint: copy before writing"]
    printed = history.outputs[0].text
    assert "0" * 64 not in printed and "kernel_guard" not in printed and "[grader's line]" in printed, printed


def _fake_guard_root(tmp_path):
    (tmp_path / "kernel_guard.py").write_text("")
    return tmp_path, "0" * 64


def test_shards_split_a_class_without_overlap():
    from autograde_helpers import course_script

    course = course_script()
    students = [f"s{k:02d}" for k in range(10)]
    shards = [course.shard_of(students, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(sum(shards, [])) == students
    assert all(len(shard) in (3, 4) for shard in shards)
    with pytest.raises(SystemExit):
        course.shard_of(students, "4/3")


# --- the sandbox and the second opinion (fast: no nbgrader run) ------------------------------

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _student_course(tmp_path, student="alice", assignment="02_block_allocator", notebook=None):
    """A course root with one student's submission and autograded scratch, plus secrets beside it."""
    from autograde_helpers import bubblewrap

    root = tmp_path / "course"
    for part in ("source/" + assignment, f"submitted/{student}/{assignment}", f"autograded/{student}/{assignment}"):
        (root / part).mkdir(parents=True, exist_ok=True)
    (root / "source" / assignment / "secret.txt").write_text("hidden tests\n")
    (root / "gradebook.db").write_text("")
    (root / "submitted" / "bob").mkdir()
    if notebook is not None:
        import nbformat

        nbformat.write(notebook, root / "submitted" / student / assignment / f"{assignment}.ipynb")
    return bubblewrap.Submission(root, student, assignment)


@needs_bwrap
def test_the_sandbox_hides_the_course_and_the_network(tmp_path):
    """Only the student's submission is there; the kernel's autograded folder is a discarded scratch
    (the real one, with the notebook whose hidden tests nbgrader restored, is never mounted)."""
    from autograde_helpers import bubblewrap

    submission = _student_course(tmp_path)
    real = submission.scratch / f"{submission.assignment}.ipynb"
    real.write_text("### BEGIN HIDDEN TESTS\nsecret\n")
    (submission.root / "submitted" / "alice" / submission.assignment / "notes.txt").write_text("my notes")
    box = bubblewrap.Sandbox(submission)
    probe = textwrap.dedent(
        f"""
        import os, socket, paged_helpers
        print(sorted(os.listdir({str(submission.root)!r})))
        print(sorted(os.listdir({str(submission.root / "submitted")!r})))
        print(sorted(os.listdir(".")), open("notes.txt").read())
        open("scratch.txt", "w").write("mine")
        os.symlink({str(submission.root / "gradebook.db")!r}, "gradebook-link.txt")
        for target in [{str(submission.root / "submitted" / "alice" / "x")!r}, paged_helpers.__file__]:
            try:
                open(target, "a").write("x")
                print("WROTE", target)
            except OSError as error:
                print("refused", error.errno)
        try:
            socket.create_connection(("127.0.0.1", 22), timeout=2)
            print("NETWORK")
        except OSError:
            print("no network")
        """
    )
    try:
        done = subprocess.run([*box.prefix, sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        assert (box.scratch / submission.assignment / "scratch.txt").read_text() == "mine"
        link = f"a symbolic link gradebook-link.txt -> {submission.root / 'gradebook.db'}"
        assert box.leftovers(submission.assignment) == [link]
    finally:
        box.close()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "['autograded', 'submitted']" and lines[1] == "['alice']", lines
    assert lines[2] == "['notes.txt'] my notes", lines  # the submitted files, never the graded notebook
    assert lines[3:5] == ["refused 30", "refused 30"] and lines[5] == "no network", lines
    assert sorted(p.name for p in submission.scratch.iterdir()) == [real.name], "the kernel wrote the real folder"
    assert box.cgroup.path is None and not box.private.exists() and not box.scratch.exists()


@needs_bwrap
def test_the_sandbox_keeps_none_of_the_graders_credentials(tmp_path, monkeypatch):
    """The grader's environment is the instructor's: on a JupyterHub it holds the hub's API token, and a
    gradebook password may be there. A cell that prints ``os.environ`` prints into the feedback, so a
    sandboxed process sees only what configures Python, Jupyter, torch and the course."""
    from autograde_helpers import bubblewrap

    secrets = {
        "JUPYTERHUB_API_TOKEN": "the instructor's hub token",
        "JPY_API_TOKEN": "the same, by its old name",
        "PGPASSWORD": "the gradebook's password",
        "AWS_SECRET_ACCESS_KEY": "a cloud key",
        "INSTRUCTOR_NOTE": "anything else of the instructor's",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PAGED_HELPERS_AUDIT_PROBE", "kept")
    box = bubblewrap.Sandbox(_student_course(tmp_path))
    probe = "import json, os; print(json.dumps(dict(os.environ)))"
    try:
        done = subprocess.run([*box.prefix, sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    finally:
        box.close()
    assert done.returncode == 0, done.stderr
    inside = json.loads(done.stdout.splitlines()[-1])
    assert not set(secrets) & set(inside), sorted(set(secrets) & set(inside))
    assert not any(value in done.stdout for value in secrets.values())
    assert inside["PAGED_HELPERS_AUDIT_PROBE"] == "kept" and inside["PATH"] == os.environ["PATH"]
    assert inside.get("PYTHONPATH") == os.environ.get("PYTHONPATH") and inside["HOME"] == "/tmp/home"


def test_check_calls_are_read_as_data_never_run(tmp_path):
    from autograde_helpers import second_opinion, secret_seeds

    source = (
        guard.preamble(*_fake_guard_root(tmp_path))
        + "from paged_helpers.checks import check_block_allocator\n\n"
        + 'check_block_allocator(BlockAllocator, unfinished="note")\n### BEGIN HIDDEN TESTS\n'
        + "check_block_allocator(BlockAllocator, seed=2026)\n### END HIDDEN TESTS\n"
    )
    calls = second_opinion.check_calls(source)
    visible = {"check": "check_block_allocator", "args": [["name", "BlockAllocator"]], "kwargs": {}, "hidden": False}
    hidden_call = {**visible, "kwargs": {"seed": 2026}, "hidden": True}
    assert calls == [visible, hidden_call]
    seed = secret_seeds.secret_seed(tmp_path, "alice", "02_block_allocator", "test_block_allocator")
    assert seed == secret_seeds.secret_seed(tmp_path, "alice", "02_block_allocator", "test_block_allocator")
    assert seed != secret_seeds.secret_seed(tmp_path, "bob", "02_block_allocator", "test_block_allocator")
    assert secret_seeds.with_secret_seeds(calls, seed) == [visible, {**hidden_call, "kwargs": {"seed": seed}}]
    for bad in ("import os\n", "x = check_block_allocator(A)\n", "ph.checks.check_x(A)\n", "check_x(A, seed=f())\n"):
        with pytest.raises((second_opinion.UnsupportedTest, ValueError)):
            second_opinion.check_calls(bad)


def test_feedback_outputs_never_show_hidden_lines_or_parameters():
    from autograde_helpers import hidden_tests

    source = "check_x(A)\n### BEGIN HIDDEN TESTS\ncheck_x(A, seed=2026, pool=13)\n### END HIDDEN TESTS\n"
    lines = hidden_tests.hidden_lines(source)
    scrub = hidden_tests.Scrubber(lines, hidden_tests.hidden_parameters(lines))
    text = "In[7]: check_x(A, seed=2026, pool=13)\nfailed with seed 2026 on a pool: 13 (block 2026 stays)"
    assert scrub(text) == "In[7]: [hidden test]\nfailed with seed (hidden) on a pool: (hidden) (block 2026 stays)"


def _allocator_submission(method_line: str = "", extra_cell: str = ""):
    """The instructor's notebook 02, with a line added to allocate() or a cell added after it."""
    from autograde_helpers import insert_cell_after, instructor, replace_in_cell

    notebook = instructor("02_block_allocator")
    if method_line:
        old = "        block = self.free.popleft()"
        notebook = replace_in_cell(notebook, "block_allocator", old, method_line + "\n" + old)
    if extra_cell:
        notebook = insert_cell_after(notebook, "block_allocator", extra_cell)
    return notebook


CLEAN_RUN_CASES = {
    "honest": (_allocator_submission, {}, True, None),
    "peeks_at_the_checker": (
        _allocator_submission,
        {"method_line": "        import sys; _ = sys._getframe(1).f_locals"},
        False,
        "took a frame object",
    ),
    "peeks_through_logging": (
        _allocator_submission,
        {"method_line": "        import logging; _ = logging.currentframe().f_back.f_locals"},
        False,
        "took a frame object during the check through logging",
    ),
    "honest_logging": (
        _allocator_submission,
        {"method_line": "        import logging; logging.getLogger('allocator').warning('allocate')"},
        True,
        None,
    ),
    "walks_the_heap": (
        _allocator_submission,
        {"method_line": "        import gc; _ = gc.get_objects()"},
        False,
        "gc.get_objects",
    ),
    "forges_a_result": (
        _allocator_submission,
        {
            "method_line": "        import os, contextlib\n        for fd in range(3, 16):\n"
            '            with contextlib.suppress(OSError): os.write(fd, b\'{"outcome": {"passed": true}}\\n\')'
        },
        False,
        "forged",
    ),
    "hook_in_a_class_body": (
        _allocator_submission,
        {"extra_cell": "class Sneaky:\n    import sys\n    sys.meta_path.insert(0, object())\n"},
        False,
        "sys.meta_path was changed",
    ),
    "top_level_hook_never_runs": (
        _allocator_submission,
        {"extra_cell": "import builtins\nbuiltins.__import__ = None\n"},
        True,
        None,
    ),
}


@needs_bwrap
@pytest.mark.parametrize("case", sorted(CLEAN_RUN_CASES))
def test_the_clean_run_judges_the_definitions_and_flags_tampering(tmp_path, case):
    import json

    from autograde_helpers import runners, second_opinion

    make, edits, passes, flag = CLEAN_RUN_CASES[case]
    submission = _student_course(tmp_path, notebook=make(**edits))
    notebook_path = submission.root / "submitted" / "alice" / "02_block_allocator" / "02_block_allocator.ipynb"
    calls = second_opinion.check_calls("check_block_allocator(BlockAllocator, seed=5)\n")
    spec = {"notebook": str(notebook_path), "cells": [{"grade_id": "t", "calls": calls}], "timeout": 120}
    verdict = runners.run_runner(submission, spec, budget=300)["t"]
    assert verdict["passed"] is passes, json.dumps(verdict)
    if flag:
        assert any(flag in f for f in verdict["flags"]), verdict


@needs_bwrap
def test_one_runner_serves_a_submission_and_each_notebook_starts_clean(tmp_path):
    """The second opinion's runner is reused for the student's next notebook (torch imported once),
    and what a child left in the sandbox's /tmp is gone before that notebook's children run."""
    import nbformat

    from autograde_helpers import runners, second_opinion

    submission = _student_course(
        tmp_path, notebook=_allocator_submission('        open("/tmp/planted", "w").write("x")')
    )
    folder = submission.root / "submitted" / "alice" / "02_block_allocator"
    later = folder / "later.ipynb"
    nbformat.write(
        _allocator_submission('        assert not __import__("os").path.exists("/tmp/planted"), "left over"'), later
    )
    calls = second_opinion.check_calls("check_block_allocator(BlockAllocator, seed=5)\n")
    verdicts = []
    pids = []
    try:
        for path in (folder / "02_block_allocator.ipynb", later):
            spec = {"notebook": str(path), "cells": [{"grade_id": "t", "calls": calls}], "timeout": 120}
            job = runners.NotebookJob(submission, spec, budget=300)
            pids.append(job.runner.process.pid)
            verdicts.append(job.verdicts()["t"])
    finally:
        runners._stop_all_runners()
    assert pids[0] == pids[1]
    assert not verdicts[0]["passed"] and any("for writing" in f for f in verdicts[0]["flags"]), verdicts[0]
    assert verdicts[1]["passed"], verdicts[1]


def _warmup_submission(launcher_line: str = "", kernel_body: str = ""):
    """The instructor's notebook 06, with the scale launcher or the scale kernel's body edited."""
    from autograde_helpers import instructor

    notebook = instructor("06_triton_warmup")
    if kernel_body:
        cell = notebook.cells[[i for i, c in enumerate(notebook.cells) if "def scale_kernel" in c.source][0]]
        head = cell.source.split("    ### BEGIN SOLUTION")[0]
        cell.source = head + kernel_body
    if launcher_line:
        cell = next(c for c in notebook.cells if "def scale(" in c.source)
        cell.source = cell.source.replace("    return out", launcher_line + "\n    return out")
    return notebook


@needs_bwrap
@pytest.mark.parametrize(
    "edits, passes",
    [
        ({}, True),
        ({"kernel_body": "    tl.program_id(0)\n", "launcher_line": "    out.copy_(x * factor)"}, False),
        ({"kernel_body": "    tl.program_id(0)\n", "launcher_line": "    out.numpy()[:] = x.numpy() * factor"}, False),
    ],
    ids=["honest_kernel", "do_nothing_kernel_plus_torch", "do_nothing_kernel_plus_numpy"],
)
def test_the_kernel_is_judged_whatever_the_launcher_does(tmp_path, edits, passes):
    """In 06 the launchers are given and never judged: the check launches the kernel itself, so a
    kernel that does nothing fails whatever the launcher computes around it (issue 35)."""
    from autograde_helpers import runners, second_opinion

    assignment = "06_triton_warmup"
    submission = _student_course(tmp_path, assignment=assignment, notebook=_warmup_submission(**edits))
    notebook_path = submission.root / "submitted" / "alice" / assignment / f"{assignment}.ipynb"
    calls = second_opinion.check_calls("check_scale_kernel(scale_kernel)\n")
    spec = {"notebook": str(notebook_path), "cells": [{"grade_id": "t", "calls": calls}], "timeout": 300}
    verdict = runners.run_runner(submission, spec, budget=400)["t"]
    assert verdict["passed"] is passes, verdict
    if not passes:
        assert "never written" in verdict["message"], verdict


# --- sandbox leftovers when a grader or its kernel is killed (issue 12 e) ------------------------

GRADER_THAT_GETS_KILLED = """
import subprocess, sys, time
from paged_grading.sandbox import bubblewrap
from pathlib import Path
box = bubblewrap.Sandbox(bubblewrap.Submission(Path({root!r}), "alice", "02_block_allocator"))
bubblewrap.install_signal_cleanup()
kernel = subprocess.Popen([*box.prefix, sys.executable, "-c", "import time; time.sleep(120)"])
print(box.private, box.cgroup.path or "", kernel.pid, flush=True)
time.sleep(120)
"""


def _start_grader(tmp_path):

    submission = _student_course(tmp_path)
    script = GRADER_THAT_GETS_KILLED.format(root=str(submission.root))
    grader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    private, cgroup, kernel = grader.stdout.readline().split(" ")
    return grader, Path(private), Path(cgroup) if cgroup else None, int(kernel)


def _gone(pid: int, seconds: float = 10) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):  # dead, waiting for a reaper
            return True
        time.sleep(0.1)
    return False


@needs_bwrap
def test_a_killed_grader_leaves_nothing_after_the_next_sandbox(tmp_path):
    """SIGKILL (a timeout, the OOM killer): no clean-up runs; the next sandbox sweeps the leftovers."""
    from autograde_helpers import bubblewrap

    grader, private, cgroup, kernel = _start_grader(tmp_path)
    assert private.is_dir()
    grader.kill()
    grader.wait(timeout=30)
    assert private.is_dir()  # nothing could clean up after SIGKILL
    box = bubblewrap.Sandbox(_student_course(tmp_path / "next"))
    try:
        assert _gone(kernel), "the sandboxed kernel outlived its grader and the sweep"
        assert not private.exists(), "the dead grader's sandbox folder was not swept"
        assert cgroup is None or not cgroup.exists(), "the dead grader's cgroup was not swept"
        assert box.private.is_dir()  # a live sandbox is never swept, by itself or another one
        assert box.private not in bubblewrap.sweep()
    finally:
        box.close()
    assert not box.private.exists()


@needs_bwrap
def test_a_grader_told_to_stop_closes_its_sandboxes(tmp_path):
    """SIGTERM (course.py's timeout, a ^C'd job runner): the grader closes its sandboxes on the way out."""
    import signal

    grader, private, cgroup, kernel = _start_grader(tmp_path)
    grader.send_signal(signal.SIGTERM)
    grader.wait(timeout=30)
    assert _gone(kernel)
    assert not private.exists()
    assert cgroup is None or not cgroup.exists()


@needs_bwrap
def test_a_grading_kernel_killed_mid_cell_leaves_no_sandbox(tmp_path, monkeypatch):
    """The kernel dies (SIGKILL, as the OOM killer does); shutting its manager down removes the sandbox.
    (A kernel of its own sandbox; the zygote's kernels are below.)"""
    import asyncio
    import signal

    from autograde_helpers import grading_kernels

    submission = _student_course(tmp_path)
    monkeypatch.setattr(grading_kernels, "pristine_copies", lambda: [])

    async def run():
        manager = grading_kernels.SandboxedKernelManager(kernel_name="python3", use_zygote=False)
        await manager.start_kernel(cwd=str(submission.scratch))
        box = manager.sandbox
        private, cgroup = box.private, box.cgroup.path
        assert private.is_dir()
        os.kill(manager.provisioner.process.pid, signal.SIGKILL)  # the kernel (its sandbox's outer process)
        for _ in range(100):
            if not await manager.is_alive():
                break
            await asyncio.sleep(0.1)
        await manager.shutdown_kernel(now=True)
        return private, cgroup

    private, cgroup = asyncio.run(run())
    assert not private.exists()
    assert cgroup is None or not cgroup.exists()


async def _run_in_kernel(grading_kernels, cwd: Path, code: str) -> str:
    """Start a grading kernel working in ``cwd``, run ``code``, stop the kernel; what it printed."""
    manager = grading_kernels.SandboxedKernelManager(kernel_name="python3")
    await manager.start_kernel(cwd=str(cwd))
    client = manager.client()
    client.start_channels()
    printed = []
    try:
        await client.wait_for_ready(timeout=120)
        await client.execute_interactive(
            code,
            timeout=120,
            output_hook=lambda message: printed.append(message["content"].get("text", "")),
        )
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
    return "".join(printed)


LEAVE_THINGS_BEHIND = """
import os, subprocess, sys
open("/tmp/planted", "w").write("from the first notebook")
open("/dev/shm/planted", "w").write("from the first notebook")
sleeper = subprocess.Popen(["sleep", "600"])
print("ZYGOTE", os.getppid(), "SLEEPER", sleeper.pid, "TORCH", "torch" in sys.modules)
"""

LOOK_FOR_THEM = """
import os, sys
print("ZYGOTE", os.getppid(), "TORCH", "torch" in sys.modules, "CWD", os.getcwd())
print("PLANTED", os.path.exists("/tmp/planted"), os.path.exists("/dev/shm/planted"))
print("PROCESSES", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
"""


@needs_bwrap
def test_one_students_kernels_are_forked_by_one_zygote_and_start_clean(tmp_path, monkeypatch):
    """Two notebooks of one student: both kernels come from the student's zygote (torch imported
    before any cell ran), and the second finds nothing the first left: no file in /tmp or
    /dev/shm, no process it started; and no kernel can reach the zygote's control socket."""
    import asyncio

    from autograde_helpers import grading_kernels

    first = _student_course(tmp_path)
    second = first.root / "autograded" / "alice" / "03_paged_kv_cache"
    second.mkdir()
    monkeypatch.setattr(grading_kernels, "pristine_copies", lambda: [])
    try:
        before = asyncio.run(_run_in_kernel(grading_kernels, first.scratch, LEAVE_THINGS_BEHIND)).split()
        (zygote,) = grading_kernels._ZYGOTES
        private = zygote.box.private
        control = f"\nprint('CONTROL', os.path.exists({str(zygote.socket)!r}), os.path.exists({str(zygote.control)!r}))"
        after = asyncio.run(_run_in_kernel(grading_kernels, second, LOOK_FOR_THEM + control)).split()
    finally:
        grading_kernels.close_zygotes()
    assert before[0] == "ZYGOTE" and before[4:6] == ["TORCH", "True"], before
    assert after[1] == before[1], "both kernels are children of the zygote"
    assert after[2:4] == ["TORCH", "True"] and after[5] == str(second), after
    assert after[after.index("PLANTED") + 1 : after.index("PLANTED") + 3] == ["False", "False"], after
    processes = " ".join(after[after.index("PROCESSES") + 1 :])
    assert before[3] not in processes.strip("[]").replace(",", " ").split(), "the sleeper was killed"
    assert after[after.index("CONTROL") + 1 :] == ["False", "False"], "the zygote's control socket is out of reach"
    assert not private.exists(), "closing the zygote removes its sandbox"


@needs_bwrap
def test_a_kernel_that_kills_its_zygote_costs_only_its_own_notebook(tmp_path, monkeypatch):
    import asyncio

    from autograde_helpers import grading_kernels

    first = _student_course(tmp_path)
    second = first.root / "autograded" / "alice" / "03_paged_kv_cache"
    second.mkdir()
    monkeypatch.setattr(grading_kernels, "pristine_copies", lambda: [])
    try:
        with contextlib.suppress(Exception):  # the kernel may die with its zygote before it replies
            asyncio.run(_run_in_kernel(grading_kernels, first.scratch, "import os; os.kill(os.getppid(), 9)"))
        assert grading_kernels._ZYGOTES == [], "the dead zygote's sandbox was closed when its kernel was let go"
        assert "TORCH True" in asyncio.run(_run_in_kernel(grading_kernels, second, LOOK_FOR_THEM))
        assert len(grading_kernels._ZYGOTES) == 1, "the next notebook started a new one"
    finally:
        grading_kernels.close_zygotes()
