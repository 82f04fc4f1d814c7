"""Course administration: the work of ``course.py``'s commands, outside every nbgrader step.

  collect             students' notebooks (folders, LMS zips) into ``submitted/``, regular files only
  release_check       a student release: no leaked solution, every test says "not implemented yet"
  publish             an assignment's solution after its deadline, for later notebooks
  workspace           the learner's ``workspace/`` (``make lab``), never overwriting their edits
  class_report        grades, pass rates and a histogram, read from the gradebook
  gradebook           which gradebook a course root uses (``CourseDirectory.db_url``)
  course_files        the configuration and the gradebook, checked before and between nbgrader steps
  feedback_files      links, special and oversized files kept out of ``autograded/`` and ``feedback/``
  throwaway_postgres  a PostgreSQL server on a socket, for the tests and the grading benchmark
"""
