"""A contributor's view of the catalogues, in seconds: what the checks say of every entry.

    python tests/catalogue_status.py [ASSIGNMENT ...] [--exercise NAME] [--all]

For each wrong answer: the name it must be given and the cell that owns it, then what the hidden checks say and
what the visible checks alone say (the release's test cells). ``ok`` when the owner cell names the mistake, the
visible checks name it, and no cell names another mistake.
For correct answers, any cell that fails. Without an assignment, every chapter, then the total. With
``--exercise``, only the entries of that exercise (of the one assignment given): what a contributor adding it reads.

The hidden checks judge an entry as ``tests/test_catalogue.py`` does, in this process, as nbgrader's kernel would:
the notebook's answers with the entry in place of its exercise's, and the test cells of that exercise and of those
built on it (``touched_cells``; the other cells run the instructor's answers). The class grader
(``tests/test_catalogue.py``) is the real proof.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from class_grading import catalogue_module, touched_cells  # noqa: E402
from notebook_grading import ASSIGNMENTS, exercise_names, exercise_of, grade_in_process  # noqa: E402

from attention_course.testing import mistake_name  # noqa: E402


def _wrong_entry(assignment: str, index: int) -> tuple[list[str], bool]:
    """What needs a fix in the wrong answer ``WRONG[index]``, and whether the visible checks name it."""
    entry = catalogue_module(assignment).WRONG[index]
    exercises = exercise_names(assignment)
    cells = touched_cells(assignment, entry.target)
    hidden = {g: r.message for g, r in grade_in_process(assignment, {entry.target: entry.impl}, cells=cells,
                                                        as_notebook=True).items() if not r.passed}
    visible = {g: r.message for g, r in
               grade_in_process(assignment, {entry.target: entry.impl}, visible_only=True,
                                exercise=entry.target).items()
               if not r.passed}
    allowed = {entry.name, *entry.also, None}
    issues = []
    if mistake_name(hidden.get(entry.cell, "")) != entry.name:
        issues.append(f"hidden {entry.cell or '(no cell)'}: {hidden.get(entry.cell, 'passed')}")
    issues += [f"hidden {g} names another mistake: {m}" for g, m in hidden.items()
               if mistake_name(m) not in allowed]
    issues += [f"visible {g} names another mistake: {m}" for g, m in visible.items()
               if mistake_name(m) not in allowed]
    own = [m for g, m in visible.items() if exercise_of(g, exercises) == entry.target]
    seen = any(mistake_name(m) == entry.name for m in own)
    if not visible:
        issues.append(f"passes every visible check: add one to the test cell {entry.cell} that fails it")
    elif not seen:
        issues.append("visible checks do not name it: " + (" | ".join(own) or "no visible cell of it fails"))
    return issues, seen


def _correct_entry(assignment: str, index: int) -> list[str]:
    """The cells, hidden then visible, that the correct answer ``CORRECT[index]`` fails."""
    entry = catalogue_module(assignment).CORRECT[index]
    cells = touched_cells(assignment, entry.target)
    issues = []
    for visible_only in (False, True):
        failed = {g: r.message for g, r in grade_in_process(
            assignment, {entry.target: entry.impl}, visible_only=visible_only, cells=cells,
            as_notebook=not visible_only).items() if not r.passed}
        if failed:
            issues.append(f"FIX correct {entry.target}: {entry.label!r} fails {'visible' if visible_only else 'hidden'}"
                          f" {failed}")
    return issues


def _judge(assignment: str, tasks: list[tuple[str, int]]) -> list[tuple[str, int, object]]:
    """Judge these entries, ``("wrong" | "correct", index)``, in this process (a worker of the pool)."""
    torch.set_num_threads(1)  # small tensors: a second thread only costs CPU time, and the workers share the cores
    return [(kind, i, _wrong_entry(assignment, i) if kind == "wrong" else _correct_entry(assignment, i))
            for kind, i in tasks]


def status(assignment: str, show_all: bool, exercise: str | None = None,
           pool: ProcessPoolExecutor | None = None, jobs: int = 1) -> tuple[int, int, int]:
    """Print the entries of ``assignment``'s catalogue (of ``exercise`` only, when given) that need a fix (all of
    them with ``show_all``); return (entries to fix, wrong answers the visible checks name, wrong answers). With a
    ``pool`` of ``jobs`` processes, each judges a share of the entries; they are printed in order."""
    module = catalogue_module(assignment)
    tasks = [("wrong", i) for i, e in enumerate(module.WRONG) if exercise in (None, e.target)]
    tasks += [("correct", i) for i, e in enumerate(module.CORRECT) if exercise in (None, e.target)]
    if pool is not None and len(tasks) > 1:
        shares = [pool.submit(_judge, assignment, tasks[k::jobs]) for k in range(min(jobs, len(tasks)))]
        results = {(kind, i): r for share in shares for kind, i, r in share.result()}
    else:
        results = {(kind, i): r for kind, i, r in _judge(assignment, tasks)}
    problems = named_visibly = wrong = 0
    for kind, i in tasks:
        if kind == "correct":
            problems += len(results[kind, i])
            for line in results[kind, i]:
                print(line)
            continue
        entry, (issues, seen) = module.WRONG[i], results[kind, i]
        wrong += 1
        named_visibly += seen
        problems += bool(issues)
        if issues or show_all:
            print(f"{'FIX' if issues else 'ok '} {entry.target}: {entry.label!r} -> ({entry.name}) in {entry.cell}")
            for line in issues:
                print(f"      {line}")
    return problems, named_visibly, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignments", nargs="*", help="assignment ids (default: every chapter)")
    parser.add_argument("--exercise", metavar="NAME", help="only the entries of this exercise (one assignment)")
    parser.add_argument("--all", action="store_true", help="print the entries that are fine too")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes judging the entries (default: 2, or 1 on one core)")
    args = parser.parse_args()
    unknown = [a for a in args.assignments if a not in ASSIGNMENTS]
    if unknown:
        parser.error(f"unknown assignment {', '.join(unknown)}: one of {', '.join(ASSIGNMENTS)}")
    if args.exercise and len(args.assignments) != 1:
        parser.error("--exercise needs the one assignment the exercise belongs to")
    if args.exercise and args.exercise not in exercise_names(args.assignments[0]):
        parser.error(f"{args.assignments[0]} has no exercise {args.exercise!r}: one of "
                     f"{', '.join(exercise_names(args.assignments[0]))}")
    totals = [0, 0, 0]
    # one pool for every chapter asked for: a worker's start-up (torch and the checks, about 5 s) is paid once
    spawn = multiprocessing.get_context("spawn")  # fresh interpreters: no state shared with this one
    pool = ProcessPoolExecutor(args.jobs, mp_context=spawn) if args.jobs > 1 else None
    try:
        for assignment in args.assignments or list(ASSIGNMENTS):
            started = time.monotonic()
            problems, named, wrong = status(assignment, args.all, args.exercise, pool, args.jobs)
            totals = [t + n for t, n in zip(totals, (problems, named, wrong), strict=True)]
            where = f"{assignment} ({args.exercise})" if args.exercise else assignment
            print(f"{where}: {problems} entries to fix; visible checks name {named}/{wrong} "
                  f"({named / max(wrong, 1):.0%}) of the wrong answers ({time.monotonic() - started:.0f} s)",
                  flush=True)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if len(args.assignments) != 1:
        problems, named, wrong = totals
        print(f"all: {problems} entries to fix; visible checks name {named}/{wrong} ({named / max(wrong, 1):.0%}) "
              "of the wrong answers")
    return 1 if totals[0] else 0


if __name__ == "__main__":
    raise SystemExit(main())
