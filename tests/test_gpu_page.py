"""Chapter 6 measures on the machine that runs it, and claims nothing it did not measure.

The chapter's benchmark cells call the functions of the helper package's ``benchmark_attention`` and
``benchmark_training`` (so they run wherever ``attention_course`` is installed); on a machine with CUDA they measure the
``gpu`` configuration and compute MFU against the GPU's peak, elsewhere the ``tiny`` one. No test machine has a
GPU, so these tests run the chapter's own measuring code (its cell, parsed from the notebook) on the CPU with
a tiny batch, and drive the CUDA branch as far as a CPU allows: the peak lookup with a GPU's name, and the MFU
arithmetic with that peak.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import replace

import pytest
import torch

from attention_course import benchmark_attention as attention_bench
from attention_course import benchmark_training as training_bench
from attention_course.tasks import dates_task
from attention_course.training import GPU, TINY
from autograder.release import REPO_ROOT

CHAPTER = REPO_ROOT / "book" / "06_transformer.ipynb"


def _cells() -> dict[str, dict]:
    return {cell["id"]: cell for cell in json.loads(CHAPTER.read_text())["cells"]}


def _chapter_definitions(cell_id: str, names: dict) -> dict:
    """Run the constant tables and the functions a code cell defines (not its top-level statements) in ``names``."""
    tree = ast.parse("".join(_cells()[cell_id]["source"]))
    kept = [node for node in tree.body if isinstance(node, ast.FunctionDef)
            or (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets))]
    if not kept:
        raise AssertionError(f"cell {cell_id!r} of {CHAPTER.name} defines no function or table")
    exec(compile(ast.Module(body=kept, type_ignores=[]), f"{CHAPTER.name}:{cell_id}", "exec"), names)
    return names


@pytest.fixture(scope="module")
def chapter():
    """The chapter's measuring functions, with what its earlier cells would have defined."""
    import argparse

    return _chapter_definitions("bench-training-run", {"argparse": argparse, "torch": torch, "task": dates_task(),
                                                       "training_bench": training_bench})


def test_the_chapter_shows_no_placeholder_for_a_measurement() -> None:
    text = "\n".join("".join(cell["source"]) for cell in _cells().values()).lower()
    for placeholder in ("not yet measured", "to be measured", "tbd"):
        assert placeholder not in text, f"{CHAPTER.name} still says {placeholder!r}"


def test_the_chapter_source_carries_no_outputs() -> None:
    """What the page shows is computed when it is built, never stored in the source."""
    stale = [cid for cid, cell in _cells().items() if cell["cell_type"] == "code" and cell["outputs"]]
    assert not stale, f"code cells with stored outputs: {stale}"


def test_the_benchmark_cells_call_the_benchmark_modules() -> None:
    """The numbers come from the helper package's benchmark modules, the same code as their command lines (and
    as benchmarks/attention.py and training.py, which call them), not from a copy; nothing needs benchmarks/."""
    cells = _cells()
    setup = "".join(cells["bench-setup"]["source"])
    assert "from attention_course import benchmark_attention as attention_bench" in setup, setup
    assert "from attention_course import benchmark_training as training_bench" in setup, setup
    assert "training_bench.run_variant(" in "".join(cells["bench-training-run"]["source"])
    assert '"-m", "attention_course.benchmark_attention"' in "".join(cells["bench-attention-run"]["source"])
    code = "".join("".join(cell["source"]) for cell in cells.values() if cell["cell_type"] == "code")
    assert "benchmarks" not in code.replace("attention_course.benchmark", ""), "a code cell still uses benchmarks/"


def test_the_peak_is_known_only_for_a_listed_gpu(chapter, monkeypatch) -> None:
    peak_tflops = chapter["peak_tflops"]
    assert peak_tflops(torch.device("cpu")) == (None, None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert peak_tflops(torch.device("cuda")) == (989.0, 67.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")  # a lower peak
    assert peak_tflops(torch.device("cuda")) == (None, None)
    for name, (bf16, fp32) in chapter["PEAK_TFLOPS"].items():
        assert name.startswith("NVIDIA ") and bf16 > fp32 > 0, (name, bf16, fp32)


@pytest.mark.parametrize("peaks", [(None, None), (989.0, 67.0)], ids=["cpu, no peak", "gpu peak, as on an H100"])
def test_the_chapter_measures_every_variant(chapter, peaks) -> None:
    config = replace(TINY, batch_size=8)
    results = chapter["measure_throughput"](config, torch.device("cpu"), peaks, steps=2, warmup=1)
    assert [r.variant for r in results] == ["fp32, manual", "fp32, fused", "bf16, manual", "bf16, fused"]
    for r in results:
        assert r.note == "", f"{r.variant} did not run: {r.note}"
        assert r.step_ms > 0 and r.tokens_per_s > 0 and r.tflops > 0, r
        assert math.isfinite(r.loss), r
        peak = peaks[0] if r.precision == "bf16" else peaks[1]
        if peak is None:
            assert r.mfu is None, r
        else:
            assert r.mfu == pytest.approx(r.tflops / peak), r
    table = training_bench.table(results)
    for r in results:
        row = next(line for line in table.splitlines() if line.startswith(r.variant))
        assert (f"{r.mfu:.1%}" in row) if r.mfu is not None else (" - " in row), row


def test_the_gpu_configuration_is_the_papers_base_size() -> None:
    """What the chapter says it measures on a GPU: 6 + 6 layers, d_model 512, 8 heads, d_ff 2048."""
    assert (GPU.n_layers, GPU.d_model, GPU.n_heads, GPU.d_ff) == (6, 512, 8, 2048)


def test_the_attention_benchmark_runs_on_the_cpu() -> None:
    """The chapter runs attention_course.benchmark_attention as a script and reads back its Row records."""
    import argparse

    args = argparse.Namespace(dtype=None, batch=1, heads=2, d_head=8, causal=False, repeats=2, budget=1.0)
    rows = [attention_bench.measure(torch.device("cpu"), 32, impl, mode, args, False)
            for mode in ("forward", "fwd+bwd") for impl in ("manual", "fused")]
    assert all(r.ms is not None and r.ms > 0 for r in rows), rows
    assert {r.backend for r in rows if r.impl == "fused"} <= {"CPU (flash)", "CPU (math)"}, rows
    assert "manual ms" in attention_bench.table(rows, ["manual", "fused"])
