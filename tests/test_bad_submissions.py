"""Fair grading under bad submissions: one class, one real grading run, every case graded as described.

All submissions are notebook 02 (the allocator: one 6-point test cell, a check that takes a
second), built from the instructor source (right) or the release (nothing done) with one
edit each. One ``course.py grade`` runs over the whole class; each test then reads the
gradebook, the autograded notebook or the integrity log. The per-cell timeout is shortened
to keep the run short.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from autograde_helpers import (
    ROOT,
    autograded_notebook,
    cell_of,
    course,
    errors_of,
    feedback_text,
    graded_course,
    insert_cell_after,
    instructor,
    isolated_site,
    manual_scores,
    released,
    replace_in_cell,
    scores_of,
    write_submission,
)

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]

A = "02_block_allocator"
TEST = "test_block_allocator"
SOLUTION = "block_allocator"
FULL = 5.0  # notebook 02's autograded points (test_block_allocator)
TIMEOUT = 15

PATCHED = "patched: the check now passes anything"

EDIT_CHECK_ON_DISK = f"""\
import importlib
import pathlib
import paged_helpers.checks.allocator.check as target
path = pathlib.Path(target.__file__)
stub = (
    "from ..registry import check\\n"
    "@check(notebook='02_block_allocator', builds='BlockAllocator')\\n"
    "def check_block_allocator(*args, **kwargs):\\n    pass\\n"
)
path.write_text(stub)
importlib.reload(target)
target.check_block_allocator(None)
print({PATCHED!r})
"""

MONKEYPATCH_ATTRIBUTE = f"""\
import paged_helpers as ph
ph.checks.check_block_allocator = lambda *args, **kwargs: None
ph.checks.check_block_allocator(None)
print({PATCHED!r})
"""

MONKEYPATCH_MODULE = f"""\
import sys, types
import paged_helpers.checks.allocator as allocator_checks
import paged_helpers.checks.speaking.failure as failure
allocator_checks.check_block_allocator.__wrapped__.__code__ = (lambda *args, **kwargs: None).__code__
failure.fail = lambda *args, **kwargs: None
fake = types.ModuleType("paged_helpers.checks")
fake.check_block_allocator = lambda *args, **kwargs: None
sys.modules["paged_helpers.checks"] = fake
allocator_checks.check_block_allocator(None)
from paged_helpers.checks import check_block_allocator
check_block_allocator(None)
print({PATCHED!r})
"""

# --- tricks that beat the in-kernel guard; the sandbox or the second opinion must beat them ---
FAKE_CHECKS = """\
import sys, types
fake_checks = types.ModuleType("paged_helpers.checks")
fake_checks.check_block_allocator = lambda *args, **kwargs: print("check_block_allocator: passed")
"""

FAKE_RUNPY = (
    FAKE_CHECKS
    + """\
fake_ph = types.ModuleType("paged_helpers")
fake_ph.checks = fake_checks
fake_runpy = types.ModuleType("runpy")
def run_path(path, *args, **kwargs):
    sys.modules["paged_helpers"] = fake_ph
    sys.modules["paged_helpers.checks"] = fake_checks
    return {"fresh_helpers": lambda *args, **kwargs: fake_ph}
fake_runpy.run_path = run_path
sys.modules["runpy"] = fake_runpy
"""
)

IMPORT_HOOK = (
    FAKE_CHECKS
    + """\
import builtins
real_import = builtins.__import__
def hooked(name, globals=None, locals=None, fromlist=(), level=0):
    if name == "paged_helpers.checks":
        return fake_checks
    return real_import(name, globals, locals, fromlist, level)
