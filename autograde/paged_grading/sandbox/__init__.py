"""Where student code runs while grading: the sandbox, and the grading kernels in it.

  bubblewrap         the sandbox: what a student's process sees (bwrap), its limits, its clean-up
  fair_share         a cgroup per student: the same CPU weight each, a memory and a process cap
  owners             who made a sandbox folder or cgroup (pid and start time), for sweeping leftovers
  grading_kernels    nbgrader's kernel manager: kernels started in the student's sandbox
  kernel_zygote      inside the sandbox: one process per student that imported torch, forking kernels
  zygote_client      outside: the process jupyter_client manages for a forked kernel
  between_notebooks  inside: what a zygote empties between two notebooks
  package_copies     the installed package as grading found it, and the verified copies test cells import
  kernel_guard       inside the kernel: verify a copy and import the package from it
"""
