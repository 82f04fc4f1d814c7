"""Runs INSIDE the grading kernel, at the top of every autograded test cell.

The grader (``guard.GuardChecks``) prepends two lines to each test cell: they check this
file's SHA-256, then call ``fresh_helpers(root, manifest_sha256)``, which

1. verifies the manifest (its hash is written literally into the cell by the grader) and every
   file of the pristine copy of ``paged_helpers`` under ``root`` against it, and refuses to
   go on if anything was changed, added or removed since the grader wrote the copy;
2. drops every ``paged_helpers`` module from ``sys.modules`` and imports the package afresh
   from the pristine copy, under its real name (so a check that pickles a function by name
   for a child process still finds it);
3. marks the run as graded (``PAGED_HELPERS_GRADED=1``, read by ``checks.registry`` when a check
   starts): a check cell that asks ``unfinished="note"`` so that Run All goes on in a learner's
   workspace still fails here, and unfinished code scores zero;
4. returns the fresh package, which the cell binds to ``ph``.

So a learner cell that replaced ``ph.checks.check_block_allocator``, patched a function inside
a check module, swapped a function's ``__code__``, or edited the installed package on disk
cannot change what this test cell runs. What it cannot stop is written in autograde/README.md
("What nbgrader cannot defend against"). This file uses only the standard library and keeps
no state between calls.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import sys
from pathlib import Path

PACKAGE = "paged_helpers"
# Must equal paged_helpers.running.graded.GRADED_ENV (tests/test_learner_path.py compares them).
GRADED_ENV = "PAGED_HELPERS_GRADED"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _integrity_error(what: str) -> AssertionError:
    return AssertionError(
        f"autograde guard: {what}. The course's helper package was modified while this notebook "
        "was being graded, so this test cannot be trusted and scores zero. Ask your instructor."
    )


def verify(root: str | Path, manifest_sha256: str) -> Path:
    """Check the pristine copy under ``root``; return its package folder."""
    root = Path(root)
    manifest_path = root / "manifest.json"
    if _sha256(manifest_path) != manifest_sha256:
        raise _integrity_error("the manifest of the pristine copy was changed")
    manifest: dict[str, str] = json.loads(manifest_path.read_text())
    package_dir = root / PACKAGE
    present = {p.relative_to(package_dir).as_posix() for p in package_dir.rglob("*.py*")}
    extra = sorted(present - set(manifest))
    if extra:
        raise _integrity_error(f"files were added to the pristine copy: {', '.join(extra)}")
    for relative, digest in manifest.items():
        path = package_dir / relative
        if not path.is_file() or _sha256(path) != digest:
            raise _integrity_error(f"{relative} of the pristine copy was changed or removed")
    return package_dir


def fresh_helpers(root: str | Path, manifest_sha256: str):
    """A freshly imported ``paged_helpers`` from the verified pristine copy under ``root``."""
    package_dir = verify(root, manifest_sha256)
    os.environ[GRADED_ENV] = "1"
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        PACKAGE, package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the package's banner, already shown once
            spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module
