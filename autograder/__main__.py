"""Command line of the course's grading tools: ``python -m autograder COMMAND``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.release import NOTEBOOKS, assignments, generate_release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("release", help="generate the student notebooks from autograder/source/")
    release.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    release.add_argument("--out", type=Path, default=NOTEBOOKS, help="where to write them (default: notebooks/)")
    args = parser.parse_args(argv)

    if args.command == "release":
        for assignment in args.assignments or assignments():
            try:
                target = generate_release(assignment, args.out)
            except ValueError as err:
                parser.error(str(err))
            print(f"released {assignment} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
