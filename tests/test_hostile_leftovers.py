"""Nothing a submission leaves behind reaches the grader, the class or another student.

One small class, graded through the real pipeline (``course.py collect / grade / feedback /
report``, bubblewrap, the second opinion), notebook 02 only: honest control students beside
submissions that plant links to the course's secrets in their working folder, replace their own
autograded notebook with links to the gradebook, the config and another student's work, print
every file they can read and IPython's input history rot13-, base64- and reverse-encoded, sleep
through the time budget, and (graded after all of them) a one-line monkeypatch that only works if
the grader fell back to nbgrader's defaults. Each test below asserts one promise:

* no secret (course key, solution, hidden test, config, gradebook, another's notebook) in any
  feedback file, in any of those encodings;
* every other student's files and scores unchanged, the class graded to the end;
* the grader's files intact (config, gradebook, course key, source);
* the cheated parts scored 0, and the trick named in ``reports/integrity.log``.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from autograde_helpers import (
    autograded_notebook,
    cell_of,
    course,
    graded_course,
    insert_cell_after,
    instructor,
    released,
    scores_of,
    secret_seeds,
    write_submission,
)

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]

A = "02_block_allocator"
TEST = "test_block_allocator"
SOLUTION = "block_allocator"
FULL = 5.0  # notebook 02's autograded points (test_block_allocator)
TIMEOUT = 15
BUDGET_CELLS = 2  # a notebook's kernel time: 2 x 15 s

# Each attacking cell builds its targets from its own working folder, as a real attack would:
# autograded/<student>/<assignment>/ -> the course root three levels up.
ROOT_FROM_CWD = "import os, pathlib\nroot = pathlib.Path(os.getcwd()).parents[2]\n"

LINKS_TO_SECRETS = ROOT_FROM_CWD + f"""\
targets = {{
    "key-notes.txt": root / ".hidden_seed_key",
    "solution-notes.txt": root / "source" / "{A}" / "{A}.ipynb",
    "grades-notes.txt": root / "gradebook.db",
    "config-notes.txt": root / "nbgrader_config.py",
    "classmate-notes.txt": root / "submitted" / "honest_a" / "{A}" / "{A}.ipynb",
    "classmate-graded.txt": root / "autograded" / "honest_a" / "{A}" / "{A}.ipynb",
}}
for name, target in targets.items():
    os.symlink(target, name)
print("planted", len(targets), "links")
"""

WRITE_THROUGH = ROOT_FROM_CWD + f"""\
mine = pathlib.Path("{A}.ipynb")
if mine.exists() or mine.is_symlink():
    mine.unlink()
os.symlink(root / "gradebook.db", mine)
os.symlink(root / "nbgrader_config.py", "{A}.html")
classmate = root / "submitted" / "honest_a" / "{A}" / "{A}.ipynb"
for target in (root / "gradebook.db", root / "nbgrader_config.py", classmate):
    try:
        open(target, "a").write("# overwritten")
        print("WROTE", target)
    except OSError as error:
        print("refused", type(error).__name__)
"""

ENCODE_EVERYTHING = ROOT_FROM_CWD + """\
import base64, codecs
def leak(label, text):
    print(label, "rot13", codecs.encode(text, "rot13"))
    print(label, "b64", base64.b64encode(text.encode()).decode())
    print(label, "rev", text[::-1])
readable = []
for folder in (pathlib.Path.cwd(), root):
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                readable.append((str(path), path.read_text(errors="replace")[:20000]))
        except OSError:
            pass
for path, text in readable:
    leak(path, text)
leak("history", "\\n".join(In))
"""

SLEEPS = "import time\ntime.sleep(12)\nprint('slept')\n"

MONKEYPATCH = """\
import paged_helpers as ph
ph.checks.check_block_allocator = lambda *args, **kwargs: None
"""


def _hidden_lines() -> list[str]:
    source = instructor(A).cells[cell_of(instructor(A), TEST)].source
    lines, inside = [], False
    for line in source.splitlines():
        if "BEGIN HIDDEN TESTS" in line:
            inside = True
        elif "END HIDDEN TESTS" in line:
            inside = False
        elif inside and line.strip():
            lines.append(line.strip())
    assert lines, "notebook 02's test cell has no hidden test: update this test"
    return lines


def _right_as_a_student_has_it():
    """The release with the instructor's solution typed in: what a student submits, no hidden tests."""
    notebook = released(A)
    solution = instructor(A).cells[cell_of(instructor(A), SOLUTION)].source
    notebook.cells[cell_of(notebook, SOLUTION)].source = solution
    return notebook


