"""nbgrader's own process, as this course runs it: set up while nbgrader loads ``nbgrader_config.py``.

Both are about nbgrader's internals, measured on this course, never about a submission.

Start-up costs that do not change during a grading run, paid once (``cache_schema_version_lookup``):
nbgrader checks the gradebook's schema version every time it opens the gradebook, by running
``alembic heads`` in a subprocess (about a second on a 2-core machine). Autograding one
notebook opens the gradebook around ten times (the converter, OverwriteCells, RestoreCellRoles,
SaveAutoGrades, ...), so most of a small notebook's grading time went there. The answer is the
version of the installed nbgrader, which cannot change while the process runs: cache it.

Known harmless messages of nbgrader's own processes, silenced by exact message, nothing else
(``silence_known_noise``; it runs in the nbgrader process and in ``course.py``, which loads the
same configuration):

* SQLAlchemy's ``SAWarning`` "Object of type <SubmittedNotebook> not in session, add operation
  along 'Notebook.submissions' will not proceed" (and the same for ``SubmittedAssignment`` along
  ``Assignment.submissions`` and ``Student.submissions``): nbgrader's gradebook builds a submission
  while the session autoflushes; the rows are written a moment later. Three per graded submission.
* traitlets' "Config option `display_data_priority` not recognized by `<Preprocessor>`": nbconvert's
  HTML exporter configures ``NbConvertBase.display_data_priority``, which nbgrader's preprocessors
  inherit but do not declare configurable; none of them reads it. One per preprocessor and notebook
  on every feedback page.

Any other warning, SAWarning or unrecognised option (a typo in the course's configuration) is still
printed: the filters match these messages exactly.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings


def cache_schema_version_lookup() -> None:
    """Make nbgrader ask alembic for its schema head once per process (idempotent)."""
    import nbgrader.api

    lookup = nbgrader.api.get_alembic_version
    if not hasattr(lookup, "cache_info"):
        nbgrader.api.get_alembic_version = functools.cache(lookup)


SUBMISSION_AUTOFLUSH = (
    r"Object of type <Submitted(Notebook|Assignment)> not in session, add operation along "
    r"'(Notebook|Assignment|Student)\.submissions' will not proceed"
)
UNUSED_PRIORITY = re.compile(r"Config option `display_data_priority` not recognized by `\w+`\.$")
# The nbgrader applications whose logger the preprocessors' warnings go to (traitlets names an
# application's logger after its class).
APPS = ("GenerateFeedbackApp", "AutogradeApp", "NbGraderApp")


class _UnusedPriority(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not UNUSED_PRIORITY.match(record.getMessage())


_FILTER = _UnusedPriority()


def silence_known_noise() -> None:
    """Silence exactly the messages above in this process (idempotent)."""
    try:
        from sqlalchemy.exc import SAWarning
    except ImportError:  # no gradebook in this process: nothing of SQLAlchemy's to silence
        pass
    else:
        warnings.filterwarnings("ignore", message=SUBMISSION_AUTOFLUSH, category=SAWarning)
    for name in APPS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
