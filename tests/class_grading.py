"""Test helpers: grade whole classes through ``python -m autograder grade``, the path instructors use.

``catalogue_class`` turns a chapter's catalogue (``tests/catalogue/<module>.py``)
into a class of submissions: the instructor's answers, the untouched release,
and one learner per catalogue entry whose answer cell for the entry's exercise
holds the catalogue module's code (less its imports of the reference and of
the test package) followed by ``<exercise> = <the entry's implementation>``;
every other answer is the instructor's. ``grade_class`` grades such a folder
with the real command line, sandbox on, and reads back every student's row and
per-cell feedback.
"""

from __future__ import annotations

import ast
import csv
import functools
import importlib
import json
import subprocess
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from notebook_grading import ASSIGNMENTS, read_notebook, release_notebook, replace_solution, source_notebook

from autograder.release import REPO_ROOT, nbgrader_env

CATALOGUES = Path(__file__).parent / "catalogue"
INSTRUCTOR, UNTOUCHED = "instructor", "untouched"


def catalogue_module(assignment: str) -> Any:
    return importlib.import_module(f"catalogue.{ASSIGNMENTS[assignment][1].rsplit('.', 1)[1]}")


def catalogue_code(assignment: str) -> str:
    """The catalogue module's source as a learner's cell: its definitions, without the imports of the
    reference and of the test package (the notebook defines those names) and without the entry lists. Its
    ``from __future__ import annotations`` stays, first in the cell: annotations may name classes that the
    notebook defines later."""
    path = CATALOGUES / (ASSIGNMENTS[assignment][1].rsplit(".", 1)[1] + ".py")
    text = path.read_text()
    lines = text.splitlines()
    drop: set[int] = set()
    tree = ast.parse(text)
    for node in tree.body:
        dropped = (
            isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("catalogue", "solutions")
            or isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("WRONG", "CORRECT")
                                                    for t in node.targets)
            or isinstance(node, ast.Expr) and node is tree.body[0]  # the module docstring
        )
        if dropped:
            drop.update(range(node.lineno - 1, node.end_lineno))
    return "\n".join(line for i, line in enumerate(lines) if i not in drop).strip() + "\n"


def _impl_names(assignment: str) -> dict[str, list[str]]:
    """{"WRONG": [name of each entry's implementation], "CORRECT": [...]}, read from the entry lists."""
    path = CATALOGUES / (ASSIGNMENTS[assignment][1].rsplit(".", 1)[1] + ".py")
    names: dict[str, list[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in (
                "WRONG", "CORRECT"):
            names[node.targets[0].id] = [ast.unparse(call.args[2]) for call in node.value.elts]
    return names


@dataclass(frozen=True)
class Learner:
    student_id: str
    kind: str  # "instructor", "untouched", "wrong" or "correct"
    entry: Any = None  # the catalogue Entry, for wrong and correct answers


def catalogue_class(assignment: str, folder: Path, only: Collection[str] | None = None) -> dict[str, Learner]:
    """Write the class of ``assignment``'s catalogue into ``folder``: {student_id: Learner}; with ``only``, just
    those students (ids ``instructor``, ``untouched``, ``wrong-007``, ``correct-000``)."""
    module = catalogue_module(assignment)
    code = catalogue_code(assignment)
    names = _impl_names(assignment)
    notebook = ASSIGNMENTS[assignment][0]
    learners = {INSTRUCTOR: Learner(INSTRUCTOR, INSTRUCTOR), UNTOUCHED: Learner(UNTOUCHED, UNTOUCHED)}

    def write(student: str, nb: Any) -> None:
        if only is not None and student not in only:
            learners.pop(student, None)
            return
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / notebook)

    write(INSTRUCTOR, read_notebook(source_notebook(assignment)))
    write(UNTOUCHED, read_notebook(release_notebook(assignment)))
    for kind, entries in (("wrong", module.WRONG), ("correct", module.CORRECT)):
        impls = names["WRONG" if kind == "wrong" else "CORRECT"]
        assert len(impls) == len(entries), f"{assignment}: could not read every {kind} entry's implementation"
        for index, (entry, impl) in enumerate(zip(entries, impls, strict=True)):
            assert getattr(entry.impl, "__name__", impl) == impl, f"{entry.label}: implementation {impl} not found"
            student = f"{kind}-{index:03d}"
            if only is not None and student not in only:
                continue
            nb = read_notebook(source_notebook(assignment))
            replace_solution(nb, entry.target, f"{code}\n\n{entry.target} = {impl}\n")
            write(student, nb)
            learners[student] = Learner(student, kind, entry)
    unknown = set(only or ()) - set(learners)
    assert not unknown, f"{assignment}'s catalogue has no students {sorted(unknown)}"
    return learners


@dataclass
class Graded:
    rows: dict[str, dict[str, str]]  # student -> row of grades.csv
    feedback: dict[str, dict]  # student -> feedback JSON
    log: str
    returncode: int

    def cells(self, student: str) -> dict[str, dict]:
        return {c["grade_id"]: c for c in self.feedback[student]["cells"]}


def grade_class(assignment: str, submissions: Path, out: Path, *extra: str, timeout: int = 1500,
                env: dict[str, str] | None = None) -> Graded:
    """``python -m autograder grade`` on ``submissions`` (sandbox on, the command's own workers), with ``env``
    added to its environment."""
    command = [sys.executable, "-m", "autograder", "grade", assignment, str(submissions), "--out", str(out),
               "--gradebook", f"sqlite:///{out.parent / (out.name + '-gradebook.db')}", *extra]
    run = subprocess.run(command, cwd=REPO_ROOT, env={**nbgrader_env(), **(env or {})}, capture_output=True,
                         text=True, timeout=timeout)
    rows, feedback = {}, {}
    if (out / "grades.csv").exists():
        with (out / "grades.csv").open() as handle:
            rows = {row["student_id"]: row for row in csv.DictReader(handle)}
        for student in rows:
            path = out / "feedback" / student / f"{assignment}.json"
            feedback[student] = json.loads(path.read_text())
    return Graded(rows, feedback, run.stdout + run.stderr, run.returncode)


@functools.cache
def touched_cells(assignment: str, target: str) -> tuple[str, ...]:
    """The grade ids of the test cells of ``target`` and of the exercises built on it, in the notebook's order: the
    cells a wrong ``target`` can change (the others run the instructor's answers)."""
    from notebook_grading import exercise_names, exercise_of, graded_cells, nbgrader_meta

    exercises = exercise_names(assignment)
    touched = dependents(assignment, target) | {target}
    nb = read_notebook(source_notebook(assignment), copy_it=False)
    return tuple(nbgrader_meta(c)["grade_id"] for c in graded_cells(nb)
                 if exercise_of(nbgrader_meta(c)["grade_id"], exercises) in touched)


def dependents(assignment: str, target: str) -> set[str]:
    """The exercises whose instructor answer uses ``target``, directly or through another exercise: in a
    notebook a wrong ``softmax`` also makes the attention built on it wrong."""
    from notebook_grading import nbgrader_meta, solution_cells

    answers = {nbgrader_meta(c)["grade_id"]: c.source
               for c in solution_cells(read_notebook(source_notebook(assignment), copy_it=False))}
    uses = {name: {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)} & set(answers)
            for name, src in answers.items()}
    found = {target}
    while True:
        more = {name for name, used in uses.items() if used & found} - found
        if not more:
            return found - {target}
        found |= more

