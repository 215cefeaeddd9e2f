"""Grade a class: find the submissions, run each in the sandbox, judge outside it, record every one.

For each submission:

1. **Read** the notebook (a wrongly named one is accepted when it is the only
   notebook; invalid JSON, an empty folder or several candidates give an
   ``invalid`` row with the reason).
2. **Assemble** the notebook that will run: the instructor's source notebook
   (its test cells carry the hidden checks), in which every solution cell is
   replaced by the learner's answer (matched by ``grade_id``), or by the
   release's empty stub where the learner has none, and the learner's own
   extra code cells are put in. Test cells, set-up cells and metadata always
   come from the instructor, so deleted, duplicated or altered test cells and
   unknown metadata change nothing.
3. **Run** it in the sandbox (:mod:`autograder.sandbox`); the hidden checks
   only *probe* there, writing plain observations.
4. **Judge** in this trusted process: each test cell's points come from the
   reference's verdict on the observations recorded while that cell ran, so
   nothing the learner's code does inside the sandbox can earn a point; a
   cell whose hidden check passed then keeps its points only if the whole
   cell ran as ``nbgrader autograde`` would score it (no error in a visible
   assert, nothing on stderr), so that both give every cell the same points.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import re
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat

from attention_course.testing import mistake_name
from autograder import sandbox
from autograder.chapters import chapter
from autograder.checks.core import Mistake
from autograder.judges.core import RecordMismatch, judge_recorded

COURSE_ROOT = Path(__file__).resolve().parent
REPO_ROOT = COURSE_ROOT.parent
STATUSES = ("ok", "timeout", "crashed", "invalid", "flagged")
MAX_NOTEBOOK_BYTES = 20 << 20
MAX_OBSERVATION_BYTES = 64 << 20
#: Source patterns that have no place in an honest answer; a match flags the submission for a person to look at.
SUSPICIOUS = {
    r"\b(import|from)\s+(autograder|solutions|nbgrader)\b|__import__|importlib|gradebook\.db":
        "import the grader or the reference",
    r"\brun_check\b|AUTOGRADER_OBSERVATIONS": "touch the hidden checks",
    r"torch\.(allclose|equal|testing)\s*=|builtins\.|__builtins__": "replace built-in or comparison functions",
    r"sys\.(modules|meta_path|path_hooks|settrace|setprofile)|inspect\.(stack|currentframe)|sys\._getframe":
        "hook imports or inspect the caller's frames",
    r"\b(gc\.get_objects|ctypes)\b": "search memory or call C directly",
    # No exercise needs files, the environment, processes, signals or threads: code that reaches for them
    # can rewrite or suppress the hidden checks' records, so a person should look.
    r"\b(import|from)\s+(os|sys|io|subprocess|signal|threading|multiprocessing|socket|shutil|tempfile|pathlib|mmap"
    r"|resource|pty|fcntl|atexit)\b|(?<![\w.])open\s*\(|\bos\.|environ|/proc\b|/dev/|\.jsonl":
        "reach for files, the environment or other processes",
    r"(?<![\w.])(exec|eval|compile)\s*\(|\b(globals|locals|vars)\s*\(\s*\)":
        "run code or reach names built from strings",
    r"\b(get_ipython|IPython|ipykernel|display_pub|zmq)\b": "reach into the notebook's kernel",
    r"\b(BaseException|KeyboardInterrupt|SystemExit|GeneratorExit)\b|(?<![\w])_exit\s*\(|(?<![\w.])(exit|quit)\s*\(":
        "raise or catch what stops the hidden checks",
}


@dataclass
class Submission:
    student_id: str
    notebook: Path | None  # None when nothing gradable was found
    problem: str = ""  # why it cannot be graded (status invalid)
    note: str = ""  # worth knowing, but gradable
    data: bytes | None = None  # the notebook's bytes, when they travel with the task (Dask workers elsewhere)
    submitted_at: datetime | None = None  # when it came in, UTC (autograder.deadlines), if the submission says
    time_source: str = ""  # where that time came from: timestamp.txt or the zip entry

    def carried(self) -> Submission:
        """This submission with its notebook's bytes attached, for a worker that cannot see the file."""
        if self.notebook is None or self.data is not None:
            return self
        try:
            if self.notebook.stat().st_size > MAX_NOTEBOOK_BYTES:
                return self  # read_student_notebook gives the reason on the worker's side
            return dataclasses.replace(self, data=self.notebook.read_bytes())
        except OSError:
            return self


