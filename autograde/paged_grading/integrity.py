"""``reports/integrity.log``: one line per finding about a submission, for the instructor.

Every finding of the grader goes through ``log``: the second opinion's disagreements and flags,
the guard's restored package, and what a sandbox left behind that the grader refused to follow
(``sandbox.bubblewrap.odd_entries``). A line is ``time<TAB>student<TAB>assignment<TAB>notebook<TAB>kind: text``;
``kind`` is one of ``KINDS``, so that ``course.py report`` can say what it counts.
"""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path

LOG = Path("reports") / "integrity.log"  # relative to the course root, where nbgrader runs

KINDS = {
    "clean-run": "a test the kernel passed failed or was flagged in the clean re-run",
    "review": "a test the kernel failed passed in the clean re-run (the kernel's 0 stands; worth a look)",
    "package": "the installed helper package was modified during grading (restored)",
    "leftover": "the grading kernel left a link or special file in its scratch folder (discarded, never followed)",
    "time": "a notebook or a student ran out of grading time (the unfinished cells scored 0)",
    "hidden": "the visible calls passed and a hidden scenario failed (scored as a failed test; a signal to look at)",
}


def log(ids: dict, kind: str, text: str, root: Path | None = None) -> None:
    """Append one finding; ``ids`` has the nbgrader resource keys student, assignment, notebook."""
    if kind not in KINDS:
        raise ValueError(f"unknown integrity finding kind {kind!r}; one of {sorted(KINDS)}")
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    path = (root or Path.cwd()) / LOG
    path.parent.mkdir(exist_ok=True)
    line = "\t".join(str(ids.get(key)) for key in ("student", "assignment", "notebook"))
    text = " ".join(text.split())  # one finding, one line, whatever the evidence held
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{now}\t{line}\t{kind}: {text}\n")


def summary(path: Path) -> list[str]:
    """'3 x clean-run (what it counts), student(s) a, b' lines for ``course.py report``."""
    if not path.exists():
        return []
    counts: Counter[str] = Counter()
    students: dict[str, set[str]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) < 5:
            continue
        kind = fields[4].split(":", 1)[0]
        kind = kind if kind in KINDS else "other"
        counts[kind] += 1
        students.setdefault(kind, set()).add(fields[1])
    return [
        f"{counts[kind]} x {kind} ({KINDS.get(kind, 'lines of an older format')}): "
        f"{', '.join(sorted(students[kind]))}"
        for kind in sorted(counts)
    ]
