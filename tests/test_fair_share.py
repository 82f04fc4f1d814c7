"""A fair share of the machine (issue 36): one student's processes cannot cost a classmate marks.

* Each student's sandboxes (and checker) run in one cgroup of theirs, with the same CPU weight as
  every other student's, a memory cap and a process cap; cgroup v2 and v1 are found at run time
  (``fair_share.find_hierarchies``, ``bubblewrap.student_leaf``).
* A clean run whose learner's process could not start, or that ran out of time beside other work,
  is "no verdict": the cell is run again alone (the final run), where a timeout is the student's
  and a process that still cannot start leaves the cell without a verdict (0, a note, a ``time``
  line; never a failure, never a ``clean-run`` line against the student).
* Through the real pipeline: "spinner", whose first cell of notebook 02 forks a tree of about 500
  spinning processes, graded with ``course.py grade --jobs 2`` beside "honest" (the instructor's
  solution) into a PostgreSQL gradebook: honest keeps full marks, nothing in the integrity log
  names honest, and honest's feedback never says the learner's process did not start. (Without
  the student cgroups honest scored 0: its test cell ran out of time.)
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from paged_grading.sandbox import fair_share, owners

from autograde_helpers import (
    AUTOGRADE,
    bubblewrap,
    cell_of,
    class_report,
    course,
    feedback_text,
    grading_env,
    instructor,
    throwaway_postgres,
    write_config,
    write_submission,
)

A2 = "02_block_allocator"


# --- cgroups: found at run time, v2 or v1 ------------------------------------------------------


def _hierarchy_folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def test_cgroup_v2_with_the_controllers_is_used_at_its_root_when_the_graders_own_group_cannot(tmp_path):
    v2 = _hierarchy_folder(tmp_path / "v2", {"cgroup.procs": "", "cgroup.subtree_control": "cpu memory pids io"})
    _hierarchy_folder(v2 / "grader", {"cgroup.procs": "1\n", "cgroup.subtree_control": ""})
    mountinfo = f"41 23 0:38 / {v2} rw,relatime - cgroup2 cgroup2 rw\n"
    found = fair_share.find_hierarchies(mountinfo, "0::/grader\n")
    assert found == [fair_share.Hierarchy(v2, 2, frozenset({"cpu", "memory", "pids"}))]
    files = found[0].limit_files(fair_share.StudentLimits())
    assert files["cpu.weight"] == "100" and files["memory.max"] == str(fair_share.StudentLimits().memory_bytes)


def test_cgroup_v1_hierarchies_are_used_under_the_graders_own_groups(tmp_path):
    """What this machine has: cgroup v1 cpu, memory and pids apart, and a cgroup2 without controllers."""
    folders = {}
    for name in ("cpu", "memory", "pids"):
        folders[name] = _hierarchy_folder(tmp_path / name, {"cgroup.procs": ""})
    _hierarchy_folder(folders["memory"] / "job" / "7", {"cgroup.procs": "1\n"})
    unified = _hierarchy_folder(tmp_path / "unified", {"cgroup.procs": "", "cgroup.subtree_control": ""})
    mountinfo = "".join(
        f"3{k} 31 0:2{k} / {folders[name]} rw,relatime - cgroup cgroup rw,{name}\n"
        for k, name in enumerate(("cpu", "memory", "pids"))
    )
    mountinfo += f"41 31 0:38 / {unified} rw,relatime - cgroup2 cgroup2 rw\n"
    own = "8:pids:/\n4:memory:/job/7\n1:cpu,cpuacct:/\n0::/\n"
    found = {h.base: h for h in fair_share.find_hierarchies(mountinfo, own)}
    assert set(found) == {folders["cpu"], folders["memory"] / "job" / "7", folders["pids"]}
    assert all(h.version == 1 for h in found.values())
    limits = fair_share.StudentLimits()
    assert found[folders["cpu"]].limit_files(limits) == {"cpu.shares": "1024"}
    assert found[folders["memory"] / "job" / "7"].limit_files(limits) == {
        "memory.limit_in_bytes": str(limits.memory_bytes)
    }
    assert found[folders["pids"]].limit_files(limits) == {"pids.max": str(limits.processes)}


def test_a_machine_without_writable_cgroups_has_none():
    assert fair_share.find_hierarchies("", "0::/\n") == []


def test_without_cgroups_grading_says_so_once_and_what_holds_the_students_instead(monkeypatch, capsys):
    monkeypatch.setattr(fair_share, "hierarchies", lambda: ())
    assert fair_share.fair_share_gaps() == ["cpu", "memory", "pids"]
    leaf = bubblewrap.student_leaf(bubblewrap.Submission(Path("/nowhere"), "alice", A2))
    assert leaf.path is None and leaf.enter_command() == [] and not leaf.caps_processes
    leaf.kill_all_and_remove()
    monkeypatch.setattr(bubblewrap, "require_bwrap", lambda: "bwrap")
    bubblewrap.configure(unsafe=False)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("NOTE fair share: no cgroup with cpu, memory, pids"), lines
    for words in ("RLIMIT_CPU", "RLIMIT_NPROC", "depend on the load", "README"):
        assert words in lines[0], lines[0]


needs_cgroups = pytest.mark.skipif(
    bool(fair_share.fair_share_gaps()), reason=f"no student cgroup here: {fair_share.fair_share_note()}"
)


@needs_cgroups
def test_one_cgroup_per_student_holds_all_their_sandboxes_and_goes_with_the_last(tmp_path):
    alice = bubblewrap.Submission(tmp_path, "alice", A2)
    bob = bubblewrap.Submission(tmp_path, "bob", A2)
    kernel, learner = bubblewrap.student_leaf(alice), bubblewrap.student_leaf(alice)
    other = bubblewrap.student_leaf(bob)
    try:
        assert kernel.path.parent == learner.path.parent != other.path.parent
        for path in kernel.paths:  # every hierarchy: a leaf under the student's group
            assert path.parent.name.startswith(fair_share.CGROUP_PREFIX)
        spinner = subprocess.Popen([*kernel.enter_command(), sys.executable, "-c", "while True: pass"])
        for _ in range(50):
            if str(spinner.pid) in (kernel.path / "cgroup.procs").read_text().split():
                break
            time.sleep(0.1)
        assert str(spinner.pid) in (kernel.path / "cgroup.procs").read_text().split()
        group = kernel.path.parent
        kernel.kill_all_and_remove()
        assert spinner.wait(timeout=10) != 0 and group.exists()  # alice's learner leaf is still there
        learner.kill_all_and_remove()
        assert not group.exists() and not learner.path
    finally:
        for leaf in (kernel, learner, other):
            leaf.kill_all_and_remove()


# --- no verdict for the machine's reasons -------------------------------------------------------


class _StarvedZygote:
    """A learner's zygote that cannot start a process, or whose process never answers in time."""

    def __init__(self, starts: bool):
        from autograde_helpers import checker

        self.starts, self.peer_gone = starts, checker.PeerGone
        self.flags, self.deadline, self.broken = [], None, False  # as the started process's peer

    def cell(self, request, deadline):
        if not self.starts:
            raise self.peer_gone("no answer in time")
        return self, {"loaded": True, "changes": []}

    def request(self, *args, **kwargs):
        time.sleep(max(0.0, self.deadline - time.monotonic()) + 0.01)
        raise self.peer_gone("no answer in time")

    def finish(self, peer):
        pass

    def stop(self):
        pass


