"""Known harmless messages of nbgrader's own processes, silenced by exact message; nothing else.

``install()`` runs in the nbgrader process (``nbgrader_config.py`` calls it while nbgrader loads its
configuration) and in ``course.py`` (which loads the same file). Two kinds of noise, both measured
on this course and both about nbgrader's internals, not about any submission:

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

import logging
import re
import warnings

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


def install() -> None:
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
