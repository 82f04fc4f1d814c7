"""Is a student release safe to hand out?

Two questions, for every released notebook:

1. Leaks: does a line of a solution or hidden-test region of the instructor source appear in
   the release (any line of at least ``MIN_LINE`` characters that the source does not also
   show outside the regions), or does the installed ``paged_helpers`` package contain a
   fragment of one (three consecutive region lines, a whole short region, or one long
   computational line; input validation like ``raise ValueError(...)`` is shared on purpose)?
2. Behaviour: executed as a learner receives it (all releases side by side, nothing
   implemented), does every autograded test cell fail with "not implemented yet", with the
   kernel alive, rather than crash or pass? The run is a graded one (as in autograde), so a
   check cell that asks ``unfinished="note"`` must still fail.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..preprocessors.guard import is_autograded_test
from ..preprocessors.outputs import check_message
from ..sandbox.kernel_guard import GRADED_ENV
from ..sandbox.package_copies import installed_package_dir

MIN_LINE = 16
REGIONS = [("### BEGIN SOLUTION", "### END SOLUTION"), ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")]
NOT_IMPLEMENTED = re.compile(r"not implemented yet", re.I)


def _region_blocks(instructor_notebook: Path) -> tuple[list[list[str]], set[str]]:
    """(each region's stripped lines, in order; every line outside the regions)."""
    notebook = nbformat.read(instructor_notebook, as_version=4)
    blocks: list[list[str]] = []
    outside: set[str] = set()
    for cell in notebook.cells:
        current: list[str] = []
        depth = 0
        for line in cell.source.splitlines():
            stripped = line.strip()
            if any(stripped.startswith(begin) for begin, _ in REGIONS):
                depth += 1
            elif any(stripped.startswith(end) for _, end in REGIONS):
                depth = max(0, depth - 1)
                if depth == 0 and current:
                    blocks.append(current)
                    current = []
            elif stripped:
                (current.append(stripped) if depth else outside.add(stripped))
    return blocks, outside


def secret_lines(instructor_notebook: Path) -> set[str]:
    """Specific lines that exist only inside solution or hidden-test regions."""
    blocks, outside = _region_blocks(instructor_notebook)
    inside = {line for block in blocks for line in block}
    return {line for line in inside - outside if len(line) >= MIN_LINE and re.search(r"[A-Za-z]", line)}


# Lines that also appear, legitimately, in helper code: input validation, messages, control flow.
_GENERIC = re.compile(
    r"^(raise |if |elif |else|for |while |try|except|finally|with |assert |def |class |return None"
    r"|pass|#|[\"'f]?[\"']|\)|\]|\})"
)


def secret_fragments(instructor_notebook: Path) -> list[tuple[str, ...]]:
    """What would give a solution away if found in the helper package: any 3 consecutive lines of a
    region (the whole region when shorter), or one long computational line."""
    blocks, outside = _region_blocks(instructor_notebook)
    fragments: set[tuple[str, ...]] = set()
    for block in blocks:
        lines = [line for line in block if not line.startswith("#")]
        if len(lines) <= 3:
            fragments.add(tuple(lines))
        fragments.update(tuple(lines[i : i + 3]) for i in range(len(lines) - 2))
        fragments.update(
            (line,) for line in lines if len(line) >= 30 and line not in outside and not _GENERIC.match(line)
        )
    return sorted(f for f in fragments if f)


def _text_lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def _contains(lines: list[str], fragment: tuple[str, ...]) -> bool:
    n = len(fragment)
    return any(tuple(lines[i : i + n]) == fragment for i in range(len(lines) - n + 1))


@dataclass
class Leak:
    secret: str
    where: str


def find_leaks(
    instructor_notebook: Path, released_notebook: Path, package_dir: Path | None = None
) -> list[Leak]:
    """Solution or hidden-test text in the release (any specific line) or in the package (a fragment)."""
    released = nbformat.read(released_notebook, as_version=4)
    released_lines: set[str] = set()
    for cell in released.cells:
        released_lines |= _text_lines(cell.source)
    leaks = [
        Leak(s, str(released_notebook)) for s in sorted(secret_lines(instructor_notebook) & released_lines)
    ]
    markers = [m for pair in REGIONS for m in pair]
    for cell in released.cells:
        leaks += [Leak(m, f"{released_notebook} (marker)") for m in markers if m in cell.source]
    fragments = secret_fragments(instructor_notebook)
    package_dir = package_dir or installed_package_dir()
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".txt", ".json", ".md", ".html", ".js", ".css"):
            lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
            leaks += [Leak(" / ".join(f), str(path)) for f in fragments if _contains(lines, f)]
    return leaks


@dataclass
class CellVerdict:
    grade_id: str
    ok: bool
    message: str


@dataclass
class ReleaseRun:
    assignment: str
    verdicts: list[CellVerdict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.verdicts) and all(v.ok for v in self.verdicts)


def _verdict(cell) -> CellVerdict:
    grade_id = cell.metadata["nbgrader"]["grade_id"]
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors:
        return CellVerdict(grade_id, False, "passed without any implementation (a check that cannot fail?)")
    message = check_message(errors[-1])
    if NOT_IMPLEMENTED.search(message):
        return CellVerdict(grade_id, True, message.splitlines()[0])
    return CellVerdict(grade_id, False, f"failed without saying 'not implemented yet': {message[:400]}")


def run_release(release_dir: Path, assignments: list[str], timeout: int = 600) -> list[ReleaseRun]:
    """Execute each released notebook in a scratch copy of release/ (releases side by side)."""
    from nbclient import NotebookClient

    results = []
    with tempfile.TemporaryDirectory(prefix="release-run-") as scratch:
        for assignment in assignments:
            shutil.copytree(release_dir / assignment, Path(scratch) / assignment)
        for assignment in assignments:
            folder = Path(scratch) / assignment
            path = folder / f"{assignment}.ipynb"
            notebook = nbformat.read(path, as_version=4)
            client = NotebookClient(
                notebook,
                timeout=timeout,
                allow_errors=True,
                kernel_name="python3",
                resources={"metadata": {"path": str(folder)}},
            )
            # The kernel inherits this process's environment: grade it as autograde would.
            previous = os.environ.get(GRADED_ENV)
            os.environ[GRADED_ENV] = "1"
            try:
                client.execute()
            finally:
                if previous is None:
                    del os.environ[GRADED_ENV]
                else:
                    os.environ[GRADED_ENV] = previous
            run = ReleaseRun(assignment)
            run.verdicts = [_verdict(cell) for cell in notebook.cells if is_autograded_test(cell)]
            results.append(run)
    return results