CELL = {"grade_id": "t", "calls": [{"check": "check_block_allocator", "args": [["name", "BlockAllocator"]],
                                    "kwargs": {}, "hidden": False}]}  # fmt: skip


@pytest.mark.parametrize("final", [False, True])
def test_a_learners_process_that_cannot_start_is_no_verdict_even_on_the_final_run(final):
    from autograde_helpers import checker

    spec = {"notebook": "n.ipynb", "timeout": 5, "final": final}
    verdict = checker.run_cell(CELL, spec, _StarvedZygote(starts=False), fresh=True)
    assert verdict["no_verdict"] is True and not verdict["passed"], verdict
    assert "did not start" in verdict["message"]


def test_checks_out_of_time_are_no_verdict_until_the_final_run_where_they_fail():
    from autograde_helpers import checker

    first = checker.run_cell(CELL, {"notebook": "n", "timeout": 0.05}, _StarvedZygote(True), fresh=True)
    assert first.get("no_verdict") is True, first
    final = checker.run_cell(CELL, {"notebook": "n", "timeout": 0.05, "final": True}, _StarvedZygote(True), True)
    assert not final.get("no_verdict") and not final["passed"] and "ran longer than" in final["message"], final


class _Job:
    def __init__(self, verdicts):
        self.answer = verdicts

    def verdicts(self):
        return self.answer


