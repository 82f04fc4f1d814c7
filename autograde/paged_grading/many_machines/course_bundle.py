"""The released course as a worker needs it, sent once per version through the queue's database.

What is in it: ``source/<assignment>/<assignment>.ipynb`` of every released assignment (the
instructor's notebooks, solutions and hidden tests included: nbgrader restores the test cells from
the gradebook it builds from them, and the clean run reads the hidden calls there), and
``published/`` (released solutions that later notebooks fall back on). Nothing else of the course
root: no gradebook, no course key, no student's file. A worker installs it in its own root with
``course.py``'s own release (``release_into``: nbgrader ``generate_assignment`` into the worker's
own SQLite gradebook), so its gradebook knows the same cells as the coordinator's.

Invariant: the digest names the bytes (SHA-256 of a deterministic tar: sorted entries, no times,
no owners), and every job names the digest under the coordinator's MAC: a bundle row changed in
the database is refused by its digest, whatever it says.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import tarfile
from pathlib import Path

MARK = ".bundle"  # in a worker's root: the digest of the course installed there


def _members(root: Path, assignments: list[str]) -> list[tuple[str, Path]]:
    members = [(f"notebooks/{a}.ipynb", root / "source" / a / f"{a}.ipynb") for a in sorted(assignments)]
    published = root / "published"
    if published.is_dir():
        members += [
            (f"published/{path.relative_to(published).as_posix()}", path)
            for path in sorted(published.rglob("*"))
            if path.is_file() and not path.is_symlink()
        ]
    return members


def pack(root: Path, assignments: list[str]) -> tuple[str, bytes]:
    """(digest, tar.gz bytes) of the course's released assignments and published solutions."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in _members(root, assignments):
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    data = gzip.compress(buffer.getvalue(), mtime=0)  # no time stamp: the digest names the content only
    return hashlib.sha256(data).hexdigest(), data


def installed(root: Path) -> str | None:
    mark = root / MARK
    return mark.read_text().strip() if mark.is_file() else None


def install(root: Path, digest: str, data: bytes, release) -> list[str]:
    """Put the bundle in a worker's root and release it there; returns the assignments.

    ``release(root, notebooks, assignments)`` is course.py's ``release_into`` (one nbgrader call).
    Refuses bytes whose digest is not the one the signed job named.
    """
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"the course bundle in the database is not the one the coordinator signed ({digest[:12]})")
    (root / MARK).unlink(missing_ok=True)
    unpacked = root / ".bundle-files"
    for folder in (unpacked, root / "source", root / "release", root / "published"):
        shutil.rmtree(folder, ignore_errors=True)
    (root / "gradebook.db").unlink(missing_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if (
                not member.isfile()
                or parts[0] not in ("notebooks", "published")
                or ".." in parts
                or member.name.startswith("/")
            ):
                raise ValueError(f"unexpected entry in the course bundle: {member.name!r}")
            target = unpacked / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    if (unpacked / "published").is_dir():
        shutil.copytree(unpacked / "published", root / "published")
    assignments = sorted(path.stem for path in (unpacked / "notebooks").glob("*.ipynb"))
    release(root, unpacked / "notebooks", assignments)
    (root / MARK).write_text(digest + "\n")
    return assignments
