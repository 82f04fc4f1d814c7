"""SecondOpinion: every autograded test cell is graded twice, and the lower score stands.

nbgrader's own run executes the whole notebook in one kernel, so a cell the student added
before the tests can change what the tests do (an import hook, a fake module in
``sys.modules``, an IPython AST transformer, an ``execute_result`` that nbgrader counts as
credit). After that run, this preprocessor (autograde step, before grades are saved) grades
each test cell again, independently: the checker (``opinion_runner``, outside the sandbox,
never running student code) makes the cell's check calls (parsed here from the locked test
cell, never executed as text) on the learner's objects, which live in a fresh learner process
per cell inside the student's sandbox (``learner_host``: only the submission's definitions,
loaded by ``load_from_notebook``'s rules, and a view of the package without checks or
references); the two exchange plain data only. The verdicts come back as data; the scores are
decided here:

The hidden calls run in the clean run only: ``StartSecondOpinion`` takes them out of the test
cells before nbgrader's kernel runs the notebook (``_Plan.withhold_hidden_tests``), so the kernel
never holds their text, and puts them back afterwards. Their seeds are replaced by a secret seed
per student, notebook and cell (``secret_seed``): hidden scenarios that no visible or guessed
seed reproduces, and whose failure costs the points like any failed check.

* both agree: nothing changes;
* the kernel passed a cell the clean run failed (or caught tampering in): the cell gets an
  error output in front of its outputs, so it scores zero, and the student's feedback says
  why; ``reports/integrity.log`` gets a line with the evidence;
* the clean run passed a cell the kernel failed: the kernel's zero stands (the lower score),
  and the disagreement is logged for the instructor to look at.

The log line also lists suspicious constructs found in the submission's source (``scan``).
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict, Integer

from . import hidden, integrity, sandbox
from .guard import GUARD_BEGIN, GUARD_END, is_autograded_test

SECOND_OPINION = "SecondOpinion"
RUNNER = Path(__file__).with_name("opinion_runner.py")  # the checker, outside the sandbox
HOST = Path(__file__).with_name("learner_host.py")  # the learner's process, inside it
_GUARD_BLOCK = re.compile(re.escape(GUARD_BEGIN) + r".*?" + re.escape(GUARD_END) + r"\n?", re.S)

# Constructs an honest notebook of this course has no reason to contain; each is a known way
# to bend an in-kernel grade. Found ones are named in the integrity log (evidence, not verdict).
SUSPICIOUS = {
    "an import hook (builtins.__import__)": r"__import__\s*=|builtins\.__import__|setattr\(\s*builtins",
    "an import finder (sys.meta_path / path_hooks)": r"meta_path|path_hooks",
    "a fake module in sys.modules": r"sys\.modules\s*\[[^\]]+\]\s*=|sys\.modules\.update|sys\.modules\.setdefault",
    "an IPython AST transformer or input hook": r"ast_transformers|input_transformers",
    "display / output hooks": r"display_pub|displayhook|publish_display_data|execute_result|display_formatter",
    "stack or frame inspection": r"_getframe|currentframe|inspect\.stack|f_back|f_locals|tb_frame|settrace",
    "the grader's files (gradebook, source, config)": r"gradebook|nbgrader_config|\.\./\.\./|/source\b|manual_score",
    "the Python environment (site-packages, .pth)": r"site-packages|\.pth\b|site\.getsitepackages",
    "the helper package on disk": r"paged-grading-|manifest\.json|kernel_guard",
    "threads or processes": r"threading\.Thread|multiprocessing|os\.fork|subprocess",
    "ctypes": r"\bctypes\b",
}


def scan(notebook: NotebookNode) -> list[str]:
    """Names of suspicious constructs in the student's code cells (not in locked cells)."""
    found = []
    text = "\n".join(
        cell.source
        for cell in notebook.cells
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("locked")
    )
    for what, pattern in SUSPICIOUS.items():
        if re.search(pattern, text):
            found.append(what)
    return found


class UnsupportedTest(ValueError):
    """A test cell this second opinion cannot replay (it then gives no opinion on it)."""


