"""Tests that teach, through the class grader: every wrong answer in the catalogues loses points with a
message that names its mistake, every correct alternative keeps full marks, the instructor's answers get
full marks and the untouched release zero, for every chapter.

Each chapter's catalogue is graded as one class by ``python -m autograder grade`` with the sandbox on, the
path instructors use (see ``class_grading``). A sample of each class also goes through stock
``nbgrader autograde``, whose kernel judges in place: both paths must give the same points, cell by cell.
"""

from __future__ import annotations

import importlib

import nbformat
import pytest
from class_grading import INSTRUCTOR, UNTOUCHED, Graded, catalogue_class, dependents, exercise_of, grade_class
from notebook_grading import (
    ASSIGNMENTS,
    autograde,
    exercise_names,
    grade_in_process,
    graded_cells,
    nbgrader_meta,
    source_notebook,
)


def _catalogue(module: str):
    try:
        return importlib.import_module(f"catalogue.{module.rsplit('.', 1)[1]}")
    except ModuleNotFoundError:
        return None  # reported by test_every_assignment_has_a_catalogue, without breaking collection


#: assignment id -> its catalogue module, tests/catalogue/<reference module name>.py
FOUND = {assignment: _catalogue(module) for assignment, (_, module) in ASSIGNMENTS.items()}
CATALOGUES = {assignment: module for assignment, module in FOUND.items() if module is not None}

WRONG = [(a, i, e) for a, module in CATALOGUES.items() for i, e in enumerate(module.WRONG)]
CORRECT = [(a, i, e) for a, module in CATALOGUES.items() for i, e in enumerate(module.CORRECT)]


def _id(case: tuple) -> str:
    return f"{case[2].target}: {case[2].label}"


_CLASSES: dict[str, tuple] = {}


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """assignment -> (Graded, {student: Learner}, folder): each chapter graded once, when first asked for."""

    def get(assignment: str) -> tuple[Graded, dict, object]:
        if assignment not in _CLASSES:
            root = tmp_path_factory.mktemp(f"class-{assignment}")
            learners = catalogue_class(assignment, root / "submissions")
            graded = grade_class(assignment, root / "submissions", root / "out")
            assert graded.returncode == 0, graded.log[-4000:]
            _CLASSES[assignment] = (graded, learners, root / "submissions")
        return _CLASSES[assignment]

    return get


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_instructor_answers_get_full_marks_and_the_release_zero(classes, assignment) -> None:
    graded, learners, _ = classes(assignment)
    assert set(graded.rows) == set(learners), "a submission has no row"
    instructor, untouched = graded.rows[INSTRUCTOR], graded.rows[UNTOUCHED]
    short = {g: c["message"] for g, c in graded.cells(INSTRUCTOR).items() if c["points"] < c["max_points"]}
    assert (instructor["status"], instructor["score"]) == ("ok", instructor["max_score"]), short
    assert float(instructor["max_score"]) == sum(_points(assignment).values())
    assert (untouched["status"], float(untouched["score"])) == ("ok", 0.0), untouched


def _student(learners: dict, kind: str, index: int) -> str:
    student = f"{kind}-{index:03d}"
    assert learners[student].kind == kind
    return student


@pytest.mark.parametrize("case", WRONG, ids=_id)
def test_wrong_answer_loses_points_and_is_named(classes, case) -> None:
    assignment, index, entry = case
    graded, learners, _ = classes(assignment)
    student = _student(learners, "wrong", index)
    row, cells = graded.rows[student], graded.cells(student)
    assert row["status"] == "ok", f"{entry.label!r}: status {row['status']}: {row['reason']}"
    own = {gid: c for gid, c in cells.items() if gid.startswith(entry.target + "_")}
    failed = {gid: c["message"] for gid, c in own.items() if c["points"] < c["max_points"]}
    assert failed, f"{entry.label!r} kept full marks on {sorted(own)}"
    named = [gid for gid, message in failed.items() if any(p.lower() in message.lower() for p in entry.expect)]
    assert named, (
        f"{entry.label!r} lost points, but no message names the mistake (expected one of {entry.expect}):\n"
        + "\n".join(f"  {gid}: {message}" for gid, message in failed.items())
    )
    exercises = exercise_names(assignment)
    affected = dependents(assignment, entry.target)  # built on the target: they may fail with it
    others = [gid for gid, c in cells.items() if exercise_of(gid, exercises) not in affected | {entry.target}
              and c["points"] < c["max_points"]]
    assert not others, f"{entry.label!r} also failed cells of exercises that do not use it: {others}"


@pytest.mark.parametrize("case", CORRECT, ids=_id)
def test_correct_alternative_keeps_full_marks(classes, case) -> None:
    assignment, index, entry = case
    graded, learners, _ = classes(assignment)
    student = _student(learners, "correct", index)
    row = graded.rows[student]
    failed = {gid: c["message"] for gid, c in graded.cells(student).items() if c["points"] < c["max_points"]}
    assert not failed, f"the correct alternative {entry.label!r} lost points: {failed}"
    assert row["status"] == "ok", f"{entry.label!r}: status {row['status']}: {row['reason']}"


def _sample(assignment: str) -> list[str]:
    """The students whose notebooks also go through stock nbgrader: the instructor, the untouched release,
    three wrong answers spread over the catalogue and a correct one."""
    wrong = len(CATALOGUES[assignment].WRONG)
    return [INSTRUCTOR, UNTOUCHED, *(f"wrong-{i:03d}" for i in sorted({0, wrong // 2, wrong - 1})), "correct-000"]


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_nbgrader_in_kernel_and_the_class_grader_agree_cell_by_cell(classes, assignment, tmp_path) -> None:
    graded, _, folder = classes(assignment)
    name = ASSIGNMENTS[assignment][0]
    sample = {s: nbformat.read(folder / s / name, 4) for s in _sample(assignment)}
    stock = autograde(assignment, sample, tmp_path)
    assert stock.total(INSTRUCTOR)[0] == stock.total(INSTRUCTOR)[1], "nbgrader: the instructor lost points"
    for cell in graded_cells(stock.notebooks[INSTRUCTOR]):
        assert not cell.outputs, f"passing test cell {nbgrader_meta(cell)['grade_id']} printed {cell.outputs}"
    assert stock.total(UNTOUCHED)[0] == 0, "nbgrader: the untouched release scored points"
    for student in sample:
        ours = {gid: c["points"] for gid, c in graded.cells(student).items()}
        theirs = {gid: score for gid, (score, _) in stock.scores[student].items()}
        differ = {gid: (ours[gid], theirs.get(gid)) for gid in ours if ours[gid] != theirs.get(gid)}
        assert not differ, f"{student}: (class grader, nbgrader) points differ on {differ}"


def _points(assignment: str) -> dict[str, float]:
    nb = nbformat.read(source_notebook(assignment), 4)
    return {nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c)["points"]) for c in graded_cells(nb)}


def test_every_assignment_has_a_catalogue() -> None:
    missing = sorted(a for a, module in FOUND.items() if module is None)
    assert not missing, f"assignments without tests/catalogue/<module>.py: {missing}"


def test_reference_scores_full_marks_in_process() -> None:
    for assignment in CATALOGUES:
        results = grade_in_process(assignment)
        assert all(r.passed for r in results.values()), {g: r.message for g, r in results.items() if not r.passed}


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_catalogue_covers_every_exercise(assignment) -> None:
    module = CATALOGUES[assignment]
    for name in exercise_names(assignment):
        assert any(e.target == name for e in module.WRONG), f"no wrong answers for {name}"
        assert any(e.target == name for e in module.CORRECT), f"no correct alternatives for {name}"
