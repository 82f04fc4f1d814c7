"""Put students' notebooks where nbgrader expects them: submitted/<student>/<assignment>/<assignment>.ipynb.

Two sources:

* a folder per student: ``<src>/<student>/`` holding ``NN_name.ipynb`` files, either flat or
  in ``NN_name/`` (or any other) subfolders (what ``nbgrader fetch``/JupyterHub users have);
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

Honest students never lose silently here:

* Student ids keep their letters in any script (``student_id``); a name with nothing usable
  left gets an id derived from a hash of the name, never a shared placeholder, and two
  different names that come out the same in one collection get distinct ids (``Roster``).
* When a student has several copies of one notebook (a draft in ``backup/``, a Canvas ``-1``
  resubmission), exactly one is graded, chosen by ``CHOICE_RULE``; every such choice is
  reported (``Collected.choices``) so the instructor can see and undo it.

And no student gets what is not theirs: a student's folder is the student's to fill, but the
instructor reads it, with the instructor's rights. A notebook that is a symbolic link
(``02_block_allocator.ipynb -> /home/alice/02_block_allocator.ipynb``, or the course's own
``source/`` notebook) would be read through it and graded as the student's own work, and a named
pipe would hang the whole collection. So only regular files are read, opened one folder at a time
without following any link (``read_regular_file``); anything else is refused and named
(``Collected.refused``).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import os
import re
import stat
import unicodedata
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ASSIGNMENT = r"(?P<assignment>\d\d_[a-z0-9_]+?)(?:-(?P<resubmission>\d+))?\.ipynb"
LMS_PATTERNS = {
    "canvas": re.compile(r"(?:^|/)(?P<student>[^/_]+)_(?:LATE_)?\d+_\d+_" + ASSIGNMENT + r"$"),
    "moodle": re.compile(
        r"(?:^|/)(?P<student>[^/_]+)_\d+_assignsubmission_file_/(?:.*/)?" + ASSIGNMENT + r"$"
    ),
    "plain": re.compile(r"(?:^|/)(?P<student>[^/]+)/(?:[^/]+/)*" + ASSIGNMENT + r"$"),
}

CHOICE_RULE = (
    "newest modification time (the zip entry's time for LMS exports); on a tie, the copy in the "
    "shallowest folder, then the highest resubmission number (-N), then the first path in sort order"
)

# nbgrader keeps student ids in a 128-character column; leave room for a disambiguating suffix.
MAX_ID_LENGTH = 100


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def student_id(name: str) -> str:
    """A folder-safe nbgrader student id that keeps the name's letters in any script.

    Letters and digits of every script, '-', '_' and '.' are kept (NFC-normalised, so the same
    name typed on two systems gives the same id); runs of anything else become '_'. A name with
    nothing usable left (only punctuation or symbols) gets ``student-<hash of the name>``, so two
    such names still get different ids.
    """
    normal = unicodedata.normalize("NFC", name.strip())
    cleaned = re.sub(r"[^\w.\-]+", "_", normal).strip("_.-")
    if not cleaned:
        return f"student-{_short_hash(normal)}"
    if len(cleaned) > MAX_ID_LENGTH:
        cleaned = f"{cleaned[:MAX_ID_LENGTH]}-{_short_hash(normal)}"
    return cleaned


@dataclass
class Roster:
    """Raw names seen in one collection and the distinct ids they were given.

    Two different raw names that ``student_id`` maps to the same id ("Anna Lee", "Anna_Lee")
    would overwrite each other's submissions; the second one gets ``<id>-<hash of its name>``
    (``claim`` lets a name that already is a valid id keep it, whatever the order).
    """

    ids: dict[str, str] = field(default_factory=dict)  # raw name -> id
    owners: dict[str, str] = field(default_factory=dict)  # id -> raw name

    def claim(self, raws: list[str]) -> None:
        """Register names that already are valid ids first, so that they keep them unchanged."""
        for raw in sorted(raws, key=lambda name: student_id(name) != unicodedata.normalize("NFC", name.strip())):
            self.id_for(raw)

    def id_for(self, raw: str) -> str:
        raw = unicodedata.normalize("NFC", raw.strip())
        if raw not in self.ids:
            wanted = student_id(raw)
            if wanted in self.owners:
                wanted = f"{wanted}-{_short_hash(raw)}"
            self.ids[raw] = wanted
            self.owners[wanted] = raw
        return self.ids[raw]

    def renamed(self) -> dict[str, str]:
        """raw name -> id, for the names that did not become their own id unchanged."""
        return {raw: sid for raw, sid in self.ids.items() if raw != sid}


@dataclass(frozen=True)
class Candidate:
    """One copy of a student's notebook for one assignment, found in a folder or a zip."""

    student: str
    assignment: str
    where: str  # the path shown to the instructor
    modified: datetime.datetime
    depth: int  # folders between the student's root and the notebook
    resubmission: int
    read: Callable[[], bytes] = field(compare=False, repr=False)

    def rank(self) -> tuple:
        """Sort key: the first candidate in this order is graded (see ``CHOICE_RULE``)."""
        return (-self.modified.timestamp(), self.depth, -self.resubmission, self.where)


@dataclass
class Choice:
    """Several copies of one notebook: which one is graded, and which were left out."""

    student: str
    assignment: str
    chosen: Candidate
    ignored: list[Candidate]

    def describe(self) -> str:
        def one(c: Candidate) -> str:
            return f"{c.where} (modified {c.modified:%Y-%m-%d %H:%M:%S} UTC)"

        others = "; ".join(one(c) for c in self.ignored)
        return (
            f"{self.student}/{self.assignment}: {len(self.ignored) + 1} copies; graded {one(self.chosen)}; "
            f"not graded: {others}"
        )


