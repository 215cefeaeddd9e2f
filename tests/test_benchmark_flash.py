"""``benchmarks/flash_attention.py``, Chapter 9's measurements of the reference, on the CPU.

The script runs as a learner or an instructor would run it, ``--quick`` (tiny sizes, seconds), in a fresh Python:
Triton must learn that it interprets before it is first imported, which a test process may already have done. Its
``--json`` file holds the numbers it measured; the tables it printed must show those numbers, each in its column,
and the numbers must say what the script claims of them. The goals, which set the exit status, are checked to fail
on numbers that miss them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from attention_course.benchmark_generation import MemoryRow
from autograder.release import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "flash_attention.py"


def _module():
    spec = importlib.util.spec_from_file_location("flash_attention_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """(exit status, printed text, the --json numbers) of ``--quick`` on the CPU."""
    out = tmp_path_factory.mktemp("flash") / "results.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.returncode, done.stdout, json.loads(out.read_text())


def _table_lines(text: str, first: str) -> list[str]:
    """The lines of the table that follows the line starting with ``first`` (a section's title), up to a blank."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    rows = []
    for line in lines[start + 3:]:  # title, header, rule
        if not line.strip():
            break
        rows.append(line)
    return rows


def test_the_memory_table_prints_the_peaks_and_errors_it_measured(quick_run) -> None:
    _, text, results = quick_run
    memory = results["memory"]
    names = list(dict.fromkeys(r["name"] for r in memory))
    assert names == ["full", "online loop", "FlashAttention", "SDPA"]
    lines = _table_lines(text, "1. ")
    assert [int(line.split()[0]) for line in lines] == [256, 512], "the --quick lengths, one line each"
    for line in lines:
        fields = line.split()
        t = int(fields[0])
        row = {r["name"]: r for r in memory if r["T"] == t}
        assert fields[1:5] == [f"{row[n]['peak_bytes'] / 2**20:.2f}" for n in names], line
        assert fields[5:9] == [f"{row[n]['max_error']:.1e}" for n in names], line
    for r in memory:
        assert 0 < r["peak_bytes"] and r["max_error"] < 1e-5, r
    by = {(r["name"], r["T"]): r["peak_bytes"] for r in memory}
    assert by[("FlashAttention", 512)] * 4 < by[("online loop", 512)], "the loop under autograd keeps its weights"
    assert by[("FlashAttention", 512)] < by[("full", 512)]
    assert by[("full", 512)] >= 2 * 512 * 512 * 4, "full attention under autograd keeps a (2, T, T) matrix"


def test_the_kernel_table_prints_the_errors_it_measured(quick_run) -> None:
    _, text, results = quick_run
    kernels = results["kernels"]
    assert len(kernels) == 3, "--quick runs the first three cases"
    lines = _table_lines(text, "2. ")
    assert len(lines) == len(kernels)
    for line, row in zip(lines, kernels, strict=True):
        assert line.startswith(str(tuple(row["shape"]))), line
        fields = line.split(")")[-1].split()  # after the shape: causal, dtype, errors, tolerance, seconds ...
        assert fields[0] == ("yes" if row["causal"] else "no") and fields[1] == row["dtype"].removeprefix("torch.")
        assert fields[2:5] == [f"{row['out_error']:.1e}", f"{row['lse_error']:.1e}", f"{row['tolerance']:.0e}"]
        assert fields[5] == f"{row['kernel_s']:.3f}" and fields[6] == f"{1e3 * row['sdpa_s']:.3f}", line
        assert row["out_error"] <= row["tolerance"] and row["lse_error"] <= 1e-4, row
        assert row["kernel_s"] > row["sdpa_s"], "the interpreter runs one program at a time, in NumPy"
    assert {row["dtype"] for row in kernels} == {"torch.float32", "torch.float16"}
    assert any(row["causal"] for row in kernels) and not all(row["causal"] for row in kernels)


def test_the_goals_it_prints_are_the_ones_it_returns_and_all_are_met(quick_run) -> None:
    status, text, results = quick_run
    assert results["status"] == status == 0
    assert len(results["goals"]) == 3 and all(line.endswith(": met") for line in results["goals"])
    assert text.rstrip().endswith("\n".join(f"  {line}" for line in results["goals"]))
    assert results["speed"] is None and "CUDA only" in text, "no speed table without a GPU"


def _memory(flash_peak: int, loop_peak: int, error: float = 1e-7) -> list[MemoryRow]:
    return [MemoryRow("full", 512, 8 << 20, None, error), MemoryRow("online loop", 512, loop_peak, None, 1e-7),
            MemoryRow("FlashAttention", 512, flash_peak, None, 1e-7), MemoryRow("SDPA", 512, 1 << 20, None, 1e-7)]


def test_each_goal_is_missed_by_numbers_that_miss_it() -> None:
    bench = _module()
    fine = bench.KernelRow((1, 1, 64, 64, 16), False, torch.float32, 1e-7, 1e-7, 1.0, 1e-4, 1e-5)
    met = bench.goals(_memory(1 << 20, 8 << 20), [fine], 1e-5)
    assert [line.endswith(": met") for line in met] == [True, True, True], met
    cases = {0: bench.goals(_memory(1 << 20, 8 << 20, error=2e-5), [fine], 1e-5),  # full attention off by 2e-5
             1: bench.goals(_memory(2 << 20, 8 << 20), [fine], 1e-5),  # FlashAttention at a quarter of the loop
             2: bench.goals(_memory(1 << 20, 8 << 20), [fine, bench.KernelRow(
                 (1, 2, 77, 77, 64), True, torch.float16, 6e-3, 1e-7, 1.0, 1e-4, 5e-3)], 1e-5)}  # a kernel off
    for missed, lines in cases.items():
        assert [line.endswith("MISSED") for line in lines] == [i == missed for i in range(3)], lines
    assert "(1, 2, 77, 77, 64) float16 off by 6.0e-03" in cases[2][2]


def test_the_tolerances_follow_the_dtype_and_whether_the_kernel_is_compiled() -> None:
    bench = _module()
    assert bench.tolerance(torch.float32, interpreted=True) == 1e-5
    assert bench.tolerance(torch.float32, interpreted=False) == 1e-2, "compiled, tl.dot runs float32 in TF32"
    assert bench.tolerance(torch.float16, True) < bench.tolerance(torch.bfloat16, True)
    row = bench.KernelRow((1, 1, 8, 8, 16), True, torch.float32, 1e-6, 2e-4, 0.5, 2e-4, 1e-5)
    assert not row.within, "a log-sum-exp off by more than 1e-4 is out of tolerance"
    table = bench.kernel_table([row])
    assert table.splitlines()[-1].split() == ["(1,", "1,", "8,", "8,", "16)", "yes", "float32", "1.0e-06",
                                              "2.0e-04", "1e-05", "0.500", "0.200", "2,500×"]
