"""Running a real term's class: a progress line with an ETA, a progress store to resume from, and a dry-run
comparison with earlier grades.

- :class:`Progress` prints one plain line per finished submission (no carriage returns: the lines read the
  same in a terminal, a CI log or a file), with the time so far and an estimate of the time left.
- :class:`ProgressStore` keeps every result as it arrives in ``OUT/.progress/``, under a key that changes
  whenever the notebook or anything that decides its grade changes (:func:`grader_version`,
  :func:`submission_key`), so that ``--resume`` grades again only what could have a different grade.
- :func:`read_previous` and :func:`compare` tell, before a regrade is written, whose score would change, and
  which test cells cause it (``--compare``).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # the grader itself imports torch and nbformat: seconds that checking --compare need not wait
    from autograder.grading import Result, Settings, Submission

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The fixed columns of grades.csv (the contract, CONTRIBUTING.md), repeated here: checking a file needs no matplotlib.
COLUMNS = ["student_id", "assignment", "score", "max_score", "status", "reason"]
STORE_FORMAT = 1


# ---------------------------------------------------------------- progress and ETA

def clock_text(seconds: float) -> str:
    """``0:41``, ``16:20``, ``1:02:03``: minutes and seconds, hours only when there are some."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """One line per finished submission, e.g.
    ``[ 12/300] kim: ok, 25/28 — 0:41 elapsed, ~16:20 left (2.1 s/submission)``.

    The rate is the wall-clock time since grading started divided by the work finished in that time. The
    preflight is never counted as a submission, but where it shares the workers with the class (the local
    pool) it took one worker's turn, so it counts as one unit of finished work; where it ran alone before
    the class (Dask), the clock starts after it. Results reused from the progress store count as done but
    took no time, so they are left out of the rate.
    """

    def __init__(self, total: int, done: int = 0, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.done = total, done
        self.graded = 0  # finished in this run
        self.units = 0  # work finished besides the graded submissions (the preflight, in the local pool)
        self.stream, self.clock = stream, clock
        self.started: float | None = None

    def start(self, units: int = 0) -> None:
        self.started, self.units = self.clock(), units

    def arrived(self, result: Result) -> str:
        """Print (and return) the line for ``result``, flushed at once."""
        if self.started is None:
            self.start()
        self.done += 1
        self.graded += 1
        elapsed = self.clock() - self.started
        rate = elapsed / (self.graded + self.units)
        left = "done" if self.done >= self.total else f"~{clock_text(rate * (self.total - self.done))} left"
        line = (f"[{self.done:>{len(str(self.total))}}/{self.total}] {result.student_id}: {result.status}, "
                f"{result.score:g}/{result.max_score:g} — {clock_text(elapsed)} elapsed, {left} "
                f"({rate:.1f} s/submission)")
        print(line, file=self.stream or sys.stderr, flush=True)
        return line


# ---------------------------------------------------------------- what decides a grade

def _package_modules(folder: Path) -> list[Path]:
    """Every ``.py`` of the package rooted at ``folder``, its subpackages included (those with an
    ``__init__.py`` all the way up): not the course's nbgrader folders, where submissions could drop files."""
    found = []
    for path in folder.rglob("*.py"):
        parents = path.relative_to(folder).parents
        if all((folder / parent / "__init__.py").is_file() for parent in parents):
            found.append(path)
    return sorted(found)


def grader_version(settings: Settings) -> str:
    """A digest of everything that decides a grade: the grader (every module of ``autograder``, the hidden
    checks' probes and judges included), the reference in ``solutions/``, the helper package the notebooks
    import (the sandbox carries it), this assignment's source and release notebooks, the limits given on the
    command line, whether the sandbox is on, and the Python and PyTorch versions. Any change means a stored
    result may no longer be the grade, so ``--resume`` grades again."""
    digest = hashlib.sha256()
    files = [*_package_modules(REPO_ROOT / "autograder"), *_package_modules(REPO_ROOT / "solutions"),
             *_package_modules(REPO_ROOT / "attention_course"), settings.source, settings.release]
    for path in files:
        name = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    digest.update(json.dumps({"assignment": settings.assignment, "limits": dataclasses.asdict(settings.limits),
                              "sandbox": settings.use_sandbox, "python": sys.version, "torch": torch},
                             sort_keys=True).encode())
    return digest.hexdigest()


