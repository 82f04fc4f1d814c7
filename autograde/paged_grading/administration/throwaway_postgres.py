"""A throwaway PostgreSQL server on a Unix socket, for tests and the grading benchmark.

``course.py grade --jobs N`` needs a gradebook that takes concurrent writers. On a real course
that is a PostgreSQL server the instructor runs (see autograde/README.md); to test the same
path on one machine, ``ThrowawayPostgres`` starts Debian's PostgreSQL binaries in a temporary
folder: ``initdb`` with trust authentication, a server that listens on a socket in that
folder only (no TCP port), one database. PostgreSQL refuses to run as root, so when this
process is root the server runs as the ``postgres`` user (``runuser``); the folder is handed
to that user and removed when the server stops.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SERVER_USER = "postgres"  # Debian's account for PostgreSQL, used when we are root
ROLE = "grader"
DATABASE = "gradebook"


def find_bindir() -> Path | None:
    """Where initdb/pg_ctl live: $PG_BINDIR, else the newest /usr/lib/postgresql/<version>/bin."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def unavailable_reason() -> str | None:
    """Why a throwaway server cannot start here (None when it can)."""
    bindir = find_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        return "PostgreSQL's initdb/pg_ctl were not found (install Debian's postgresql, or set PG_BINDIR)"
    if os.geteuid() == 0 and (shutil.which("runuser") is None or _uid(SERVER_USER) is None):
        return f"running as root, but there is no {SERVER_USER!r} user or no runuser to start PostgreSQL as"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "the psycopg2 driver is not installed (pip install psycopg2-binary)"
    return None


def _uid(user: str) -> int | None:
    import pwd

    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


class ThrowawayPostgres:
    """``with ThrowawayPostgres() as server: server.url`` -> a SQLAlchemy URL nbgrader accepts."""

    def __init__(self) -> None:
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        self.bindir = find_bindir()
        # Unix socket paths are limited to ~107 bytes: keep the folder short, under /tmp.
        self.folder = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))
        self.data = self.folder / "data"
        self.as_server_user = os.geteuid() == 0

    @property
    def url(self) -> str:
        return self.url_of(DATABASE)

    def url_of(self, database: str) -> str:
        """The URL of another database of this server (``create_database``)."""
        return f"postgresql+psycopg2://{ROLE}@/{database}?host={self.folder}"

    def create_database(self, name: str) -> str:
        """One more database on this server (a grading queue beside the gradebook); its URL."""
        self._run("createdb", "-h", str(self.folder), "-U", ROLE, name)
        return self.url_of(name)

    def restart(self, pause_s: float = 0.0) -> None:
        """Stop the server at once (as a crash would: ``-m immediate``), wait, start it again on the same data."""
        import time

        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        time.sleep(pause_s)
        self._start()

    def _start(self) -> None:
        log = str(self.folder / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-o", self._options, "-l", log, "-w", "start")

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.as_server_user:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            log = self.folder / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}{tail}")

    def start(self) -> ThrowawayPostgres:
        if self.as_server_user:
            uid = _uid(SERVER_USER)
            os.chown(self.folder, uid, -1)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", ROLE, "--no-sync", "-E", "UTF8")
        self._options = f"-k {self.folder} -c listen_addresses='' -c fsync=off -c max_connections=50"
        self._start()
        self._run("createdb", "-h", str(self.folder), "-U", ROLE, DATABASE)
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
