"""The code that grades, as one digest: a worker that would grade with other code refuses the job.

Two machines give the same grade to the same bytes only if they run the same checks, the same
grader and the same configuration: the installed ``paged_helpers`` (its data included), this
package (``paged_grading``), the course's ``nbgrader_config.py``, and the versions of nbgrader,
torch, triton and numpy. The coordinator puts its digest in every job; a worker whose own differs
fails the job with a message naming what to update, so the job is retried on another worker and,
if none matches, the student is listed NOT GRADED with that reason, never graded by stale code.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path

from ..sandbox.package_copies import installed_package_dir

VERSIONED = ("nbgrader", "torch", "triton", "numpy")


def _files(folder: Path, pattern: str = "*") -> list[Path]:
    return sorted(p for p in folder.rglob(pattern) if p.is_file() and "__pycache__" not in p.parts)


@functools.cache
def course_fingerprint(config: Path) -> str:
    """SHA-256 over the grading code, the configuration ``config`` and the pinned libraries' versions."""
    digest = hashlib.sha256()
    helpers = installed_package_dir()
    grader = Path(__file__).resolve().parents[1]
    sources = [(f"paged_helpers/{p.relative_to(helpers).as_posix()}", p) for p in _files(helpers)]
    clone_data = helpers.parent / "data"
    if not (helpers / "course_data" / "files").is_dir() and clone_data.is_dir():  # an editable install
        sources += [
            (f"paged_helpers/course_data/files/{p.relative_to(clone_data).as_posix()}", p) for p in _files(clone_data)
        ]
    sources += [(f"paged_grading/{p.relative_to(grader).as_posix()}", p) for p in _files(grader, "*.py")]
    sources.append(("nbgrader_config.py", config))
    for name, path in sorted(sources):
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    for package in VERSIONED:
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{package}=={version}\0".encode())
    return digest.hexdigest()