class _Plan:
    """A notebook of two replayed cells whose clean runs answer what the test says."""

    def __init__(self, submitted: Path, first: dict, again: dict):
        self.grade_ids, self.submitted, self.secret_seeds = ["a", "b"], submitted, set()
        self.first, self.again, self.reruns = _Job(first), again, []

    def restore_hidden_tests(self, nb):
        pass

    def budget(self, timeout, cells=None):
        return timeout * (2 if cells is None else cells) + 120

    def start(self, timeout, only=None, final=False):
        self.reruns.append((only, final))
        return _Job(self.again)


def _graded_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for grade_id in ("a", "b"):
        cell = nbformat.v4.new_code_cell("check_block_allocator(BlockAllocator)")
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id, "points": 3}
        nb.cells.append(cell)
    return nb


def _second_opinion(tmp_path, monkeypatch, first, again):
    from autograde_helpers import second_opinion

    monkeypatch.chdir(tmp_path)
    nb = _graded_notebook()
    submitted = tmp_path / "submitted.ipynb"
    nbformat.write(nb, submitted)
    ids = {"student": "honest", "assignment": A2, "notebook": A2}
    plan = _Plan(submitted, first, again)
    monkeypatch.setitem(second_opinion._STARTED, (ids["student"], A2, A2), (plan.first, plan))
    nb, _ = second_opinion.SecondOpinion().preprocess(nb, {"nbgrader": ids})
    log = tmp_path / "reports" / "integrity.log"
    return nb, plan, log.read_text() if log.exists() else ""


PASSED = {"passed": True, "message": "", "flags": [], "hidden": False}
NOT_STARTED = {"passed": False, "message": "no verdict: the learner's process did not start: no answer in time",
               "flags": [], "hidden": False, "no_verdict": True}  # fmt: skip


def test_a_cell_without_a_verdict_is_run_again_alone_and_only_that_cell(tmp_path, monkeypatch):
    nb, plan, log = _second_opinion(tmp_path, monkeypatch, {"a": NOT_STARTED, "b": PASSED}, {"a": PASSED})
    assert plan.reruns == [(["a"], True)]
    assert all(not cell.outputs for cell in nb.cells), "both cells keep the kernel's full marks"
    assert log == ""


def test_a_process_that_never_starts_is_scored_0_with_a_note_and_no_accusation(tmp_path, monkeypatch):
    nb, plan, log = _second_opinion(tmp_path, monkeypatch, {"a": NOT_STARTED, "b": PASSED}, {"a": NOT_STARTED})
    note = nb.cells[0].outputs[0]
    assert note.output_type == "error" and "could not be confirmed" in note.evalue and "regrade" in note.evalue
    assert "did not start" not in note.evalue and not nb.cells[1].outputs
    assert "clean-run" not in log and "\ttime: a:" in log and "did not start" in log and "not tampering" in log


def test_a_runner_that_gave_nothing_is_run_again_for_every_cell(tmp_path, monkeypatch):
    _, plan, log = _second_opinion(tmp_path, monkeypatch, {}, {"a": PASSED, "b": PASSED})
    assert plan.reruns == [(["a", "b"], True)] and log == ""


# --- through the real pipeline: a spinner beside an honest classmate ----------------------------

# The first cell forks the tree (every process waits for GO, then spins, forever) and returns; the
# kernel then sleeps in cells of its own until the grader stops it at the notebook's budget
# (5 cell timeouts of kernel time), and with it the tree. A kernel restarted meanwhile forks another.
SPINNER = """\
import os, time
GO = time.time() + 6  # time for the tree to fork, even beside other work

if os.fork() == 0:  # a child forks the tree and leaves it to the sandbox's init
    try:
        for _ in range(20):
            if os.fork() == 0:
                for _ in range(24):
                    try:
                        if os.fork() == 0:
                            break
                    except OSError:
                        break
                time.sleep(max(0.0, GO - time.time()))
                while True:
                    pass
    finally:
        os._exit(0)
os.wait()
time.sleep(max(0.0, GO - 0.5 - time.time()))  # counted just before the tree spins, while this kernel still runs
print("processes:", sum(name.isdigit() for name in os.listdir("/proc")))
"""
WAIT = "time.sleep(5)\n"
# The honest student submits the instructor's notebook 02 with a slow demo before its test cell
# (15 s of sleep, in cells under the cell timeout): whatever the two workers' start-up order, the
# test cell runs while the tree spins. A short burst after a sleep is served at once by the
# scheduler even among 500 spinning processes, longer work gets about 0.4% of a CPU there (both
# measured on this 2-core machine): the test cell (the guard's fresh import of the checks, then the
# check: about 0.2 CPU seconds alone) then takes 10 to 40 s: past the cell timeout, and with the
# restarted kernels past the notebook's budget.
PAUSE = "import time\ntime.sleep(5)\n"
CELL_TIMEOUT = 8
# The clean run's checks of one cell (02's: about 1,300 calls to the learner's process, each a round
# trip): a few seconds with a fair share; starved, past this, which is a failed test unless the
# grader runs it again alone (a first run out of time has no verdict).
CHECKS_TIMEOUT = 15


