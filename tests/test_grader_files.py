"""The grader's own files and clocks, in isolation (fast; no nbgrader run).

* ``course.py`` refuses to grade, give feedback or report when ``nbgrader_config.py`` does not
  load or lacks the course's preprocessors (nbgrader itself would only log it and go on with its
  defaults: no sandbox, no second opinion, hidden tests in feedback);
* a configuration that changes, or a gradebook that stops being a database, while a class is
  graded stops the grader before the next nbgrader step;
* links and special files are removed from ``autograded/`` and ``feedback/`` without following them,
  and from ``submitted/`` before nbgrader's autograde copies (and so follows) them; ``collect``
  never reads a student's notebook through a link or from a pipe;
* a clean-run verdict that is already in the pipe counts, however late the grader reads it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from autograde_helpers import AUTOGRADE, collect, course, course_script, feedback_files, runners, write_config


def _refused(root, *command):
    done = course(root, *command, check=False)
    return done.returncode != 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "config, words",
    [
        ("raise RuntimeError('a typo in the config')\n", "does not load"),
        ("c = get_config()  # noqa: F821\nc.CourseDirectory.course_id = 'x'\n", "lacks"),
    ],
    ids=["does not load", "nbgrader defaults"],
)
def test_a_config_nbgrader_would_ignore_is_refused(tmp_path, config, words):
    root = tmp_path / "course"
    (root / "submitted" / "alice" / "01_block_tables").mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(config)
    for command in (["grade"], ["feedback"], ["report"]):
        refused, said = _refused(root, *command)
        assert refused and words in said and "refusing" in said.lower(), (command, said)


def _course(tmp_path):
    from paged_grading.administration import course_files

    root = tmp_path / "course"
    write_config(root)
    with sqlite3.connect(root / "gradebook.db") as db:
        db.execute("CREATE TABLE grade (id INTEGER)")
    return root, course_files


def test_a_changed_config_stops_grading(tmp_path):
    root, course_files = _course(tmp_path)
    files = course_files.CourseFiles.of(root, AUTOGRADE)
    files.check()
    (root / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\n")
    with pytest.raises(course_files.CourseFilesBroken, match="changed while the course was being graded"):
        files.check()


@pytest.mark.parametrize("replace", ["json", "link"])
def test_a_gradebook_that_is_no_longer_a_database_stops_grading(tmp_path, replace):
    root, course_files = _course(tmp_path)
    files = course_files.CourseFiles.of(root, AUTOGRADE)
    gradebook = root / "gradebook.db"
    gradebook.unlink()
    if replace == "json":
        gradebook.write_text(json.dumps({"cells": []}))
    else:
        gradebook.symlink_to(root / "nbgrader_config.py")
    with pytest.raises(course_files.CourseFilesBroken, match="gradebook.db is no longer"):
        files.check()


def test_links_are_removed_from_autograded_and_never_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the course key")
    folder = tmp_path / "autograded" / "mallory" / "02_block_allocator"
    folder.mkdir(parents=True)
    (folder / "notes.txt").symlink_to(secret)
    (folder / "real.txt").write_text("mine")
    os.mkfifo(folder / "pipe")
    removed = feedback_files.remove_odd_entries(tmp_path / "autograded")
    assert sorted(p.text for p in removed) == [
        "autograded/: a named pipe mallory/02_block_allocator/pipe (removed; never followed)",
        f"autograded/: a symbolic link mallory/02_block_allocator/notes.txt -> {secret} (removed; never followed)",
    ]
    assert all(p.ids["student"] == "mallory" and p.ids["assignment"] == "02_block_allocator" for p in removed)
    assert sorted(p.name for p in folder.iterdir()) == ["real.txt"] and secret.read_text() == "the course key"


def test_collect_never_reads_a_students_notebook_through_a_link(tmp_path):
    """On a JupyterHub the instructor collects from the students' own folders, with the instructor's
    rights: mallory's notebook, a link to alice's (which mallory cannot read) or to the course's
    solution, must not become mallory's submission."""
    assignment = "02_block_allocator"
    source = tmp_path / "class"
    for student in ("alice", "mallory"):
        (source / student).mkdir(parents=True)
    (source / "alice" / f"{assignment}.ipynb").write_text('{"alice": "her own work"}')
    (source / "mallory" / f"{assignment}.ipynb").symlink_to(source / "alice" / f"{assignment}.ipynb")
    result = collect.collect_folders(source, tmp_path / "submitted", {assignment})
    assert result.placed == [("alice", assignment)]
    assert not (tmp_path / "submitted" / "mallory").exists()
    [refused] = result.refused
    assert "mallory" in refused and "symbolic link" in refused and "never followed" in refused


