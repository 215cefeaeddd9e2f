"""Training throughput: tokens per second and model FLOPs utilisation (MFU), with and without the fast paths.

The command line of :mod:`attention_course.benchmark_training` (where the measuring code lives, so that Chapter 6
runs it wherever the helper package is installed, Colab included), with the course repository's one extra:
``--model reference``, the course's reference ``Transformer`` (from ``solutions/``, see ``reference.py``), the
default here; ``--model torch`` trains ``TorchTransformer``. Results go to ``benchmarks/results/`` by default.

Usage::

    python benchmarks/training.py --config gpu --peak-tflops 989              # on a GPU
    python benchmarks/training.py --config tiny --steps 20 --threads 1         # on a CPU
    python benchmarks/training.py --config gpu --data random --src-len 256 --tgt-len 256 --peak-tflops 989

It prints a table and writes ``training.csv`` and ``training.png`` to ``--out``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attention_course.benchmark_training import MODELS  # noqa: E402
from attention_course.benchmark_training import main as measure_training  # noqa: E402
from benchmarks.reference import reference_transformer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return measure_training(argv, models={"reference": reference_transformer, **MODELS},
                            default_out="benchmarks/results")


if __name__ == "__main__":
    raise SystemExit(main())
