"""The learner's workspace: the student release of every notebook, in a folder the learner owns.

``make lab`` (through ``course.py workspace``) releases ``notebooks/`` with nbgrader exactly as
a class receives it (solutions and hidden tests removed) and copies the released notebooks into
``workspace/``. The learner's edits are never overwritten:

* ``workspace/.generated.json`` records, per notebook, the SHA-256 of the copy that was put
  there (and of the instructor source it came from). The build folder remembers which sources
  it released (``released_from.json``), so unchanged notebooks are not released again.
* A notebook that is missing is added. A notebook whose bytes still equal the recorded copy
  (never edited, never run) is replaced when the release changed. Anything else is the
  learner's: left alone, with a line saying how to get a fresh copy (move it aside, run again).

This module only moves files; releasing is ``course.py``'s job (``release_into``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

MANIFEST = ".generated.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(workspace: Path) -> dict[str, dict[str, str]]:
    path = workspace / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}  # an unreadable record: every existing notebook counts as the learner's


def write_manifest(workspace: Path, manifest: dict[str, dict[str, str]]) -> None:
    (workspace / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


RELEASED_FROM = "released_from.json"


def stale_sources(build: Path, sources: dict[str, Path], released: dict[str, Path]) -> list[str]:
    """Notebooks whose release in ``build`` is missing or was made from another version of the source."""
    record_path = build / RELEASED_FROM
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    return [
        name
        for name, source in sources.items()
        if not released[name].is_file() or record.get(name) != sha256(source)
    ]


def record_release(build: Path, sources: dict[str, Path]) -> None:
    """Remember which source each release in ``build`` was made from (see ``stale_sources``)."""
    record = {name: sha256(source) for name, source in sources.items()}
    (build / RELEASED_FROM).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Placed:
    name: str
    action: str  # "added", "updated", "unchanged", "kept"
    newer: bool = False  # kept: a newer release exists than the copy the learner started from


def sync(workspace: Path, sources: dict[str, Path], released: dict[str, Path]) -> list[Placed]:
    """Copy released notebooks into ``workspace`` without touching one the learner changed."""
    workspace.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(workspace)
    placed = []
    for name, release in released.items():
        target = workspace / f"{name}.ipynb"
        new_digest = sha256(release)
        record = manifest.get(name)
        if not target.exists():
            action = "added"
        elif record is not None and sha256(target) == record["released_sha256"]:
            action = "unchanged" if record["released_sha256"] == new_digest else "updated"
        else:
            newer = record is None or record["released_sha256"] != new_digest
            placed.append(Placed(name, "kept", newer))
            continue
        if action != "unchanged":
            shutil.copyfile(release, target)
        manifest[name] = {"released_sha256": new_digest, "source_sha256": sha256(sources[name])}
        placed.append(Placed(name, action))
    write_manifest(workspace, manifest)
    return placed


def describe(workspace: Path, placed: list[Placed]) -> list[str]:
    """What happened, for the learner, one line per notebook that is not simply unchanged."""
    lines = []
    for item in placed:
        if item.action in ("added", "updated"):
            lines.append(f"  {item.action}: {item.name}.ipynb")
        elif item.action == "kept" and item.newer:
            lines.append(
                f"  kept your {item.name}.ipynb; the course has a newer version of it. For a fresh copy: "
                f"rename or delete {workspace / (item.name + '.ipynb')}, then run `make lab` again."
            )
    kept = sum(item.action == "kept" for item in placed)
    lines.append(
        f"workspace {workspace}: {len(placed)} notebooks, {kept} of them yours (changed since they were "
        "put there, so never overwritten; for a fresh copy of one, rename or delete it and run `make lab` again)."
    )
    return lines