def _submissions():
    right = _right_as_a_student_has_it()
    after_test = lambda source: insert_cell_after(right, TEST, source)  # noqa: E731
    sleepy = right
    for _ in range(3):
        sleepy = insert_cell_after(sleepy, TEST, SLEEPS)
    return {
        "honest_a": right,
        "honest_z": right,  # graded after every attacker
        "linker": after_test(LINKS_TO_SECRETS),
        "overwriter": after_test(WRITE_THROUGH),
        "encoder": after_test(ENCODE_EVERYTHING),
        "sleeper": sleepy,
        "zz_patcher": insert_cell_after(released(A), SOLUTION, MONKEYPATCH),  # nothing done
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    root = graded_course(
        "hostile-leftovers",
        **{
            "FairExecute.timeout": TIMEOUT,
            "FairExecute.responsive_grace": 5,
            "FairExecute.notebook_budget_cells": BUDGET_CELLS,
            "SecondOpinion.timeout": TIMEOUT,
        },
    )
    folder = tmp_path_factory.mktemp("class")
    for student, notebook in _submissions().items():
        write_submission(folder, student, {A: notebook})
    course(root, "collect", str(folder))
    secret_seeds.secret_seed(root, "course key")  # the course key exists before grading, as in a course
    secrets = {
        "key": root / ".hidden_seed_key",
        "config": root / "nbgrader_config.py",
        "source": root / "source" / A / f"{A}.ipynb",
    }
    before = {name: _digest(path) for name, path in secrets.items()}
    submitted_before = {p: _digest(p) for p in (root / "submitted").rglob("*.ipynb")}
    graded = course(root, "grade", A, check=False)
    feedback = course(root, "feedback", A, check=False)
    report = course(root, "report", check=False)
    return {
        "root": root,
        "graded": graded,
        "feedback": feedback,
        "report": report,
        "before": before,
        "secrets": secrets,
        "submitted_before": submitted_before,
    }


def _feedback_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "feedback").rglob("*") if not p.is_dir())


def test_the_class_is_graded_to_the_end(hostile_class):
    root = hostile_class["root"]
    for step in ("graded", "feedback", "report"):
        assert hostile_class[step].returncode == 0, hostile_class[step].stdout + hostile_class[step].stderr
    scores = scores_of(root)
    students = set(_submissions())
    assert {student for student, _ in scores} == students
    for student in students:
        assert (root / "feedback" / student / A / f"{A}.html").is_file(), student


def test_honest_and_attacking_work_scores_what_it_earned(hostile_class):
    scores = scores_of(hostile_class["root"])
    for student in ("honest_a", "honest_z", "linker", "overwriter", "encoder", "sleeper"):
        assert scores[(student, A)][TEST] == (FULL, FULL), (student, scores[(student, A)])
    # With the config intact, the long-defeated monkeypatch meets the real check: nothing done, 0.
    assert scores[("zz_patcher", A)][TEST] == (0.0, FULL)


def test_the_graders_files_are_intact(hostile_class):
    root, before = hostile_class["root"], hostile_class["before"]
    for name, path in hostile_class["secrets"].items():
        assert not path.is_symlink() and _digest(path) == before[name], f"{name} changed"
    with sqlite3.connect(root / "gradebook.db") as db:  # still the SQLite gradebook, every grade in it
        assert db.execute("SELECT count(*) FROM grade").fetchone()[0] >= len(_submissions())
    for path, digest in hostile_class["submitted_before"].items():
        assert not path.is_symlink() and _digest(path) == digest, f"{path} changed"
    for path in (root / "autograded").rglob("*"):
        assert not path.is_symlink(), f"a link in autograded/: {path}"
    assert autograded_notebook(root, "overwriter", A).cells, "the attacker's graded notebook is the grader's"


