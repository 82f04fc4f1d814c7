"""The chapter's demos: `python run.py NAME [options]`, each ending with one JSON object on stdout.

The demos are the modules of paged_helpers/demos/ (found there, not listed here); `python run.py
--help` lists them with the first line of each module's docstring, for example:

    python run.py paged            static slots vs paged blocks on the seeded workload
    python run.py radix            multi-turn chats: flat vs radix cache, FCFS vs cache-aware
    python run.py system           the learner's whole system: slots vs blocks, prefix cache, gather vs kernels
    python run.py gpu-check        on a CUDA GPU, one process per stage within 8 minutes: kernels compiled,
                                   the fork milestone on the kernel path in bf16, engine on kernels vs
                                   gather, decode bandwidth vs SDPA -> docs/gpu_check.json and .png

Demos that need the learner's classes read them from the notebooks in --impl DIR
(default: notebooks/, the instructor's source). Point it at your own copies to run the
chapter's demos on your work: `python run.py cow --impl ~/my-course`.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import import_module

import paged_helpers  # noqa: F401  (first: selects the device and Triton mode)
from paged_helpers.demos import DEMOS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    for name, module_name in DEMOS.items():
        module = import_module(f"paged_helpers.demos.{module_name}")
        sub = commands.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    result = args.run(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
