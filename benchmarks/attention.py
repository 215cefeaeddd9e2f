"""Textbook attention against PyTorch's fused kernel: time and peak memory, forward and backward.

The command line of :mod:`attention_course.benchmark_attention` (where the measuring code lives, so that Chapter 6
runs it wherever the helper package is installed, Colab included), with the course repository's one extra:
``--impls reference`` times the course's reference ``scaled_dot_product_attention`` (Chapter 1, its own softmax;
see ``reference.py``). Results go to ``benchmarks/results/`` by default.

Usage::

    python benchmarks/attention.py                                # CPU, and CUDA when present
    python benchmarks/attention.py --device cpu --lengths 128 256 512 1024 2048 --threads 1
    python benchmarks/attention.py --device cuda --lengths 128 256 512 1024 2048 4096 --dtype bf16
    python benchmarks/attention.py --causal --impls manual fused reference

It prints a table and writes ``attention.csv`` and ``attention.png`` to ``--out``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attention_course.benchmark_attention import IMPLS  # noqa: E402
from attention_course.benchmark_attention import main as measure_attention  # noqa: E402
from benchmarks.reference import reference_attention  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return measure_attention(argv, impls={**IMPLS, "reference": reference_attention}, default_out="benchmarks/results")


if __name__ == "__main__":
    raise SystemExit(main())
