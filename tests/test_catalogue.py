"""Tests that teach: every wrong answer in the catalogues loses points with a message that names its mistake,
every correct alternative keeps full marks, the instructor's answers get full marks and the untouched release
zero, for every chapter.

Every entry is judged by the hidden checks and visible asserts of its exercise's test cells, and of the
exercises built on it, run in-process on the notebook's answers with the entry in place of its exercise's
(``_judged``): nbgrader's in-kernel path, where a check's probe and its judge run in one process. A sample of
each chapter's catalogue (``class_sample``: the instructor, the untouched release, a correct alternative and three
wrong answers, the first, the middle and the last) is graded as one class by ``python -m autograder grade`` with
the sandbox on, the path instructors use (see ``class_grading``): it must give the sample the in-process verdicts,
cell by cell, and full marks on every cell of the exercises the answer does not touch. One wrong answer of the sample
also goes through stock ``nbgrader autograde``: both graders must give it the same points, cell by cell.

(Every entry through the class grader took 1,025 s of a whole run on two cores, a kernel per entry running all
of its chapter's checks; in-process, the entries' own cells take about 230 s, and the samples are 54 of the 732
notebooks.)
"""

from __future__ import annotations

import functools
import importlib
import shutil

import nbformat
import pytest
from class_grading import INSTRUCTOR, UNTOUCHED, Graded, catalogue_class, grade_class, touched_cells
from notebook_grading import (
    ASSIGNMENTS,
    CellResult,
    autograde,
    exercise_names,
    grade_in_process,
    graded_cells,
    nbgrader_meta,
    source_notebook,
)

from attention_course.testing import mistake_name
from autograder.chapters import chapter
from autograder.leaks import REGION, all_secrets, scan


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
    """``01_self_attention/softmax: softmax over the wrong axis``: ``-k 01_self_attention`` picks a chapter."""
    return f"{case[0]}/{case[2].target}: {case[2].label}"


