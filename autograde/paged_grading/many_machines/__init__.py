"""Grading on many machines: a coordinator, workers, and procrastinate's queue on PostgreSQL between them.

``course.py grade --queue URL`` (the coordinator, on the instructor's machine) sends one job per
student; ``course.py --root DIR worker --queue URL`` (on any machine with the course installed)
grades one student at a time with today's one-machine pipeline and sends back a bounded result;
``course.py status`` shows where every student stands. See autograde/README.md, "Grading on many
machines", for the engine, the deployment and the measurements.

Who owns what:

| module | concept | owns |
| --- | --- | --- |
| ``queue_db`` | the queue: procrastinate's app and the course's tables beside it | the schema |
| ``signing`` | the worker key: jobs and results signed (HMAC-SHA256) | ``.worker_key`` |
| ``fingerprint`` | the grading code as one digest, equal on every machine | - |
| ``course_bundle`` | the released course, as a worker installs it | a worker's ``source/``, ``release/`` |
| ``submission_job`` | one student's job: submission, seeds, ledger (the payload) | - |
| ``gradebook_rows`` | one student's autograde as rows, out of one gradebook into another | - |
| ``result`` | one try's bounded result, and writing it into the course | the course's ``autograded/``, ``feedback/`` |
| ``coordinator`` | the loop: sending jobs, judging results, watching workers | the gradebook, ``reports/``, verdicts |
| ``roster`` | each student's tries, the current one, why others failed; NOT GRADED | - |
| ``fencing`` | which result counts (signed, its job, the current try, the bytes sent) | - |
| ``leases`` | tries whose worker went silent or whose job ended without a result | - |
| ``grading_status`` | the bar while grading, ``reports/grading-status.csv``, the run's summary | those files |
| ``worker`` | taking jobs, grading with course.py, sending results | a worker's root |

Invariants: only the coordinator writes the course (a worker writes its own root and inserts rows
in the queue, nothing else); a student is graded at most once per run and only by their current
try; a try that fails for the infrastructure's reasons is retried and never scored; nothing a
worker holds reaches a student's sandbox.
"""
