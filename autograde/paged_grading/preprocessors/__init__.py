"""The nbgrader steps of this course, named by dotted path in ``nbgrader_config.py``, in the order they run.

  sanitize        MatchLostMetadata, RestoreCellRoles: a submission's nbgrader metadata is not trusted
  guard           GuardChecks, GuardAudit: every test cell imports a verified copy of the package
  second_opinion  StartSecondOpinion, SecondOpinion: every test cell graded again in the clean run
  execute         FairExecute: kernels that die or hang, and time budgets, cost only their cells
  outputs         DemoteStderr, StripGuard, DefuseMarkers, HideTestTracebacks, LimitOutputs
  hidden_tests    HideHiddenTests: no output shows a hidden test or its parameters
  safe_outputs    SafeOutputs: nothing a notebook shows in a browser runs
  feedback_scores AwaitingGrading: an unmarked written answer reads "awaiting grading"
"""
