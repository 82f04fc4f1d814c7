"""The clean run's hidden draws: a secret seed per submission and test cell, and who was graded with which.

A hidden call runs in the clean run alone, its ``seed`` replaced by one nobody outside the grader
can know (``secret_seed``): an HMAC, under the course's own key (``.hidden_seed_key`` in the course
root, never in a sandbox), of the student, the notebook, the SHA-256 of the submitted bytes
(``submission_digest``) and the test cell. A regrade of the same bytes draws the same hidden
scenarios, a resubmission new ones. ``reports/hidden_draws.log`` names the draw family of each
graded notebook (``seed_family``: a different HMAC message, nothing of the seeds). Standard library
only: ``course.py`` makes the course key with it before grading.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

SECRET_KEY_FILE = ".hidden_seed_key"


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
    digest = hmac.new(_course_key(root), "/".join(names).encode(), hashlib.sha256)
    return int(digest.hexdigest(), 16) % 2**31  # numpy and torch seeds fit in 31 bits


def submission_digest(path: Path) -> str:
    """The submitted notebook's SHA-256: what makes its hidden draw its own."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def seed_family(root: Path, *names: str) -> str:
    """A short public name for the draw of one submission (``reports/hidden_draws.log``): equal names,
    equal hidden scenarios; it tells nothing of the seeds themselves (a different HMAC message)."""
    return hmac.new(_course_key(root), ("family/" + "/".join(names)).encode(), hashlib.sha256).hexdigest()[:12]


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
