"""Tests that teach: every wrong answer in the catalogues loses points with a message that names its
mistake, and every correct alternative keeps full marks.

The answers go through the source notebook's own test cells (visible and
hidden) via ``grade_in_process``.
"""

from __future__ import annotations

import importlib

import pytest
from notebook_grading import ASSIGNMENTS, exercise_names, grade_in_process


def _catalogue(module: str):
    try:
        return importlib.import_module(f"catalogue.{module.rsplit('.', 1)[1]}")
    except ModuleNotFoundError:
        return None  # reported by test_every_assignment_has_a_catalogue, without breaking collection


#: assignment id -> its catalogue module, tests/catalogue/<reference module name>.py
FOUND = {assignment: _catalogue(module) for assignment, (_, module) in ASSIGNMENTS.items()}
CATALOGUES = {assignment: module for assignment, module in FOUND.items() if module is not None}

WRONG = [(a, e) for a, module in CATALOGUES.items() for e in module.WRONG]
CORRECT = [(a, e) for a, module in CATALOGUES.items() for e in module.CORRECT]


def _id(case: tuple) -> str:
    return f"{case[1].target}: {case[1].label}"


@pytest.mark.parametrize("case", WRONG, ids=_id)
def test_wrong_answer_loses_points_and_is_named(case) -> None:
    assignment, entry = case
    results = grade_in_process(assignment, {entry.target: entry.impl})
    own = {gid: r for gid, r in results.items() if gid.startswith(entry.target + "_")}
    failed = {gid: r.message for gid, r in own.items() if not r.passed}
    assert failed, f"{entry.label!r} kept full marks on {sorted(own)}"
    named = [gid for gid, message in failed.items() if any(p.lower() in message.lower() for p in entry.expect)]
    assert named, (
        f"{entry.label!r} lost points, but no message names the mistake (expected one of {entry.expect}):\n"
        + "\n".join(f"  {gid}: {message}" for gid, message in failed.items())
    )
    others = [gid for gid, r in results.items() if gid not in own and not r.passed]
    assert not others, f"{entry.label!r} also failed other exercises' cells: {others}"


@pytest.mark.parametrize("case", CORRECT, ids=_id)
def test_correct_alternative_keeps_full_marks(case) -> None:
    assignment, entry = case
    results = grade_in_process(assignment, {entry.target: entry.impl})
    failed = {gid: r.message for gid, r in results.items() if not r.passed}
    assert not failed, f"the correct alternative {entry.label!r} lost points: {failed}"


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
