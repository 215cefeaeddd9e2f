"""Test helpers: read assignments, grade them in-process, and grade them with real nbgrader.

``grade_in_process`` runs the graded test cells of a *source* notebook (hidden
tests included) in one namespace, exactly as a kernel would run them one after
another, with the exercise objects supplied by the caller instead of the
notebook's solution cells. That makes it cheap to grade dozens of wrong and
correct implementations; a few of them also go through real
``nbgrader autograde`` in ``test_assignments.py`` to show the two agree.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import re
import shutil
import subprocess
import sys
import traceback
import types
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
from nbgrader.api import Gradebook

from autograder.chapters import CHAPTERS
from autograder.release import REPO_ROOT, SOURCE, make_course_copy, run_nbgrader

#: assignment id -> (notebook file name, reference module), from the course's one list of chapters.
ASSIGNMENTS = {c.assignment: (c.source.name, c.reference) for c in CHAPTERS}


def copy_repository(folder: Path) -> Path:
    """The repository's tracked files (as the working tree has them), copied to ``folder``: commands run there
    write nothing here."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (REPO_ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, folder / name)
    return folder


_READ: dict[tuple[Path, int, int], Any] = {}


def read_notebook(path: Path, copy_it: bool = True) -> Any:
    """``nbformat.read(path, 4)``, parsed and validated once per version of the file (its modification time and
    size), then copied (``copy_it=False``: the one parsed notebook itself, for a caller that only reads it): grading
    a catalogue reads the same notebook for every entry, and the reading, validation included, took half of the
    helper package's test."""
    path = Path(path)
    stat = path.stat()
    key = (path.resolve(), stat.st_mtime_ns, stat.st_size)
    if key not in _READ:
        _READ[key] = nbformat.read(path, 4)
    return copy.deepcopy(_READ[key]) if copy_it else _READ[key]


def source_notebook(assignment: str) -> Path:
    return SOURCE / assignment / ASSIGNMENTS[assignment][0]


def release_notebook(assignment: str) -> Path:
    return REPO_ROOT / "notebooks" / assignment / ASSIGNMENTS[assignment][0]


def nbgrader_meta(cell: Any) -> dict[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {})


def graded_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if nbgrader_meta(c).get("grade")]


def solution_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if nbgrader_meta(c).get("solution")]


def exercise_names(assignment: str) -> list[str]:
    """The names the learner implements: the ``grade_id`` of every solution cell."""
    nb = read_notebook(source_notebook(assignment), copy_it=False)
    return [nbgrader_meta(c)["grade_id"] for c in solution_cells(nb)]


def exercise_of(grade_id: str, exercises: list[str]) -> str:
    """The exercise a test cell belongs to: its grade_id is ``<exercise>_<property>``."""
    return max((e for e in exercises if grade_id.startswith(e + "_")), key=len)


def reference_objects(assignment: str) -> dict[str, Any]:
    module = importlib.import_module(ASSIGNMENTS[assignment][1])
    return {name: getattr(module, name) for name in exercise_names(assignment)}


def checked_objects(assignment: str) -> dict[str, Any]:
    """Check id -> the object the source notebook's test cell gives its hidden check: the reference's exercise, or
    what the cell's code before its hidden checks made of the references (Chapter 7's trained model), that code run
    as the notebook runs it, after its set-up cell."""
    reference = importlib.import_module(ASSIGNMENTS[assignment][1])
    nb = read_notebook(source_notebook(assignment))
    made: dict[str, Any] = {}
    found = {}
    for cell in graded_cells(nb):
        before = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        if before.strip():
            if not made:
                setup = next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "setup")
                exec(setup.source, made)  # noqa: S102
                made.update(reference_objects(assignment))
            exec(before, made)  # noqa: S102
        for check, name in re.findall(r'run_check\(\s*"([^"]+)",\s*(\w+)\s*\)', cell.source):
            found[check] = made[name] if name in made else getattr(reference, name)
    return found


