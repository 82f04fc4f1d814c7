"""FairExecute: nbgrader's Execute, made robust to submissions that kill or hang the kernel.

nbgrader's own Execute gives up on a whole submission when the kernel dies (``os._exit``, a
segfault in an unmasked Triton load): the student's notebook is removed from autograded/
and every cell, including the ones that passed, scores nothing. A kernel that ignores the
interrupt after a timeout makes every later cell time out in turn.

FairExecute keeps grading the rest of the notebook instead:

* the cell that killed the kernel (or left it unresponsive after a timeout) gets an error
  output that says so, so a test cell there scores zero and a solution cell shows why;
* a fresh kernel is started, the cells before the crash are replayed silently (their
  recorded outputs are kept; cells that had crashed or timed out are skipped), and
  execution continues with the next cell;
* after ``max_kernel_restarts`` crashes, the remaining cells are marked "not run" with an
  error output: a grade cell with no output would otherwise get full points.

Each kernel is started inside the submission's sandbox (``grading_kernels.SandboxedKernelManager``).
The per-cell timeout is ``timeout`` (seconds), or ``slow_assignments[assignment]`` for the
Triton notebooks, whose checks run kernels in the CPU interpreter.

Time budgets bound a whole submission, not only a cell: a notebook gets at most
``notebook_budget_cells`` per-cell timeouts of kernel time, and a student at most
``student_budget`` seconds over all their notebooks (what earlier notebooks used is kept in
``reports/grading-time/<student>/<assignment>``, outside every sandbox). The cell running when a
budget runs out is stopped, the cells after it are marked "not run" (so only the submission's own
unfinished cells score 0), and ``reports/integrity.log`` says so. An honest notebook takes seconds.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Dict, Integer

from .. import integrity
from ..sandbox.grading_kernels import SandboxedKernelManager

KERNEL_DIED = "KernelDied"
KERNEL_UNRESPONSIVE = "KernelUnresponsive"
NOT_RUN = "CellNotRun"
TIMEOUT = "CellTimeoutError"
TIME_LEDGER = Path("reports") / "grading-time"  # relative to the course root, where nbgrader runs


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _cell_label(cell: NotebookNode, index: int) -> str:
    """'cell 7 (test_block_allocator)' or 'cell 4 (time.sleep(600))': which cell, in the learner's terms."""
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    return f"cell {index + 1} ({grade_id or first[:60]})"


def _has_error(cell: NotebookNode, *names: str) -> bool:
    return any(
        out.get("output_type") == "error" and out.get("ename") in names for out in cell.get("outputs", [])
    )


