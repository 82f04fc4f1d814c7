"""SecondOpinion: every autograded test cell is graded twice, and the lower score stands.

nbgrader's own run executes the whole notebook in one kernel, so a cell the student added
before the tests can change what the tests do (an import hook, a fake module in
``sys.modules``, an IPython AST transformer, an ``execute_result`` that nbgrader counts as
credit). After that run, this preprocessor (autograde step, before grades are saved) grades
each test cell again, independently: the checker (``clean_run.checker``, outside the sandbox,
never running student code) makes the cell's check calls (parsed here from the locked test
cell, never executed as text) on the learner's objects, which live in a fresh learner process
per cell inside the student's sandbox (``clean_run.learner_host``: only the submission's
definitions, loaded by ``load_from_notebook``'s rules, and a view of the package without checks
or references); the two exchange plain data only (both started by ``clean_run.runners``). The
verdicts come back as data; the scores are decided here:

The hidden calls run in the clean run only: ``StartSecondOpinion`` takes them out of the test
cells before nbgrader's kernel runs the notebook (``_Plan.withhold_hidden_tests``), so the kernel
never holds their text, and puts them back afterwards. Their seeds are replaced by a secret seed
per submission and cell (``clean_run.secret_seeds``): hidden scenarios that no visible or guessed
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
import re
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict, Integer

from .. import integrity
from ..clean_run import runners
from ..clean_run.secret_seeds import log_hidden_draw, secret_seed, seed_family, submission_digest, with_secret_seeds
from ..sandbox import bubblewrap
from . import hidden_tests
from .guard import GUARD_BEGIN, GUARD_END, is_autograded_test

SECOND_OPINION = "SecondOpinion"
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
        if stripped.startswith(hidden_tests.BEGIN):
            inside = True
        elif stripped.startswith(hidden_tests.END):
            inside = False
        elif inside:
            numbers.add(number)
    return numbers


def _exception_name(name: object) -> str:
    """The failure's exception name as the feedback shows it: one of the checks' own, or CheckFailed."""
    return name if name in ("CheckFailed", "NotImplementedYet", "Refused", "NoVerdict") else "CheckFailed"


def _kernel_passed(cell: NotebookNode) -> bool:
    score, max_score = utils.determine_grade(cell)
    return score is not None and max_score is not None and score >= max_score


_STARTED: dict[tuple, tuple[runners.NotebookJob, _Plan]] = {}  # (student, assignment, notebook) -> (job, plan)


def _key(ids: dict) -> tuple:
    return ids["student"], ids["assignment"], ids["notebook"]


class _Plan:
    """What the second opinion replays for one notebook: its test cells and their check calls."""

    def __init__(self, nb, ids: dict, log):
        self.submission = bubblewrap.Submission(Path.cwd(), ids["student"], ids["assignment"])
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

    def start(self, timeout: int, only: list[str] | None = None, final: bool = False) -> runners.NotebookJob:
        """The clean run of the replayed cells (of those in ``only``); ``final``: the grader's last run
        of them, where a cell that runs out of time has failed (``clean_run.checker``)."""
        if not self.draw_logged and any(call["hidden"] for cell in self.cells for call in cell["calls"]):
            log_hidden_draw(Path.cwd(), self.ids, self.digest, self.seed_family)
            self.draw_logged = True
        cells = [cell for cell in self.cells if only is None or cell["grade_id"] in only]
        spec = {"notebook": str(self.submitted), "cells": cells, "timeout": timeout, "final": final}
        return runners.NotebookJob(self.submission, spec, budget=self.budget(timeout, len(cells)))

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
            if is_autograded_test(cell) and grade_id in replayed and hidden_tests.BEGIN in cell.source:
                self.withheld[grade_id] = cell.source
                cell.source = hidden_tests.without_hidden_lines(cell.source)

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
        lines = [line for cell in tests.values() for line in hidden_tests.hidden_lines(cell.source)]
        parameters = hidden_tests.hidden_parameters(lines)
        parameters.setdefault("seed", set()).update(plan.secret_seeds)
        self.hide = hidden_tests.Scrubber(lines, parameters)  # what students may not see
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
            # the checker sent, never re-read from a message; see clean_run.checker.failure_verdict).
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
