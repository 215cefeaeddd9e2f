"""Command line of the course's grading tools: ``python -m autograder COMMAND``.

- ``notebooks [ASSIGNMENT ...]``: generate the student notebooks in ``notebooks/`` from ``autograder/source/``.
- ``grade ASSIGNMENT SUBMISSIONS``: grade a class in the sandbox (see ``autograder.grading``). Before it grades
  anyone it loads every hidden check (here and inside the sandbox) and grades the instructor's own answers
  (the preflight); it refuses to start when either falls short. A line per submission with the time so far
  and an estimate of the time left; every result is kept as it arrives in ``OUT/.progress/``, and
  ``--resume`` grades only the submissions whose notebook, or the grader itself, changed since (a run
  killed halfway goes on where it stopped). ``--compare PREVIOUS/grades.csv`` is the dry run of a regrade:
  it writes only ``OUT/changes.csv``, whose score would change and which test cells cause it
  (see ``autograder.batch``).
- ``selftest [ASSIGNMENT ...]``: the same two steps alone, for every assignment (default) or those named.
- ``new-exercise ASSIGNMENT NAME --points P``: the cells, stubs, contract entry and table rows of a new exercise
  (see ``autograder.scaffold`` and CONTRIBUTING.md, "Adding an exercise"); the student notebook regenerated.
- ``student-repo OUT``: write the public student repository (built book, notebooks, helper package, Binder's
  set-up), its buttons naming ``--student-repository`` (default: ``student_repository`` in ``_config.yml``),
  leak-scanned (see ``autograder.bundle``).
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

from autograder.release import COURSE_ROOT, NOTEBOOKS, assignments, generate_releases


def _notebooks(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        targets = generate_releases(args.assignments or assignments(), args.out)
    except ValueError as err:
        parser.error(str(err))
    for assignment, target in targets.items():
        print(f"student notebook of {assignment} -> {target}")
    return 0


def _new_exercise(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from autograder.scaffold import ScaffoldError, make_request, new_exercise

    try:
        request = make_request(args.assignment, args.name, args.points, args.title, args.tests, args.signature,
                               args.takes, args.returns)
        written = new_exercise(request)
    except ScaffoldError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    root = COURSE_ROOT.parent
    tests = ", ".join(f"{args.name}_{p} ({n} point{'s' * (n != 1)})" for p, n in request.tests)
    print(f"scaffolded {args.name} in {args.assignment}: {tests}\nwrote "
          + "\n      ".join(str(p.relative_to(root)) for p in written)
          + "\nnow write by hand (CONTRIBUTING.md, \"Adding an exercise\"): the reference, the notebook's answer, text "
          "and visible checks, the cases, the known mistakes (attention_course/mistakes/, or the judge in a chapter "
          "that has none there), and a wrong and a correct catalogue entry")
    return 0


def _export(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from autograder import export
    from autograder.release import nbgrader_env

    os.environ["PATH"] = nbgrader_env()["PATH"]  # nbgrader's gradebook shells out to alembic
    try:
        return export.main(args.format, args.out, args.gradebook or f"sqlite:///{COURSE_ROOT / 'gradebook.db'}",
                           args.roster, args.assignment, args.column, args.missing)
    except export.ExportError as err:
        parser.error(str(err))


def _formgrader(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """nbgrader's formgrader: JupyterLab served from the course root, where nbgrader finds nbgrader_config.py, the
    sources, the gradebook that grade writes and the course's exchange."""
    from autograder.release import nbgrader_env

    course = (args.course or COURSE_ROOT).resolve()
    if not (course / "nbgrader_config.py").is_file():
        parser.error(f"{course} is not an nbgrader course root: it has no nbgrader_config.py")
    # the exchange nbgrader_config.py names: the formgrader offers to release only once it exists, and nbgrader
    # creates it only at the first release_assignment, so make it here as that command does (everyone may write)
    exchange = Path(os.environ.get("NBGRADER_EXCHANGE") or course / "exchange")
    if not exchange.exists():
        try:
            exchange.mkdir(parents=True)
            exchange.chmod(0o777)
        except OSError as err:
            print(f"note: cannot create the exchange {exchange} ({err.strerror or err}): the formgrader will not "
                  "release assignments; set NBGRADER_EXCHANGE to a folder you can write to", file=sys.stderr)
    extra = args.jupyter_args[1:] if args.jupyter_args[:1] == ["--"] else args.jupyter_args
    command = [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", f"--port={args.port}",
               f"--ServerApp.root_dir={course}", *extra]
    print(f"the formgrader of {course}: open http://localhost:{args.port}/formgrader (JupyterLab prints the address "
          "with its token below; Ctrl-C stops it)", flush=True)
    # JupyterLab takes this process's place: a signal that stops the command (a terminal's, a service manager's, a
    # test's terminate) reaches the server itself, which a child process left running would not get
    os.chdir(course)
    os.execve(command[0], command, nbgrader_env())


