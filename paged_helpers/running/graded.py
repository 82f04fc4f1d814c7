"""Whether this process is a graded run: the one fact the checks and the runners both read."""

from __future__ import annotations

import os

# Set to "1" in the grading kernel (autograde/paged_grading/sandbox/kernel_guard.py), in the learner's
# process of the clean run and by the release check: a graded run treats unfinished code as a
# failure whatever the cell asked for, and trusts no result file on disk.
GRADED_ENV = "PAGED_HELPERS_GRADED"


def graded_run() -> bool:
    """True inside a graded run (nbgrader autograde, the release check)."""
    return os.environ.get(GRADED_ENV) == "1"
