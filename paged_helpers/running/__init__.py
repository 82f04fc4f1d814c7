"""Running the learner's code apart: child processes, the launch watcher, the GPU compile.

* ``isolated``: one call in a forked child (a segfault or a hang becomes an ``Outcome``);
* ``spawned``: on a GPU, calls in one spawned child that owns its CUDA context;
* ``launch_watch``: what a launcher did while it ran (launches, the tensors they wrote, guard bands);
* ``guard_bands``, ``launcher_reads``: the launch watcher's two instruments;
* ``gpu_compile`` (with ``_gpu_compile_worker``): the learner's kernels compiled for CUDA targets;
* ``kernel_source``: a kernel module validated before a compile runs any of it, and, when grading,
  read from the notebook as text;
* ``graded``: whether this is a graded run.

This layer knows nothing of scenarios, expected values or verdicts (``paged_helpers.checks``), and
the learner's process when grading holds it whole.
"""
