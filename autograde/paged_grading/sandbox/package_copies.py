"""The installed ``paged_helpers`` as grading found it, and the verified copies of it that test cells import.

``HelperSnapshot`` reads every file of the installed package into memory once, when grading starts
(the instructor's installed copy is the reference), and compiles its modules once. For each
notebook it writes a pristine copy: the package, ``kernel_guard.py`` and a hash manifest of sources
and bytecode, in a new private folder inside ``copies_folder``, which the notebook's sandbox binds
read-only. The guard's preamble in every test cell verifies that copy and imports the package from
it (``preprocessors.guard``, ``kernel_guard``). After the notebook, ``changes_on_disk`` says which
files of the installed package a learner changed, added or removed, and ``restore`` puts them back.
Standard library only: the sandbox asks here where the package is without importing nbgrader.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

from . import kernel_guard

PACKAGE = kernel_guard.PACKAGE


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed_package_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{PACKAGE} is not installed in the Python that runs nbgrader")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


# Where an installed paged_helpers keeps the course's data/ (see setup.py and paged_helpers.course_data).
_INSTALLED_DATA = "course_data/files"


def _package_files(package_dir: Path) -> dict[str, bytes]:
    """Every file of the package; from a clone (an editable install), also the clone's data/ folder,
    placed where an installed package keeps it, so that a copy of the package finds its data."""
    files = {
        path.relative_to(package_dir).as_posix(): path.read_bytes()
        for path in sorted(package_dir.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    clone_data = package_dir.parent / "data"
    if not (package_dir / _INSTALLED_DATA).is_dir() and clone_data.is_dir():
        files.update(
            {
                f"{_INSTALLED_DATA}/{path.relative_to(clone_data).as_posix()}": path.read_bytes()
                for path in sorted(clone_data.rglob("*"))
                if path.is_file()
            }
        )
    return files


def _bytecode(files: dict[str, bytes]) -> dict[str, bytes]:
    """Compiled modules for the pristine copies, made once: ``__pycache__/NAME.TAG.pyc`` -> pyc bytes.

    Every test cell imports the package afresh from a copy the sandbox sees read-only, so without
    these each cell would compile every module it imports from source again. They are checked-hash
    pycs (valid for their source whatever its timestamp) and are in the manifest like the sources.
    """
    from importlib import _bootstrap_external as external
    from importlib.util import cache_from_source, source_hash

    compiled = {}
    for relative, data in files.items():
        if not relative.endswith(".py"):
            continue
        code = compile(data, relative, "exec", dont_inherit=True)
        pyc = Path(cache_from_source(relative)).as_posix()
        compiled[pyc] = bytes(external._code_to_hash_pyc(code, source_hash(data), checked=True))
    return compiled


def _on_disk(package_dir: Path, relative: str) -> Path:
    """Where the snapshot's file ``relative`` lives: data taken from a clone goes back to the clone's data/."""
    prefix = f"{_INSTALLED_DATA}/"
    if relative.startswith(prefix) and not (package_dir / _INSTALLED_DATA).is_dir():
        return package_dir.parent / "data" / relative.removeprefix(prefix)
    return package_dir / relative


class HelperSnapshot:
    """The installed package's files as bytes, taken once; the reference for every notebook."""

    def __init__(self, package_dir: Path):
        self.package_dir = package_dir
        self.files = _package_files(package_dir)
        self.bytecode = _bytecode(self.files)
        self.manifest = {
            rel: _sha256(data)
            for rel, data in [*self.files.items(), *self.bytecode.items()]
            if rel.endswith((".py", ".pyc"))
        }
        self.written: list[Path] = []  # pristine copies not yet cleaned up
        self._copies: Path | None = None

    @property
    def copies_folder(self) -> Path:
        """The one folder every pristine copy of this grader process is written in (a sandbox that
        binds it sees the copies written after it started), removed when the process ends."""
        if self._copies is None:
            self._copies = Path(tempfile.mkdtemp(prefix="paged-grading-"))
            atexit.register(shutil.rmtree, self._copies, ignore_errors=True)
        return self._copies

    def write_pristine_copy(self) -> tuple[Path, str]:
        """A new private folder with the package, kernel_guard.py and manifest.json; and its hash."""
        root = Path(tempfile.mkdtemp(prefix="notebook-", dir=self.copies_folder))
        self.written.append(root)
        for relative, data in [*self.files.items(), *self.bytecode.items()]:
            target = root / PACKAGE / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        shutil.copyfile(kernel_guard.__file__, root / "kernel_guard.py")
        manifest_bytes = json.dumps(self.manifest, sort_keys=True, indent=1).encode()
        (root / "manifest.json").write_bytes(manifest_bytes)
        return root, _sha256(manifest_bytes)

    def changes_on_disk(self) -> list[str]:
        """Files of the installed package that differ from the snapshot (changed, added, removed)."""
        now = _package_files(self.package_dir)
        return sorted(rel for rel in set(now) | set(self.files) if now.get(rel) != self.files.get(rel))

    def restore(self, changed: list[str]) -> None:
        for relative in changed:
            path = _on_disk(self.package_dir, relative)
            if relative in self.files:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(self.files[relative])
            elif path.is_file():
                path.unlink()
        for cache in self.package_dir.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)

    def clean_up(self) -> None:
        while self.written:
            shutil.rmtree(self.written.pop(), ignore_errors=True)


@functools.cache
def snapshot_for_this_grading_run() -> HelperSnapshot:
    """One snapshot per grader process, taken before the first student's code runs."""
    return HelperSnapshot(installed_package_dir())