def class_sample(assignment: str) -> list[str]:
    """The students of ``assignment``'s catalogue that the class grader grades: the instructor, the untouched
    release, the first correct alternative, and three wrong answers: the first, the one in the middle of the list
    (stock nbgrader's sample, below) and the last, so an early, a middle and a late exercise of the notebook.

    The instructor's notebook runs every test cell of the chapter through the sandboxed kernel, passing; the wrong
    answers show failing cells graded there with the in-process points and names, and full marks on the cells they
    do not touch. A wrong answer of every exercise (103 notebooks in all, 54 now) graded the same plumbing again, a
    kernel each that runs all of its chapter's checks, for about 5 minutes of a 2-core run; every entry's verdicts
    are still proven in-process, cell by cell, above."""
    last = len(CATALOGUES[assignment].WRONG) - 1
    picked = sorted({0, (last + 1) // 2, last})
    return [INSTRUCTOR, UNTOUCHED, "correct-000", *(f"wrong-{i:03d}" for i in picked)]


_CLASSES: dict[str, tuple] = {}


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """assignment -> (Graded, {student: Learner}, folder): each chapter's sample graded once, when first asked
    for."""

    def get(assignment: str) -> tuple[Graded, dict, object]:
        if assignment not in _CLASSES:
            root = tmp_path_factory.mktemp(f"class-{assignment}")
            learners = catalogue_class(assignment, root / "submissions", only=class_sample(assignment))
            graded = grade_class(assignment, root / "submissions", root / "out")
            _CLASSES[assignment] = (graded, learners, root / "submissions")
        graded, learners, folder = _CLASSES[assignment]
        # a class that could not be graded fails every test that asks for it, from the one grading: a broken
        # chapter costs one run of the grader, not one per catalogue entry
        assert graded.returncode == 0, graded.log[-4000:]
        return graded, learners, folder

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


def _accusations(messages: dict[str, str], entry) -> dict[str, str]:
    """The failing cells of ``messages`` ({grade_id: message}) that name a mistake the entry does not make (the name
    each message ends with, ``mistake_name``)."""
    allowed = {entry.name, *entry.also}
    return {gid: m for gid, m in messages.items() if mistake_name(m) not in allowed | {None}}


_JUDGED: dict[tuple[str, str, int], dict[str, CellResult]] = {}


def _judged(assignment: str, kind: str, index: int) -> dict[str, CellResult]:
    """{grade_id: result} of the test cells of the entry's exercise and of the exercises built on it (the source
    notebook's: visible asserts and hidden checks), run in-process on the notebook's answers with the entry in
    place of its exercise's: the exercises built on it call it, as in a notebook. The other exercises' cells are
    not run: they do not use the entry (the class grader's sample shows that they keep full marks). A chapter's
    entries share one process, as its group of tests does, where the class grader gives each notebook its own:
    an entry that changed torch's global state (default dtype, threads) would change the verdicts of those after
    it. None does today: every entry passes here the assertions it passed when each went through the class
    grader."""
    key = (assignment, kind, index)
    if key not in _JUDGED:
        entry = (CATALOGUES[assignment].WRONG if kind == "wrong" else CATALOGUES[assignment].CORRECT)[index]
        cells = touched_cells(assignment, entry.target)
        _JUDGED[key] = grade_in_process(assignment, {entry.target: entry.impl}, cells=cells, as_notebook=True)
    return _JUDGED[key]


def _failed(results: dict[str, CellResult]) -> dict[str, str]:
    return {gid: r.message for gid, r in results.items() if not r.passed}


@pytest.mark.parametrize("case", WRONG, ids=_id)
def test_wrong_answer_loses_points_and_is_named(case) -> None:
    assignment, index, entry = case
    judged = _judged(assignment, "wrong", index)
    assert entry.cell in _points(assignment), f"{entry.label!r} names {entry.cell!r}, not a test of {assignment}"
    assert entry.cell in judged, (f"{entry.label!r} names {entry.cell!r}, which tests neither {entry.target} nor "
                                  f"an exercise built on it")
    failed = _failed(judged)
    assert entry.cell in failed, (
        f"{entry.label!r} kept full marks on {entry.cell}, the test of its property: no hidden case breaks it. Add "
        f"one to the Check {entry.cell!r} in autograder/checks/{chapter(assignment).module}.py, a case this "
        f"answer gets wrong (its mistake declared where the judge finds it), and a row to the contract table")
    named = mistake_name(failed[entry.cell])
    assert named == entry.name, (
        f"{entry.label!r}: {entry.cell} should name the mistake {entry.name!r}; the feedback names {named!r}:\n"
        f"  {failed[entry.cell]}")
    wrongly = _accusations(failed, entry)
    assert not wrongly, f"{entry.label!r} is also accused of mistakes it does not make (declare expected ones " \
        f"in `also`): " + "; ".join(f"{gid}: {m}" for gid, m in wrongly.items())


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_every_graded_test_is_failed_by_a_wrong_answer(assignment) -> None:
    """A test cell that no catalogued mistake fails is a test nobody has seen fail."""
    failed = {gid for index in range(len(CATALOGUES[assignment].WRONG))
              for gid in _failed(_judged(assignment, "wrong", index))}
    never = sorted(set(_points(assignment)) - failed)
    assert not never, f"{assignment}: no wrong answer in the catalogue fails {never}"


@pytest.mark.parametrize("case", CORRECT, ids=_id)
def test_correct_alternative_keeps_full_marks(case) -> None:
    assignment, index, entry = case
    failed = _failed(_judged(assignment, "correct", index))
    assert not failed, f"the correct alternative {entry.label!r} lost points: {failed}"


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_the_class_grader_gives_its_sample_the_in_process_verdicts(classes, assignment) -> None:
    """The sample through ``python -m autograder grade``, a sandboxed kernel per notebook: every cell of the
    entry's exercise and of those built on it has the points and the mistake's name of the in-process run, every
    other cell full marks, every notebook the status ok."""
    graded, learners, _ = classes(assignment)
    assert set(graded.rows) == set(learners) == set(class_sample(assignment)), "a submission has no row"
    for student, learner in learners.items():
        if learner.kind not in ("wrong", "correct"):
            continue
        row, cells = graded.rows[student], graded.cells(student)
        assert row["status"] == "ok", f"{learner.entry.label!r}: status {row['status']}: {row['reason']}"
        judged = _judged(assignment, learner.kind, int(student.split("-")[1]))
        ours = {gid: (c["points"], c["mistake"] if c["points"] < c["max_points"] else None)
                for gid, c in cells.items()}
        expected = {gid: (judged[gid].points, mistake_name(judged[gid].message)) if gid in judged
                    else (c["max_points"], None) for gid, c in cells.items()}
        differ = {gid: (ours[gid], expected[gid]) for gid in cells if ours[gid] != expected[gid]}
        assert not differ, (f"{student} ({learner.entry.label!r}): (class grader, in-process) (points, mistake) "
                            f"differ on {differ}")


# ---------------------------------------------------------------- the visible checks, as the learner runs them

def _visible(assignment: str, entry) -> dict[str, str]:
    """{grade_id: message} of every visible test cell the entry fails (the release's test cells, in-process)."""
    key = (assignment, entry.label, entry.target)
    if key not in _VISIBLE:  # in-process, the other exercises are the reference's: only the entry's cells can fail
        results = grade_in_process(assignment, {entry.target: entry.impl}, visible_only=True, exercise=entry.target)
        _VISIBLE[key] = {gid: r.message for gid, r in results.items() if not r.passed}
    return _VISIBLE[key]


_VISIBLE: dict[tuple, dict[str, str]] = {}


def _visibly_named(assignment: str, entry) -> bool:
    return any(mistake_name(m) == entry.name for m in _visible(assignment, entry).values())


@functools.cache
def _secrets() -> frozenset[str]:
    return frozenset(all_secrets())


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_feedback_shows_no_hidden_test_and_no_line_of_the_reference(classes, assignment, tmp_path) -> None:
    """Every feedback file the class grader wrote for the chapter's sample (failures with their messages among
    them), scanned by the leak scanner of the student repository: no hidden test's text, no line of the reference
    or of the hidden checks and judges. The scan finds a hidden test's line planted in one of those files."""
    graded, _, folder = classes(assignment)
    feedback = folder.parent / "out" / "feedback"
    pages = sorted(feedback.rglob("*.html"))
    assert len(pages) == len(graded.rows), f"{len(pages)} feedback pages for {len(graded.rows)} students"
    leaks = scan([feedback], set(_secrets()))
    assert not leaks, f"{assignment}: the feedback shows hidden text:\n" + "\n".join(leaks[:20])
    hidden_tests = [" ".join(line.split()) for cell in nbformat.read(source_notebook(assignment), 4).cells
                    for kind, body in REGION.findall(cell.source) if kind == "HIDDEN TESTS"
                    for line in body.splitlines()]
    line = next(line for line in hidden_tests if line in _secrets())
    planted = tmp_path / pages[0].name
    planted.write_text(pages[0].read_text() + f"<pre>{line}</pre>")
    assert scan([planted], set(_secrets())), "the scan missed a hidden test's line in a feedback page"


@pytest.mark.parametrize("case", WRONG, ids=_id)
def test_visible_checks_fail_the_wrong_answer_without_a_false_name(case) -> None:
    """While the learner works: a wrong answer fails a visible check, and no visible check names a mistake the
    answer does not make. (Whether the visible checks name it rightly is counted by
    test_visible_checks_name_most_mistakes and catalogue_status.py.)"""
    assignment, _, entry = case
    failed = _visible(assignment, entry)
    wrongly = _accusations(failed, entry)
    assert not wrongly, f"{entry.label!r}: the visible checks name a mistake it does not make: " + "; ".join(
        f"{gid}: {m}" for gid, m in wrongly.items())
    module = chapter(assignment).module
    assert failed, (f"{entry.label!r} passes every visible check: add to the test cell {entry.cell} of "
                    f"autograder/source/{assignment}/ a visible check that fails it, naming its mistake from "
                    f"attention_course/mistakes/{module}.py, then run `make notebooks`")


@pytest.mark.parametrize("case", CORRECT, ids=_id)
def test_visible_checks_pass_the_correct_alternative(case) -> None:
    assignment, _, entry = case
    failed = _visible(assignment, entry)
    assert not failed, f"the correct alternative {entry.label!r} fails visible checks: {failed}"


#: The share of a chapter's wrong answers whose visible checks name the mistake (the README states the figure).
VISIBLE_GOAL = 0.8


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_visible_checks_name_most_mistakes(assignment) -> None:
    """While the learner works, before any grading: the visible checks name most mistakes, in every chapter.
    (Per chapter, in the chapter's group of tests, so the visible runs above are reused, not repeated.)"""
    entries = [entry for a, _, entry in WRONG if a == assignment]
    missed = [entry.label for entry in entries if not _visibly_named(assignment, entry)]
    share = 1 - len(missed) / len(entries)
    print(f"{assignment}: the visible checks name {len(entries) - len(missed)}/{len(entries)} ({share:.0%})")
    assert share >= VISIBLE_GOAL, f"{assignment}: the visible checks name {share:.0%}; not named: {missed}"


def _sample(assignment: str) -> str:
    """The student whose notebook also goes through stock nbgrader: a wrong answer from the middle of the catalogue,
    in the class grader's sample (``class_sample``), with cells that pass and cells that fail with a message. Each
    notebook here costs a kernel of its own that runs all of the chapter's checks: six a chapter took 730 s of a
    whole run on two cores. The instructor's notebook is left out: ``nbgrader validate`` runs it in nbgrader's kernel
    and finds every test passing (test_assignments.py), and the class grader gives it full marks (above); nor is
    the untouched release: the class grader gives it zero (above), in every chapter."""
    return f"wrong-{len(CATALOGUES[assignment].WRONG) // 2:03d}"


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_nbgrader_in_kernel_and_the_class_grader_agree_cell_by_cell(classes, assignment, tmp_path) -> None:
    graded, _, folder = classes(assignment)
    name = ASSIGNMENTS[assignment][0]
    student = _sample(assignment)
    stock = autograde(assignment, {student: nbformat.read(folder / student / name, 4)}, tmp_path)
    score, maximum = stock.total(student)
    assert 0 < score < maximum, (score, maximum)
    passing = {gid for gid, (points, most) in stock.scores[student].items() if points == most}
    for cell in graded_cells(stock.notebooks[student]):
        gid = nbgrader_meta(cell)["grade_id"]
        assert gid not in passing or not cell.outputs, f"passing test cell {gid} printed {cell.outputs}"
    ours = {gid: c["points"] for gid, c in graded.cells(student).items()}
    theirs = {gid: points for gid, (points, _) in stock.scores[student].items()}
    differ = {gid: (ours[gid], theirs.get(gid)) for gid in ours if ours[gid] != theirs.get(gid)}
    assert not differ, f"{student}: (class grader, nbgrader) points differ on {differ}"


#: The chapter whose catalogue is also graded where the platform refuses namespaces inside the sandbox: the
#: fallback gives each notebook a bubblewrap sandbox of its own (a worker's start-up each), so one chapter.
FALLBACK = "04_multi_head"


@pytest.mark.xdist_group(f"catalogue-{FALLBACK}")  # beside that chapter's class, graded once for both
def test_without_nested_namespaces_each_notebook_gets_its_own_sandbox_and_the_same_verdicts(classes,
                                                                                           tmp_path) -> None:
    """bwrap --disable-userns refuses the namespaces the grader would create for each notebook, as Ubuntu's
    AppArmor profile for bubblewrap and Docker's seccomp profile do: the grader says so once, with the cost,
    and grades two notebooks of the chapter's sample (the instructor's, and a wrong answer that passes some cells
    and fails others) one sandbox per notebook, with every verdict of the usual way."""
    from autograder.sandbox import DISABLE_NESTED

    graded, learners, folder = classes(FALLBACK)
    sample = [INSTRUCTOR, _sample(FALLBACK)]  # a worker's start-up per notebook: two, every cell passing in one
    for student in sample:
        shutil.copytree(folder / student, tmp_path / "submissions" / student)
    fallback = grade_class(FALLBACK, tmp_path / "submissions", tmp_path / "out", env={DISABLE_NESTED: "1"})
    assert fallback.returncode == 0, fallback.log[-3000:]
    assert fallback.log.count("refuses namespaces inside the grading sandbox") == 1, fallback.log[-3000:]
    assert "a worker's start-up per notebook (measured here:" in fallback.log, fallback.log[-3000:]
    assert set(fallback.rows) == set(sample) and set(sample) <= set(learners)
    for student in sample:
        usual, alone = graded.rows[student], fallback.rows[student]
        assert (alone["status"], alone["score"]) == (usual["status"], usual["score"]), (student, usual, alone)
        for gid, cell in graded.cells(student).items():
            other = fallback.cells(student)[gid]
            assert (other["points"], other["mistake"], other["message"]) == (
                cell["points"], cell["mistake"], cell["message"]), (student, gid)


@functools.cache
def _points(assignment: str) -> dict[str, float]:
    nb = nbformat.read(source_notebook(assignment), 4)
    return {nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c)["points"]) for c in graded_cells(nb)}


