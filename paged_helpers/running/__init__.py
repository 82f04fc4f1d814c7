"""Running the learner's code apart: child processes, the checker's kernel process, the GPU compile.

* ``learner_kernel``: where a kernel check finds the learner's kernel, always as text (the cells a
  Jupyter kernel ran, or the notebook when grading);
* ``kernel_source``: a kernel module validated before anything loads or compiles it (the rules
  of a kernel cell), with ``kernel_rules`` (the rules' words, the refusals), ``kernel_names`` (the
  module's names, chains through ``tl`` and ``math``), ``kernel_top_level`` (imports, constants,
  function headers) and ``kernel_code`` (a kernel's body);
* ``kernel_process`` (with ``_kernel_worker``): the checker launches a kernel itself, in a fresh
  process that holds only the module and the inputs it is sent, every access checked;
* ``isolated``: one call of a launcher in a forked child (a segfault or a hang becomes an ``Outcome``);
* ``spawned``: on a GPU, launcher calls in one spawned child that owns its CUDA context;
* ``gpu_compile`` (with ``_gpu_compile_worker``): kernels compiled for CUDA targets without a GPU;
* ``graded``: whether this is a graded run.

This layer knows nothing of scenarios, expected values or verdicts (``paged_helpers.checks``), and
the learner's process when grading holds it whole.
"""
