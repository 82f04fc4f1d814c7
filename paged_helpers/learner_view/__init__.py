"""The learner view: the one place where the course's checks meet the learner's objects.

In the lab a check is handed the learner's own class or launcher and calls it in this process.
When grading, the learner's code runs in a sandboxed process of its own, and a check is handed
``Remote`` stand-ins (``remote``) instead: each call, attribute read or ``len`` is a request over
a pipe (``peer``), and only plain values cross (``wire``: ints, floats, strings, lists, dicts,
tensors as bytes with dtype and shape; never a pickle). The check's code is the same either way;
``launcher_runs`` runs a launcher under the launch watcher on whichever side the launcher lives.

The checks, their references, scenarios, seeds and expected values stay on the checking side:
the learner's process is given a view of the package without them (``package_view``).
"""
