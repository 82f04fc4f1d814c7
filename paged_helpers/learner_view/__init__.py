"""The learner view: the one place where the course's checks meet the learner's objects.

In the lab a check is handed the learner's own class or launcher and calls it in this process.
When grading, the learner's code runs in a sandboxed process of its own, and a check is handed
``Remote`` stand-ins (``remote``) instead: each call, attribute read or ``len`` is a request over
a pipe (``peer``), and only plain values cross (``wire``: ints, floats, strings, lists, dicts,
tensors as bytes with dtype and shape; never a pickle). The check's code is the same either way;
``launcher_runs`` runs a launcher under the launch watcher on whichever side the launcher lives.

``peer`` is the conversation (the request loop, the serving loop); beside it, one concept a module:
``channel`` (the lines over two descriptors, a deadline on every wait), ``handles`` (the objects an
end lent and its stand-ins of the other's), ``operations`` (what an end answers; what the checking
end lends), ``written_back`` (arguments a call changed in place, carried back), ``exceptions_across``
(exceptions as data, rebuilt by name), ``answers_kept`` (which answers are kept as ``answers_held``).

The checks, their references, scenarios, seeds and expected values stay on the checking side:
the learner's process is given a view of the package without them (``package_view``).
"""