def test_collect_refuses_a_named_pipe_instead_of_waiting_on_it(tmp_path):
    """A pipe named like a notebook would hang the whole class's collection on its read."""
    assignment = "02_block_allocator"
    (tmp_path / "class" / "eve").mkdir(parents=True)
    os.mkfifo(tmp_path / "class" / "eve" / f"{assignment}.ipynb")
    outcome = []

    def collect_the_class():
        outcome.append(collect.collect_folders(tmp_path / "class", tmp_path / "submitted", {assignment}))

    worker = threading.Thread(target=collect_the_class, daemon=True)
    worker.start()
    worker.join(20)
    assert outcome, "collect waited on the pipe"
    assert outcome[0].placed == [] and "named pipe" in outcome[0].refused[0]


def test_links_in_submitted_are_removed_before_nbgrader_copies_them(tmp_path, monkeypatch):
    """nbgrader's autograde copies submitted/<student>/<assignment>/ into autograded/ with
    shutil.copy, outside the sandbox: a link there would arrive as a regular file holding what it
    points at (the course key), and generate_feedback would hand that to the student."""
    assignment = "02_block_allocator"
    root = tmp_path / "course"
    write_config(root)
    (root / "source" / assignment).mkdir(parents=True)
    folder = root / "submitted" / "mallory" / assignment
    folder.mkdir(parents=True)
    (folder / f"{assignment}.ipynb").write_text("{}")
    key = root / ".hidden_seed_key"
    key.write_text("the course key")
    (folder / "notes.txt").symlink_to(key)
    os.mkfifo(folder / "pipe")
    course_py = course_script()
    seen_by_nbgrader = []

    def fake_nbgrader(root_, *args, **kwargs):
        seen_by_nbgrader.append(sorted(p.name for p in folder.iterdir()))
        return 0

    monkeypatch.setattr(course_py, "nbgrader", fake_nbgrader)
    monkeypatch.setattr(course_py.bubblewrap, "configure", lambda unsafe: None)  # nothing runs: nbgrader is faked
    course_py.main(["--root", str(root), "grade", assignment])
    assert seen_by_nbgrader == [[f"{assignment}.ipynb"]]
    assert key.read_text() == "the course key"
    log = (root / "reports" / "integrity.log").read_text()
    assert "\tmallory\t02_block_allocator\t" in log and "notes.txt" in log and "named pipe" in log


def test_a_verdict_already_in_the_pipe_counts_however_late_it_is_read():
    """The clean run finished while nbgrader's kernel was still running (sleeping cells): its
    verdict was waiting in the pipe, and used to be dropped because the budget counted from when
    the job was queued. Now what was written is always read, and the budget counts from when the
    runner began the request (its ``started`` line)."""
    results = {"test_x": {"passed": True, "message": "", "flags": []}}
    lines = [{"request": 1, "started": time.monotonic()}, {"request": 1, "results": results}]
    prints = "".join(f"print({json.dumps(json.dumps(line))})\n" for line in lines)
    script = f"import sys\n{prints}sys.stdout.flush()\n"
    runner = object.__new__(runners.StudentRunner)
    runner.process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    runner.pending = b""
    runner.process.wait()
    sent_long_ago = time.monotonic() - 1000  # queued before a kernel that took 1000 s
    try:
        assert runner.receive(1, sent_long_ago, budget=5) == results
    finally:
        runner.process.stdout.close()


def test_a_runner_that_never_answers_is_given_up_on_at_its_deadline():
    runner = object.__new__(runners.StudentRunner)
    runner.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE)
    runner.pending = b""
    started = time.monotonic()
    try:
        assert runner.receive(1, time.monotonic(), budget=0.5) is None
        assert time.monotonic() - started < 5
    finally:
        runner.process.kill()
        runner.process.wait()
        runner.process.stdout.close()


def test_a_students_budget_is_what_their_other_notebooks_left(tmp_path, monkeypatch):
    from autograde_helpers import execute

    monkeypatch.chdir(tmp_path)  # nbgrader runs in the course root; the ledger is under reports/
    runner = execute.FairExecute(student_budget=100, notebook_budget_cells=5)
    runner.cell_timeout = 120
    ids = {"student": "sam", "assignment": "03_paged_kv_cache"}
    runner._budget_start(ids, began=0.0)
    assert runner.budget == 100 and runner.budget_is_students  # 5 x 120 s, capped by the student's 100 s
    runner._budget_record({"student": "sam", "assignment": "01_block_tables"}, 70.0)
    runner._budget_record(ids, 55.0)  # this notebook's own earlier run is replaced, never counted
    runner._budget_start(ids, began=0.0)
    assert runner.budget == 30 and "100 s in all" in runner._budget_words()
    runner._budget_record({"student": "sam", "assignment": "02_block_allocator"}, 40.0)
    runner._budget_start(ids, began=0.0)
    assert runner.budget == 0