def test_every_assignment_has_a_catalogue() -> None:
    missing = sorted(a for a, module in FOUND.items() if module is None)
    assert not missing, f"assignments without tests/catalogue/<module>.py: {missing}"


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_reference_passes_every_visible_check(assignment) -> None:
    """The visible checks hold their own expected values (hand-worked numbers, torch's built-ins), not the
    reference's: a reference that is wrong fails them."""
    results = grade_in_process(assignment, visible_only=True)
    assert results and all(r.passed for r in results.values()), {
        g: r.message for g, r in results.items() if not r.passed}


@pytest.mark.parametrize("assignment", sorted(CATALOGUES))
def test_catalogue_covers_every_exercise(assignment) -> None:
    module = CATALOGUES[assignment]
    for name in exercise_names(assignment):
        where = f"tests/{module.__name__.replace('.', '/')}.py"
        assert any(e.target == name for e in module.WRONG), (
            f"{where} has no wrong answer of {name}: every exercise needs one, written as a learner would, added to "
            f"WRONG as Entry({name!r}, label, impl, mistake's name, owner cell)")
        assert any(e.target == name for e in module.CORRECT), (
            f"{where} has no correct alternative of {name}: every exercise needs one, added to CORRECT as "
            f"Entry({name!r}, label, impl)")
