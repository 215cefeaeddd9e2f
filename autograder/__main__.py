"""Command line of the course's grading tools: ``python -m autograder COMMAND``.

- ``release [ASSIGNMENT ...]``: generate the student notebooks in ``notebooks/``.
- ``grade ASSIGNMENT SUBMISSIONS``: grade a class in the sandbox (see ``autograder.grading``).
- ``bundle OUT``: write the student bundle (built book, notebooks, helper package), leak-scanned
  (see ``autograder.bundle``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from autograder.release import COURSE_ROOT, NOTEBOOKS, assignments, generate_release


def _release(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    for assignment in args.assignments or assignments():
        try:
            target = generate_release(assignment, args.out)
        except ValueError as err:
            parser.error(str(err))
        print(f"released {assignment} -> {target}")
    return 0


def _bundle(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from autograder.bundle import make_bundle

    try:
        entries = make_bundle(args.out, args.html)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"student bundle written to {args.out}: {', '.join(p.name for p in entries if not p.name.startswith('.'))}"
          "\nleak scan: no solution or hidden-test text found")
    return 0


def _grade(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from autograder import grading, reports, sandbox
    from autograder.release import nbgrader_env

    os.environ["PATH"] = nbgrader_env()["PATH"]  # nbgrader's gradebook shells out to alembic

    use_sandbox = not args.no_sandbox
    if use_sandbox:
        why = sandbox.problem()
        if why:
            print(f"refusing to grade: the sandbox does not work here: {why}.\n"
                  "Student code is untrusted; fix the sandbox, or pass --no-sandbox to grade without one "
                  "(only for notebooks you trust).", file=sys.stderr)
            return 2
    else:
        print("warning: --no-sandbox: submissions run with your permissions, network and files", file=sys.stderr)
    limits = sandbox.Limits(wall_seconds=args.timeout, cell_seconds=args.cell_timeout,
                            memory_bytes=args.memory_gb << 30)
    out = args.out or Path("grades") / args.assignment
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="autograder-") as scratch:
        scratch_path = Path(scratch)
        try:
            name, source, release, bundle = grading.prepare(args.assignment, scratch_path)
            found = grading.collect(args.submissions, args.assignment, name, scratch_path)
        except ValueError as err:
            parser.error(str(err))
        settings = grading.Settings(args.assignment, name, source, release, bundle, limits, use_sandbox)
        results = _run_all(found, settings, args.workers, args.scheduler)
    out.mkdir(parents=True, exist_ok=True)
    reports.write_grades(results, out / "grades.csv")
    for result in results:
        reports.write_feedback(result, out / "feedback")
    reports.write_report(results, out / "report.html")
    gradebook = args.gradebook or f"sqlite:///{COURSE_ROOT / 'gradebook.db'}"
    reports.write_gradebook(results, name, json.loads(release.read_text()), gradebook)
    statuses = Counter(r.status for r in results)
    mean = sum(r.score for r in results) / len(results) if results else 0.0
    maximum = max((r.max_score for r in results), default=0.0)
    print(f"graded {len(results)} submissions of {args.assignment} in {time.monotonic() - started:.0f} s: "
          + ", ".join(f"{n} {s}" for s, n in statuses.most_common())
          + f"; mean {mean:.1f} / {maximum:g}\n"
          f"grades: {out / 'grades.csv'}   feedback: {out / 'feedback'}   report: {out / 'report.html'}")
    return 0


def _run_all(found: list, settings, workers: int, scheduler: str | None) -> list:
    from autograder.grading import grade_one

    results = []
    total = len(found)

    def progress(result) -> None:
        results.append(result)
        print(f"[{len(results):>{len(str(total))}}/{total}] {result.student_id}: {result.status}, "
              f"{result.score:g}/{result.max_score:g}", file=sys.stderr, flush=True)

    if scheduler:
        from dask.distributed import Client
        from dask.distributed import as_completed as dask_completed

        with Client(scheduler) as client:
            # the notebooks travel with the tasks: a worker on another machine cannot read this one's files
            futures = client.map(grade_one, [s.carried() for s in found], settings=settings, pure=False)
            for future in dask_completed(futures):
                progress(future.result())
    else:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for future in as_completed([pool.submit(grade_one, s, settings) for s in found]):
                progress(future.result())
    return sorted(results, key=lambda r: r.student_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("release", help="generate the student notebooks from autograder/source/")
    release.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    release.add_argument("--out", type=Path, default=NOTEBOOKS, help="where to write them (default: notebooks/)")
    grade = commands.add_parser("grade", help="grade a class of submissions in a sandbox")
    grade.add_argument("assignment", help="assignment id, e.g. 01_self_attention")
    grade.add_argument("submissions", type=Path,
                       help="folder of <student>/*.ipynb, nbgrader's submitted/ layout, or an LMS .zip")
    grade.add_argument("--out", type=Path, help="output folder (default: grades/ASSIGNMENT)")
    # one more than the cores: a worker spends part of each notebook waiting on its kernel (start-up, replies)
    grade.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1,
                       help="parallel submissions (default: cores + 1)")
    grade.add_argument("--scheduler", help="address of a Dask distributed scheduler to grade on instead")
    grade.add_argument("--no-sandbox", action="store_true", help="run without bubblewrap (trusted notebooks only)")
    grade.add_argument("--timeout", type=int, default=600, help="seconds per notebook (default 600)")
    grade.add_argument("--cell-timeout", type=int, default=120, help="seconds per cell (default 120)")
    grade.add_argument("--memory-gb", type=int, default=6, help="address-space limit per notebook (default 6)")
    grade.add_argument("--gradebook", help="nbgrader database URL (default: sqlite:///autograder/gradebook.db)")
    bundle = commands.add_parser("bundle", help="write the student bundle (built book, notebooks, helpers)")
    bundle.add_argument("out", type=Path, help="folder to write (empty, or a bundle made earlier)")
    bundle.add_argument("--html", type=Path, default=Path("_build/html"), help="the built book (default _build/html)")
    args = parser.parse_args(argv)
    commands = {"release": _release, "grade": _grade, "bundle": _bundle}
    return commands[args.command](args, parser)


if __name__ == "__main__":
    sys.exit(main())
