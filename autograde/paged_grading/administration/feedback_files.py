"""What goes back to students in feedback/: regular files only, size-capped.

nbgrader's generate_feedback copies every file of ``autograded/<student>/<assignment>/`` with
``shutil.copy``, which follows symbolic links. No sandbox can write that folder (the kernels
work in a scratch of their own, see ``sandbox.bubblewrap``), but ``remove_odd_entries`` still removes any
link or special file from ``autograded/`` before nbgrader runs and from ``feedback/`` after it,
so that nothing but plain files the grader wrote or copied ever reaches a student.

nbgrader's generate_feedback copies every file of ``autograded/<student>/<assignment>/`` next
to the feedback page, whatever its size: a notebook that wrote a 1 GiB file while it was being
graded would have it handed back. ``enforce_limits`` runs after generate_feedback and removes
any file over ``MAX_FILE_BYTES`` (a page included: the outputs are already capped by
``outputs.LimitOutputs``, so only a huge cell source can make one that big), leaving a short
note in its place, and returns one line per removal for the instructor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..sandbox.bubblewrap import odd_entries

MAX_FILE_BYTES = 8 * 1024 * 1024
NOTE_SUFFIX = ".left-out.txt"


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def enforce_limits(feedback: Path) -> list[str]:
    """Remove oversized files under ``feedback/``; one line per file removed."""
    problems = []
    if not feedback.exists():
        return problems
    for path in sorted(p for p in feedback.rglob("*") if p.is_file() and not p.is_symlink()):
        size = path.stat().st_size
        if size <= MAX_FILE_BYTES:
            continue
        path.unlink()
        note = path.with_name(path.name + NOTE_SUFFIX)
        note.write_text(
            f"{path.name} ({_mib(size)}) was left out of your feedback: the limit is "
            f"{_mib(MAX_FILE_BYTES)} per file. Ask your instructor if you need it.\n"
        )
        problems.append(f"{path.relative_to(feedback)}: {_mib(size)} over the {_mib(MAX_FILE_BYTES)} limit, left out")
    return problems


@dataclass(frozen=True)
class OddEntry:
    ids: dict  # student, assignment, notebook (for the integrity log)
    text: str


def remove_odd_entries(folder: Path) -> list[OddEntry]:
    """Remove every link and special file under ``folder`` (``autograded/`` or ``feedback/``)."""
    removed = []
    if not folder.is_dir() or folder.is_symlink():
        return removed
    for path, description in odd_entries(folder):
        parts = path.relative_to(folder).parts
        student = parts[0] if len(parts) > 1 else None
        assignment = parts[1] if len(parts) > 2 else None
        try:
            os.unlink(path)  # the entry itself, never what a link points at
        except OSError:
            continue
        removed.append(
            OddEntry(
                {"student": student, "assignment": assignment, "notebook": assignment},
                f"{folder.name}/: {description} (removed; never followed)",
            )
        )
    return removed
