"""The course's grader: what nbgrader itself does not do. Four parts, each importing only those below it:

  administration/  the instructor's commands' work (course.py): collect, check a release, publish,
                   the learner's workspace, the class report, the gradebook, the grader's own files
  preprocessors/   the nbgrader steps ``nbgrader_config.py`` names: sanitize, guard, execute, the
                   second opinion, outputs, hidden tests, safe outputs, feedback scores
  clean_run/       the second opinion's clean run: the checker (outside the sandbox), the learner's
                   process (inside it), the processes that run them, the secret seeds of hidden calls
  sandbox/         the bubblewrap sandbox, the grading kernels forked in it, the verified package
                   copies their test cells import

and under all four, ``integrity`` (``reports/integrity.log``, one line per finding). ``nbgrader_process``
is what ``nbgrader_config.py`` changes about nbgrader's own process. ``lint-imports`` keeps the layers.
"""