@dataclass
class CellResult:
    grade_id: str
    points: float
    max_points: float
    message: str = ""  # the judge's message when it failed, as the learner reads it
    #: the short name of the learner's likely mistake, from the judge's Mistake.name (never read from the message)
    mistake: str | None = None


@dataclass
class Result:
    student_id: str
    assignment: str
    status: str
    reason: str
    cells: dict[str, CellResult] = field(default_factory=dict)
    #: seconds per phase (see ``PHASES``): the batch summary and the benchmark add them up
    timings: dict[str, float] = field(default_factory=dict)
    #: what went wrong while the notebook ran, outside the test cells' verdicts: the first errors of other cells
    #: and the tail of its stderr (the preflight and selftest show them when the instructor's answers fall short)
    diagnostics: list[str] = field(default_factory=list)

    #: the late-submission penalty in points (autograder.deadlines), taken from the cells' sum
    penalty: float = 0.0

    @property
    def score(self) -> float:
        return sum(c.points for c in self.cells.values()) - self.penalty

    @property
    def max_score(self) -> float:
        return sum(c.max_points for c in self.cells.values())


# ---------------------------------------------------------------- finding submissions

def _student_from_lms_name(name: str) -> str:
    """Canvas-style file names: ``lastfirst_12345_67890_notebook.ipynb`` -> ``lastfirst``."""
    return name.split("_", 1)[0] if "_" in name else Path(name).stem


def _extract_zip(path: Path, into: Path) -> dict[Path, tuple[int, ...]]:
    """Unpack an LMS zip, refusing paths that escape ``into`` and more than 2 GiB in all; each file's entry time
    (a wall-clock time with no zone), by its unpacked path."""
    with zipfile.ZipFile(path) as archive:
        total = 0
        for member in archive.infolist():
            target = (into / member.filename).resolve()
            if not str(target).startswith(str(into.resolve())):
                raise ValueError(f"{path.name}: entry {member.filename!r} would unpack outside its folder")
            total += member.file_size
            if total > 2 << 30:
                raise ValueError(f"{path.name} unpacks to more than 2 GiB")
        archive.extractall(into)
        return {(into / m.filename).resolve(): m.date_time for m in archive.infolist() if not m.is_dir()}


def collect(submissions: Path, assignment: str, notebook_name: str, scratch: Path,
            zip_timezone: str = "UTC") -> list[Submission]:
    """Every submission under ``submissions``, in the layouts the contract lists (CONTRIBUTING.md).

    ``SUBMISSIONS/<student>/*.ipynb``; nbgrader's ``[submitted/]<student>/<assignment>/*.ipynb``;
    or a zip holding either layout, or LMS-style files ``<student>_..._<name>.ipynb`` side by side.
    Each submission's time, where it has one: nbgrader's ``timestamp.txt`` beside the notebook, else the
    notebook's entry time in the zip, read in ``zip_timezone`` (autograder.deadlines).
    """
    entry_times: dict[Path, tuple[int, ...]] = {}
    if submissions.is_file() and submissions.suffix == ".zip":
        entry_times = _extract_zip(submissions, scratch / "unzipped")
        submissions = scratch / "unzipped"
        inner = [p for p in submissions.iterdir() if not p.name.startswith(("__MACOSX", "."))]
        if len(inner) == 1 and inner[0].is_dir() and not any(inner[0].glob("*.ipynb")):
            submissions = inner[0]
    if not submissions.is_dir():
        raise ValueError(f"{submissions} is neither a folder nor a .zip of submissions")
    if (submissions / "submitted").is_dir():
        submissions = submissions / "submitted"
    found: list[Submission] = []
    loose: dict[str, list[Path]] = {}
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith((".", "__MACOSX")):
            continue
        if entry.is_file() and entry.suffix == ".ipynb":
            loose.setdefault(_student_from_lms_name(entry.name), []).append(entry)
        elif entry.is_dir():
            folder = entry / assignment if (entry / assignment).is_dir() else entry
            chosen = _choose(entry.name, sorted(folder.rglob("*.ipynb")), notebook_name)
            found.append(_timed(chosen, folder / "timestamp.txt", entry_times, zip_timezone))
    for student, files in loose.items():
        found.append(_timed(_choose(student, files, notebook_name), None, entry_times, zip_timezone))
    return sorted(found, key=lambda s: s.student_id)


