"""The clean run: every test cell graded again, apart from nbgrader's kernel (``preprocessors.second_opinion``).

  checker        the checks, outside the sandbox: it runs no student code and decides the verdicts
  learner_host   the learner's process, inside the sandbox: the submission's definitions, served as data
  runners        starting both for a student and reading a notebook's verdicts within its budget
  secret_seeds   the hidden calls' seeds: an HMAC per submission and cell under the course's key
"""
