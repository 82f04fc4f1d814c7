"""`python -m paged_helpers.course_data build|check`: remake or verify the course's data files.

    build [--out DIR]   write the checkpoint, vocabulary, traces and SHA256SUMS
                        (default: the data folder itself, from its corpus.txt and prompts.json)
    check [DIR]         compare the files with SHA256SUMS; exit status 1 on any difference
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import data_dir
from .build import build, mismatches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paged_helpers.course_data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the built files")
    make.add_argument("--out", type=Path, default=None, help="output folder (default: the data folder)")
    verify = commands.add_parser("check", help="compare files with SHA256SUMS")
    verify.add_argument("folder", type=Path, nargs="?", default=None)
    args = parser.parse_args(argv)

    sources = data_dir()
    if args.command == "build":
        out = args.out or sources
        for path in build(out, sources):
            print(f"wrote {path} ({path.stat().st_size} bytes)")
        return 0
    wrong = mismatches(args.folder or sources)
    for line in wrong:
        print(f"differs: {line}")
    print("all files match SHA256SUMS" if not wrong else f"{len(wrong)} file(s) differ")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