def _timed(submission: Submission, stamp: Path | None, entry_times: dict[Path, tuple[int, ...]],
           zone: str) -> Submission:
    """``submission`` with its time: ``stamp`` (nbgrader's timestamp.txt) if it exists and reads, else its
    notebook's zip entry time. A timestamp.txt that cannot be read is noted, and the submission graded."""
    from autograder import deadlines

    if stamp is not None and stamp.is_file():
        text = stamp.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            try:
                when = deadlines.parse_time(text, f"{submission.student_id}'s timestamp.txt")
            except ValueError as err:
                note = "; ".join(filter(None, [submission.note, f"{err}: graded as if it had no time"]))
                return dataclasses.replace(submission, note=note)
            return dataclasses.replace(submission, submitted_at=when, time_source=deadlines.FROM_FILE)
    if submission.notebook is not None and submission.notebook.resolve() in entry_times:
        when = deadlines.zip_time(entry_times[submission.notebook.resolve()], zone)
        return dataclasses.replace(submission, submitted_at=when, time_source=deadlines.FROM_ZIP)
    return submission


def _choose(student: str, notebooks: list[Path], expected: str) -> Submission:
    notebooks = [p for p in notebooks if ".ipynb_checkpoints" not in p.parts]
    exact = [p for p in notebooks if p.name == expected or p.name.endswith("_" + expected)]
    if len(exact) >= 1:
        note = "" if len(exact) == 1 else f"{len(exact)} copies; graded {exact[0].name}"
        return Submission(student, exact[0], note=note)
    if len(notebooks) == 1:
        return Submission(student, notebooks[0], note=f"graded {notebooks[0].name} as {expected}")
    if not notebooks:
        return Submission(student, None, problem=f"empty submission: no notebook (expected {expected})")
    names = ", ".join(p.name for p in notebooks[:5])
    return Submission(student, None, problem=f"{len(notebooks)} notebooks ({names}) and none is named {expected}")


# ---------------------------------------------------------------- assembling