builtins.__import__ = hooked
"""
)

META_PATH_FINDER = """\
import importlib.abc, importlib.machinery, sys
class PassingChecks(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "paged_helpers.checks":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader
        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return real.create_module(spec)
            def exec_module(self, module):
                real.exec_module(module)
                module.check_block_allocator = lambda *args, **kwargs: None
        spec.loader = Loader()
        return spec
sys.meta_path.insert(0, PassingChecks())
"""

THREAD_SWAPS_FILES = """\
import glob, threading, time
STUB = "def check_block_allocator(*args, **kwargs):\\n    pass\\n"
refused = []
def swap():
    for _ in range(4000):
        for path in glob.glob("/tmp/paged-grading-*/paged_helpers/checks/allocator/check.py"):
            try:
                with open(path, "w") as f:
                    f.write(STUB)
            except OSError as error:
                refused.append(error)
        time.sleep(0.002)
threading.Thread(target=swap, daemon=True).start()
"""

EXECUTE_RESULT_FIRST = f"""\
ip = get_ipython()
ip.events.register("pre_run_cell", lambda *args: ip.displayhook({FULL}))
"""

AST_TRANSFORMER = """\
import ast
class ForgiveEverything(ast.NodeTransformer):
    def visit_Module(self, node):
        handler = ast.ExceptHandler(type=ast.Name("BaseException", ast.Load()), name=None, body=[ast.Pass()])
        node.body = [ast.Try(body=node.body or [ast.Pass()], handlers=[handler], orelse=[], finalbody=[])]
        return ast.fix_missing_locations(node)
get_ipython().ast_transformers.append(ForgiveEverything())
"""

# Run inside a method the check calls: it reads the checker's local variables.
PEEK_AT_THE_CHECKER = """\
        import sys
        checker_locals = dict(sys._getframe(1).f_locals)"""

# A library function that hands the learner its own frame (not audited as the learner's
# sys._getframe): the frame's f_back, which is never audited, is the checker's.
PEEK_THROUGH_LOGGING = """\
        import logging
        checker_locals = dict(logging.currentframe().f_back.f_locals)"""

# An int subclass that says it equals everything: the check must not compare with it.
ALWAYS_EQUAL = """\
class AlwaysEqual(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__
"""

ESCAPES = f"""\
import glob, os, pathlib, site, socket, sqlite3, sys
for path in glob.glob("../../../source/*/*.ipynb") + glob.glob({str(ROOT / "notebooks")!r} + "/*.ipynb"):
    print(open(path).read())
print("visible:", [p for p in ["../../../source", "../../../gradebook.db", "../../../nbgrader_config.py",
      "../../../release", "../../zz_blank_after_the_edit", {str(ROOT / "notebooks")!r}] if os.path.exists(p)])
try:
    db = sqlite3.connect("../../../gradebook.db")
    db.execute("UPDATE grade SET manual_score = 100")
    db.commit()
    print("gradebook written")
except Exception as error:
    print("gradebook refused:", type(error).__name__)
for folder in [*site.getsitepackages(), sys.prefix]:
    try:
        pathlib.Path(folder, "zz_planted_by_a_student.pth").write_text("import sys\\n")
        print("planted in", folder)
    except OSError as error:
        print("pth refused:", type(error).__name__)
try:
    socket.create_connection(("127.0.0.1", 22), timeout=2)
    print("network reached")
except OSError as error:
    print("network refused:", type(error).__name__)
try:
    pathlib.Path("../../../nbgrader_config.py").open("a").write("c.GenerateFeedback.preprocessors = []\\n")
    print("config appended")
except OSError as error:
    print("config refused:", type(error).__name__)
"""

# The config write may "succeed" into the sandbox's own throwaway folders; the real file is checked.
ESCAPE_MARKERS = ("gradebook written", "planted in", "network reached")

IGNORE_INTERRUPTS = """\
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
"""


def _submissions() -> dict[str, tuple[nbformat.NotebookNode, float, str]]:
    """student -> (their notebook 02, the autograded points it must get, what it shows)."""
    right, blank = instructor(A), released(A)
    deleted_test = blank.copy()
    deleted_test.cells = [c for i, c in enumerate(blank.cells) if i != cell_of(blank, TEST)]
    deleted_test_right = right.copy()
    deleted_test_right.cells = [c for i, c in enumerate(right.cells) if i != cell_of(right, TEST)]
    fake_grade_cell = {
        "nbgrader": {
            "schema_version": 3,
            "grade": True,
            "locked": True,
            "solution": False,
            "grade_id": "bonus_points",
            "points": 100,
        }
    }
    return {
        "correct": (right, FULL, "the instructor's solution"),
        "release": (blank, 0.0, "the release as handed out"),
        "loop_in_solution": (
            replace_in_cell(
                right,
                SOLUTION,
                "        self.free = deque(range(num_blocks))",
                "        while True:\n            pass\n        self.free = deque(range(num_blocks))",
            ),
            0.0,
            "an infinite loop in __init__: the test cell times out",
        ),
        "loop_ignoring_interrupt": (
            insert_cell_after(right, SOLUTION, IGNORE_INTERRUPTS),
            FULL,
            "a cell that ignores the interrupt: kernel restarted, the test still graded",
        ),
        "os_exit_cell": (
            insert_cell_after(right, SOLUTION, "import os\nos._exit(1)"),
            FULL,
            "os._exit in a cell: kernel restarted, the test still graded",
        ),
        "os_exit_in_check": (
            replace_in_cell(
                right,
                SOLUTION,
                "        block = self.free.popleft()",
                "        import os\n        os._exit(3)\n        block = self.free.popleft()",
            ),
            0.0,
            "os._exit inside allocate(): the test cell dies, scores 0",
        ),
        "segfault": (
            insert_cell_after(right, SOLUTION, "import ctypes\nctypes.string_at(0)"),
            FULL,
            "a segfault in a cell: kernel restarted, the test still graded",
        ),
        "sys_exit_and_raise": (
            insert_cell_after(
                insert_cell_after(right, None, "raise ImportError('the learner broke the imports')"),
                None,
                "import sys\nsys.exit(1)",
            ),
            FULL,
            "sys.exit, then an exception, in cells before the imports",
        ),
        "edited_test_prints_passed": (
            insert_cell_after(
                replace_in_cell(
                    blank, TEST, 'check_block_allocator(BlockAllocator, unfinished="note")', "print('all tests passed')"
                ),
                TEST,
                "print('all tests passed')",
            ),
            0.0,
            "test cell replaced by a print, and another print after it: restored and run",
        ),
        "deleted_test_blank": (deleted_test, 0.0, "test cell deleted, nothing implemented: re-added and run"),
        "deleted_test_right": (
            deleted_test_right,
            FULL,
            "test cell deleted, right solution: re-added and run",
        ),
        "added_grade_cell": (
            insert_cell_after(blank, SOLUTION, "print('bonus')", metadata=fake_grade_cell),
            0.0,
            "an added cell posing as a 100-point test cell",
        ),
        "stderr_writes": (
            insert_cell_after(
                replace_in_cell(
                    right,
                    SOLUTION,
                    "        block = self.free.popleft()",
                    "        import sys\n        print('debug: allocate', file=sys.stderr)\n"
                    "        logging.getLogger('allocator').debug('allocate called')\n"
                    "        block = self.free.popleft()",
                ),
                None,
                "import logging\nlogging.basicConfig(level=logging.DEBUG, format='log: %(message)s')",
            ),
            FULL,
            "a right solution that prints and logs to stderr keeps its points",
        ),
        "monkeypatch_attribute": (
            insert_cell_after(blank, SOLUTION, MONKEYPATCH_ATTRIBUTE),
            0.0,
            "ph.checks.check_block_allocator = lambda: None",
        ),
        "monkeypatch_module": (
            insert_cell_after(blank, SOLUTION, MONKEYPATCH_MODULE),
            0.0,
            "patched __code__, failure.fail and sys.modules",
        ),
        "edit_package_on_disk": (
            insert_cell_after(blank, SOLUTION, EDIT_CHECK_ON_DISK),
            0.0,
            "rewrote the installed check module on disk",
        ),
        "zz_blank_after_the_edit": (blank, 0.0, "a blank one after the edit: the stub is gone"),
        "fake_runpy": (insert_cell_after(blank, SOLUTION, FAKE_RUNPY), 0.0, "a fake runpy in sys.modules"),
        "import_hook": (insert_cell_after(blank, SOLUTION, IMPORT_HOOK), 0.0, "a builtins.__import__ hook"),
        "meta_path_finder": (
            insert_cell_after(blank, SOLUTION, META_PATH_FINDER),
            0.0,
            "a sys.meta_path finder serving a passing check",
        ),
        "thread_swaps_files": (
            insert_cell_after(blank, SOLUTION, THREAD_SWAPS_FILES),
            0.0,
            "a thread rewriting the guard's private copy",
        ),
        "execute_result_first": (
            insert_cell_after(blank, SOLUTION, EXECUTE_RESULT_FIRST),
            0.0,
            f"an execute_result ({FULL}) emitted before the test's error",
        ),
        "ast_transformer": (
            insert_cell_after(blank, SOLUTION, AST_TRANSFORMER),
            0.0,
            "an IPython AST transformer wrapping every cell in try/except",
        ),
        "peeks_at_the_checker": (
            replace_in_cell(
                right,
                SOLUTION,
                "        block = self.free.popleft()",
                PEEK_AT_THE_CHECKER + "\n        block = self.free.popleft()",
            ),
            0.0,
            "a right allocator that reads the checker's stack frames",
        ),
        "peeks_through_logging": (
            replace_in_cell(
                right,
                SOLUTION,
                "        block = self.free.popleft()",
                PEEK_THROUGH_LOGGING + "\n        block = self.free.popleft()",
            ),
            0.0,
            "a right allocator that reads the checker's locals through logging.currentframe().f_back",
        ),
        "always_equal": (
            insert_cell_after(
                replace_in_cell(right, SOLUTION, "        return len(self.free)", "        return AlwaysEqual(0)"),
                SOLUTION,
                ALWAYS_EQUAL,
            ),
            0.0,
            "num_free returns an int subclass whose == always says True (it used to pass)",
        ),
        "capped_share": (
            replace_in_cell(
                right,
                SOLUTION,
                "        self.refs[block] += 1",
                "        self.refs[block] = min(self.refs[block] + 1, 7)",
            ),
            0.0,
            "share() stops counting at 7: the visible scenarios pass, a hidden-only scenario kind fails",
        ),
        "escapes_right": (
            insert_cell_after(right, SOLUTION, ESCAPES),
            FULL,
            "a right solution that also tries to read source/, write the gradebook, plant a .pth, "
            "use the network and edit the config: all refused, its points kept",
        ),
    }


@pytest.fixture(scope="module")
def bad_class(tmp_path_factory):
    root = graded_course(
        "bad-submissions",
        **{"FairExecute.timeout": TIMEOUT, "FairExecute.responsive_grace": 5, "SecondOpinion.timeout": TIMEOUT},
    )
    submissions = _submissions()
    folder = tmp_path_factory.mktemp("class")
    for student, (notebook, _, _) in submissions.items():
        write_submission(folder, student, {A: notebook})
    course(root, "collect", str(folder))
    done = course(root, "grade", A, check=False)
    course(root, "feedback", A)
    return root, submissions, done


def test_the_run_completes_and_grades_everyone(bad_class):
    root, submissions, done = bad_class
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scores = scores_of(root)
    assert sorted(student for student, _ in scores) == sorted(submissions)


def _cases():
    return [(student, expected) for student, (_, expected, _) in _submissions().items()]


@pytest.mark.parametrize("student,expected", _cases(), ids=[s for s, _ in _cases()])
def test_each_submission_gets_what_it_earned(bad_class, student, expected):
    root, submissions, _ = bad_class
    cells = scores_of(root)[(student, A)]
    assert set(cells) == {TEST}, f"{student}: graded cells {sorted(cells)} (an added cell must not count)"
    assert cells[TEST] == (expected, FULL), f"{student} ({submissions[student][2]})"


def test_timeouts_and_crashes_say_what_happened(bad_class):
    root = bad_class[0]
    assert any("CellTimeoutError" in e for e in errors_of(autograded_notebook(root, "loop_in_solution", A), TEST))
    assert any("KernelDied" in e for e in errors_of(autograded_notebook(root, "os_exit_in_check", A), TEST))
    for student, ename in [
        ("os_exit_cell", "KernelDied"),
        ("segfault", "KernelDied"),
        ("loop_ignoring_interrupt", "KernelUnresponsive"),
    ]:
        notebook = autograded_notebook(root, student, A)
        crashed = [c for c in notebook.cells if any(o.get("ename") == ename for o in c.get("outputs", []))]
        assert len(crashed) == 1 and not crashed[0].metadata.get("nbgrader"), student


def _outputs_text(cell) -> str:
    return "".join(o.get("text", "") + o.get("evalue", "") for o in cell.outputs)


def test_monkeypatching_meets_the_real_check_and_the_package_is_read_only(bad_class):
    root = bad_class[0]
    for student in ("monkeypatch_attribute", "monkeypatch_module", "edit_package_on_disk"):
        notebook = autograded_notebook(root, student, A)
        attack_text = _outputs_text(notebook.cells[cell_of(notebook, SOLUTION) + 1])
        if student == "edit_package_on_disk":  # the sandbox mounts the package read-only
            assert "Read-only file system" in attack_text and PATCHED not in attack_text, attack_text
        else:
            assert PATCHED in attack_text, (student, attack_text)  # the attack worked in its own cell
        messages = errors_of(notebook, TEST)
        assert any("not implemented yet" in m for m in messages), (student, messages)


def test_the_installed_package_is_never_changed(bad_class):
    root = bad_class[0]
    log = (root / "reports" / "integrity.log").read_text()
    assert "modified installed" not in log
    installed = isolated_site() / "paged_helpers" / "checks" / "allocator" / "check.py"
    assert installed.read_text() == (ROOT / "paged_helpers" / "checks" / "allocator" / "check.py").read_text()


CAUGHT_BY_THE_SECOND_OPINION = {
    "fake_runpy": "a fake module in sys.modules",
    "import_hook": "an import hook",
    "meta_path_finder": "an import finder",
    "execute_result_first": "display / output hooks",
    "ast_transformer": "an IPython AST transformer",
    "peeks_at_the_checker": "took a frame object",
    "peeks_through_logging": "took a frame object",
}


def _integrity_lines(root, student: str) -> list[str]:
    log = (root / "reports" / "integrity.log").read_text()
    return [line for line in log.splitlines() if line.split("\t")[1] == student]


@pytest.mark.parametrize("student", sorted(CAUGHT_BY_THE_SECOND_OPINION))
def test_tricks_that_fool_the_kernel_are_caught_by_the_clean_run(bad_class, student):
    root = bad_class[0]
    lines = _integrity_lines(root, student)
    assert len(lines) == 1 and "kernel passed, clean run failed (scored 0)" in lines[0], lines
    assert CAUGHT_BY_THE_SECOND_OPINION[student] in lines[0], lines
    messages = errors_of(autograded_notebook(root, student, A), TEST)
    assert messages[0].startswith("SecondOpinion: this test passed in your notebook"), messages
    assert "SecondOpinion" in feedback_text(root, student, A)


def test_values_that_compare_equal_to_anything_are_refused(bad_class):
    root = bad_class[0]
    messages = errors_of(autograded_notebook(root, "always_equal", A), TEST)
    assert any("num_free" in m and "a value of type" in m and "AlwaysEqual" in m for m in messages), messages
    assert "a value of type" in feedback_text(root, "always_equal", A)
    lines = _integrity_lines(root, "always_equal")  # both runs failed it; the clean run also flags it
    assert len(lines) == 1 and "flagged in the clean run" in lines[0], lines
    assert "handed the check what it refuses" in lines[0], lines


def test_hidden_only_scenarios_fail_without_naming_their_parameters(bad_class):
    root = bad_class[0]
    notebook = autograded_notebook(root, "capped_share", A)
    messages = errors_of(notebook, TEST)
    # Every hidden kind runs, in an order drawn from the secret seed: the first to fail is one that
    # shares a block more than 7 times, and its message names no size, id or count of the scenario.
    failed = [m for m in messages if "a hidden scenario failed:" in m]
    assert failed, messages
    assert not re.search(r"\bpool of \d|expected: \d|got: +\d", failed[0]), failed[0]
    text = feedback_text(root, "capped_share", A)
    assert "a hidden scenario failed" in text and "2026" not in text


def test_honest_students_are_not_flagged(bad_class):
    root = bad_class[0]
    honest = [s for s, (_, points, _) in _submissions().items() if points == FULL]
    flagged = {line.split("\t")[1] for line in (root / "reports" / "integrity.log").read_text().splitlines()}
    assert not flagged & set(honest), flagged & set(honest)


def test_the_sandbox_refuses_every_escape(bad_class):
    root = bad_class[0]
    notebook = autograded_notebook(root, "escapes_right", A)
    text = _outputs_text(notebook.cells[cell_of(notebook, SOLUTION) + 1])
    assert "visible: []" in text, text
    for refused in ("gradebook refused", "pth refused", "network refused"):
        assert refused in text, text
    assert not any(marker in text for marker in ESCAPE_MARKERS), text
    import site

    assert not [p for p in map(Path, site.getsitepackages()) if (p / "zz_planted_by_a_student.pth").exists()]
    assert "GenerateFeedback" not in (root / "nbgrader_config.py").read_text()
    assert not [row for row in manual_scores(root) if row is not None]


def test_no_solution_or_hidden_test_in_any_feedback(bad_class):
    from autograde_helpers import NOTEBOOKS, feedback_text, release_check

    root, submissions, _ = bad_class
    hidden = ["seed=2026", "seed 2026", "HIDDEN TESTS", "autograde guard"]
    solution = release_check.secret_lines(NOTEBOOKS / f"{A}.ipynb")
    for student, (notebook, _, _) in submissions.items():
        text = feedback_text(root, student, A)
        assert not [h for h in hidden if h in text], student
        wrote_a_solution = any(line in "\n".join(c.source for c in notebook.cells) for line in solution)
        if not wrote_a_solution:
            assert not [line for line in solution if line in text], student


def test_stderr_is_shown_not_punished(bad_class):
    root = bad_class[0]
    notebook = autograded_notebook(root, "stderr_writes", A)
    cell = notebook.cells[cell_of(notebook, TEST)]
    streams = [o for o in cell.outputs if o.output_type == "stream"]
    assert streams and all(o.name == "stdout" for o in streams)
    text = "".join(o.text for o in streams)
    assert "debug: allocate" in text  # sys.stderr inside a check: the check sends it to stdout
    assert "[stderr] log: allocate called" in text  # a logging handler holds the kernel's stderr
