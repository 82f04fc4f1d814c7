"""The clean run's hidden draws: a secret seed per submission and test cell, and who was graded with which.

A hidden call runs in the clean run alone, its ``seed`` replaced by one nobody outside the grader
can know (``secret_seed``): an HMAC, under the course's own key (``.hidden_seed_key`` in the course
root, never in a sandbox), of the student, the notebook, the SHA-256 of the submitted bytes
(``submission_digest``) and the test cell. A regrade of the same bytes draws the same hidden
scenarios, a resubmission new ones. ``reports/hidden_draws.log`` names the draw family of each
graded notebook (``seed_family``: a different HMAC message, nothing of the seeds). Standard library
only: ``course.py`` makes the course key with it before grading.

A grading worker of another machine (``many_machines``) never holds the course key: the coordinator
computes the seeds and families of the one submission it sends (``seeds_for``) and the worker writes
them to ``GIVEN_SEEDS_FILE`` in its own course root (never in a sandbox); where that file exists,
``secret_seed`` and ``seed_family`` read it and never make or read a key. A name it lacks is an
error, never a seed drawn some other way (the draw would differ from ``course.py grade``'s).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from pathlib import Path

SECRET_KEY_FILE = ".hidden_seed_key"
GIVEN_SEEDS_FILE = ".hidden_seeds_given.json"  # a worker's: one submission's seeds, from the coordinator


class SeedNotGiven(KeyError):
    """A worker was asked for a seed its coordinator did not send: grading it would draw another scenario."""


def _given(root: Path) -> dict | None:
    path = root / GIVEN_SEEDS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _given_value(given: dict, table: str, names: tuple[str, ...]):
    key = "/".join(names)
    if key not in given[table]:
        raise SeedNotGiven(
            f"the coordinator sent no hidden {table[:-1]} for {key}: this worker's course differs from the "
            "coordinator's (update it), so it does not grade this submission"
        )
    return given[table][key]


def ensure_course_key(root: Path) -> None:
    """Make the course key before grading starts (one key, not one per parallel process); a worker with
    given seeds has none and needs none."""
    if _given(root) is None:
        _course_key(root)


def _course_key(root: Path) -> bytes:
    """The course's secret key, made once per course root (``.hidden_seed_key``, never in a sandbox)."""
    key_file = root / SECRET_KEY_FILE
    if not key_file.exists():
        key_file.write_text(secrets.token_hex(32))
        key_file.chmod(0o600)
    return key_file.read_text().strip().encode()


def secret_seed(root: Path, *names: str) -> int:
    """A seed nobody outside the grader can know: HMAC of the names under the course's own key.

    The names include the submitted notebook's digest (``submission_digest``): a resubmission draws
    new hidden scenarios, and a regrade of the same bytes the same ones. No visible seed reproduces them.
    """
    given = _given(root)
    if given is not None:
        return int(_given_value(given, "seeds", names))
    digest = hmac.new(_course_key(root), "/".join(names).encode(), hashlib.sha256)
    return int(digest.hexdigest(), 16) % 2**31  # numpy and torch seeds fit in 31 bits


def submission_digest(path: Path) -> str:
    """The submitted notebook's SHA-256: what makes its hidden draw its own."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def seed_family(root: Path, *names: str) -> str:
    """A short public name for the draw of one submission (``reports/hidden_draws.log``): equal names,
    equal hidden scenarios; it tells nothing of the seeds themselves (a different HMAC message)."""
    given = _given(root)
    if given is not None:
        return str(_given_value(given, "families", names))
    return hmac.new(_course_key(root), ("family/" + "/".join(names)).encode(), hashlib.sha256).hexdigest()[:12]


def seeds_for(root: Path, submission: tuple[str, str, str, str], grade_ids: list[str]) -> dict:
    """What a worker needs to draw one submission's hidden scenarios as this course would, and no more:
    ``submission`` is (student, assignment, notebook, digest); the test cells' seeds and the family."""
    return {
        "seeds": {"/".join((*submission, cell)): secret_seed(root, *submission, cell) for cell in grade_ids},
        "families": {"/".join(submission): seed_family(root, *submission)},
    }


HIDDEN_DRAWS_LOG = Path("reports") / "hidden_draws.log"


def log_hidden_draw(root: Path, ids: dict, digest: str, family: str) -> None:
    """One line per graded notebook: who, which submitted bytes, which family of hidden draws."""
    import datetime

    path = root / HIDDEN_DRAWS_LOG
    path.parent.mkdir(exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    fields = [now, *(str(ids.get(key)) for key in ("student", "assignment", "notebook")), digest[:16], family]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\t".join(fields) + "\n")


def with_secret_seeds(calls: list[dict], seed: int) -> list[dict]:
    """The hidden calls' seeds replaced by the secret one (the clean run's own hidden scenarios)."""
    return [
        {**call, "kwargs": {**call["kwargs"], "seed": seed}} if call["hidden"] and "seed" in call["kwargs"] else call
        for call in calls
    ]
