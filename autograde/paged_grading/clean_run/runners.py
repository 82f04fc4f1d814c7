"""The clean run's processes: the checker outside the student's sandbox, the learner's process inside it.

``StudentRunner`` starts ``checker.py --serve`` once per student (outside the sandbox: it holds
the checks and runs no student code), in the student's cgroup, and hands it the command that
starts the learner's process (``learner_host.py``, in the student's sandbox, with the learner's
view of the package in place of the package). ``NotebookJob`` sends it one notebook's spec now
and reads that notebook's verdicts later, within a budget; ``RunnerJob`` (``run_runner``) does the
same with a checker of its own for one notebook. What the verdicts count for is decided by the
nbgrader step (``preprocessors.second_opinion``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..sandbox import between_notebooks, bubblewrap

CHECKER = Path(__file__).with_name("checker.py")  # outside the sandbox
HOST = Path(__file__).with_name("learner_host.py")  # the learner's process, inside it
# What the learner's process reads in its sandbox: its own folder, and the one of between_notebooks,
# which it imports by file name.
HOST_FOLDERS = [HOST.parent, Path(between_notebooks.__file__).parent]


def _learner_host(submission: bubblewrap.Submission) -> tuple[bubblewrap.Sandbox | None, list[str]]:
    """The student's sandbox for the learner's process, and the command that starts it there.

    The checker (``checker.py``) runs outside: it runs no student code. The learner's process
    (``learner_host``) runs inside, read-only, with the learner's view of the package in place of
    the package (no check, reference or answer to read or import).
    """
    if bubblewrap.sandbox_disabled():
        return None, [sys.executable, str(HOST)]
    box = bubblewrap.Sandbox(
        submission, readable=HOST_FOLDERS, scratch_writable=False, package=bubblewrap.learner_package_view()
    )
    return box, [*box.prefix, sys.executable, str(HOST), "--sandboxed"]


def _checker() -> list[str]:
    return [sys.executable, str(CHECKER)]


def _checker_environment() -> dict[str, str]:
    """The checker's environment: the grader's, and, unless grading is unsafe, the sandbox its kernel
    processes run in (``bubblewrap.kernel_process_prefix``: the learner's kernels run there, not here)."""
    environment = dict(os.environ)
    if not bubblewrap.sandbox_disabled():
        environment["PAGED_HELPERS_KERNEL_PREFIX"] = json.dumps(bubblewrap.kernel_process_prefix())
    return environment


class RunnerJob:
    """One checker.py process for one notebook (``run_runner``), started now, read later."""

    def __init__(self, submission: bubblewrap.Submission, spec: dict, budget: float):
        self.deadline = time.monotonic() + budget
        self.box, host = _learner_host(submission)
        spec = {**spec, "host": host, "cwd": str(submission.scratch)}
        self.folder = Path(tempfile.mkdtemp(prefix="paged-opinion-"))
        self.spec_path = self.folder / "spec.json"
        self.spec_path.write_text(json.dumps(spec))
        # Files, not pipes: nobody reads the output until the kernel's run is over.
        self.stdout = tempfile.TemporaryFile()
        self.group = bubblewrap.student_leaf(submission)  # the student's share, with their kernel processes
        self.process = subprocess.Popen(
            [*self.group.enter_command(), *_checker(), str(self.spec_path)],
            cwd=submission.scratch,
            env=_checker_environment(),
            stdin=subprocess.DEVNULL,
            stdout=self.stdout,
            stderr=subprocess.DEVNULL,
        )
        _RUNNING.add(self)

    def verdicts(self) -> dict:
        """Wait (until the budget is spent) for the runner; its verdicts ({} when it gave none)."""
        try:
            self.process.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.close()
            return {}
        self.close()
        self.stdout.seek(0)
        lines = self.stdout.read().decode(errors="replace").strip().splitlines()
        self.stdout.close()
        try:
            return json.loads(lines[-1]) if lines else {}
        except ValueError:
            return {}

    def close(self) -> None:
        """Stop the runner if it still runs, and remove its bubblewrap."""
        _RUNNING.discard(self)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.box is not None:
            self.box.close()
            self.box = None
        self.group.kill_all_and_remove()
        shutil.rmtree(self.folder, ignore_errors=True)


class StudentRunner:
    """One ``checker.py --serve`` (outside the sandbox) for all the notebooks of one submission,
    with its learner's process in the student's bubblewrap.

    torch and the checks are imported once per student instead of once per notebook, and so is
    the learner's zygote, which forks a fresh learner process for every cell and kills whatever
    one left behind. A runner that overruns a notebook's budget is killed; the next notebook
    starts a new one.
    """

    def __init__(self, submission: bubblewrap.Submission):
        self.student = (submission.root, submission.student)
        self.box, self.host = _learner_host(submission)
        # In the student's cgroup (``bubblewrap.student_leaf``), and so are the kernel processes it starts.
        self.group = bubblewrap.student_leaf(submission)
        self.process = subprocess.Popen(
            [*self.group.enter_command(), *_checker(), "--serve"],
            cwd=submission.scratch,
            env=_checker_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.pending = b""
        self.requests = 0
        _RUNNING.add(self)

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, submission: bubblewrap.Submission, spec: dict) -> int:
        """Queue one notebook's clean run; the request number its verdicts will carry."""
        self.requests += 1
        if self.box is not None:
            self.box.prepare(submission.assignment)
        spec = {**spec, "host": self.host, "cwd": str(submission.scratch), "request": self.requests}
        self.process.stdin.write((json.dumps(spec) + "\n").encode())
        self.process.stdin.flush()
        return self.requests

    def receive(self, request: int, sent_at: float, budget: float) -> dict | None:
        """The verdicts of ``request``; None if the runner died or overran its budget.

        The budget counts from when the runner began the request (its ``started`` line), not from
        when it was queued, and whatever the runner already wrote is read before a deadline is
        judged: a verdict that arrived while nbgrader's kernel was still running always counts.
        A ``started`` time is believed only between ``sent_at`` and ``sent_at + budget``.
        """
        fd = self.process.stdout.fileno()
        deadline = sent_at + 2 * budget
        while True:
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # the package's banner, printed when the runner imported it
                if not isinstance(record, dict) or record.get("request") != request:
                    continue
                started = record.get("started")
                if isinstance(started, float) and sent_at <= started <= sent_at + budget:
                    deadline = started + budget
                elif isinstance(record.get("results"), dict):
                    return record["results"]
            left = deadline - time.monotonic()
            if not select.select([fd], [], [], max(0.0, left))[0]:
                return None  # nothing more was written, and the budget is spent
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.pending += chunk

    def close(self) -> None:
        _RUNNING.discard(self)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        if self.box is not None:
            self.box.close()
            self.box = None
        self.group.kill_all_and_remove()


_STUDENT_RUNNER: list[StudentRunner] = []  # at most one: the submission being graded


def _student_runner(submission: bubblewrap.Submission) -> StudentRunner:
    """The running runner of this submission's student, or a new one (any other is stopped)."""
    while _STUDENT_RUNNER:
        runner = _STUDENT_RUNNER.pop()
        if runner.student == (submission.root, submission.student) and runner.alive():
            _STUDENT_RUNNER.append(runner)
            return runner
        runner.close()
    runner = StudentRunner(submission)
    _STUDENT_RUNNER.append(runner)
    return runner


class NotebookJob:
    """One notebook's clean re-run on its student's runner: sent now, read later (``verdicts``).

    Sent before nbgrader's kernel runs the notebook (``StartSecondOpinion``), so that on a
    2-core machine the clean re-run and the kernel's run take a core each instead of one after
    the other. The runner reads only the submitted notebook and the check calls taken from the
    locked test cells, never anything the kernel produces, so starting it early changes
    nothing it sees; the scores are still decided after both are done.
    """

    def __init__(self, submission: bubblewrap.Submission, spec: dict, budget: float):
        self.sent_at, self.budget = time.monotonic(), budget
        self.runner = _student_runner(submission)
        try:
            self.request = self.runner.send(submission, spec)
        except OSError:  # the runner is gone: a fresh one for this notebook
            _STUDENT_RUNNER.remove(self.runner)
            self.runner.close()
            self.runner = _student_runner(submission)
            self.request = self.runner.send(submission, spec)
        self.done = False

    def verdicts(self) -> dict:
        if self.done:
            return {}
        self.done = True
        results = self.runner.receive(self.request, self.sent_at, self.budget)
        if results is None:  # dead or over budget: nothing of it may serve the next notebook
            if self.runner in _STUDENT_RUNNER:
                _STUDENT_RUNNER.remove(self.runner)
            self.runner.close()
            return {}
        return results

    def close(self) -> None:
        """Abandoned (its notebook was not graded to the end): the runner may be mid-notebook."""
        if not self.done:
            self.done = True
            if self.runner in _STUDENT_RUNNER:
                _STUDENT_RUNNER.remove(self.runner)
            self.runner.close()


_RUNNING: set = set()


@atexit.register
def _stop_all_runners() -> None:
    for job in list(_RUNNING):
        job.close()
    _STUDENT_RUNNER.clear()


def run_runner(submission: bubblewrap.Submission, spec: dict, budget: float) -> dict:
    """Run checker.py on ``spec`` (sandboxed unless grading is unsafe); its verdicts."""
    return RunnerJob(submission, spec, budget).verdicts()