def _content_digest(submission: Submission) -> str | None:
    """sha256 of the notebook's bytes; the problem text when there is no notebook; None when it cannot be
    read now (then it is always graded again, which gives the reason)."""
    if submission.notebook is None:
        return "problem:" + hashlib.sha256(submission.problem.encode()).hexdigest()
    if submission.data is not None:
        return hashlib.sha256(submission.data).hexdigest()
    digest = hashlib.sha256()
    try:
        with submission.notebook.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def submission_key(submission: Submission, version: str) -> str | None:
    """What a stored result must match to be reused: the grader's version and the submission as graded —
    its bytes, its file name and the collector's note or problem (they go into the reason)."""
    content = _content_digest(submission)
    if content is None:
        return None
    name = submission.notebook.name if submission.notebook is not None else ""
    return hashlib.sha256(json.dumps([version, submission.student_id, name, content, submission.note,
                                      submission.problem]).encode()).hexdigest()


# ---------------------------------------------------------------- the progress store

def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader (or a run killed halfway) sees the old file or the new
    one, never a part: a temporary file beside it, flushed to disk, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def result_to_json(result: Result) -> dict:
    return dataclasses.asdict(result)


def result_from_json(data: dict) -> Result:
    """The inverse of :func:`result_to_json`; raises (KeyError, TypeError, ValueError) on anything else."""
    from autograder.grading import CellResult, Result

    known = {f.name for f in dataclasses.fields(Result)}
    cells = {gid: CellResult(**cell) for gid, cell in data["cells"].items()}
    fields = {k: v for k, v in data.items() if k in known and k != "cells"}
    result = Result(**fields, cells=cells)
    if not all(isinstance(getattr(result, k), str) for k in ("student_id", "assignment", "status", "reason")):
        raise ValueError("a stored result's text fields are not text")
    if not all(c.mistake is None or isinstance(c.mistake, str) for c in cells.values()):
        raise ValueError("a stored result's named mistakes are not text")
    return result


