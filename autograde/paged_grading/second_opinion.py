"""SecondOpinion: every autograded test cell is graded twice, and the lower score stands.

nbgrader's own run executes the whole notebook in one kernel, so a cell the student added
before the tests can change what the tests do (an import hook, a fake module in
``sys.modules``, an IPython AST transformer, an ``execute_result`` that nbgrader counts as
credit). After that run, this preprocessor (autograde step, before grades are saved) grades
each test cell again, independently, in a fresh sandboxed process (``opinion_runner``): the
checks are imported first, then only the submission's definitions are loaded, by
``load_from_notebook``'s rules, and the cell's check calls (parsed here from the locked test
cell, never executed as text) are made. The verdicts come back as data; the scores are
decided here, outside the sandbox:

The hidden calls' seeds are replaced, in the clean run, by a secret seed per student, notebook
and cell (``secret_seed``): hidden scenarios that no visible or guessed seed reproduces, and
whose failure still costs the points (the lower score stands).

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
import datetime
import hashlib
import hmac
import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict, Integer

from . import hidden, sandbox
from .guard import GUARD_BEGIN, GUARD_END, is_autograded_test

SECOND_OPINION = "SecondOpinion"
RUNNER = Path(__file__).with_name("opinion_runner.py")
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


def secret_seed(root: Path, *names: str) -> int:
    """A seed nobody outside the grader can know: HMAC of the names under the course's own key.

    The key is made once per course root (``.hidden_seed_key``, never inside a sandbox), so a
    regrade draws the same scenarios and no visible seed reproduces them.
    """
    key_file = root / SECRET_KEY_FILE
    if not key_file.exists():
        key_file.write_text(secrets.token_hex(32))
        key_file.chmod(0o600)
    digest = hmac.new(key_file.read_text().strip().encode(), "/".join(names).encode(), hashlib.sha256)
    return int(digest.hexdigest(), 16) % 2**31  # numpy and torch seeds fit in 31 bits


def with_secret_seeds(calls: list[dict], seed: int) -> list[dict]:
    """The hidden calls' seeds replaced by the secret one (the clean run's own hidden scenarios)."""
    return [
        {**call, "kwargs": {**call["kwargs"], "seed": seed}} if call["hidden"] and "seed" in call["kwargs"] else call
        for call in calls
    ]


def _kernel_passed(cell: NotebookNode) -> bool:
    score, max_score = utils.determine_grade(cell)
    return score is not None and max_score is not None and score >= max_score


def log_integrity(ids: dict, line: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    log_dir = Path("reports")
    log_dir.mkdir(exist_ok=True)
    with open(log_dir / "integrity.log", "a") as log:
        log.write(f"{now}\t{ids.get('student')}\t{ids.get('assignment')}\t{ids.get('notebook')}\t{line}\n")


def run_runner(submission: sandbox.Submission, spec: dict, budget: float) -> dict:
    """Run opinion_runner.py on ``spec`` (sandboxed unless grading is unsafe); its verdicts."""
    if sandbox.sandbox_disabled():
        spec = {**spec, "sandboxed": False}
        spec_path = Path(submission.scratch) / ".second_opinion.json"
        prefix: list[str] = []
        box = None
    else:
        box = sandbox.Sandbox(submission, readable=[RUNNER.parent], scratch_writable=False)
        spec = {**spec, "sandboxed": True}
        spec_path = box.private / "spec.json"
        prefix = box.prefix
    spec_path.write_text(json.dumps(spec))
    try:
        done = subprocess.run(
            [*prefix, sys.executable, str(RUNNER), str(spec_path)],
            cwd=submission.scratch,
            capture_output=True,
            text=True,
            timeout=budget,
        )
    except subprocess.TimeoutExpired:
        return {}
    finally:
        if box is not None:
            box.close()
        else:
            spec_path.unlink(missing_ok=True)
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}


class SecondOpinion(NbGraderPreprocessor):
    """Re-grade each test cell in a clean sandboxed process; the lower score stands."""

    timeout = Integer(120, help="Seconds for the clean run of one test cell.").tag(config=True)
    slow_assignments = Dict({}, help="Seconds per test cell for named (Triton) assignments.").tag(config=True)

    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        submission = sandbox.Submission(Path.cwd(), ids["student"], ids["assignment"])
        submitted = Path.cwd() / "submitted" / ids["student"] / ids["assignment"] / f"{ids['notebook']}.ipynb"
        tests, cells, secret_seeds = {}, [], set()
        for cell in nb.cells:
            if not is_autograded_test(cell):
                continue
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            seed = secret_seed(Path.cwd(), ids["student"], ids["assignment"], grade_id)
            try:
                cells.append({"grade_id": grade_id, "calls": with_secret_seeds(check_calls(cell.source), seed)})
                tests[grade_id] = cell
                secret_seeds.add(str(seed))
            except (UnsupportedTest, SyntaxError, ValueError) as error:
                self.log.warning("second opinion: %s cannot be replayed (%s)", grade_id, error)
        if not cells or not submitted.is_file():
            return nb, resources
        timeout = int(self.slow_assignments.get(ids["assignment"], self.timeout))
        spec = {"notebook": str(submitted), "cells": cells, "timeout": timeout}
        verdicts = run_runner(submission, spec, budget=timeout * len(cells) + 120)
        suspicious = scan(nbformat.read(submitted, as_version=4))
        lines = [line for cell in tests.values() for line in hidden.hidden_lines(cell.source)]
        parameters = hidden.hidden_parameters(lines)
        parameters.setdefault("seed", set()).update(secret_seeds)
        self.hide = hidden.Scrubber(lines, parameters)  # what students may not see
        for grade_id, cell in tests.items():
            verdict = verdicts.get(grade_id) or {
                "passed": False,
                "message": "the clean run gave no result",
                "flags": [],
            }
            self._reconcile(ids, grade_id, cell, verdict, suspicious)
        return nb, resources

    def _reconcile(self, ids, grade_id, cell, verdict, suspicious) -> None:
        kernel, clean = _kernel_passed(cell), bool(verdict["passed"])
        if kernel == clean and not verdict["flags"]:
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
            log_integrity(ids, f"{grade_id}: kernel passed, clean run failed (scored 0): {evidence}")
        elif clean and not kernel:
            log_integrity(ids, f"{grade_id}: kernel failed, clean run passed (kernel's 0 stands; review): {evidence}")
        else:
            log_integrity(ids, f"{grade_id}: flagged in the clean run: {evidence}")
