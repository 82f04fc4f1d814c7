"""Which gradebook a course root uses: nbgrader's ``CourseDirectory.db_url`` from its config.

SQLite (``gradebook.db`` in the course root) is nbgrader's default and fine for one grading
process. Several processes writing at once (``course.py grade --jobs N``, or several machines)
need a server database such as PostgreSQL: ``c.CourseDirectory.db_url =
"postgresql://grader@dbhost/paged_attention"`` in ``nbgrader_config.py``. Everything in this
course reads the URL from there (never assumes ``gradebook.db``), so reports and tests follow
whichever database the configuration names.
"""

from __future__ import annotations

from pathlib import Path


def db_url(root: Path) -> str:
    """The gradebook URL nbgrader uses when run from ``root`` (its nbgrader_config.py, or the default)."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    config = Config()
    if (root / "nbgrader_config.py").exists():
        config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    coursedir = CourseDirectory(config=config)
    coursedir.root = str(root)
    return coursedir.db_url


def allows_concurrent_writers(url: str) -> bool:
    """SQLite serialises writers and times out under several grading processes; servers do not."""
    return not url.startswith("sqlite")


def shown(url: str) -> str:
    """The URL for logs and messages, without a password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