def check_calls(source: str) -> list[dict]:
    """The check calls of a locked test cell, as data: ``check_x(Name, ..., seed=3)``.

    Imports from ``paged_helpers.checks`` are allowed (the checks are taken from the registry);
    anything else is refused, so no test text is ever executed as code.
    """
    calls = []
    source = _GUARD_BLOCK.sub("", source)
    hidden_lines = _hidden_line_numbers(source)
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("paged_helpers"):
            continue
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            raise UnsupportedTest(f"line {node.lineno}: only check calls and imports are replayed")
        call = node.value
        if not isinstance(call.func, ast.Name):
            raise UnsupportedTest(f"line {node.lineno}: a check is called by its name")
        args = []
        for arg in call.args:
            if isinstance(arg, ast.Name):
                args.append(["name", arg.id])
            else:
                args.append(["value", ast.literal_eval(arg)])
        # unfinished="note" lets a learner's Run All go on; graded, unfinished code always fails.
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg and kw.arg != "unfinished"}
        calls.append({"check": call.func.id, "args": args, "kwargs": kwargs, "hidden": node.lineno in hidden_lines})
    return calls


def _hidden_line_numbers(source: str) -> set[int]:
    numbers, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(hidden.BEGIN):
            inside = True
        elif stripped.startswith(hidden.END):
            inside = False
        elif inside:
            numbers.add(number)
    return numbers


SECRET_KEY_FILE = ".hidden_seed_key"


def _course_key(root: Path) -> bytes:
    """The course's secret key, made once per course root (``.hidden_seed_key``, never in a sandbox)."""
    key_file = root / SECRET_KEY_FILE
    if not key_file.exists():
        key_file.write_text(secrets.token_hex(32))
        key_file.chmod(0o600)
    return key_file.read_text().strip().encode()


def secret_seed(root: Path, *names: str) -> int:
    """A seed nobody outside the grader can know: HMAC of the names under the course's own key.

    The names include the submitted notebook's digest (``submission_digest``): a resubmission draws
    new hidden scenarios, and a regrade of the same bytes the same ones. No visible seed reproduces them.
    """
    digest = hmac.new(_course_key(root), "/".join(names).encode(), hashlib.sha256)
    return int(digest.hexdigest(), 16) % 2**31  # numpy and torch seeds fit in 31 bits


