"""The grader's own files, checked before and between nbgrader steps: config, gradebook, what nbgrader copies.

nbgrader reads ``nbgrader_config.py`` from the current folder and, when the file fails to load,
only logs the error and goes on with its defaults: no sandbox, no guard, no second opinion, no
secret seeds, hidden tests in feedback. So ``course.py`` loads the configuration itself first
(``CourseFiles.check``) and refuses to grade, give feedback or report unless it loaded and names
the course's preprocessors (``REQUIRED``). It then keeps fingerprints of the configuration and
checks them, and that the gradebook is still a database, before every nbgrader step: if either
changed while grading, it stops instead of grading anyone on defaults or into a broken gradebook.

No sandboxed process can reach these files (``sandbox.bubblewrap``); these checks make sure that stays
true through every step that runs outside the sandbox, and fail loudly if it ever does not.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

CONFIG = "nbgrader_config.py"

# What makes grading this course safe and fair; a configuration without any of it is refused.
REQUIRED = {
    ("Autograde", "sanitize_preprocessors"): [
        "paged_grading.preprocessors.sanitize.RestoreCellRoles",
        "paged_grading.preprocessors.guard.GuardChecks",
    ],
    ("Autograde", "autograde_preprocessors"): [
        "paged_grading.preprocessors.second_opinion.StartSecondOpinion",
        "paged_grading.preprocessors.execute.FairExecute",
        "paged_grading.preprocessors.guard.GuardAudit",
        "paged_grading.preprocessors.second_opinion.SecondOpinion",
    ],
    ("GenerateFeedback", "preprocessors"): [
        "paged_grading.preprocessors.outputs.StripGuard",
        "paged_grading.preprocessors.hidden_tests.HideHiddenTests",
        "nbgrader.preprocessors.ClearHiddenTests",
        "paged_grading.preprocessors.outputs.HideTestTracebacks",
    ],
}
SQLITE_HEADER = b"SQLite format 3\x00"


class CourseFilesBroken(SystemExit):
    """The configuration or the gradebook is not what grading needs: say so and stop."""


def _fingerprint(path: Path) -> str:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "absent"
    if not stat.S_ISREG(info.st_mode):
        return f"not a regular file (mode {oct(info.st_mode)})"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_config(root: Path):
    """The course's configuration, loaded as nbgrader loads it; raises CourseFilesBroken if it does not."""
    from traitlets.config.loader import PyFileConfigLoader

    path = root / CONFIG
    if path.is_symlink() or not path.is_file():
        raise CourseFilesBroken(f"{path} is missing or not a regular file: refusing to run nbgrader on its defaults.")
    try:
        config = PyFileConfigLoader(CONFIG, path=str(root)).load_config()
    except Exception as error:  # noqa: BLE001 - any failure means nbgrader would use its defaults
        raise CourseFilesBroken(
            f"{path} does not load ({type(error).__name__}: {str(error)[:300]}). nbgrader would go on with its "
            "defaults (no sandbox, no second opinion, hidden tests in feedback): refusing. Restore the file "
            "(git checkout, or course.py's default: a file that loads autograde/nbgrader_config.py)."
        ) from None
    for (section, trait), needed in REQUIRED.items():
        have = [str(x) for x in config.get(section, {}).get(trait, [])]
        missing = [name for name in needed if name not in have]
        if missing:
            raise CourseFilesBroken(
                f"{path} loaded, but c.{section}.{trait} lacks {', '.join(missing)}: grading without them is "
                "not safe (see autograde/README.md). Refusing."
            )
    return config


class CourseFiles:
    """Fingerprints of the configuration files and the gradebook's state, taken once and re-checked."""

    def __init__(self, root: Path, config_files: list[Path]):
        self.root = root
        self.config_files = config_files
        load_config(root)
        self.fingerprints = {path: _fingerprint(path) for path in config_files}

    @classmethod
    def of(cls, root: Path, here: Path) -> CourseFiles:
        files = [root / CONFIG]
        if (here / CONFIG).resolve() != (root / CONFIG).resolve():
            files.append(here / CONFIG)  # the file a course root elsewhere loads with load_subconfig
        return cls(root, files)

    def check(self) -> None:
        """Raise CourseFilesBroken if a configuration file changed or the SQLite gradebook is not one."""
        for path, before in self.fingerprints.items():
            if _fingerprint(path) != before:
                raise CourseFilesBroken(
                    f"{path} changed while the course was being graded: stopping before nbgrader reads it. "
                    "Restore it, then grade again (and look at reports/integrity.log)."
                )
        gradebook = self.root / "gradebook.db"
        try:
            info = gradebook.lstat()
        except FileNotFoundError:
            return  # a PostgreSQL gradebook, or none yet (nbgrader makes it)
        if not stat.S_ISREG(info.st_mode):
            raise CourseFilesBroken(
                f"{gradebook} is no longer a regular file: stopping before nbgrader writes through it."
            )
        if info.st_size:
            fd = os.open(gradebook, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
            if header != SQLITE_HEADER:
                raise CourseFilesBroken(
                    f"{gradebook} is no longer an SQLite database: stopping so that no grade is lost. "
                    "Restore it from a backup."
                )
