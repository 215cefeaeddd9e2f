"""When does an induction head form? The command line of :mod:`attention_course.induction` (where the training
code lives, so that Chapter 8 runs it wherever the helper package is installed), writing to ``benchmarks/results/``.

Usage::

    python benchmarks/induction.py                                    # every variant, seeds 0-4, 400 steps
    python benchmarks/induction.py --variants chapter --seeds 0 1 2 --steps 300

It prints a table and writes ``induction.csv`` to ``--out``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attention_course.induction import main as measure_induction  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return measure_induction(argv, default_out="benchmarks/results")


if __name__ == "__main__":
    raise SystemExit(main())
