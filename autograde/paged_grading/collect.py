"""Put students' notebooks where nbgrader expects them: submitted/<student>/<assignment>/<assignment>.ipynb.

Two sources:

* a folder per student: ``<src>/<student>/`` holding ``NN_name.ipynb`` files, either flat or
  in ``NN_name/`` subfolders (what ``nbgrader fetch``/JupyterHub users have);
* the zip an LMS exports for one assignment (or for the whole course). Each notebook's file
  name is matched against ``LMS_PATTERNS`` to find the student:
    Canvas   ``jdoe_12345_67890_02_block_allocator.ipynb`` (``_LATE_`` and ``-1`` copies too)
    Moodle   ``Jane Doe_12345_assignsubmission_file_/02_block_allocator.ipynb``
    plain    ``jdoe/02_block_allocator.ipynb`` inside the zip.

Only notebooks named after a known assignment are taken; anything else is reported as
skipped. nbgrader's own ``zip_collect`` does the same for one notebook per assignment with a
single regular expression; it cannot strip Canvas's "-1" resubmission suffix or sort one zip
into several assignments, which is why this module exists. A timestamp.txt (the file's time
in the zip) lets nbgrader's late-submission policy apply.
"""

from __future__ import annotations

import datetime
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ASSIGNMENT = r"(?P<assignment>\d\d_[a-z0-9_]+?)(?:-\d+)?\.ipynb"
LMS_PATTERNS = {
    "canvas": re.compile(r"(?:^|/)(?P<student>[A-Za-z0-9.\-]+)_(?:LATE_)?\d+_\d+_" + ASSIGNMENT + r"$"),
    "moodle": re.compile(
        r"(?:^|/)(?P<student>[^/_]+)_\d+_assignsubmission_file_/(?:.*/)?" + ASSIGNMENT + r"$"
    ),
    "plain": re.compile(r"(?:^|/)(?P<student>[^/]+)/(?:[^/]+/)*" + ASSIGNMENT + r"$"),
}


@dataclass
class Collected:
    placed: list[tuple[str, str]] = field(default_factory=list)  # (student, assignment)
    skipped: list[str] = field(default_factory=list)


def student_id(name: str) -> str:
    """nbgrader student ids: letters, digits, '-', '_', '.'."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", name.strip()).strip("_") or "unknown"


def _place(
    data: bytes, student: str, assignment: str, submitted: Path, when: datetime.datetime | None
) -> None:
    folder = submitted / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{assignment}.ipynb").write_bytes(data)
    if when is not None:
        (folder / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))


def collect_folders(source: Path, submitted: Path, assignments: set[str]) -> Collected:
    result = Collected()
    for student_dir in sorted(p for p in source.iterdir() if p.is_dir()):
        student = student_id(student_dir.name)
        for notebook in sorted(student_dir.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in notebook.parts:
                continue
            match = re.fullmatch(ASSIGNMENT, notebook.name)
            if match is None or match["assignment"] not in assignments:
                result.skipped.append(str(notebook))
                continue
            when = datetime.datetime.fromtimestamp(notebook.stat().st_mtime, datetime.timezone.utc)
            _place(notebook.read_bytes(), student, match["assignment"], submitted, when)
            result.placed.append((student, match["assignment"]))
    return result


def collect_zip(archive: Path, submitted: Path, assignments: set[str], lms: str = "auto") -> Collected:
    patterns = list(LMS_PATTERNS.values()) if lms == "auto" else [LMS_PATTERNS[lms]]
    result = Collected()
    with zipfile.ZipFile(archive) as zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            if info.is_dir() or "__MACOSX" in info.filename or ".ipynb_checkpoints" in info.filename:
                continue
            match = next((m for p in patterns if (m := p.search(info.filename))), None)
            if match is None or match["assignment"] not in assignments:
                result.skipped.append(info.filename)
                continue
            when = datetime.datetime(*info.date_time, tzinfo=datetime.timezone.utc)
            student = student_id(match["student"])
            _place(zf.read(info), student, match["assignment"], submitted, when)
            result.placed.append((student, match["assignment"]))
    return result


def clear_submissions(submitted: Path) -> None:
    if submitted.exists():
        shutil.rmtree(submitted)