@dataclass
class Collected:
    placed: list[tuple[str, str]] = field(default_factory=list)  # (student, assignment)
    skipped: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # a course notebook that is a link or special file
    choices: list[Choice] = field(default_factory=list)  # several copies of one notebook
    renamed: dict[str, str] = field(default_factory=dict)  # raw student name -> id used


def _place(candidate: Candidate, submitted: Path) -> None:
    folder = submitted / candidate.student / candidate.assignment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{candidate.assignment}.ipynb").write_bytes(candidate.read())
    (folder / "timestamp.txt").write_text(candidate.modified.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))


def _settle(candidates: list[Candidate], submitted: Path, result: Collected) -> Collected:
    """Place one copy per (student, assignment), recording every choice among several copies."""
    groups: dict[tuple[str, str], list[Candidate]] = {}
    for candidate in candidates:
        groups.setdefault((candidate.student, candidate.assignment), []).append(candidate)
    for (student, assignment), group in sorted(groups.items()):
        ranked = sorted(group, key=Candidate.rank)
        distinct = {c.read() for c in ranked} if len(ranked) > 1 else set()
        if len(distinct) > 1:  # identical copies are not a choice worth reporting
            result.choices.append(Choice(student, assignment, ranked[0], ranked[1:]))
        _place(ranked[0], submitted)
        result.placed.append((student, assignment))
    return result


class NotARegularFile(OSError):
    """A student's file that is a link or a special file: never read through."""


def read_regular_file(path: Path, folder: Path) -> bytes:
    """The bytes of ``path``, a regular file under ``folder``, without following any link on the way.

    Each folder between ``folder`` and the file is opened with ``O_NOFOLLOW``, and so is the file
    (``O_NONBLOCK``: a named pipe is refused, not waited on), so a link swapped in after the
    folder was listed is refused too, never followed (``OSError``).
    """
    parts = path.relative_to(folder).parts
    here = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
            os.close(here)
            here = inner
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=here)
    finally:
        os.close(here)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise NotARegularFile(f"{path} is not a regular file")
        return handle.read()


def _not_regular(path: Path) -> str | None:
    """Why ``path`` is not read (a link, a pipe, a device), from its own metadata; None for a regular file."""
    try:
        mode = path.lstat().st_mode
    except OSError as error:
        return f"unreadable ({error.strerror})"
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(path)}: never followed"
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode) else "a socket or device"
        return f"{kind}, not a regular file: never read"
    return None


def collect_folders(
    source: Path, submitted: Path, assignments: set[str], roster: Roster | None = None
) -> Collected:
    roster = roster if roster is not None else Roster()
    result = Collected()
    candidates = []
    student_dirs = sorted(p for p in source.iterdir() if p.is_dir())
    roster.claim([p.name for p in student_dirs])
    for student_dir in student_dirs:
        student = roster.id_for(student_dir.name)
        for notebook in sorted(student_dir.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in notebook.parts:
                continue
            match = re.fullmatch(ASSIGNMENT, notebook.name)
            if match is None or match["assignment"] not in assignments:
                result.skipped.append(str(notebook))
                continue
            why = _not_regular(notebook)
            if why is not None:
                result.refused.append(f"{notebook}: {why}")
                continue
            candidates.append(
                Candidate(
                    student=student,
                    assignment=match["assignment"],
                    where=str(notebook),
                    modified=datetime.datetime.fromtimestamp(notebook.lstat().st_mtime, datetime.timezone.utc),
                    depth=len(notebook.relative_to(student_dir).parts) - 1,
                    resubmission=int(match["resubmission"] or 0),
                    read=functools.partial(read_regular_file, notebook, student_dir),
                )
            )
    result.renamed = roster.renamed()
    return _settle(candidates, submitted, result)


def _zip_reader(archive: Path, name: str) -> Callable[[], bytes]:
    def read() -> bytes:
        with zipfile.ZipFile(archive) as zf:
            return zf.read(name)

    return read


def collect_zip(
    archive: Path, submitted: Path, assignments: set[str], lms: str = "auto", roster: Roster | None = None
) -> Collected:
    roster = roster if roster is not None else Roster()
    patterns = list(LMS_PATTERNS.values()) if lms == "auto" else [LMS_PATTERNS[lms]]
    result = Collected()
    candidates = []
    with zipfile.ZipFile(archive) as zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            if info.is_dir() or "__MACOSX" in info.filename or ".ipynb_checkpoints" in info.filename:
                continue
            match = next((m for p in patterns if (m := p.search(info.filename))), None)
            if match is None or match["assignment"] not in assignments:
                result.skipped.append(info.filename)
                continue
            path = PurePosixPath(info.filename)
            student_at = next(
                (i for i, part in enumerate(path.parts) if part.startswith(match["student"])), 0
            )
            candidates.append(
                Candidate(
                    student=roster.id_for(match["student"]),
                    assignment=match["assignment"],
                    where=f"{archive}:{info.filename}",
                    modified=datetime.datetime(*info.date_time, tzinfo=datetime.timezone.utc),
                    depth=len(path.parts) - student_at - 1,
                    resubmission=int(match["resubmission"] or 0),
                    read=_zip_reader(archive, info.filename),
                )
            )
    result.renamed = roster.renamed()
    return _settle(candidates, submitted, result)