class ProgressStore:
    """``OUT/.progress/``: one JSON file per student, the full result and its key, written as it arrives."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.warned = False

    def path(self, student_id: str) -> Path:
        """A file name that is safe whatever the id, and distinct for ids that differ only in unsafe
        characters (``a b`` and ``a_b``)."""
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", student_id)[:80].lstrip(".") or "_"
        return self.folder / f"{safe}-{hashlib.sha256(student_id.encode()).hexdigest()[:10]}.json"

    def save(self, result: Result, key: str | None) -> None:
        """Store ``result``; a store that cannot be written is said once and does not stop the grading."""
        if key is None:
            return
        try:
            write_atomic(self.path(result.student_id),
                         json.dumps({"format": STORE_FORMAT, "key": key, "result": result_to_json(result)}))
        except OSError as err:
            if not self.warned:
                print(f"warning: cannot write the progress store {self.folder} ({err}); grading goes on, but "
                      "--resume will not find these results", file=sys.stderr, flush=True)
                self.warned = True

    def load(self, student_id: str, key: str | None) -> Result | None:
        """The stored result of ``student_id`` if it was stored under ``key``; None otherwise (no file, another
        key, or a file that cannot be read: then the student is simply graded again)."""
        if key is None:
            return None
        try:
            stored = json.loads(self.path(student_id).read_text(encoding="utf-8"))
            if stored.get("format") != STORE_FORMAT or stored.get("key") != key:
                return None
            result = result_from_json(stored["result"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return result if result.student_id == student_id else None


def reuse(found: list[Submission], store: ProgressStore,
          keys: dict[str, str | None]) -> tuple[list[Result], list[Submission]]:
    """(results reused from the store, submissions still to grade), for ``--resume``."""
    reused, todo = [], []
    for submission in found:
        stored = store.load(submission.student_id, keys.get(submission.student_id))
        if stored is None:
            todo.append(submission)
        else:
            reused.append(stored)
    return reused, todo


# ---------------------------------------------------------------- comparing with earlier grades

def read_previous(path: Path, assignment: str) -> dict[str, dict[str, str]]:
    """The rows of an earlier ``grades.csv`` of ``assignment``, by student; raises ValueError naming what is
    wrong with the file (missing, unreadable, not a grades.csv, another assignment, a score that is not a
    number, a student twice)."""
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    if not path.is_file():
        raise ValueError(f"{path} is not a file (give the grades.csv itself)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} cannot be read ({err})") from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        if header[:len(COLUMNS)] != COLUMNS:
            raise ValueError(f"{path} is not a grades.csv: its header should begin with {', '.join(COLUMNS)}, "
                             f"not {', '.join(header[:len(COLUMNS)]) or 'nothing'}")
        rows: dict[str, dict[str, str]] = {}
        for line, row in enumerate(reader, start=2):
            if None in row or None in row.values():
                raise ValueError(f"{path}, line {line}: {len(header)} columns expected")
            if row["assignment"] != assignment:
                raise ValueError(f"{path} holds grades of {row['assignment']!r} (line {line}), not of {assignment}")
            for column in ["score", "max_score", *header[len(COLUMNS):]]:
                if row[column] != "" or column in ("score", "max_score"):
                    _number(row[column], f"{path}, line {line}: {column}")
            if row["student_id"] in rows:
                raise ValueError(f"{path}, line {line}: student {row['student_id']!r} appears twice")
            rows[row["student_id"]] = row
    except csv.Error as err:
        raise ValueError(f"{path} is not a readable CSV ({err})") from None
    return rows


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{where} is {text!r}, not a number") from None


@dataclass
class Change:
    student_id: str
    change: str  # "score", "new" or "missing"
    old_score: str
    new_score: str
    cells: list[str]  # "grade_id old→new" for every test cell whose points differ
    old_status: str
    new_status: str


def _same(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) < 1e-9


def _cell_changes(old: dict[str, str], new: Result) -> list[str]:
    """``grade_id old→new`` for each test cell whose points differ (``—`` where a side has no such cell)."""
    gids = list(new.cells) + [c for c in old if c not in COLUMNS and c not in new.cells]
    changes = []
    for gid in gids:
        before = float(old[gid]) if old.get(gid) not in (None, "") else None
        after = new.cells[gid].points if gid in new.cells else None
        if not _same(before, after):
            shown = ["—" if v is None else f"{v:g}" for v in (before, after)]
            changes.append(f"{gid} {shown[0]}→{shown[1]}")
    return changes


def compare(previous: dict[str, dict[str, str]], results: Iterable[Result]) -> list[Change]:
    """Every student whose score differs from ``previous`` (with the cells that make the difference), every
    student new since then, and every student ``previous`` has and ``results`` lacks, by student id."""
    changes = []
    seen = set()
    for result in results:
        seen.add(result.student_id)
        old = previous.get(result.student_id)
        if old is None:
            changes.append(Change(result.student_id, "new", "", f"{result.score:g}", [], "", result.status))
        elif not _same(float(old["score"]), result.score):
            changes.append(Change(result.student_id, "score", old["score"], f"{result.score:g}",
                                  _cell_changes(old, result), old["status"], result.status))
    changes += [Change(s, "missing", row["score"], "", [], row["status"], "")
                for s, row in previous.items() if s not in seen]
    return sorted(changes, key=lambda c: c.student_id)


CHANGE_COLUMNS = ["student_id", "change", "old_score", "new_score", "cells", "old_status", "new_status"]


def write_changes(changes: list[Change], path: Path) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CHANGE_COLUMNS)
    for c in changes:
        writer.writerow([c.student_id, c.change, c.old_score, c.new_score, "; ".join(c.cells), c.old_status,
                         c.new_status])
    write_atomic(path, buffer.getvalue())


def describe(change: Change) -> str:
    """One line for a person: ``kim: 12 → 28 (softmax_stable 0→2; ...)``."""
    if change.change == "new":
        return f"{change.student_id}: new, {change.new_score} ({change.new_status})"
    if change.change == "missing":
        return f"{change.student_id}: missing from this run (was {change.old_score})"
    status = "" if change.old_status == change.new_status else f", {change.old_status} → {change.new_status}"
    return f"{change.student_id}: {change.old_score} → {change.new_score}{status} ({'; '.join(change.cells)})"