@contextlib.contextmanager
def grader_cpu_group():
    """A command prefix that runs a grader in a cpu cgroup of its own, as in a systemd unit or a
    container. (Where the grader is in the root cpu group, as on this test machine, the scheduler's
    autogroups give each session a share, which hides what a spinning student does elsewhere.)"""
    hierarchy = next(h for h in fair_share.hierarchies() if "cpu" in h.controllers)
    path = hierarchy.base / f"{fair_share.CGROUP_PREFIX}{owners.owner_tag()}-grader"
    path.mkdir()
    try:
        yield ["/bin/sh", "-c", f'echo $$ > {path / "cgroup.procs"} && exec "$@"', "grader"]
    finally:
        fair_share.remove_cgroup(path)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    reason = throwaway_postgres.unavailable_reason()
    if reason:
        pytest.skip(f"PostgreSQL is not available here: {reason}")
    if fair_share.fair_share_gaps():
        pytest.skip(f"no student cgroup here: {fair_share.fair_share_note()}")
    server = throwaway_postgres.ThrowawayPostgres().start()
    try:
        root = tmp_path_factory.mktemp("fair") / "course"
        write_config(
            root,
            **{
                "CourseDirectory.db_url": server.url,
                "FairExecute.timeout": CELL_TIMEOUT,
                "FairExecute.responsive_grace": 5,
                "SecondOpinion.timeout": CHECKS_TIMEOUT,
            },
        )
        course(root, "release", A2)
        folder = tmp_path_factory.mktemp("class")
        honest = instructor(A2)
        test_cell = cell_of(honest, "test_block_allocator")
        honest.cells[test_cell:test_cell] = [nbformat.v4.new_code_cell(PAUSE) for _ in range(3)]
        write_submission(folder, "honest", {A2: honest})
        spinner = instructor(A2)
        spinner.cells[0:0] = [nbformat.v4.new_code_cell(source) for source in (SPINNER, *[WAIT] * 8)]
        write_submission(folder, "spinner", {A2: spinner})
        course(root, "collect", str(folder))
        started = time.perf_counter()
        with grader_cpu_group() as prefix:
            command = [*prefix, sys.executable, str(AUTOGRADE / "course.py"), "--root", str(root), "grade", A2]
            grade = subprocess.run([*command, "--jobs", "2"], env=grading_env(), capture_output=True, text=True)
        seconds = time.perf_counter() - started
        feedback = course(root, "feedback", A2, "--student", "honest", check=False)
        spinner = nbformat.read(root / "autograded" / "spinner" / A2 / f"{A2}.ipynb", as_version=4)
        spun = "".join(output.get("text", "") for output in spinner.cells[0].outputs)
        scores = {}
        for row in class_report.autograded_scores(server.url):
            score, maximum = scores.get(row.student, (0.0, 0.0))
            scores[row.student] = (score + row.score, maximum + row.max_score)
        yield {"root": root, "grade": grade, "feedback": feedback, "scores": scores, "seconds": seconds, "spun": spun}
    finally:
        server.stop()


@pytest.mark.nbgrader
@pytest.mark.slow
def test_a_spinning_classmate_costs_an_honest_student_nothing(graded):
    root, grade = graded["root"], graded["grade"]
    print(f"graded in {graded['seconds']:.1f} s")
    assert "with 2 workers into postgresql" in grade.stdout, grade.stdout[-3000:]
    assert int(graded["spun"].split("processes:")[1].split()[0]) >= 300, graded["spun"]  # the tree spun (pids.max 512)
    score, maximum = graded["scores"]["honest"]
    assert maximum > 0 and score == maximum, (graded["scores"], grade.stdout[-3000:])
    log = root / "reports" / "integrity.log"
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    assert not [line for line in lines if line.split("\t")[1:2] == ["honest"]], lines
    assert graded["feedback"].returncode == 0, graded["feedback"].stdout[-3000:]
    assert "did not start" not in feedback_text(root, "honest", A2)