def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    value = meta.get("nbgrader") if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def read_student_notebook(path: Path, raw: bytes | None = None) -> dict:
    """The learner's notebook as plain JSON (from ``raw`` when given, else the file); raises ValueError with
    a reason a person understands."""
    size = len(raw) if raw is not None else path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"{path.name} is {size >> 20} MiB, over the {MAX_NOTEBOOK_BYTES >> 20} MiB limit")
    text = (raw if raw is not None else path.read_bytes()).decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path.name} is not a notebook: invalid JSON at line {err.lineno} ({err.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError(f"{path.name} is not a notebook: it has no list of cells")
    return data


def assemble(source: dict, release: dict, student: dict) -> tuple[dict, list[str]]:
    """The notebook to run: ``source`` with the learner's answers (else the release's stubs) in its
    solution cells, its test cells whole (hidden checks and visible asserts, as ``nbgrader autograde`` runs
    them), up to its last test cell; and notes on what was odd. The reference solution in ``source`` never
    runs."""
    notes: list[str] = []
    answers: dict[str, str] = {}
    extras: dict[str | None, list[str]] = {}
    last: str | None = None
    for cell in student["cells"]:
        if not isinstance(cell, dict):
            continue
        meta = _nbgrader(cell)
        if meta.get("solution") and isinstance(meta.get("grade_id"), str):
            gid = meta["grade_id"]
            if gid in answers:
                notes.append(f"solution cell {gid} appears twice; the first was graded")
            else:
                answers[gid] = _source(cell)
            last = gid
        elif cell.get("cell_type") == "code" and not meta:
            extras.setdefault(last, []).append(_source(cell))
    stubs = {_nbgrader(c)["grade_id"]: _source(c) for c in release["cells"] if _nbgrader(c).get("solution")}
    given = {_source(c).strip() for c in source["cells"]}  # the learner's untouched copies of our cells
    extras = {k: [src for src in v if src.strip() and src.strip() not in given] for k, v in extras.items()}
    nb = json.loads(json.dumps(source))
    cells = []
    for cell in nb["cells"]:
        meta = _nbgrader(cell)
        gid = meta.get("grade_id")
        if meta.get("grade_id") == "setup":
            cells.append(cell)
            cells += [_learner_cell(src) for src in extras.get(None, [])]
            continue
        if meta.get("solution"):
            cell["source"] = answers.get(gid, stubs.get(gid, "raise NotImplementedError()"))
        cells.append(cell)
        if meta.get("solution"):
            cells += [_learner_cell(src) for src in extras.get(gid, [])]
    missing = [_nbgrader(c)["grade_id"] for c in nb["cells"] if _nbgrader(c).get("solution")
               and _nbgrader(c)["grade_id"] not in answers]
    if missing:
        notes.append(f"no answer cell for {', '.join(missing)}")
    # What comes after the last test cannot change any test's points (Chapter 6 ends with an ungraded training
    # run of the learner's model): it is not run.
    last_test = max((i for i, cell in enumerate(cells) if _nbgrader(cell).get("grade")), default=len(cells))
    nb["cells"] = cells[:last_test + 1]
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4
    return nb, notes


LEARNER_CELL = "learner_cell"  # the metadata key that marks a cell of the learner's own in the assembled notebook


def _learner_cell(source: str) -> dict:
    return nbformat.v4.new_code_cell(source, metadata={LEARNER_CELL: True})


def suspicious(student: dict) -> list[str]:
    """Reasons the learner's own code deserves a person's look (answers and extra cells only)."""
    found = []
    for cell in student.get("cells", []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = _nbgrader(cell)
        if meta and not meta.get("solution"):
            continue
        source = _source(cell)
        for pattern, why in SUSPICIOUS.items():
            if re.search(pattern, source) and why not in found:
                found.append(why)
    return found


# ---------------------------------------------------------------- running and judging

@dataclass(frozen=True)
class Settings:
    assignment: str
    notebook_name: str
    source: Path  # the instructor's notebook, with the hidden tests
    release: Path  # the student release notebook
    bundle: Path
    limits: sandbox.Limits
    use_sandbox: bool = True


def grade_one(submission: Submission, settings: Settings) -> Result:
    """Grade one submission; never raises: every failure becomes a row with a status and a reason."""
    try:
        return _grade_one(submission, settings)
    except Exception as err:  # a fault of the grader itself must still leave a row
        return Result(submission.student_id, settings.assignment, "crashed",
                      f"the grader failed on this submission ({type(err).__name__}: {err})",
                      _zero_cells(settings))


def _zero_cells(settings: Settings, messages: dict[str, str] | None = None) -> dict[str, CellResult]:
    release = json.loads(settings.release.read_text())
    cells = {}
    for cell in release["cells"]:
        meta = _nbgrader(cell)
        if meta.get("grade"):
            gid = meta["grade_id"]
            cells[gid] = CellResult(gid, 0.0, float(meta.get("points", 0)), (messages or {}).get(gid, ""))
    return cells


def _grade_one(submission: Submission, settings: Settings) -> Result:
    row = lambda status, reason, cells=None: Result(  # noqa: E731
        submission.student_id, settings.assignment, status, reason, cells or _zero_cells(settings))
    if submission.notebook is None:
        return row("invalid", submission.problem)
    try:
        student = read_student_notebook(submission.notebook, submission.data)
    except (ValueError, OSError) as err:
        return row("invalid", str(err))
    started = time.perf_counter()
    release = json.loads(settings.release.read_text())
    assembled, notes = assemble(json.loads(settings.source.read_text()), release, student)
    if submission.note:
        notes.insert(0, submission.note)
    timings = {"assemble_s": time.perf_counter() - started}
    execution = execute(assembled, settings)
    timings.update(execution.timings)
    started = time.perf_counter()
    cells, flags = _judge(settings, execution.summary, execution.observations, assembled)
    status, reason = _status(execution, assembled, flags, settings.limits)
    patterns = suspicious(student)
    if patterns and status == "ok":
        status, reason = "flagged", "the answers " + "; ".join(patterns)
    elif patterns:
        reason += "; also: the answers " + "; ".join(patterns)
    if notes:
        reason = "; ".join(filter(None, [reason, *notes]))
    timings["judge_s"] = time.perf_counter() - started
    return Result(submission.student_id, settings.assignment, status, reason, cells, timings,
                  _diagnostics(execution, assembled))


def _diagnostics(execution: sandbox.Execution, assembled: dict) -> list[str]:
    """The errors of the cells that are not tests (a set-up cell whose import failed, an answer that does not
    compile), then the last lines the notebook wrote to stderr."""
    found = []
    errors = [entry for entry in (execution.summary or {}).get("errors") or []
              if isinstance(entry, list) and len(entry) == 3]
    for index, kind, text in errors[:3]:
        found.append(f"{_where(assembled, index)} raised {str(kind)[:80]}: {str(text)[:300]}")
    if len(errors) > 3:
        found.append(f"and {len(errors) - 3} more cells raised{'' if len(errors) < 20 else ' (at least)'}")
    tail = [line for line in execution.stderr.splitlines() if line.strip()][-6:]
    if tail:
        found.append("the notebook's stderr ended with: " + " | ".join(line.strip()[:200] for line in tail))
    return found


#: The phases of one submission, in order (a worker's own start-up is once per worker: ``sandbox.worker_starts``).
PHASES = {"assemble_s": "assemble the notebook", "start_s": "fork, namespaces and mounts",
          "cells_s": "run the cells (the learner's code and the probes)", "judge_s": "judge the records"}


def timings(results: list[Result], load_seconds: float, write_seconds: float, total_seconds: float) -> dict:
    """Where a batch's time went, for ``timings.json``: the checks' load, each worker's start-up, each
    submission's phases (see ``PHASES``), and writing the outputs."""
    return {"total_s": total_seconds, "load_s": load_seconds, "write_s": write_seconds,
            "workers": sandbox.worker_starts(),
            "submissions": {r.student_id: r.timings for r in results}}


def execute(assembled: dict, settings: Settings) -> sandbox.Execution:
    """Run ``assembled`` on a warm worker. A worker that dies under a notebook (not the notebook's own process,
    which the worker watches) is replaced and the notebook run once more on the fresh one."""
    for _attempt in range(2):
        with sandbox.worker(_bundle(settings), settings.limits, settings.use_sandbox) as worker:
            execution = worker.run(assembled, settings.limits)
        if execution.summary and execution.summary.get("setup_failed"):
            raise sandbox.WorkerFailed("the sandbox could not give the notebook its own namespaces "
                                       f"({execution.summary['setup_failed']}); no notebook can be graded here")
        if not execution.worker_died:
            break
    return execution


_WORKER_BUNDLES: dict[Path, Path] = {}


def _bundle(settings: Settings) -> Path:
    """The sandbox bundle; a Dask worker on another machine, which cannot see the command's scratch folder,
    builds its own once from its copy of the repository."""
    if settings.bundle.is_dir():
        return settings.bundle
    if settings.bundle not in _WORKER_BUNDLES:
        scratch = Path(tempfile.mkdtemp(prefix="autograder-bundle-"))
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # removed when the worker process ends
        _WORKER_BUNDLES[settings.bundle] = sandbox.build_bundle(scratch)
    return _WORKER_BUNDLES[settings.bundle]


def _judge(settings: Settings, summary: dict | None, data: bytes,
           assembled: dict) -> tuple[dict[str, CellResult], list[str]]:
    """Points per test cell from the one record its hidden check wrote while the cell ran and, once that passes,
    from how the whole cell ran (its visible asserts, its stderr: :func:`_cell_verdict`); and the reasons, if
    any, to flag the submission for a person to look at.

    A cell earns its points only from exactly one well-formed record of its own check, judged against the
    reference, in a cell that then ran to its end as nbgrader would give it the points. No record, several
    records, a record of another check, a probe stopped by something other than an exception, or a record
    that does not fit the check's cases: 0 points, and all but the first flag the submission (the learner's
    code wrote or suppressed records; a missing record can also come from an honest answer whose cell does
    not run). A cell during which the kernel died or ran out of time scores 0, whatever it recorded.
    """
    cells = _zero_cells(settings)
    ranges = (summary or {}).get("ranges", {})
    outcomes = (summary or {}).get("outcomes") or {}
    stopped = (summary or {}).get("stopped")
    stopped_in = _grade_id_at(assembled, stopped.get("cell")) if isinstance(stopped, dict) else None
    flags: list[str] = []
    claimed = 0
    for gid, cell in cells.items():
        span = ranges.get(gid)
        if not (isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span)):
            cell.message = "this test did not run: the notebook stopped before it"
            continue
        start, end = span
        records = [line for line in data[start:end].splitlines() if line.strip()]
        claimed += len(records)
        if gid == stopped_in:
            why = "ran past the per-cell time limit" if stopped.get("why") == "timeout" else "crashed"
            cell.message = f"the notebook {why} while this test ran"
            continue
        message, flag, cell.mistake = _verdict(gid, records)
        points = cell.max_points
        if not (message or flag):  # the hidden check passed: now the whole cell, as nbgrader would score it
            message, flag, cell.mistake, points = _cell_verdict(outcomes.get(gid), cell.max_points)
        cell.message = message
        if flag:
            flags.append(f"{gid}: {flag}")
        elif not message:
            cell.points = points
    stray = len([line for line in data.splitlines() if line.strip()]) - claimed
    if stray > 0:
        flags.append(f"{stray} hidden-check record(s) were written outside the test cells")
    return cells, flags


def _verdict(gid: str, records: list[bytes]) -> tuple[str, str, str | None]:
    """(message, flag, mistake) for the records of test ``gid``: ("", "", None) when it passed; a flag means the
    records themselves are wrong, which honest code cannot cause; ``mistake`` is the name the judge gave the
    learner's mistake (its Mistake's ``name`` field), None when it named none."""
    if not records:  # e.g. the exercise's name is not defined (a syntax error in its cell): honest code can
        return ("the hidden check of this test did not run: nothing was recorded. Is the exercise defined, and "
                "does its cell run without an error?"), "", None
    if len(records) > 1:
        return (f"the hidden check of this test wrote {len(records)} records; one was expected",
                f"{len(records)} hidden-check records for one test", None)
    try:
        record = json.loads(records[0])
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        return ("the hidden-check record of this test cannot be read", f"unreadable hidden-check record ({err})",
                None)
    if record.get("check") != gid:
        return (f"the hidden-check record of this test is for {record.get('check')!r}",
                f"a record for {str(record.get('check'))[:80]!r} inside this test", None)
    if "interrupted" in record:
        info = record["interrupted"]
        if not (isinstance(info, list) and len(info) == 3):
            return "the hidden-check record of this test cannot be read", "malformed hidden-check record", None
        kind, message, is_exception = info
        text = f"the hidden check of this test was stopped by {kind}: {message!r}"
        return text, "" if is_exception is True else f"the learner's code stopped the hidden check with {kind}", None
    try:
        judge_recorded(gid, record.get("observations"))
    except Mistake as failure:  # the message the learner reads, and the name the judge gave, from its field
        return str(failure), "", failure.name
    except RecordMismatch as err:
        return (f"the hidden-check record of test {gid} does not match its cases",
                f"the hidden-check record of test {gid} does not match its cases ({err})", None)
    return "", "", None


def _cell_verdict(outcome: object, max_points: float) -> tuple[str, str, str | None, float]:
    """(message, flag, mistake, points) of a test cell whose hidden check passed, by nbgrader's own rule
    (``nbgrader.utils.determine_grade``) applied to how the whole cell ran (``autograder.runner._outcome``): an
    error, a visible assert included, or anything written to stderr, a warning included, scores 0; else a value
    the cell displayed is a partial grade if it reads as a number; else full marks."""
    from nbgrader.utils import get_partial_grade

    if not (isinstance(outcome, dict) and set(outcome) == {"error", "stderr", "shown"}):
        return ("the outcome of this test was not reported", "no outcome reported for a test that ran", None, 0.0)
    error, stderr, shown = outcome["error"], outcome["stderr"], outcome["shown"]
    if error is not None:
        if not (isinstance(error, list) and len(error) == 2 and all(isinstance(x, str) for x in error)):
            return ("the outcome of this test cannot be read", "malformed outcome of a test", None, 0.0)
        kind, text = error
        # a visible check's failure names its mistake as the hidden checks do, at the end of its message
        name = mistake_name(text) if kind in ("CheckFailed", "AssertionError") else None
        return f"a visible check of this test failed: {kind}: {text}", "", name, 0.0
    if isinstance(stderr, str) and stderr:
        return (f"this test wrote to stderr, which nbgrader scores as a failure: {stderr.strip()[:500]}", "", None,
                0.0)
    if isinstance(shown, str):
        try:
            return "", "", None, float(get_partial_grade({"data": {"text/plain": shown}}, max_points))
        except ValueError as err:  # more than the cell's points
            return f"this test displayed {shown[:80]!r}, not a grade it can have ({err})", "", None, 0.0
    return "", "", None, max_points


def _grade_id_at(assembled: dict, index: object) -> str | None:
    if not isinstance(index, int) or not 0 <= index < len(assembled["cells"]):
        return None
    return _nbgrader(assembled["cells"][index]).get("grade_id")


def _status(execution: sandbox.Execution, assembled: dict, flags: list[str],
            limits: sandbox.Limits) -> tuple[str, str]:
    status, reason = _run_status(execution, assembled, limits)
    if flags and status == "ok":
        return "flagged", "; ".join(flags)
    if flags:
        reason += "; also: " + "; ".join(flags)
    return status, reason


def _run_status(execution: sandbox.Execution, assembled: dict, limits: sandbox.Limits) -> tuple[str, str]:
    summary = execution.summary or {}
    stopped = summary.get("stopped")
    if execution.timed_out:
        kept = "; the tests that ran before it keep their points" if summary.get("ranges") else ""
        return "timeout", f"the notebook ran past the {limits.wall_seconds} s limit and was stopped{kept}"
    if isinstance(stopped, dict):
        where = _where(assembled, stopped.get("cell"))
        if stopped.get("why") == "timeout":
            return "timeout", f"{where} ran past the per-cell time limit"
        return "crashed", f"the Python kernel died while running {where} (exited, crashed or ran out of memory)"
    if execution.worker_died:
        tail = (execution.stderr.splitlines() or ["no output"])[-1][:300]
        return "crashed", f"the grading worker stopped twice while running this notebook ({tail})"
    if not summary.get("done"):  # its process ended outside any cell
        tail = (execution.stderr.splitlines() or ["no output"])[-1][:300]
        if "MemoryError" in execution.stderr or execution.exit_code in (-9, 137):
            return "crashed", f"the notebook ran out of memory ({tail})"
        return "crashed", f"the notebook could not be run to the end ({tail})"
    return "ok", ""


def _where(assembled: dict, index: object) -> str:
    if not isinstance(index, int) or not 0 <= index < len(assembled["cells"]):
        return "a cell"
    cell = assembled["cells"][index]
    label = _nbgrader(cell).get("grade_id")
    if not label:
        label = "the learner's own cell" if cell.get("metadata", {}).get(LEARNER_CELL) else "a cell of the notebook's"
    return f"cell {index + 1} ({label})"


def prepare(assignment: str, scratch: Path, bundle: Path | None = None) -> tuple[str, Path, Path, Path]:
    """(notebook name, source notebook, release notebook, sandbox bundle) for ``assignment``; the bundle is
    built in ``scratch`` unless one is given (it is the same for every assignment)."""
    found = chapter(assignment)  # ValueError naming the known assignments
    for path in (found.source, found.notebook):
        if not path.is_file():
            raise ValueError(f"{assignment}: {path.relative_to(REPO_ROOT)} is missing (`make notebooks` writes the "
                             f"student notebooks from autograder/source/)")
    return found.notebook.name, found.source, found.notebook, bundle or sandbox.build_bundle(scratch / "bundle")


# ---------------------------------------------------------------- before grading anyone

INSTRUCTOR = "(instructor's answers)"

def load_problems(settings: Settings, sandbox_side: bool = True) -> list[str]:
    """Why the hidden checks of ``settings.assignment`` cannot grade anyone: a module that fails to import
    (here or inside the sandbox), a test cell without a probe or a judge, the reference reachable inside the
    sandbox. Empty when all is well."""
    from autograder.checks.core import ids as probe_ids
    from autograder.checks.core import load_all
    from autograder.judges.core import ids as judge_ids
    from autograder.judges.core import load_judges

    problems = [f"{module} failed to load: {why}" for module, why in {**load_all(), **load_judges()}.items()]
    probes, judges = set(probe_ids()), set(judge_ids())
    problems += [f"check {gid!r} has a probe but no judge" for gid in sorted(probes - judges)]
    problems += [f"check {gid!r} has a judge but no probe" for gid in sorted(judges - probes)]
    for gid in _zero_cells(settings):
        if gid not in probes & judges:
            problems.append(f"test cell {gid!r} has no hidden check (no probe or judge registered under its id)")
    if settings.use_sandbox and sandbox_side:
        problems += _sandbox_load_problems(settings, probes)
    return problems


def _sandbox_load_problems(settings: Settings, probes: set[str]) -> list[str]:
    """What a grading worker found when it loaded the probes inside the sandbox (the worker then stays warm for
    the grading itself)."""
    try:
        with sandbox.worker(_bundle(settings), settings.limits, settings.use_sandbox) as worker:
            failures, ids, reachable = worker.failures, worker.ids, worker.reachable
    except sandbox.WorkerFailed as err:
        return [f"the checks could not be loaded inside the sandbox: {err}"]
    problems = [f"{module} failed to load inside the sandbox: {why}" for module, why in failures.items()]
    problems += [f"{name} can be imported inside the sandbox; the bundle and the venv must not carry it "
                 f"(install this repository with `pip install -e .`, not a plain `pip install .`)"
                 for name in reachable]
    missing = sorted(probes - set(ids))
    if missing and not failures:
        problems.append(f"inside the sandbox these checks are not registered: {', '.join(missing)}")
    return problems


def preflight_problems(result: Result) -> list[str]:
    """What keeps the instructor's own answers from full marks: one line per cell that fell short."""
    problems = [] if result.status == "ok" else [f"status {result.status}: {result.reason}"]
    problems += [f"{c.grade_id}: {c.points:g}/{c.max_points:g} — {c.message or 'no message'}"
                 for c in result.cells.values() if c.points < c.max_points]
    return [*(f"why: {line}" for line in result.diagnostics), *problems] if problems else []


def instructor_submission(settings: Settings) -> Submission:
    """The source notebook as a submission: its solution cells are the instructor's answers."""
    return Submission(INSTRUCTOR, settings.source)
