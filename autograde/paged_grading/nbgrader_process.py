"""Start-up costs of nbgrader that do not change during a grading run, paid once.

nbgrader checks the gradebook's schema version every time it opens the gradebook, by running
``alembic heads`` in a subprocess (about a second on a 2-core machine). Autograding one
notebook opens the gradebook around ten times (the converter, OverwriteCells, RestoreCellRoles,
SaveAutoGrades, ...), so most of a small notebook's grading time went there. The answer is the
version of the installed nbgrader, which cannot change while the process runs: cache it.
"""

from __future__ import annotations

import functools


def cache_schema_version_lookup() -> None:
    """Make nbgrader ask alembic for its schema head once per process (idempotent)."""
    import nbgrader.api

    lookup = nbgrader.api.get_alembic_version
    if not hasattr(lookup, "cache_info"):
        nbgrader.api.get_alembic_version = functools.cache(lookup)