class FairExecute(Execute):
    """Execute that survives dead and unresponsive kernels (see the module docstring)."""

    slow_assignments = Dict(
        {}, help="Per-cell timeout in seconds for named assignments (the Triton notebooks)."
    ).tag(config=True)
    max_kernel_restarts = Integer(
        3, help="Kernel restarts allowed per notebook before the rest is skipped."
    ).tag(config=True)
    responsive_grace = Integer(
        10, help="Seconds an interrupted kernel has to answer before it is declared unresponsive."
    ).tag(config=True)
    notebook_budget_cells = Integer(
        5, help="A notebook's kernel time budget, in per-cell timeouts (600 s; 2100 s for the Triton notebooks)."
    ).tag(config=True)
    student_budget = Integer(
        3600, help="Seconds of kernel time one student's notebooks may take in all."
    ).tag(config=True)

    def __init__(self, *args, **kwargs):
        # Every grading kernel runs in a bubblewrap sandbox (see sandbox/bubblewrap.py).
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)
        self.configured_timeout = self.timeout  # self.timeout is narrowed per cell by the budgets

    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        ids = (resources or {}).get("nbgrader", {})
        assignment = ids.get("assignment")
        self.cell_timeout = int(self.slow_assignments.get(assignment, self.configured_timeout))
        self.timeout = self.cell_timeout
        began = time.monotonic()
        self._budget_start(ids, began)
        start, restarts = 0, 0
        try:
            while start < len(self.nb.cells):
                start = self._run_from(start, resources)
                if start < len(self.nb.cells) and not self._out_of_time:
                    restarts += 1
                    if restarts > self.max_kernel_restarts:
                        self._mark_not_run(start, "the kernel crashed too many times in this notebook")
                        break
        finally:
            self._budget_record(ids, time.monotonic() - began)
        self.set_widgets_metadata()
        return self.nb, self.resources

    # --- time budgets ----------------------------------------------------------------------
    def _budget_start(self, ids: dict, began: float) -> None:
        """The deadline of this notebook: its own budget, or what is left of the student's."""
        notebook = self.notebook_budget_cells * self.cell_timeout
        used = self._student_time_used(ids)
        self.budget = max(0, min(notebook, self.student_budget - used))
        self.budget_is_students = self.student_budget - used < notebook
        self.deadline = began + self.budget
        self._out_of_time = False

    @staticmethod
    def _ledger(ids: dict) -> Path:
        return TIME_LEDGER / str(ids.get("student")) / str(ids.get("assignment"))

    def _student_time_used(self, ids: dict) -> float:
        """Kernel seconds the student's other notebooks took (this one's own record is replaced)."""
        folder = self._ledger(ids).parent
        used = 0.0
        for path in folder.glob("*") if folder.is_dir() else ():
            if path.name != str(ids.get("assignment")):
                try:
                    used += float(path.read_text())
                except (OSError, ValueError):
                    continue
        return used

    def _budget_record(self, ids: dict, seconds: float) -> None:
        if ids.get("student") is None:
            return
        path = self._ledger(ids)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{seconds:.1f}\n")

    def _budget_words(self) -> str:
        if self.budget_is_students:
            return f"your notebooks' grading time ({self.student_budget} s in all) was spent"
        return f"this notebook's grading time ({self.budget:.0f} s) was spent"

    def _cell_time_left(self, index: int) -> bool:
        """Before each cell: the cell's timeout within the budget; False (rest not run) when spent."""
        left = self.deadline - time.monotonic()
        if left < 1:
            self._spent(index, f"cells {index + 1}-{len(self.nb.cells)} were not run")
            return False
        self.timeout = min(self.cell_timeout, math.ceil(left))
        return True

    def _spent(self, index: int, what: str) -> None:
        """The budget ran out at cell ``index``: the cells from there on are not run, and it is logged."""
        self._out_of_time = True
        self._mark_not_run(index, self._budget_words())
        integrity.log(self.resources.get("nbgrader", {}), "time", f"{self._budget_words()}; {what} (scored 0)")

    def _run_from(self, start: int, resources) -> int:
        """Run cells from ``start`` in a fresh kernel; return the index to resume at (len when done)."""
        cells = self.nb.cells
        with self.setup_kernel():
            info_msg = self.wait_for_reply(self.kc.kernel_info())
            self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
            if start and not self._replay(start):
                self._mark_not_run(start, "the kernel crashed again while replaying the cells above")
                return len(cells)
            for index in range(start, len(cells)):
                cell = cells[index]
                if not self._cell_time_left(index):
                    return len(cells)
                self._timed_out = False
                started = time.perf_counter()
                try:
                    self.preprocess_cell(cell, resources, index)
                except DeadKernelError:
                    self.log.warning("Kernel died in cell %d; restarting and continuing after it", index)
                    cell.outputs.append(
                        _error_output(
                            KERNEL_DIED,
                            "the Python kernel died while running this cell (os._exit, a segfault, "
                            "or running out of memory; in a Triton kernel, look for a load without a mask). "
                            "The cells after it were graded in a fresh kernel.",
                        )
                    )
                    self.shutdown_kernel = "immediate"
                    return index + 1
                except CellTimeoutError:  # nbclient gave up waiting for the interrupted cell's output
                    self._timed_out = True
                if self._timed_out:
                    elapsed = time.perf_counter() - started
                    self.log.warning("Cell %d timed out after %.0f s (limit %d s)", index, elapsed, self.timeout)
                    limit = (
                        f"the limit is {self.cell_timeout} s per cell"
                        if self.timeout >= self.cell_timeout
                        else self._budget_words()
                    )
                    cell.outputs.append(
                        _error_output(TIMEOUT, f"{_cell_label(cell, index)} was stopped after {elapsed:.0f} s: {limit}")
                    )
                    if self.timeout < self.cell_timeout:  # the budget, not the cell's own limit, stopped it
                        self._spent(index + 1, f"{_cell_label(cell, index)} was stopped and the cells after it not run")
                        self.shutdown_kernel = "immediate"
                        return len(cells)
                if _has_error(cell, TIMEOUT) and not self._responsive():
                    self.log.warning("Kernel unresponsive after a timeout in cell %d; restarting", index)
                    cell.outputs.append(
                        _error_output(
                            KERNEL_UNRESPONSIVE,
                            f"this cell ran longer than {self.timeout} s and ignored the interrupt; the "
                            "kernel was restarted and the cells after it were graded in a fresh kernel.",
                        )
                    )
                    self.shutdown_kernel = "immediate"
                    return index + 1
        return len(cells)

    def _replay(self, stop: int) -> bool:
        """Re-run cells [0, stop) on copies, keeping their recorded outputs. False if the kernel dies."""
        for index in range(stop):
            cell = self.nb.cells[index]
            if cell.cell_type != "code" or _has_error(
                cell, KERNEL_DIED, KERNEL_UNRESPONSIVE, TIMEOUT, NOT_RUN
            ):
                continue
            try:
                self.execute_cell(copy.deepcopy(cell), index, store_history=True)
            except DeadKernelError:
                return False
        return True

    async def _async_handle_timeout(self, timeout, cell=None):
        self._timed_out = True  # remembered so that the cell's outputs say which cell and how long
        return await super()._async_handle_timeout(timeout, cell)

    def _responsive(self) -> bool:
        saved, self.timeout = self.timeout, self.responsive_grace
        try:
            return run_sync(self._async_responsive)()
        finally:
            self.timeout = saved

    async def _async_responsive(self) -> bool:
        try:
            reply = await self.async_wait_for_reply(self.kc.kernel_info())
        except DeadKernelError:
            return False
        return reply is not None  # None: no answer within the grace period

    def _mark_not_run(self, start: int, why: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code":
                cell.outputs = [_error_output(NOT_RUN, f"not run: {why}.")]