def notebook_answers(assignment: str) -> dict[str, Any]:
    """The instructor's answers as the source notebook writes them: its set-up cell, then its solution cells, run
    in order in one namespace (as the learner's kernel would run a finished notebook)."""
    nb = read_notebook(source_notebook(assignment))
    module = types.ModuleType(f"notebook_{assignment}")  # a real module: dataclasses look their own one up
    sys.modules[module.__name__] = module
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == "setup" or nbgrader_meta(cell).get("solution"):
            exec(compile(cell.source, f"<{nbgrader_meta(cell)['grade_id']}>", "exec"), module.__dict__)  # noqa: S102
    return {name: getattr(module, name) for name in exercise_names(assignment)}


@dataclass
class CellResult:
    grade_id: str
    points: float
    max_points: float
    message: str  # empty when the cell passed

    @property
    def passed(self) -> bool:
        return self.points == self.max_points


class _Module:
    """A stand-in module whose globals are a namespace of ``grade_in_process``."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.__dict__ = namespace


def grade_in_process(assignment: str, overrides: dict[str, Any] | None = None,
                     visible_only: bool = False, exercise: str | None = None, cells: tuple[str, ...] | None = None,
                     namespace: dict[str, Any] | None = None, as_notebook: bool = False,
                     until_failure: bool = False) -> dict[str, CellResult]:
    """Grade the reference implementations, with ``overrides`` swapped in, through the notebook's test cells.

    With ``visible_only`` the test cells are the release's, as a learner runs them: the visible checks alone,
    without the hidden ones; with ``exercise``, only that exercise's test cells; with ``cells``, only the test
    cells of those grade ids. A cell scores its points when it raises nothing and writes nothing to stderr
    (nbgrader's rule: a warning in a test cell is a failure). The cells run in ``namespace`` when one is given
    (empty), so that the caller can read what they made. With ``as_notebook`` the exercises are the source
    notebook's answers, its solution cells run in the namespace as a kernel runs them, not the reference package's
    objects: an exercise built on an overridden one then calls the override, as in a learner's notebook. With
    ``until_failure`` the cells stop at the first that fails (the results hold the cells run).
    """
    assert not (as_notebook and visible_only), "the release's answer cells are stubs"
    nb = read_notebook(release_notebook(assignment) if visible_only else source_notebook(assignment),
                       copy_it=False)  # read, never changed
    namespace = {} if namespace is None else namespace
    namespace["__name__"] = "__graded__"
    # the cells' module, as a kernel's __main__ is one: a dataclass the cells define looks its module up there
    sys.modules["__graded__"] = _Module(namespace)
    setup = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "setup"]
    exec(compile(setup[0].source, "<setup>", "exec"), namespace)  # noqa: S102
    if as_notebook:
        for cell in solution_cells(nb):
            exec(compile(cell.source, f"<{nbgrader_meta(cell)['grade_id']}>", "exec"), namespace)  # noqa: S102
    else:
        namespace.update(reference_objects(assignment))
    namespace.update(overrides or {})
    results = {}
    tests = graded_cells(nb)
    if exercise is not None:
        names = [nbgrader_meta(c)["grade_id"] for c in solution_cells(nb)]
        tests = [c for c in tests if exercise_of(nbgrader_meta(c)["grade_id"], names) == exercise]
    if cells is not None:
        missing = set(cells) - {nbgrader_meta(c)["grade_id"] for c in tests}
        assert not missing, f"{assignment} has no test cells {sorted(missing)}"
        tests = [c for c in tests if nbgrader_meta(c)["grade_id"] in cells]
    for cell in tests:
        meta = nbgrader_meta(cell)
        stderr = io.StringIO()
        message = ""
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("default")
            try:
                exec(compile(cell.source, f"<{meta['grade_id']}>", "exec"), namespace)  # noqa: S102
            except Exception as err:
                message = f"{type(err).__name__}: {err}" if str(err) else "".join(
                    traceback.format_exception_only(type(err), err)).strip()
        if not message and stderr.getvalue():
            message = f"wrote to stderr: {stderr.getvalue().strip()}"
        points = 0.0 if message else float(meta["points"])
        results[meta["grade_id"]] = CellResult(meta["grade_id"], points, float(meta["points"]), message)
        if message and until_failure:
            break
    return results


# ---------------------------------------------------------------- real nbgrader

def replace_solution(nb: Any, grade_id: str, source: str) -> None:
    """Put ``source`` in the solution cell ``grade_id`` of ``nb`` (in memory), as a learner would."""
    for cell in solution_cells(nb):
        if nbgrader_meta(cell)["grade_id"] == grade_id:
            cell.source = source
            return
    raise KeyError(f"no solution cell {grade_id!r}")


@dataclass
class Autograded:
    scores: dict[str, dict[str, tuple[float, float]]]  # student -> grade_id -> (score, max)
    notebooks: dict[str, Any]  # student -> the autograded notebook (with outputs)
    #: student -> (timestamp, due date with the extension, seconds late, late penalty) as the gradebook holds them
    late: dict[str, tuple[Any, Any, float, float | None]] = field(default_factory=dict)

    def total(self, student: str) -> tuple[float, float]:
        cells = self.scores[student].values()
        return sum(s for s, _ in cells), sum(m for _, m in cells)

    def error_text(self, student: str, grade_id: str) -> str:
        """Everything the graded cell ``grade_id`` printed or raised, as plain text."""
        for cell in graded_cells(self.notebooks[student]):
            if nbgrader_meta(cell)["grade_id"] == grade_id:
                return json.dumps(cell.get("outputs", []))
        raise KeyError(grade_id)


def autograde(assignment: str, submissions: dict[str, Any], workdir: Path, *, timestamps: dict[str, str] | None = None,
              due: datetime | None = None, extensions: dict[str, timedelta] | None = None,
              env: dict[str, str] | None = None, keep_submitted: Path | None = None) -> Autograded:
    """Run ``nbgrader generate_assignment`` and ``nbgrader autograde`` on ``submissions`` (student -> notebook).

    Deadlines as an instructor sets them for nbgrader: ``timestamps`` (student -> the text of their
    ``timestamp.txt``), the assignment's ``due`` date and ``extensions`` in the gradebook, and ``env`` for
    nbgrader (a ``JUPYTER_CONFIG_DIR`` whose nbgrader_config.py picks a late-submission plugin, say).
    ``keep_submitted``: where to copy the submitted folder, timestamps and all, before the course is removed."""
    course = make_course_copy(workdir / "course", [assignment])
    run_nbgrader(["generate_assignment", assignment, "--force"], course, fast=True)  # set-up; autograde is stock
    name = ASSIGNMENTS[assignment][0]
    for student, nb in submissions.items():
        target = course / "submitted" / student / assignment
        target.mkdir(parents=True)
        nbformat.write(nb, target / name)
        if timestamps and student in timestamps:
            (target / "timestamp.txt").write_text(timestamps[student], encoding="utf-8")
    db = f"sqlite:///{course / 'gradebook.db'}"
    if due is not None or extensions:
        with warnings.catch_warnings(), Gradebook(db) as gradebook:
            warnings.simplefilter("ignore")  # nbgrader's own SQLAlchemy session warnings on a new submission
            if due is not None:
                gradebook.update_or_create_assignment(assignment, duedate=due)
            for student, extension in (extensions or {}).items():
                gradebook.update_or_create_student(student)
                gradebook.update_or_create_submission(assignment, student, extension=extension)
    if keep_submitted is not None:
        shutil.copytree(course / "submitted", keep_submitted)
    run_nbgrader(["autograde", assignment, "--force"], course, env=env)
    scores: dict[str, dict[str, tuple[float, float]]] = {}
    late: dict[str, tuple[Any, Any, float, float | None]] = {}
    with Gradebook(db) as gradebook:
        for student in submissions:
            submitted = gradebook.find_submission_notebook(Path(name).stem, assignment, student)
            scores[student] = {g.name: (float(g.score), float(g.max_score)) for g in submitted.grades}
            whole = gradebook.find_submission(assignment, student)
            late[student] = (whole.timestamp, whole.duedate, whole.total_seconds_late,
                             submitted.late_submission_penalty)
    notebooks = {s: nbformat.read(course / "autograded" / s / assignment / name, 4) for s in submissions}
    shutil.rmtree(course, ignore_errors=True)
    return Autograded(scores, notebooks, late)
