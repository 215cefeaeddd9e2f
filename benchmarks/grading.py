"""Grading speed: `python -m autograder grade` (sandboxed, parallel) against stock serial `nbgrader autograde`.

    python benchmarks/grading.py [--students 40] [--workers N] [--assignments 01_self_attention 06_transformer]

For each assignment: builds a synthetic class (correct answers, untouched stubs and, for Chapter 1, two
kinds of wrong answer, in turn), grades it both ways on this machine in the same run, checks that both
give every student the same score, and prints seconds per submission, the ratio, and where the grader's
time went (from the ``timings.json`` it writes beside ``grades.csv``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from notebook_grading import ASSIGNMENTS, release_notebook, replace_solution, source_notebook  # noqa: E402

from autograder.release import make_course_copy, nbgrader_env, run_nbgrader  # noqa: E402

WRONG = {
    "softmax": "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=0, keepdim=True)\n",
    "scaled_dot_product_attention": (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    weights = softmax(q @ k.transpose(-2, -1), dim=-1)\n    return weights @ v, weights\n"),
}


def synthetic_class(assignment: str, students: int) -> dict[str, nbformat.NotebookNode]:
    kinds = ["correct", "untouched", "wrong_softmax", "wrong_attention"]
    notebooks = {}
    for index in range(students):
        kind = kinds[index % len(kinds)]
        if kind == "untouched":
            nb = nbformat.read(release_notebook(assignment), 4)
        else:
            nb = nbformat.read(source_notebook(assignment), 4)
            if kind.startswith("wrong") and assignment == "01_self_attention":
                target = "softmax" if kind == "wrong_softmax" else "scaled_dot_product_attention"
                replace_solution(nb, target, WRONG[target])
        notebooks[f"s{index:03d}_{kind}"] = nb
    return notebooks


def ours(assignment: str, notebooks: dict, workers: int, root: Path) -> tuple[float, dict[str, float], dict]:
    name = ASSIGNMENTS[assignment][0]
    for student, nb in notebooks.items():
        (root / "class" / student).mkdir(parents=True)
        nbformat.write(nb, root / "class" / student / name)
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, str(root / "class"),
                          "--out", str(root / "out"), "--workers", str(workers),
                          "--gradebook", f"sqlite:///{root / 'ours.db'}"],
                         cwd=REPO, env=nbgrader_env(), capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(run.stderr[-3000:])
    with (root / "out" / "grades.csv").open() as handle:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    return seconds, scores, json.loads((root / "out" / "timings.json").read_text())


def stock(assignment: str, notebooks: dict, root: Path) -> tuple[float, dict[str, float]]:
    from nbgrader.api import Gradebook

    name = ASSIGNMENTS[assignment][0]
    course = make_course_copy(root / "course", [assignment])
    run_nbgrader(["generate_assignment", assignment, "--force"], course, fast=True)  # set-up; autograde is stock
    for student, nb in notebooks.items():
        folder = course / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / name)
    started = time.perf_counter()
    run_nbgrader(["autograde", assignment, "--force"], course)
    seconds = time.perf_counter() - started
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in notebooks:
            scores[student] = float(gradebook.find_submission(assignment, student).score)
    return seconds, scores


def phases(timings: dict, n: int) -> list[tuple[str, float]]:
    """(phase, seconds per submission), the batch's fixed costs spread over its ``n`` submissions."""
    rows = timings["submissions"].values()
    mean = lambda key: sum(r.get(key, 0.0) for r in rows) / max(1, len(rows))  # noqa: E731
    starts = timings["workers"]
    return [
        ("checks loaded, here and in the sandbox (once)", timings["load_s"] / n),
        (f"{len(starts)} worker(s) from {sum('other_s' in w for w in starts)} start-up(s): bubblewrap and Python",
         sum(w.get("other_s", 0.0) for w in starts) / n),
        ("  ... import torch", sum(w.get("torch_s", 0.0) for w in starts) / n),
        ("  ... import IPython, matplotlib, the probes", sum(w.get("imports_s", 0.0) for w in starts) / n),
        ("assemble the notebook", mean("assemble_s")),
        ("fork, namespaces and mounts", mean("start_s")),
        ("run the cells", mean("cells_s")),
        ("judge the records", mean("judge_s")),
        ("write grades, feedback, report, gradebook (once)", timings["write_s"] / n),
    ]


def bench(assignment: str, students: int, workers: int) -> tuple[float, float]:
    notebooks = synthetic_class(assignment, students)
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        root = Path(tmp)
        ours_seconds, ours_scores, timings = ours(assignment, notebooks, workers, root)
        stock_seconds, stock_scores = stock(assignment, notebooks, root)
        shutil.rmtree(root / "course", ignore_errors=True)
    disagree = {s: (ours_scores.get(s), stock_scores.get(s))
                for s in notebooks if ours_scores.get(s) != stock_scores.get(s)}
    n = len(notebooks)
    print(f"\n{assignment}: {n} submissions")
    print(f"{'grader':<52} {'seconds':>9} {'s/submission':>13}")
    print(f"{'stock nbgrader autograde (serial, no sandbox)':<52} {stock_seconds:>9.1f} {stock_seconds / n:>13.2f}")
    print(f"{f'python -m autograder grade (sandbox, {workers} workers)':<52} {ours_seconds:>9.1f} "
          f"{ours_seconds / n:>13.2f}")
    print(f"ratio (stock / ours): {stock_seconds / ours_seconds:.2f}x")
    print("scores agree for every student" if not disagree else f"scores differ: {disagree}")
    print(f"\nwhere the grader's time went (CPU-seconds per submission, {workers} workers in parallel):")
    for phase, seconds in phases(timings, n):
        print(f"  {phase:<52} {seconds:>8.3f}")
    return stock_seconds / n, ours_seconds / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1, help="default: the command's")
    parser.add_argument("--assignments", nargs="+", default=["01_self_attention", "06_transformer"])
    args = parser.parse_args()
    summary = {a: bench(a, args.students, args.workers) for a in args.assignments}
    print(f"\n{'assignment':<24} {'stock s/sub':>12} {'ours s/sub':>11} {'ratio':>7}")
    for assignment, (stock_rate, ours_rate) in summary.items():
        print(f"{assignment:<24} {stock_rate:>12.2f} {ours_rate:>11.2f} {stock_rate / ours_rate:>6.2f}x")


if __name__ == "__main__":
    main()
