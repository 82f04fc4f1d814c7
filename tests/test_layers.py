"""The package's layers, read from its imports (issue 24): the folder tree is the map, this test the law.

    running        runs the learner's code apart (child processes, the launch watcher, the GPU compile)
    learner_view   the learner's objects, here or across the wire
    checks         scenarios, references and verdicts: one module (or a few) per notebook, on
        registry   the @check decorator and REGISTRY
        reading    how a check reads the learner's values and objects, strictly (calls, snapshots, pools);
                   its ``learner_code`` is the one door to ``learner_view`` and ``running``
        speaking   how a check speaks: failures and hints, pass lines, hidden scenarios
    demos          the figures behind run.py

A layer imports only the layers below it: ``running`` knows nothing of views, checks or demos;
``learner_view`` (which the learner's process holds whole while grading) nothing of checks,
references or demos; ``checks`` nothing of demos or widgets; and no module of any package imports
itself around a loop (``speaking.report`` and ``strict``, ``model`` and ``checkpoint`` once did). The
contracts are import-linter's, in pyproject.toml; every import counts, at the top of a module and
inside a function.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"  # import-linter, pinned in requirements/


def _lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_layer_and_cycle_contracts_hold():
    done = _lint()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "7 kept, 0 broken" in done.stdout, done.stdout[-2000:]


def test_a_cycle_or_an_upward_import_breaks_a_contract(tmp_path):
    """The contracts can fail: a copy of the package where ``failure`` imports ``hidden`` back,
    ``speaking`` imports ``reading``, ``running`` imports a check, and a notebook's check opens a
    second door to the learner (``learner_view`` itself)."""
    import shutil

    copy = tmp_path / "project"
    shutil.copytree(
        ROOT / "paged_helpers", copy / "paged_helpers", ignore=shutil.ignore_patterns("__pycache__", "files")
    )
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    with open(copy / "paged_helpers" / "checks" / "speaking" / "failure.py", "a") as handle:
        handle.write("\nfrom . import hidden  # a cycle\n")
    with open(copy / "paged_helpers" / "checks" / "speaking" / "hidden.py", "a") as handle:
        handle.write("\nfrom ..reading import strict  # speaking reads the learner\n")
    with open(copy / "paged_helpers" / "running" / "graded.py", "a") as handle:
        handle.write("\nfrom ..checks.speaking import hidden  # upward\n")
    with open(copy / "paged_helpers" / "checks" / "allocator" / "check.py", "a") as handle:
        handle.write("\nfrom ...learner_view.remote import plain  # a second door\n")
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode != 0, done.stdout
    assert "3 kept, 4 broken" in done.stdout, done.stdout[-3000:]
    assert "paged_helpers.checks.speaking.hidden -> paged_helpers.checks.reading.strict" in done.stdout, done.stdout
    assert ".failure -> .hidden" in done.stdout or ".hidden -> .failure" in done.stdout, done.stdout
    assert "paged_helpers.checks.allocator.check -> paged_helpers.learner_view.remote" in done.stdout, done.stdout
    assert "paged_helpers.running.graded" in done.stdout, done.stdout


def test_what_checks_read_and_say_with_imports_no_notebook_check():
    """``reading`` and ``speaking`` are the checks' shared ground: neither imports a module of the
    notebooks' checks beside them (that would make every check depend on one notebook's)."""
    import grimp

    graph = grimp.build_graph("paged_helpers", include_external_packages=False)
    shared = ("paged_helpers.checks.reading", "paged_helpers.checks.speaking")
    notebook_checks = {
        module
        for module in graph.find_children("paged_helpers.checks")
        if module not in shared and not module.endswith("__main__")
    }
    assert notebook_checks, "no check module found: the test reads the wrong package"
    upward = sorted(
        (importer, imported)
        for layer in shared
        for importer in graph.find_descendants(layer) | {layer}
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported in notebook_checks
    )
    assert not upward, f"reading/speaking import a notebook's checks: {upward}"