def _decoded_forms(text: str) -> list[str]:
    """The feedback text as it is, rot13-decoded, reversed, and every base64 blob in it decoded."""
    forms = [text, codecs.decode(text, "rot13"), text[::-1]]
    for blob in re.findall(r"[A-Za-z0-9+/=]{16,}", text):
        try:
            forms.append(base64.b64decode(blob + "=" * (-len(blob) % 4)).decode(errors="replace"))
        except ValueError:
            continue
    return forms


def test_no_secret_in_any_feedback_file_in_any_encoding(hostile_class):
    root = hostile_class["root"]
    key = (root / ".hidden_seed_key").read_text().strip()
    secrets = {"the course key": key, **{f"hidden test {line!r}": line for line in _hidden_lines()}}
    secrets["the config's preprocessors"] = "paged_grading.preprocessors.second_opinion.StartSecondOpinion"
    files = _feedback_files(root)
    assert files
    for path in files:
        assert not path.is_symlink() and path.is_file(), f"{path} is not a regular file"
        text = path.read_bytes().decode(errors="replace")
        for form in _decoded_forms(text):
            for what, secret in secrets.items():
                assert secret not in form, f"{what} reached {path.relative_to(root)}"
        # The guard's lines are in the kernel's own history (they are no secret: the copy they name
        # is mounted read-only there), but feedback never shows them as they are.
        assert "kernel_guard.py" not in text and "fresh_helpers" not in text, path
    linker = {p.name for p in (root / "feedback" / "linker" / A).iterdir()}
    assert linker == {f"{A}.html", "timestamp.txt"}, f"the planted links came back as files: {linker}"


def test_every_trick_is_named_in_the_integrity_log(hostile_class):
    log = (hostile_class["root"] / "reports" / "integrity.log").read_text()
    by_student = {}
    for line in log.splitlines():
        fields = line.split("\t")
        by_student.setdefault(fields[1], []).append(fields[4])
    linker = " ".join(by_student.get("linker", []))
    for name in ("key-notes.txt", "solution-notes.txt", "grades-notes.txt", "config-notes.txt", "classmate-notes.txt"):
        assert f"a symbolic link {name} ->" in linker, (name, linker)
    overwriter = " ".join(by_student.get("overwriter", []))
    assert f"a symbolic link {A}.ipynb -> " in overwriter and "gradebook.db" in overwriter, overwriter
    assert any(kind.startswith("time:") for kind in by_student.get("sleeper", [])), by_student.get("sleeper")
    for honest in ("honest_a", "honest_z", "encoder"):
        assert honest not in by_student, (honest, by_student.get(honest))
    assert "integrity findings" in hostile_class["report"].stdout
    assert "leftover" in hostile_class["report"].stdout and "linker" in hostile_class["report"].stdout


def test_sleeping_cells_lose_only_their_own_time(hostile_class):
    root = hostile_class["root"]
    graded = autograded_notebook(root, "sleeper", A)
    texts = [
        "".join(o.get("evalue", "") + o.get("text", "") for o in cell.outputs)
        for cell in graded.cells
        if cell.cell_type == "code" and "time.sleep(12)" in cell.source
    ]
    assert len(texts) == 3
    assert texts[0].strip() == "slept", texts
    assert "grading time" in texts[-1] and "was spent" in texts[-1], texts[-1]
    used = float((root / "reports" / "grading-time" / "sleeper" / A).read_text())
    assert used < TIMEOUT * BUDGET_CELLS + 10, used


def test_the_overwriters_writes_landed_nowhere_real(hostile_class):
    """Inside the sandbox the course's paths either do not exist or (a course under /tmp) lie in the
    sandbox's own throwaway /tmp: whatever the kernel wrote there, no real file changed."""
    root = hostile_class["root"]
    classmate = (root / "submitted" / "honest_a").rglob("*.ipynb")
    for path in (root / "gradebook.db", root / "nbgrader_config.py", *classmate):
        assert b"# overwritten" not in path.read_bytes(), path
    assert shutil.which("bwrap"), "this test needs bubblewrap"
