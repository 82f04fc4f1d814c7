"""nbgrader configuration of the course "Paged attention and prefix caching".

Run nbgrader (or ``python course.py ...``) from this folder: nbgrader reads this file from the
current directory and silently uses its defaults elsewhere. The course root is the current
directory, so the same file serves a copy of the course elsewhere (tests load it with
``load_subconfig``). Each notebook notebooks/NN_name.ipynb is the assignment NN_name.
"""

from paged_grading.nbgrader_process import cache_schema_version_lookup, silence_known_noise  # setup.py installs it

c = get_config()  # noqa: F821  (provided by traitlets when it runs this file)

cache_schema_version_lookup()  # nbgrader would otherwise run `alembic heads` each time it opens the gradebook
silence_known_noise()  # nbgrader's own harmless warnings (named there), matched by their exact text

c.CourseDirectory.course_id = "paged-attention"

# --- executing submissions -------------------------------------------------------------------
# FairExecute: nbgrader's Execute plus recovery from dead or unresponsive kernels.
c.FairExecute.timeout = 120  # seconds per cell; the CPU checks take seconds
c.FairExecute.slow_assignments = {  # Triton kernels run in the CPU interpreter here
    "07_paged_decode_kernel": 420,
    "09_paged_prefill_kernel": 420,
}
c.FairExecute.interrupt_on_timeout = True
c.FairExecute.max_kernel_restarts = 3
# Nothing of a grading kernel is kept after its last cell, and its sandbox is closed anyway:
# stopping it at once saves about half a second per notebook of waiting for a polite exit.
c.FairExecute.shutdown_kernel = "immediate"
c.FairExecute.responsive_grace = 10
# The clean re-run of every test cell (preprocessors/second_opinion.py): same per-cell budgets.
c.SecondOpinion.timeout = 120
c.SecondOpinion.slow_assignments = c.FairExecute.slow_assignments
# Demo and benchmark cells the instructor tagged are not run while grading. Only this tag skips
# a cell (nbclient's default "skip-execution" could be put on a test cell by a student), and
# RestoreCellRoles removes it from every test and solution cell.
from paged_grading.preprocessors.sanitize import SKIP_TAG  # noqa: E402

c.FairExecute.skip_cells_with_tag = SKIP_TAG

# Known harmless stderr noise, removed before grading (everything else in a test cell's stderr
# is shown as "[stderr] ..." and does not cost points; see paged_grading/preprocessors/outputs.py).
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = (
    r"(?m)^.*("
    r"Failed to initialize NumPy"
    r"|TRITON_INTERPRET"
    r"|UserWarning: To exit: use 'exit', 'quit', or Ctrl-D"
    r"|Matplotlib is building the font cache"
    r").*$"
)

# Deleted locked test cells are put back (and run) rather than silently costing nothing.
c.OverwriteCells.add_missing_cells = True

c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "paged_grading.preprocessors.sanitize.MatchLostMetadata",
    "paged_grading.preprocessors.sanitize.RestoreCellRoles",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "paged_grading.preprocessors.guard.GuardChecks",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    # Starts the clean re-run now, in its own sandbox, so that it runs beside the kernel (a core
    # each); SecondOpinion below waits for it and decides the scores.
    "paged_grading.preprocessors.second_opinion.StartSecondOpinion",
    "paged_grading.preprocessors.execute.FairExecute",
    "paged_grading.preprocessors.guard.GuardAudit",
    "nbgrader.preprocessors.IgnorePattern",
    "paged_grading.preprocessors.outputs.DemoteStderr",
    "paged_grading.preprocessors.second_opinion.SecondOpinion",  # after DemoteStderr: it compares final scores
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    # After the grades are saved: only what the autograded notebook shows changes (no script,
    # handler or script link of a student's output or written answer; paged_grading/preprocessors/safe_outputs.py).
    "paged_grading.preprocessors.safe_outputs.SafeOutputs",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# --- feedback: what failed and why, never the hidden tests' code ----------------------------
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "paged_grading.preprocessors.feedback_scores.AwaitingGrading",  # unmarked written answers: "awaiting grading"
    "paged_grading.preprocessors.outputs.StripGuard",
    "paged_grading.preprocessors.hidden_tests.HideHiddenTests",
    "paged_grading.preprocessors.outputs.DefuseMarkers",
    "nbgrader.preprocessors.ClearHiddenTests",
    "paged_grading.preprocessors.outputs.HideTestTracebacks",
    "paged_grading.preprocessors.outputs.LimitOutputs",
    "paged_grading.preprocessors.safe_outputs.SafeOutputs",  # again: nothing a student's cell shows runs on the page
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# The feedback page: nbgrader's, with unmarked written answers shown as awaiting grading.
from paged_grading.preprocessors import feedback_scores  # noqa: E402

c.HTMLExporter.template_name = feedback_scores.TEMPLATE_NAME
c.HTMLExporter.template_file = feedback_scores.TEMPLATE_FILE
c.HTMLExporter.extra_template_basedirs = feedback_scores.template_folders()
