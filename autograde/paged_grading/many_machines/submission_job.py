"""One job: one student's submission, as the coordinator sends it to a worker (the payload).

A job is a student, not a notebook: one ``course.py grade --student`` on the worker grades all the
student's notebooks with one nbgrader start, one kernel zygote and one second-opinion checker (torch
and the checks imported once per student, not per notebook), and the student's grading-time budget
(``reports/grading-time/``, over all their notebooks) is kept in one place. A class gives many more
students than machines, so per-student jobs already keep every worker busy; splitting a student's
notebooks across machines would pay those start-ups once per notebook and split the budget.

What a payload holds, and nothing else: the student's id; the assignments to grade; the regular files
of every ``submitted/<student>/<assignment>/`` (a later notebook loads the student's earlier ones;
size-capped, ``MAX_SUBMISSION_BYTES``);
the secret seeds and draw families of exactly these submitted bytes (``secret_seeds.seeds_for``: not
the course key); the student's grading-time ledger; the digests of the course bundle and of the
grading code (``fingerprint``); the run and try it belongs to. It is compressed JSON, signed as a
whole by the coordinator (``signing``), and decoded only after the MAC is checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

import nbformat

from ..administration.collect import read_regular_file
from ..clean_run.secret_seeds import seeds_for, submission_digest
from ..preprocessors.execute import TIME_LEDGER
from ..preprocessors.guard import is_autograded_test

FORMAT = 1
MAX_SUBMISSION_BYTES = 32 * 2**20  # one student's submitted files, uncompressed


class TooLarge(ValueError):
    """A submission or result over its cap: said plainly, never truncated."""


@dataclass
class Payload:
    run_id: str
    job_key: str
    course_id: str
    student: str
    assignments: list[str]
    files: dict[str, dict[str, bytes]]  # assignment -> relative path -> bytes
    seeds: dict
    ledger: dict[str, str]  # assignment -> the student's recorded grading seconds (reports/grading-time)
    bundle: str
    fingerprint: str
    try_no: int
    issued_at: float = field(default_factory=time.time)
    format: int = FORMAT

    def digests(self) -> dict[str, str]:
        """graded assignment -> SHA-256 of its submitted notebook (what the hidden draw and the result name)."""
        return {a: submission_digest_of(self.files[a].get(f"{a}.ipynb")) for a in self.assignments}


def submission_digest_of(data: bytes | None) -> str:
    return hashlib.sha256(data).hexdigest() if data is not None else "missing"


def safe_relative(name: str) -> PurePosixPath:
    """A relative path of plain names, or ValueError: nothing a payload or result names leaves its folder."""
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or any(p in ("", ".", "..") or "\0" in p for p in path.parts):
        raise ValueError(f"refused path {name!r}")
    return path


def _test_cells(root: Path, assignment: str) -> list[str]:
    notebook = nbformat.read(root / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    return [cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells if is_autograded_test(cell)]


def build(
    root: Path,
    *,
    run_id: str,
    job_key: str,
    course_id: str,
    student: str,
    assignments: list[str],
    bundle: str,
    fingerprint: str,
    try_no: int,
) -> Payload:
    """The payload of one student's job, read from the coordinator's course root."""
    files: dict[str, dict[str, bytes]] = {}
    seeds: dict = {"seeds": {}, "families": {}}
    total = 0
    # Every submitted notebook of the student travels, graded or not: a later notebook loads the
    # student's earlier ones from submitted/ (grading 04 alone reads their 03).
    mine = root / "submitted" / student
    for folder in sorted(p for p in mine.iterdir() if p.is_dir() and not p.is_symlink()):
        files[folder.name] = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            data = read_regular_file(path, folder)
            total += len(data)
            if total > MAX_SUBMISSION_BYTES:
                raise TooLarge(
                    f"the submitted files are over {MAX_SUBMISSION_BYTES // 2**20} MiB, the limit of a job: grade this "
                    f"student on the coordinator (course.py grade --student {student})"
                )
            files[folder.name][path.relative_to(folder).as_posix()] = data
    graded = [a for a in assignments if a in files]
    for assignment in graded:
        notebook = mine / assignment / f"{assignment}.ipynb"
        given = seeds_for(
            root, (student, assignment, assignment, submission_digest(notebook)), _test_cells(root, assignment)
        )
        seeds["seeds"].update(given["seeds"])
        seeds["families"].update(given["families"])
    ledger_folder = root / TIME_LEDGER / student
    ledger = (
        {p.name: p.read_text() for p in sorted(ledger_folder.glob("*")) if p.is_file()}
        if ledger_folder.is_dir()
        else {}
    )
    return Payload(
        run_id=run_id, job_key=job_key, course_id=course_id, student=student,
        assignments=graded, files=files, seeds=seeds, ledger=ledger,
        bundle=bundle, fingerprint=fingerprint, try_no=try_no,
    )  # fmt: skip


def encode(payload: Payload) -> bytes:
    data = asdict(payload)
    data["files"] = {a: {n: base64.b64encode(b).decode() for n, b in fs.items()} for a, fs in payload.files.items()}
    return zlib.compress(json.dumps(data, sort_keys=True).encode(), 6)


def bounded_json(blob: bytes, limit: int, what: str, format_: int, reader: str) -> dict:
    """``blob`` (zlib-compressed JSON) read as a dict of format ``format_``, refused once it expands past
    ``limit`` bytes: jobs and results cross between machines as this, and nothing else."""
    raw = zlib.decompressobj()
    text = raw.decompress(blob, limit)
    if raw.unconsumed_tail:
        raise TooLarge(f"the {what} expands past its limit")
    data = json.loads(text)
    if type(data) is not dict or data.get("format") != format_:
        found = data.get("format") if type(data) is dict else None
        raise ValueError(f"a {what} of format {found}; {reader} reads {format_}")
    return data


def decode(blob: bytes) -> Payload:
    """A payload from its bytes (call only after its MAC is verified); every path is checked."""
    data = bounded_json(blob, 4 * MAX_SUBMISSION_BYTES, "job's payload", FORMAT, "this worker (update it)")
    data["files"] = {
        a: {str(safe_relative(n)): base64.b64decode(b) for n, b in fs.items()} for a, fs in data["files"].items()
    }
    for name in [data["student"], *data["assignments"], *data["files"], *data["ledger"]]:
        if len(safe_relative(name).parts) != 1:
            raise ValueError(f"refused name {name!r}")
    return Payload(**data)


def write_submission(root: Path, payload: Payload) -> None:
    """The submission into a worker's (emptied) ``submitted/``, and the student's time ledger."""
    for assignment, files in payload.files.items():
        folder = root / "submitted" / payload.student / assignment
        for name, data in files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    ledger = root / TIME_LEDGER / payload.student
    for assignment, text in payload.ledger.items():
        ledger.mkdir(parents=True, exist_ok=True)
        (ledger / assignment).write_text(text)