def _student_repo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from autograder.bundle import make_bundle, repositories

    try:
        repos = repositories(args.student_repository)
        entries = make_bundle(args.out, args.html, args.student_repository)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"student repository written to {args.out}: "
          f"{', '.join(p.name for p in entries if not p.name.startswith('.'))}"
          f"\nits site's repository and launch buttons name {repos.student_url} (branch {repos.branch})"
          "\nleak scan: no solution or hidden-test text, no mention of the course repository")
    return 0


def _sandbox_or_refuse(args: argparse.Namespace) -> bool | None:
    """True to grade in the sandbox, False for --no-sandbox; None (after saying why) when it cannot work."""
    from autograder import sandbox

    if args.no_sandbox:
        print("warning: --no-sandbox: submissions run with your permissions, network and files", file=sys.stderr)
        return False
    why = sandbox.problem()
    if why:
        print(f"refusing to grade: the sandbox does not work here: {why}.\n"
              "Student code is untrusted; fix the sandbox, or pass --no-sandbox to grade without one "
              "(only for notebooks you trust).", file=sys.stderr)
        return None
    return True


def _limits(args: argparse.Namespace):
    from autograder import sandbox

    return sandbox.Limits(wall_seconds=args.timeout, cell_seconds=args.cell_timeout, memory_bytes=args.memory_gb << 30)


def _settings(args: argparse.Namespace, assignment: str, scratch: Path, use_sandbox: bool, bundle: Path | None = None):
    from autograder import grading

    name, source, release, bundle = grading.prepare(assignment, scratch, bundle)
    return grading.Settings(assignment, name, source, release, bundle, _limits(args), use_sandbox)


def _warm_start(args: argparse.Namespace, scratch: Path, use_sandbox: bool) -> Path:
    """The sandbox bundle, and the grading workers already starting on it: bubblewrap, Python, torch and the
    checks load there once (about 4 s), and the ``--workers`` workers are forked from that one start-up, while
    this process imports torch and its own checks (about 3 s), not after them. (With ``--scheduler``, one: the
    cluster's workers grade the class.) Then the checks' index goes into the bundle, before any notebook runs."""
    from autograder import sandbox
    from autograder.chapters import WARM_DYNAMO

    bundle = sandbox.build_bundle(scratch / "bundle", index=False)
    sandbox.prestart(bundle, _limits(args), use_sandbox, count=1 if args.scheduler else max(1, args.workers),
                     warm_dynamo=args.assignment in WARM_DYNAMO)
    _one_torch_thread_per_judge()
    sandbox.write_index(bundle)
    return bundle


def _refuse(what: str, problems: list[str]) -> int:
    print(f"refusing to grade: {what}:\n" + "\n".join(f"  - {p}" for p in problems), file=sys.stderr)
    return 2


