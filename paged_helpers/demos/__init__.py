"""The chapter's demos behind `python run.py NAME`, one module per figure.

Each module defines ``add_arguments(parser)`` and ``run(args) -> dict``; run.py prints the
dict as JSON. Demos that need the learner's classes take them from the notebooks in
``--impl DIR`` (default: the course's own notebooks/ folder) through notebook_loader, so
this package itself never contains a solution.
"""

DEMOS = {
    "paged": "paged",  # static slots against paged blocks: utilisation
    "cow": "copy_on_write",  # fork + copy-on-write block counts
    "prefix": "prefix",  # shared system prompt: prefill saved, blocks in use
    "kernel": "kernel",  # paged decode kernel: correctness pass / bandwidth benchmark
    "engine": "engine",  # continuous batching, static slots against paged + prefix cache
    "gpu-check": "gpu_check",  # everything a CUDA GPU must pass, in one run (says what it would do elsewhere)
}