def submission_digest(path: Path) -> str:
    """The submitted notebook's SHA-256: what makes its hidden draw its own."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def seed_family(root: Path, *names: str) -> str:
    """A short public name for the draw of one submission (``reports/hidden_draws.log``): equal names,
    equal hidden scenarios; it tells nothing of the seeds themselves (a different HMAC message)."""
    return hmac.new(_course_key(root), ("family/" + "/".join(names)).encode(), hashlib.sha256).hexdigest()[:12]


HIDDEN_DRAWS_LOG = Path("reports") / "hidden_draws.log"


def log_hidden_draw(root: Path, ids: dict, digest: str, family: str) -> None:
    """One line per graded notebook: who, which submitted bytes, which family of hidden draws."""
    import datetime

    path = root / HIDDEN_DRAWS_LOG
    path.parent.mkdir(exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    fields = [now, *(str(ids.get(key)) for key in ("student", "assignment", "notebook")), digest[:16], family]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\t".join(fields) + "\n")


def with_secret_seeds(calls: list[dict], seed: int) -> list[dict]:
    """The hidden calls' seeds replaced by the secret one (the clean run's own hidden scenarios)."""
    return [
        {**call, "kwargs": {**call["kwargs"], "seed": seed}} if call["hidden"] and "seed" in call["kwargs"] else call
        for call in calls
    ]


def _exception_name(name: object) -> str:
    """The failure's exception name as the feedback shows it: one of the checks' own, or CheckFailed."""
    return name if name in ("CheckFailed", "NotImplementedYet", "Refused", "NoVerdict") else "CheckFailed"


def _kernel_passed(cell: NotebookNode) -> bool:
    score, max_score = utils.determine_grade(cell)
    return score is not None and max_score is not None and score >= max_score


def _learner_host(submission: sandbox.Submission) -> tuple[sandbox.Sandbox | None, list[str]]:
    """The student's sandbox for the learner's process, and the command that starts it there.

    The checker (``opinion_runner``) runs outside: it runs no student code. The learner's process
    (``learner_host``) runs inside, read-only, with the learner's view of the package in place of
    the package (no check, reference or answer to read or import).
    """
    if sandbox.sandbox_disabled():
        return None, [sys.executable, str(HOST)]
    box = sandbox.Sandbox(
        submission, readable=[HOST.parent], scratch_writable=False, package=sandbox.learner_package_view()
    )
    return box, [*box.prefix, sys.executable, str(HOST), "--sandboxed"]


def _checker() -> list[str]:
    return [sys.executable, str(RUNNER)]


def _checker_environment() -> dict[str, str]:
    """The checker's environment: the grader's, and, unless grading is unsafe, the sandbox its kernel
    processes run in (``sandbox.kernel_process_prefix``: the learner's kernels run there, not here)."""
    environment = dict(os.environ)
    if not sandbox.sandbox_disabled():
        environment["PAGED_HELPERS_KERNEL_PREFIX"] = json.dumps(sandbox.kernel_process_prefix())
    return environment


class RunnerJob:
    """One opinion_runner.py process for one notebook (``run_runner``), started now, read later."""

    def __init__(self, submission: sandbox.Submission, spec: dict, budget: float):
        self.deadline = time.monotonic() + budget
        self.box, host = _learner_host(submission)
        spec = {**spec, "host": host, "cwd": str(submission.scratch)}
        self.folder = Path(tempfile.mkdtemp(prefix="paged-opinion-"))
        self.spec_path = self.folder / "spec.json"
        self.spec_path.write_text(json.dumps(spec))
        # Files, not pipes: nobody reads the output until the kernel's run is over.
        self.stdout = tempfile.TemporaryFile()
        self.group = sandbox.student_leaf(submission)  # the student's share, with their kernel processes
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
        """Stop the runner if it still runs, and remove its sandbox."""
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
    """One ``opinion_runner.py --serve`` (outside the sandbox) for all the notebooks of one submission,
    with its learner's process in the student's sandbox.

    torch and the checks are imported once per student instead of once per notebook, and so is
    the learner's zygote, which forks a fresh learner process for every cell and kills whatever
    one left behind. A runner that overruns a notebook's budget is killed; the next notebook
    starts a new one.
    """

    def __init__(self, submission: sandbox.Submission):
        self.student = (submission.root, submission.student)
        self.box, self.host = _learner_host(submission)
        # In the student's cgroup (``sandbox.student_leaf``), and so are the kernel processes it starts.
        self.group = sandbox.student_leaf(submission)
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

    def send(self, submission: sandbox.Submission, spec: dict) -> int:
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


def _student_runner(submission: sandbox.Submission) -> StudentRunner:
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

    def __init__(self, submission: sandbox.Submission, spec: dict, budget: float):
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
_STARTED: dict[tuple, tuple[NotebookJob, _Plan]] = {}  # (student, assignment, notebook) -> (job, plan)


@atexit.register
def _stop_all_runners() -> None:
    for job in list(_RUNNING):
        job.close()
    _STUDENT_RUNNER.clear()


def run_runner(submission: sandbox.Submission, spec: dict, budget: float) -> dict:
    """Run opinion_runner.py on ``spec`` (sandboxed unless grading is unsafe); its verdicts."""
    return RunnerJob(submission, spec, budget).verdicts()


def _key(ids: dict) -> tuple:
    return ids["student"], ids["assignment"], ids["notebook"]


class _Plan:
    """What the second opinion replays for one notebook: its test cells and their check calls."""

    def __init__(self, nb, ids: dict, log):
        self.submission = sandbox.Submission(Path.cwd(), ids["student"], ids["assignment"])
        self.submitted = Path.cwd() / "submitted" / ids["student"] / ids["assignment"] / f"{ids['notebook']}.ipynb"
        self.grade_ids: list[str] = []  # the replayed test cells, in notebook order
        self.cells: list[dict] = []
        self.secret_seeds: set[str] = set()
        # The hidden draw is this submission's own: a resubmission gets fresh hidden scenarios.
        self.digest = submission_digest(self.submitted)
        names = (ids["student"], ids["assignment"], ids["notebook"], self.digest)
        self.seed_family = seed_family(Path.cwd(), *names)
        self.ids, self.draw_logged = ids, False
        for cell in nb.cells:
            if not is_autograded_test(cell):
                continue
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            seed = secret_seed(Path.cwd(), *names, grade_id)
            try:
                self.cells.append({"grade_id": grade_id, "calls": with_secret_seeds(check_calls(cell.source), seed)})
                self.grade_ids.append(grade_id)
                self.secret_seeds.add(str(seed))
            except (UnsupportedTest, SyntaxError, ValueError) as error:
                log.warning("second opinion: %s cannot be replayed (%s)", grade_id, error)

    @property
    def runnable(self) -> bool:
        return bool(self.cells) and self.submitted.is_file()

    def budget(self, timeout: int, cells: int | None = None) -> float:
        return timeout * (len(self.cells) if cells is None else cells) + 120

    def start(self, timeout: int, only: list[str] | None = None, final: bool = False) -> NotebookJob:
        """The clean run of the replayed cells (of those in ``only``); ``final``: the grader's last run
        of them, where a cell that runs out of time has failed (``opinion_runner``)."""
        if not self.draw_logged and any(call["hidden"] for cell in self.cells for call in cell["calls"]):
            log_hidden_draw(Path.cwd(), self.ids, self.digest, self.seed_family)
            self.draw_logged = True
        cells = [cell for cell in self.cells if only is None or cell["grade_id"] in only]
        spec = {"notebook": str(self.submitted), "cells": cells, "timeout": timeout, "final": final}
        return NotebookJob(self.submission, spec, budget=self.budget(timeout, len(cells)))

    def withhold_hidden_tests(self, nb) -> None:
        """The kernel runs only the visible lines of the replayed test cells (``restore_hidden_tests``).

        The hidden calls run in the clean run alone, with the secret seeds. So the hidden tests'
        text never reaches the kernel: no cell can print, encode or hook it (IPython's ``In``, an
        input transformer, an event callback), and feedback cannot carry it in any form.
        """
        self.withheld = {}
        replayed = set(self.grade_ids)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if is_autograded_test(cell) and grade_id in replayed and hidden.BEGIN in cell.source:
                self.withheld[grade_id] = cell.source
                cell.source = hidden.without_hidden_lines(cell.source)

    def restore_hidden_tests(self, nb) -> None:
        """The test cells' full sources back, for the autograded notebook (feedback clears them)."""
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in getattr(self, "withheld", {}):
                cell.source = self.withheld[grade_id]


def _with_verdict(verdicts: dict) -> dict:
    """The cells that got a verdict: a check's ``no_verdict`` (the machine, not the learner, kept it
    from judging: ``checks.speaking.failure.NoVerdict``) counts as no answer."""
    return {grade_id: verdict for grade_id, verdict in verdicts.items() if not verdict.get("no_verdict")}


def _timeout(preprocessor, assignment: str) -> int:
    return int(preprocessor.slow_assignments.get(assignment, preprocessor.timeout))


class SecondOpinion(NbGraderPreprocessor):
    """Re-grade each test cell in a clean sandboxed process; the lower score stands."""

    timeout = Integer(120, help="Seconds for the clean run of one test cell.").tag(config=True)
    slow_assignments = Dict({}, help="Seconds per test cell for named (Triton) assignments.").tag(config=True)

    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        timeout = _timeout(self, ids["assignment"])
        job, plan = _STARTED.pop(_key(ids), (None, None))
        if plan is None:
            plan = _Plan(nb, ids, self.log)
            if plan.runnable:
                job = plan.start(timeout)
        if job is None:
            return nb, resources
        plan.restore_hidden_tests(nb)
        answers = job.verdicts()
        verdicts = _with_verdict(answers)
        missing = [grade_id for grade_id in plan.grade_ids if grade_id not in verdicts]
        if missing:
            # No answer in time, a learner's process that could not start, a check that could not
            # reach a verdict (a loaded grader, a runner that died): those cells once more, on their
            # own now that the kernel is done, before any is judged without one. That run is final:
            # a cell out of time there has failed (the student's own slowness); one whose process
            # still cannot start, or still no verdict, is ``_no_verdict`` (never a failure).
            self.log.warning("second opinion: no verdict for %s of %s; running them again", missing, ids["notebook"])
            again = plan.start(timeout, only=missing, final=True).verdicts()
            answers = {**answers, **again}
            verdicts = {**_with_verdict(again), **verdicts}
        tests = {cell.metadata["nbgrader"]["grade_id"]: cell for cell in nb.cells if is_autograded_test(cell)}
        tests = {grade_id: tests[grade_id] for grade_id in plan.grade_ids if grade_id in tests}
        suspicious = scan(nbformat.read(plan.submitted, as_version=4))
        lines = [line for cell in tests.values() for line in hidden.hidden_lines(cell.source)]
        parameters = hidden.hidden_parameters(lines)
        parameters.setdefault("seed", set()).update(plan.secret_seeds)
        self.hide = hidden.Scrubber(lines, parameters)  # what students may not see
        for grade_id, cell in tests.items():
            if grade_id in verdicts:
                self._reconcile(ids, grade_id, cell, verdicts[grade_id], suspicious)
            else:
                reason = (answers.get(grade_id) or {}).get("message") or "no answer in time"
                self._no_verdict(ids, grade_id, cell, plan.budget(timeout), str(reason))
        return nb, resources

    def _no_verdict(self, ids, grade_id, cell, budget: float, reason: str = "") -> None:
        """Twice no verdict (the second time alone): the cell cannot be confirmed, so it scores 0 until
        regraded, and nobody is accused (the log's kind is ``time``, never ``clean-run``)."""
        why = (
            f"this test could not be confirmed: its clean re-run (only your definitions loaded, in a fresh "
            f"process) gave no result within {budget:.0f} s, twice. Loading your definitions may take too "
            "long (work at the top level of a class body?), or the grader was overloaded: ask your "
            "instructor to regrade"
        )
        traceback = [f"{SECOND_OPINION}: {why}"]
        cell.outputs.insert(0, NotebookNode(output_type="error", ename=SECOND_OPINION, evalue=why, traceback=traceback))
        reason = reason.removeprefix("no verdict: ").splitlines()[0][:300] if reason else "no answer in time"
        integrity.log(
            ids,
            "time",
            f"{grade_id}: the clean run gave no verdict within {budget:.0f} s, twice, the second time alone "
            f"({reason}); scored 0 until regraded; the machine's doing or slow loading, not tampering: regrade",
        )

    def _reconcile(self, ids, grade_id, cell, verdict, suspicious) -> None:
        kernel, clean = _kernel_passed(cell), bool(verdict["passed"])
        if kernel == clean and not verdict["flags"]:
            return
        if kernel and not clean and not verdict["flags"] and verdict.get("hidden"):
            # The kernel ran the visible calls only (withhold_hidden_tests): a hidden scenario
            # failed, which is an ordinary failed test, shown as the check's own words (the parts
            # the checker sent, never re-read from a message; see opinion_runner.failure_verdict).
            failure = verdict.get("failure") if isinstance(verdict.get("failure"), dict) else {}
            ename = _exception_name(failure.get("type"))
            message = self.hide(str(failure.get("text") or "a hidden scenario failed"))[:1500]
            if "hidden scenario" not in message:
                message = f"(in a hidden scenario) {message}"
            cell.outputs.insert(
                0, NotebookNode(output_type="error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])
            )
            kind = self.hide(str(failure.get("scenario", "")))[:300] or "a hidden scenario"
            integrity.log(
                ids,
                "hidden",
                f"{grade_id}: the visible calls passed and {kind} failed (scored as a failed test; a signal, "
                "not an accusation)",
            )
            return
        evidence = "; ".join(verdict["flags"]) or self.hide(
            verdict["message"].splitlines()[0] if verdict["message"] else ""
        )
        if suspicious:
            evidence += f" | the submission contains: {', '.join(suspicious)}"
        if kernel and not clean:
            why = (
                "this test passed in your notebook but failed when it was run again on its own, in a "
                "clean process with only your definitions (classes, functions, imports) loaded"
            )
            if verdict["flags"]:
                why += ". There, your code " + "; ".join(f.removeprefix("student code ") for f in verdict["flags"])
            else:
                why += ": " + self.hide(verdict["message"])[:1500]
            cell.outputs.insert(
                0,
                NotebookNode(
                    output_type="error", ename=SECOND_OPINION, evalue=why, traceback=[f"{SECOND_OPINION}: {why}"]
                ),
            )
            integrity.log(ids, "clean-run", f"{grade_id}: kernel passed, clean run failed (scored 0): {evidence}")
        elif clean and not kernel:
            integrity.log(
                ids, "review", f"{grade_id}: kernel failed, clean run passed (kernel's 0 stands; review): {evidence}"
            )
        else:
            integrity.log(ids, "clean-run", f"{grade_id}: flagged in the clean run: {evidence}")


class StartSecondOpinion(SecondOpinion):
    """First autograde step: start the clean re-run now, beside the kernel's run (see NotebookJob).

    Its configuration is SecondOpinion's (``timeout``, ``slow_assignments``: traitlets gives a
    subclass its parent's section); SecondOpinion takes the job over, and runs one itself where
    this step is not configured.
    """

    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        while _STARTED:  # a notebook nbgrader gave up on: its runner may still be busy with it
            stale, _ = _STARTED.pop(next(iter(_STARTED)))
            stale.close()
        plan = _Plan(nb, ids, self.log)
        if plan.runnable:
            _STARTED[_key(ids)] = (plan.start(_timeout(self, ids["assignment"])), plan)
            plan.withhold_hidden_tests(nb)
        return nb, resources
