"""Scale-out: a class graded by `python -m autograder grade --scheduler ADDRESS` on a Dask cluster.

    python benchmarks/dask_grading.py [--students 500] [--workers CORES] [--assignment 01_self_attention]

Builds the synthetic class of ``benchmarks/grading.py`` (correct answers, untouched stubs and two kinds of
wrong answer, in turn), starts a ``dask.distributed.LocalCluster`` on this machine (one single-threaded worker
process per core by default), grades the class through the command line pointed at the cluster's scheduler,
checks that every student has a row with the score their kind of notebook deserves, and prints submissions per
minute, in all and per core. Two rows: the whole command (checks loaded, preflight, grades and gradebook
written), and the class alone on the cluster (from the progress lines, whose clock starts after the
preflight). A real cluster of several machines is the same command with the address of its scheduler
(see the instructor guide, *Running a real term*).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]  # this checkout, in workers too

from grading import synthetic_class  # noqa: E402
from notebook_grading import ASSIGNMENTS  # noqa: E402

from autograder.release import nbgrader_env  # noqa: E402

ELAPSED = re.compile(r"^\[ *(\d+)/(\d+)\] .* — (?:(\d+):)?(\d+):(\d\d) elapsed", re.MULTILINE)


def write_class(assignment: str, students: int, folder: Path) -> dict[str, str]:
    """The synthetic class as ``folder/<student>/<notebook>``; {student: kind}."""
    name = ASSIGNMENTS[assignment][0]
    kinds = {}
    for student, nb in synthetic_class(assignment, students).items():
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / name)
        kinds[student] = student.split("_", 1)[1]
    return kinds


def grade_on(address: str, assignment: str, submissions: Path, out: Path) -> tuple[float, float, str]:
    """(seconds for the whole command, seconds of the class on the cluster, stderr)."""
    env = {**nbgrader_env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, str(submissions), "--out",
                          str(out), "--scheduler", address, "--gradebook", f"sqlite:///{out.parent / 'bench.db'}"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"grading failed ({run.returncode}):\n{run.stderr[-3000:]}")
    lines = ELAPSED.findall(run.stderr)
    if not lines:
        raise SystemExit(f"no progress lines in the command's output:\n{run.stderr[-3000:]}")
    hours, minutes, secs = lines[-1][2:]
    return seconds, int(hours or 0) * 3600 + int(minutes) * 60 + int(secs), run.stderr


def check(kinds: dict[str, str], grades: Path) -> list[str]:
    """What is wrong with the grades: a student without a row, a row not ok, a score its kind cannot have."""
    with grades.open(newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    problems = [f"{s}: no row" for s in kinds if s not in rows]
    for student, row in rows.items():
        score, maximum = float(row["score"]), float(row["max_score"])
        kind = kinds.get(student)
        # the wrong answers are wrong in Chapter 1 only; elsewhere synthetic_class leaves them correct
        expected = {"correct": score == maximum > 0, "untouched": score == 0}.get(kind, 0 <= score <= maximum)
        if row["status"] != "ok" or not expected:
            problems.append(f"{student} ({kind}): {row['status']}, {score:g}/{maximum:g} {row['reason']}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="worker processes, one thread each (default: the cores)")
    parser.add_argument("--assignment", default="01_self_attention")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    from dask.distributed import LocalCluster

    with tempfile.TemporaryDirectory(prefix="dask-grading-bench-") as tmp:
        root = Path(tmp)
        kinds = write_class(args.assignment, args.students, root / "class")
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster:
            total, on_cluster, _ = grade_on(cluster.scheduler_address, args.assignment, root / "class", root / "out")
        problems = check(kinds, root / "out" / "grades.csv")
    n, cores = len(kinds), args.workers
    print(f"{args.assignment} on a LocalCluster of {cores} single-threaded worker process(es) "
          f"({os.cpu_count()} cores here)")
    print(f"{'measured':<36} {'submissions':>11} {'workers':>7} {'seconds':>8} {'subs/min':>9} {'subs/min/core':>13}")
    for label, seconds in (("the whole command", total), ("the class on the cluster", on_cluster)):
        rate = n / seconds * 60 if seconds else float("inf")
        print(f"{label:<36} {n:>11} {cores:>7} {seconds:>8.1f} {rate:>9.1f} {rate / cores:>13.1f}")
    print("every student graded as their notebook deserves" if not problems
          else "wrong grades:\n  " + "\n  ".join(problems[:20]))
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
