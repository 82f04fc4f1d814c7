"""nbgrader add-ons for this course: what nbgrader itself does not do.

Each module is one concern, registered as nbgrader preprocessors in ``nbgrader_config.py``:

  execute     FairExecute: per-assignment cell timeouts; a kernel that dies (os._exit, a
              segfaulting Triton load) or stops answering is restarted, the cells before the
              crash are replayed, and grading continues after the offending cell
  guard       GuardChecks / GuardAudit: each autograded test cell gets a fresh copy of
              ``paged_helpers`` loaded from a hash-verified snapshot (defeats monkeypatching
              and on-disk edits from earlier cells); the installed package is audited and
              restored after every notebook
  outputs     DemoteStderr (stderr in a test cell is shown, not punished), HideTestTracebacks
              and StripGuard (feedback shows the check's message, never the hidden test's code)
  collect     submissions from per-student folders or LMS zip exports into submitted/
  report      grades CSV, per-check pass rates and a score histogram from the gradebook
"""