def _grade(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from autograder import batch
    from autograder.release import nbgrader_env

    previous = None
    if args.compare:  # before anything else: a typo must not cost a class's worth of time, or even a second
        try:
            previous = batch.read_previous(args.compare, args.assignment)
        except ValueError as err:
            parser.error(f"--compare: {err}")
    from autograder import deadlines
    from autograder.chapters import chapter

    try:
        chapter(args.assignment)
        due = deadlines.parse_time(args.due, "--due") if args.due else None
        stamped = deadlines.read_timestamps(args.timestamps) if args.timestamps else {}
        extensions = deadlines.read_extensions(args.extension, args.extensions)
        deadlines.check_zone(args.zip_timezone)
        deadlines.load_plugin(COURSE_ROOT)  # a broken plugin must not cost a class's worth of time (the due
        # date may be the gradebook's, known only at the end)
    except ValueError as err:  # before any worker starts
        parser.error(str(err))
    os.environ["PATH"] = nbgrader_env()["PATH"]  # nbgrader's gradebook shells out to alembic
    use_sandbox = _sandbox_or_refuse(args)
    if use_sandbox is None:
        return 2
    out = args.out or Path("grades") / args.assignment
    unwritable = _unwritable(out)
    if unwritable:  # before any grading: a class's worth of work must not be lost at the end
        parser.error(f"cannot write the grades to {out}: {unwritable}; pass --out DIR with a folder you can write "
                     "to (a read-only checkout of the course grades fine that way)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="autograder-") as scratch:
        scratch_path = Path(scratch)
        bundle = _warm_start(args, scratch_path, use_sandbox)
        from autograder import grading, reports

        try:
            settings = _settings(args, args.assignment, scratch_path, use_sandbox, bundle)
            found = grading.collect(args.submissions, args.assignment, settings.notebook_name, scratch_path,
                                    args.zip_timezone)
        except ValueError as err:
            parser.error(str(err))
        loading = time.monotonic()
        problems = grading.load_problems(settings)
        load_seconds = time.monotonic() - loading
        if problems:
            return _refuse("the hidden checks cannot run, so every score would be wrong", problems)
        store = batch.ProgressStore(out / ".progress")
        version = batch.grader_version(settings)
        keys = {s.student_id: batch.submission_key(s, version) for s in found}
        reused, todo = batch.reuse(found, store, keys) if args.resume else ([], found)
        if args.resume:
            print(f"resume: reused {len(reused)} of {len(found)} stored results from {store.folder} (notebook and "
                  f"grader unchanged); grading the other {len(todo)}", file=sys.stderr, flush=True)
        try:
            results = _run_all(todo, settings, args.workers, args.scheduler, reused=reused,
                               on_result=lambda r: store.save(r, keys.get(r.student_id)))
        except PreflightFailed as failed:
            return _refuse(f"the instructor's own answers to {args.assignment} do not get full marks in the "
                           f"sandbox ({failed.result.score:g}/{failed.result.max_score:g}), so the checks or the "
                           "sandbox are broken", failed.problems)
    gradebook = args.gradebook or (_default_gradebook(out) if previous is None else _gradebook_to_read(out))
    lateness = _apply_deadlines(results, found, stamped, due, extensions, gradebook)
    if previous is not None:
        return _dry_run(args, out, previous, results)
    writing = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    reports.write_grades(results, out / "grades.csv")
    for result in results:
        reports.write_feedback(result, out / "feedback")
    reports.write_report(results, out / "report.html", lateness)
    reports.write_gradebook(results, settings.notebook_name, json.loads(settings.release.read_text()), gradebook)
    deadlines.record(lateness, args.assignment, Path(settings.notebook_name).stem, due, extensions, gradebook)
    now = time.monotonic()
    spent = grading.timings(results, load_seconds, now - writing, now - started)
    (out / "timings.json").write_text(json.dumps(spent, indent=1), encoding="utf-8")
    statuses = Counter(r.status for r in results)
    mean = sum(r.score for r in results) / len(results) if results else 0.0
    maximum = max((r.max_score for r in results), default=0.0)
    print(f"graded {len(results)} submissions of {args.assignment} in {time.monotonic() - started:.0f} s: "
          + ", ".join(f"{n} {s}" for s, n in statuses.most_common())
          + f"; mean {mean:.1f} / {maximum:g}" + (f" ({len(reused)} reused from {store.folder})" if reused else "")
          + f"\ngrades: {out / 'grades.csv'}   feedback: {out / 'feedback'}   report: {out / 'report.html'}")
    return 0


def _apply_deadlines(results: list, found: list, stamped: dict, due, extensions: dict, gradebook: str) -> dict:
    """Each result's lateness (autograder.deadlines): its penalty taken from its score, and a line in its reason
    when it is late. Students named in --timestamps or --extension without a submission are said, not dropped."""
    from autograder import deadlines

    times = {s.student_id: (s.submitted_at, s.time_source) for s in found if s.submitted_at is not None}
    times.update({student: (when, deadlines.FROM_CSV) for student, when in stamped.items()})
    graded = {r.student_id for r in results}
    for what, named in (("--timestamps", stamped), ("--extension", extensions)):
        strangers = sorted(set(named) - graded)
        if strangers:
            print(f"note: {what} names {len(strangers)} student(s) with no submission here: {', '.join(strangers)}",
                  file=sys.stderr, flush=True)
    lateness = deadlines.assess(results, times, due, extensions, gradebook, COURSE_ROOT)
    for result in results:
        late = lateness[result.student_id]
        result.penalty = late.penalty
        if late.seconds_late:
            result.reason = "; ".join(filter(None, [result.reason, late.describe()]))
    return lateness


def _gradebook_to_read(out: Path) -> str:
    """The gradebook a dry run reads due dates and extensions from, without writing it or saying where."""
    return f"sqlite:///{COURSE_ROOT / 'gradebook.db'}" if _unwritable(COURSE_ROOT) is None else \
        f"sqlite:///{out.resolve() / 'gradebook.db'}"


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written to (None when it can): a file made and removed there, and the
    folders made for it removed after (a command that refuses later leaves nothing behind)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as err:
        return err.strerror or str(err)
    finally:
        for made in missing:  # the deepest first
            try:
                made.rmdir()
            except OSError:
                break
    return None


def _default_gradebook(out: Path) -> str:
    """nbgrader's gradebook in ``autograder/`` (where ``nbgrader export`` finds it), or beside the grades when the
    course's folder is read-only."""
    if _unwritable(COURSE_ROOT) is None:
        return f"sqlite:///{COURSE_ROOT / 'gradebook.db'}"
    print(f"note: {COURSE_ROOT} is read-only, so nbgrader's gradebook is written to {out / 'gradebook.db'} "
          "(pass --gradebook URL to choose)", file=sys.stderr, flush=True)
    return f"sqlite:///{out.resolve() / 'gradebook.db'}"


def _dry_run(args: argparse.Namespace, out: Path, previous: dict, results: list) -> int:
    """``--compare``: write and print only who would change, leaving the grades, feedback, report and
    gradebook as they are (the progress store is written, so the real run can ``--resume``)."""
    from autograder import batch

    changes = batch.compare(previous, results)
    batch.write_changes(changes, out / "changes.csv")
    kinds = Counter(c.change for c in changes)
    print(f"compared {len(results)} submissions of {args.assignment} with {args.compare}: "
          f"{kinds['score']} score(s) would change, {kinds['new']} new, {kinds['missing']} missing"
          + "".join(f"\n  {batch.describe(c)}" for c in changes)
          + f"\nchanges: {out / 'changes.csv'}")
    print(f"dry run (--compare): grades.csv, feedback, report and gradebook were not written; the results are "
          f"stored in {out / '.progress'}, so the real run with --resume (same options) grades nobody again",
          file=sys.stderr, flush=True)
    return 0


class PreflightFailed(Exception):
    def __init__(self, result, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.result, self.problems = result, problems


def _run_all(found: list, settings, workers: int, scheduler: str | None, *, reused: list | tuple = (),
             on_result=None) -> list:
    """Grade ``found``, the instructor's answers first: if they fall short, raise PreflightFailed before any
    result is kept (submissions already running finish; the rest are cancelled). ``reused``: results taken
    from the progress store, counted as done; ``on_result`` is called with each new result before its
    progress line is printed (so a line on screen means the result is stored)."""
    from autograder.batch import Progress
    from autograder.grading import grade_one, instructor_submission, preflight_problems

    results = list(reused)
    tracker = Progress(total=len(found) + len(results), done=len(results))

    def progress(result) -> None:
        if on_result is not None:
            on_result(result)
        results.append(result)
        tracker.arrived(result)

    def check(preflight) -> None:
        problems = preflight_problems(preflight)
        if problems:
            raise PreflightFailed(preflight, problems)
        print(f"preflight: the instructor's answers score {preflight.score:g}/{preflight.max_score:g} in the "
              "sandbox", file=sys.stderr, flush=True)

    print(f"preflight: grading the instructor's answers to {settings.assignment} in the sandbox first "
          "(about one submission's time)", file=sys.stderr, flush=True)
    if scheduler:
        from dask.distributed import Client
        from dask.distributed import as_completed as dask_completed

        check(grade_one(instructor_submission(settings), settings))
        tracker.start()  # the preflight ran alone, before the cluster: not part of the class's rate
        with Client(scheduler) as client:
            # the notebooks travel with the tasks: a worker on another machine cannot read this one's files
            futures = client.map(grade_one, [s.carried() for s in found], settings=settings, pure=False)
            for future in dask_completed(futures):
                progress(future.result())
    else:
        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        tracker.start(units=1)  # the preflight takes one worker's turn beside the class
        try:
            preflight = pool.submit(grade_one, instructor_submission(settings), settings)
            futures = [pool.submit(grade_one, s, settings) for s in found]
            check(preflight.result())
            for future in as_completed(futures):
                progress(future.result())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return sorted(results, key=lambda r: r.student_id)


def _selftest(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Load every check and grade each assignment's instructor answers in the sandbox; 0 when all are full."""
    from autograder import grading

    use_sandbox = _sandbox_or_refuse(args)
    if use_sandbox is None:
        return 2
    chosen = args.assignments or assignments()
    unknown = sorted(set(chosen) - set(assignments()))
    if unknown:
        parser.error(f"unknown assignment(s) {', '.join(unknown)}; known: {', '.join(assignments())}")
    started = time.monotonic()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="autograder-selftest-") as scratch:
        from autograder.chapters import WARM_DYNAMO
        from autograder.sandbox import build_bundle, prestart

        bundle = build_bundle(Path(scratch) / "bundle")  # one for all: the assignments then share warm workers
        prestart(bundle, _limits(args), use_sandbox, count=max(1, args.workers),  # forked from one start-up
                 warm_dynamo=bool(WARM_DYNAMO & set(chosen)))
        all_settings = [_settings(args, a, Path(scratch) / a, use_sandbox, bundle) for a in chosen]
        problems = grading.load_problems(all_settings[0])
        problems += [p for s in all_settings[1:] for p in grading.load_problems(s, sandbox_side=False)]
        problems = list(dict.fromkeys(problems))  # a module that fails is named once, not per assignment
        if problems:
            return _refuse("the hidden checks cannot run", problems)
        print(f"selftest: grading the instructor's answers to {len(chosen)} assignment(s) in the sandbox "
              f"({args.workers} at a time)", file=sys.stderr, flush=True)
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            jobs = {pool.submit(grading.grade_one, grading.instructor_submission(s), s): s for s in all_settings}
            for job in as_completed(jobs):
                result, settings = job.result(), jobs[job]
                short = grading.preflight_problems(result)
                failed += bool(short)
                print(f"{settings.assignment}: {result.score:g}/{result.max_score:g}, {result.status}"
                      + "".join(f"\n  - {p}" for p in short), flush=True)
    print(f"selftest: {len(chosen) - failed} of {len(chosen)} assignment(s) give the instructor full marks "
          f"({time.monotonic() - started:.0f} s)")
    return 1 if failed else 0


def _one_torch_thread_per_judge() -> None:
    """The judges of several submissions run at once, a thread each, in this process: on tiny tensors a second
    torch thread per judge only contends for the cores (Chapter 8's judges: 50 forward passes of its tiny model
    took 0.43 s of CPU on 2 threads and 0.04 s on one, on the 2-core machine). The notebooks' own processes, in
    the sandbox, are set the same way (OMP_NUM_THREADS=1)."""
    import torch

    torch.set_num_threads(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("notebooks", help="generate the student notebooks from autograder/source/")
    release.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    release.add_argument("--out", type=Path, default=NOTEBOOKS, help="where to write them (default: notebooks/)")
    grade = commands.add_parser("grade", help="grade a class of submissions in a sandbox")
    grade.add_argument("assignment", help="assignment id, e.g. 01_self_attention")
    grade.add_argument("submissions", type=Path,
                       help="folder of <student>/*.ipynb, nbgrader's submitted/ layout, or an LMS .zip")
    grade.add_argument("--out", type=Path, help="output folder (default: grades/ASSIGNMENT)")
    grade.add_argument("--scheduler", metavar="ADDRESS",
                       help="grade on a Dask distributed cluster instead (e.g. tcp://host:8786; --workers is then "
                       "not used); each worker needs this repository at the same path and commit, and bubblewrap")
    grade.add_argument("--gradebook", help="nbgrader database URL (default: sqlite:///autograder/gradebook.db)")
    grade.add_argument("--resume", action="store_true",
                       help="reuse the results stored in OUT/.progress/ for every submission whose notebook, and "
                       "the grader (its code, the checks, the reference, the notebooks, the limits), are unchanged "
                       "since; grade the rest (every result is stored as it arrives, with or without --resume)")
    grade.add_argument("--compare", type=Path, metavar="PREVIOUS_CSV",
                       help="dry run of a regrade: grade, then write only OUT/changes.csv, every student whose "
                       "score would differ from PREVIOUS_CSV (an earlier grades.csv of this assignment) and the "
                       "test cells that make the difference, and those new or missing; grades.csv, feedback, "
                       "report and gradebook are not written")
    deadline = grade.add_argument_group("deadlines", "as nbgrader keeps them (autograder/deadlines.py): the late "
                                        "penalty is the one the late-submission plugin of autograder/"
                                        "nbgrader_config.py gives, as in nbgrader autograde")
    deadline.add_argument("--due", metavar="TIME", help="the due date, e.g. '2026-12-01 17:00:00 Europe/Berlin' "
                          "(UTC without a zone), recorded in the gradebook (default: the gradebook's)")
    deadline.add_argument("--timestamps", type=Path, metavar="CSV", help="each submission's time: a CSV with "
                          "student_id and timestamp columns (before timestamp.txt and zip entry times)")
    deadline.add_argument("--extension", action="append", default=[], metavar="STUDENT=HOURS",
                          help="an extension of the due date for one student, recorded in the gradebook "
                          "(repeatable)")
    deadline.add_argument("--extensions", type=Path, metavar="CSV",
                          help="extensions from a CSV with student_id and hours columns")
    deadline.add_argument("--zip-timezone", default="UTC", metavar="ZONE",
                          help="the zone the times inside a zip were written in (default UTC)")
    selftest = commands.add_parser("selftest", help="load every check and grade the instructor's answers in the "
                                   "sandbox (what grade does before anyone else)")
    selftest.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    scaffold = commands.add_parser("new-exercise", help="scaffold a new exercise of a chapter: notebook cells, "
                                   "reference stub, check and judge skeletons, catalogue template, contract, tables")
    scaffold.add_argument("assignment", help="assignment id, e.g. 05_positional_encoding")
    scaffold.add_argument("name", help="the exercise's name, a Python function name, e.g. alibi_bias")
    scaffold.add_argument("--points", type=int, required=True, help="the exercise's points, at least 1")
    scaffold.add_argument("--title", help="the section's title (default: the name in backticks)")
    scaffold.add_argument("--tests", help="its test cells: values,errors (points shared out, the first ones taking "
                          "the rest) or values:3,errors:1 (default: values,errors; values alone for 1 point)")
    scaffold.add_argument("--signature", default="(x: Tensor) -> Tensor",
                          help="the function's signature (default: '(x: Tensor) -> Tensor')")
    scaffold.add_argument("--takes", help="book/notation.md's 'takes' cell (default: the arguments' names)")
    scaffold.add_argument("--returns", help="book/notation.md's 'returns' cell (default: the return annotation)")
    bundle = commands.add_parser("student-repo", help="write the public student repository (built book, notebooks, "
                                 "helpers, Binder's set-up)")
    bundle.add_argument("out", type=Path, help="folder to write (empty, a clone of the student repository holding "
                        "only .git, or a bundle made earlier: all but its .git is replaced)")
    bundle.add_argument("--html", type=Path, default=Path("_build/html"), help="the built book (default _build/html)")
    bundle.add_argument("--student-repository", metavar="URL", help="the public student repository "
                        "(https://github.com/OWNER/NAME) that the site's repository and launch buttons name "
                        "(default: student_repository in _config.yml)")
    formgrader = commands.add_parser("formgrader", help="nbgrader's formgrader in JupyterLab, served from the course "
                                     "root (autograder/)")
    formgrader.add_argument("--port", type=int, default=8888, help="the port to serve on (default 8888)")
    formgrader.add_argument("--course", type=Path, help="another nbgrader course root (default: autograder/)")
    formgrader.add_argument("jupyter_args", nargs=argparse.REMAINDER,
                            help="after --, options for jupyter lab, e.g. -- --ServerApp.ip=0.0.0.0")
    exporting = commands.add_parser("export", help="write the gradebook's grades in an LMS's import format (Canvas, "
                                    "Moodle) or a plain CSV")
    exporting.add_argument("format", choices=("canvas", "moodle", "plain"), help="the file's format")
    exporting.add_argument("--out", type=Path, help="the CSV to write (default: standard output)")
    exporting.add_argument("--gradebook", help="nbgrader database URL (default: sqlite:///autograder/gradebook.db, "
                           "where grade writes it)")
    exporting.add_argument("--roster", type=Path, help="CSV with a student_id column and the LMS's identity columns "
                           "(Canvas: Student, ID, SIS User ID, SIS Login ID, Section; Moodle: First name, Last name, "
                           "Email address, ID number, Username)")
    exporting.add_argument("--assignment", action="append", metavar="ID",
                           help="an assignment to export (repeat it; default: every assignment in the gradebook)")
    exporting.add_argument("--column", action="append", default=[], metavar="ID=HEADER",
                           help="the LMS's column for an assignment, e.g. '01_self_attention=Self-attention (4321)' "
                           "for Canvas's assignment 4321 (default: the assignment id)")
    exporting.add_argument("--missing", choices=("blank", "zero"), default="blank",
                           help="a student without a submission: an empty cell (the LMS keeps its grade; the "
                           "default) or 0, as nbgrader export writes")
    for command in (grade, selftest):  # the sandbox and its limits, the same for both
        # one more than the cores: a worker spends part of each notebook waiting on its kernel (start-up, replies)
        command.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1,
                             help="parallel notebooks (default: cores + 1)")
        command.add_argument("--no-sandbox", action="store_true",
                             help="run without bubblewrap (trusted notebooks only)")
        command.add_argument("--timeout", type=int, default=600, help="seconds per notebook (default 600)")
        command.add_argument("--cell-timeout", type=int, default=120, help="seconds per cell (default 120)")
        command.add_argument("--memory-gb", type=int, default=6,
                             help="address-space limit per notebook (default 6)")
    args = parser.parse_args(argv)
    if args.command == "selftest":  # grade sets it while its first worker starts (_warm_start)
        _one_torch_thread_per_judge()
    commands = {"notebooks": _notebooks, "grade": _grade, "selftest": _selftest, "student-repo": _student_repo,
                "new-exercise": _new_exercise, "export": _export,
                "formgrader": _formgrader}
    return commands[args.command](args, parser)


if __name__ == "__main__":
    sys.exit(main())
