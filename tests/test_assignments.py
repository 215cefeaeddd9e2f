"""Course-level tests of every assignment: the release is current, nbgrader grades it as intended,
and the notebooks follow the conventions learners rely on."""

from __future__ import annotations

import ast
import builtins
import csv
import importlib
import inspect
import json
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest
from catalogue import self_attention as ch01
from notebook_grading import (
    ASSIGNMENTS,
    autograde,
    exercise_names,
    grade_in_process,
    graded_cells,
    nbgrader_meta,
    notebook_answers,
    release_notebook,
    replace_solution,
    solution_cells,
    source_notebook,
)

from autograder.chapters import chapter
from autograder.release import REPO_ROOT, generate_releases, nbgrader_env

ALL = sorted(ASSIGNMENTS)


def _cells_as_json(nb_path) -> list[dict]:
    return json.loads(nb_path.read_text())["cells"]


def _collected(request, test: str) -> list[str]:
    """The assignments whose case of the parametrized ``test`` was collected (all of them if none was)."""
    return sorted({item.callspec.params["assignment"] for item in request.session.items
                   if getattr(item, "originalname", "") == test}) or ALL


@pytest.fixture(scope="module")
def fresh_releases(request, tmp_path_factory) -> dict:
    """The student notebooks generated afresh, as `make notebooks` does (one nbgrader process), of the chapters whose
    test was collected (``-k 05_positional_encoding`` generates one)."""
    return generate_releases(_collected(request, "test_committed_release_is_current"),
                             tmp_path_factory.mktemp("release"))


@pytest.mark.parametrize("assignment", ALL)
def test_committed_release_is_current(assignment, fresh_releases) -> None:
    fresh = fresh_releases[assignment] / ASSIGNMENTS[assignment][0]
    committed = release_notebook(assignment)
    assert committed.exists(), f"{committed} is missing: run `make notebooks`"
    assert json.loads(fresh.read_text()) == json.loads(committed.read_text()), (
        f"{committed} is stale: autograder/source/{assignment} changed since it was generated; run `make notebooks`"
    )


def _as_cell_source(entry, *helpers) -> str:
    """A catalogue entry's code as a learner would type it into the solution cell."""
    code = textwrap.dedent(inspect.getsource(entry.impl))
    keyword = "class" if inspect.isclass(entry.impl) else "def"
    code = re.sub(rf"^{keyword} \w+", f"{keyword} {entry.target}", code, count=1)
    prelude = "".join(textwrap.dedent(inspect.getsource(h)) + "\n\n" for h in helpers)
    return 'NEG_INF = float("-inf")\n\n' + prelude + code


def _entry(entries, label):
    return next(e for e in entries if e.label == label)


#: The course's late-submission plugin in these tests, as nbgrader's documentation writes its SubtractPlugin: one
#: point per hour or part of one, by the total seconds late that nbgrader passes it.
LATE_PLUGIN = """
import math

from nbgrader.plugins import LateSubmissionPlugin


class SubtractPlugin(LateSubmissionPlugin):
    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return float(math.ceil(total_seconds_late / 3600))
"""
DUE = "2026-12-01 17:00:00 UTC"
#: each student's timestamp.txt, as nbgrader submit writes it (a zone named, or UTC); "untouched" has none
TIMESTAMPS = {
    "solution": "2026-12-01 16:59:30 UTC",  # on time
    "wrong_axis": "2026-12-01 20:30:00 Europe/Berlin",  # 19:30 UTC: 2 h 30 min late, 3 points
    "einsum": "2026-12-02 03:00:00 UTC",  # 10 h late, but within its 24 h extension
    "deleted_test": "2026-12-02 23:00:00 UTC",  # 30 h late: 30 points, bounded by its score of 0
}


def test_nbgrader_grades_a_small_class(tmp_path) -> None:
    """Real `nbgrader generate_assignment` + `autograde` of one batch: full marks, zero, a named mistake,
    a correct alternative and a deleted test cell, side by side. The same class, due on a date, with
    timestamps, an extension and the course's late-submission plugin, then goes through the class grader
    (python -m autograder grade): the same times, lateness, penalties and points as nbgrader's, student by
    student, in the gradebook where nbgrader keeps them."""
    from datetime import datetime, timedelta

    from nbgrader.api import Gradebook

    assignment = "01_self_attention"
    source = nbformat.read(source_notebook(assignment), 4)
    wrong = nbformat.read(source_notebook(assignment), 4)
    wrong_entry = _entry(ch01.WRONG, "softmax over the wrong axis")
    replace_solution(wrong, "softmax", _as_cell_source(wrong_entry))
    alternative = nbformat.read(source_notebook(assignment), 4)
    replace_solution(alternative, "scaled_dot_product_attention",
                     _as_cell_source(_entry(ch01.CORRECT, "einsum and torch.where"), ch01._check))
    deleted = nbformat.read(release_notebook(assignment), 4)
    deleted.cells = [c for c in deleted.cells if nbgrader_meta(c).get("grade_id") != "softmax_stable"]

    config = tmp_path / "jupyter-config"  # where an instructor's ~/.jupyter would be
    config.mkdir()
    (config / "late_course.py").write_text(LATE_PLUGIN, encoding="utf-8")
    (config / "nbgrader_config.py").write_text(
        'c = get_config()  # noqa: F821\nc.AssignLatePenalties.plugin_class = "late_course.SubtractPlugin"\n')
    env = {"JUPYTER_CONFIG_DIR": str(config), "PYTHONPATH": str(config)}
    due = datetime(2026, 12, 1, 17)
    result = autograde(assignment, {
        "solution": source,
        "untouched": nbformat.read(release_notebook(assignment), 4),
        "wrong_axis": wrong,
        "einsum": alternative,
        "deleted_test": deleted,
    }, tmp_path, timestamps=TIMESTAMPS, due=due, extensions={"einsum": timedelta(hours=24)}, env=env,
        keep_submitted=tmp_path / "class")

    score, maximum = result.total("solution")
    assert maximum > 0 and score == maximum, result.scores["solution"]
    for cell in graded_cells(result.notebooks["solution"]):
        assert not cell.outputs, f"passing test cell {nbgrader_meta(cell)['grade_id']} printed {cell.outputs}"

    assert result.total("untouched") == (0.0, maximum), result.scores["untouched"]
    assert result.total("einsum") == (maximum, maximum), result.scores["einsum"]

    # the mistake costs the softmax cells; attention_scores does not use softmax and keeps its points
    # (scaled_dot_product_attention calls the learner's softmax, so its cells may fail too, as in a real kernel)
    lost = {g for g, s in result.scores["wrong_axis"].items() if s[0] < s[1]}
    assert {"softmax_sums_to_one", "softmax_masked_entries"} <= lost, lost
    assert not {g for g in lost if g.startswith("attention_scores_")}, lost
    assert "softmax over the wrong axis" in result.error_text("wrong_axis", "softmax_sums_to_one")

    # a deleted test cell is put back and graded, not silently dropped
    assert "softmax_stable" in result.scores["deleted_test"]
    assert result.total("deleted_test") == (0.0, maximum)

    # nbgrader's verdicts on the deadline, which the class grader must match
    assert {s: (late[2], late[3]) for s, late in result.late.items()} == {
        "solution": (0.0, None), "untouched": (0.0, None), "einsum": (0.0, None),
        "wrong_axis": (9000.0, 3.0), "deleted_test": (108000.0, 0.0)}, result.late

    out = tmp_path / "grades"
    run = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, str(tmp_path / "class"), "--out",
                          str(out), "--gradebook", f"sqlite:///{out / 'gradebook.db'}", "--due", DUE,
                          "--extension", "einsum=24", "--workers", "2"],
                         cwd=REPO_ROOT, env={**nbgrader_env(), **env}, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gradebook:
        ours = {}
        for student in result.late:
            whole = gradebook.find_submission(assignment, student)
            notebook = gradebook.find_submission_notebook("self_attention", assignment, student)
            ours[student] = (whole.timestamp, whole.duedate, whole.total_seconds_late, notebook.late_submission_penalty)
            assert {g.name: (float(g.score), float(g.max_score)) for g in notebook.grades} == result.scores[student], (
                f"{student}: the class grader's points differ from nbgrader autograde's")
    assert ours == result.late
    with (out / "grades.csv").open() as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    wrong_points = sum(s for s, _ in result.scores["wrong_axis"].values())
    assert float(rows["wrong_axis"]["score"]) == wrong_points - 3, rows["wrong_axis"]
    assert "2 h 30 min after the due date 2026-12-01 17:00:00 UTC: late penalty 3 point(s)" in rows["wrong_axis"][
        "reason"]
    assert "extension of 1 d" not in rows["einsum"]["reason"] and float(rows["einsum"]["score"]) == maximum
    assert "late" not in rows["untouched"]["reason"] and "late" not in rows["solution"]["reason"]
    report = (out / "report.html").read_text()
    late_table = report[report.index("<table id='late'>"):]
    late_table = late_table[:late_table.index("</table>")]
    assert late_table.count("<tr>") == 3 and "wrong_axis" in late_table and "deleted_test" in late_table
    assert "1 without a submission time" in report
    feedback = (out / "feedback" / "wrong_axis" / f"{assignment}.html").read_text()
    assert "late penalty 3 point(s)" in feedback


@pytest.fixture(scope="module")
def validated(request, tmp_path_factory) -> dict[str, str]:
    """`nbgrader validate` of every source notebook, in one run, one section per notebook. Only the chapters whose
    test was collected (``-k 05_positional_encoding`` validates one chapter). The untouched release is not
    validated here: test_catalogue grades it in every chapter's class sample, through the class grader, and finds
    it zero, so `nbgrader validate --invert` of the nine releases, a second run of each, proved nothing more."""
    cwd = tmp_path_factory.mktemp("validate")
    notebooks = {a: source_notebook(a) for a in _collected(request, "test_nbgrader_validate")}
    # one stream, unbuffered, so each notebook's verdict stays in its own section
    run = subprocess.run([sys.executable, "-m", "nbgrader", "validate", *map(str, notebooks.values())],
                         cwd=cwd, env={**nbgrader_env(), "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=1200)
    parts = re.split(r"Validating '([^']+)'", run.stdout)
    by_path = dict(zip(parts[1::2], parts[2::2], strict=True))
    return {a: by_path.get(str(path), f"no section for {path} in:\n{run.stdout[-3000:]}")
            for a, path in notebooks.items()}


@pytest.mark.parametrize("assignment", ALL)
def test_nbgrader_validate(assignment, validated) -> None:
    """`nbgrader validate`, what the learner's Validate button runs, passes the source: the instructor's answers
    pass every test cell in nbgrader's own kernel, and no passing test cell leaves output."""
    out = validated[assignment]
    assert "Success! Your notebook passes all the tests." in out, out[-3000:]
    assert "cannot be converted to" not in out, "a test cell leaves output that nbgrader reads as partial credit"


def _visible_part(source: str) -> str:
    return re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", "", source, flags=re.S)


def _where(assignment: str) -> str:
    return str(source_notebook(assignment).relative_to(REPO_ROOT))


@pytest.mark.parametrize("assignment", ALL)
def test_notebook_conventions(assignment) -> None:
    """The rules of CONTRIBUTING.md's "Adding an exercise", step 2: each failure states the rule and the fix."""
    where = _where(assignment)
    nb = nbformat.read(source_notebook(assignment), 4)
    names = exercise_names(assignment)
    tests = graded_cells(nb)
    for cell in tests:
        meta = nbgrader_meta(cell)
        gid = meta["grade_id"]
        assert any(gid.startswith(n + "_") for n in names), (
            f"{where}: test cell {gid!r}: a test cell's grade_id is <exercise>_<property>, where <exercise> is the "
            f"grade_id of a solution cell ({', '.join(names)}); rename it in the cell's nbgrader metadata")
        assert cell.cell_type == "code" and meta["locked"] and meta["points"] > 0, (
            f"{where}: test cell {gid!r}: a test cell is a code cell, locked, with points > 0 in its nbgrader "
            f"metadata (it is {cell.cell_type}, locked={meta.get('locked')}, points={meta.get('points')})")
        index = nb.cells.index(cell)
        heading = nb.cells[index - 1]
        found = re.search(r"\((\d+) points?\)", heading.source)
        assert heading.cell_type == "markdown" and found, (
            f"{where}: test cell {gid!r}: every test cell follows a markdown line that says what it checks and "
            f"its points, **Test `{gid}`** — what it checks (P points); add one right above it")
        declared = float(found.group(1))
        assert declared == meta["points"], (
            f"{where}: test cell {gid!r}: the line above it says {declared:g} points, its nbgrader metadata "
            f"{meta['points']:g}; make them agree")
        assert gid in cell.source, (
            f"{where}: test cell {gid!r}: its hidden region must run its own check, run_check({gid!r}, ...); "
            "the grader finds the check by the cell's grade_id")
        visible = _visible_part(cell.source)
        assert not re.search(r"\b(solutions|autograder)\b", visible), (
            f"{where}: test cell {gid!r}: the visible part of a test cell ships to learners and may use only "
            "attention_course.testing; move what uses solutions/ or autograder/ into the hidden region")
    for name in names:
        own = [c for c in tests if nbgrader_meta(c)["grade_id"].startswith(name + "_")]
        assert own, (f"{where}: exercise {name!r} has no test cell: add at least one, grade_id {name}_<property>, "
                     "after its solution cell")
        assert any(_visible_part(c.source).strip() for c in own), (
            f"{where}: exercise {name!r} has no visible check: at least one of its test cells needs asserts "
            "after the hidden region, so that the learner gets feedback before grading")
    sections: list[list] = []  # [heading, declared points, points of the test cells under it]
    for cell in nb.cells:
        heading = re.match(r"## (.*)\((\d+) points?\)", cell.source) if cell.cell_type == "markdown" else None
        if heading:
            sections.append([heading.group(1).strip(), float(heading.group(2)), 0.0])
        elif nbgrader_meta(cell).get("grade"):
            assert sections, (f"{where}: test cell {nbgrader_meta(cell)['grade_id']!r} comes before any section: "
                              "each exercise starts with a heading '## N. Title (P points)'")
            sections[-1][2] += nbgrader_meta(cell)["points"]
    # a section per exercise of the contract, and one for all the concept checks after them
    contract = chapter(assignment).contract
    assert len(sections) == len(contract) + 1, (
        f"{where} has {len(sections)} sections with points ({'; '.join(t for t, _, _ in sections)}) for "
        f"{len(contract)} exercises in the chapter's contract ({', '.join(contract)}) and one of concept checks: "
        "each exercise has its own '## N. Title (P points)' section and its name in the chapter's contract in "
        "autograder/chapters.py, in the notebook's order; the concept checks share the last section")
    for title, declared, counted in sections:
        assert declared == counted, (f"{where}: section {title!r} says {declared:g} points and its test cells hold "
                                     f"{counted:g}: the heading's points are the sum of its test cells'")
    ids = [c.get("id") for c in nb.cells]
    repeated = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    assert not repeated, (f"{where}: cell ids {repeated} are used more than once (a copied cell keeps its id): give "
                          "each copy a new id, e.g. nbformat.v4.new_code_cell(...).id")


def _bound(tree: ast.AST) -> set[str]:
    """Every name ``tree`` binds anywhere: assigned, defined, imported or taken as an argument."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
    return found


def _defined_at_top(source: str) -> set[str]:
    tree = ast.parse(source)
    return {name for node in tree.body for name in _bound(ast.Module(body=[node], type_ignores=[]))
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            or name == node.name}


@pytest.mark.parametrize("assignment", ALL)
def test_no_test_cell_needs_what_an_earlier_one_defines_after_its_hidden_checks(assignment) -> None:
    """Stock nbgrader judges a hidden check in the kernel: a failing one stops its cell, and what the cell defines
    after it is never defined. The class grader judges outside the sandbox, and the cell goes on. A later test cell
    that uses such a name would then fail with a NameError on one path and pass on the other (Chapter 6's
    smoothing_suspects did): so a name a later cell needs is defined before the hidden region."""
    where = _where(assignment)
    nb = nbformat.read(source_notebook(assignment), 4)
    late: dict[str, str] = {}  # name -> grade_id of the test cell that defines it after its hidden checks
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        meta = nbgrader_meta(cell)
        tree = ast.parse(cell.source)
        if meta.get("grade"):
            needed = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            needed -= _bound(tree) | set(dir(builtins))
            wrong = {name: late[name] for name in needed if name in late}
            assert not wrong, (f"{where}: test cell {meta['grade_id']!r} uses " + "; ".join(
                f"{name}, which {gid} defines after its hidden checks" for name, gid in sorted(wrong.items()))
                + ": define it before `### BEGIN HIDDEN TESTS` in that cell")
        if meta.get("grade") and "### END HIDDEN TESTS" in cell.source:
            before, after = cell.source.split("### END HIDDEN TESTS", 1)
            for name in _defined_at_top(before):
                late.pop(name, None)
            late.update(dict.fromkeys(_defined_at_top(after), meta["grade_id"]))
        else:
            for name in _defined_at_top(cell.source):
                late.pop(name, None)


@pytest.mark.parametrize("assignment", ALL)
def test_release_stubs_keep_signature_and_docstring(assignment) -> None:
    released = nbformat.read(release_notebook(assignment), 4)
    source = nbformat.read(source_notebook(assignment), 4)
    for src, rel in zip(solution_cells(source), solution_cells(released), strict=True):
        name = nbgrader_meta(src)["grade_id"]
        assert "# YOUR CODE HERE" in rel.source and "raise NotImplementedError()" in rel.source, name
        assert "BEGIN SOLUTION" not in rel.source, name
        header = src.source.split("### BEGIN SOLUTION")[0]
        assert header.strip() and rel.source.startswith(header), f"{name}: the stub lost its signature or docstring"
        assert '"""' in header, f"{name}: the stub has no docstring"


@pytest.mark.parametrize("assignment", ALL)
def test_the_contracts_exercises_come_first_then_the_concept_checks(assignment) -> None:
    """The exercises of the chapter's contract (autograder/chapters.py), in order, then the concept checks: small
    functions that return plain answers, each with a reference of the same name."""
    c = chapter(assignment)
    where = _where(assignment)
    names = exercise_names(assignment)
    assert names[: len(c.contract)] == list(c.contract), (
        f"{where}: the exercises in the notebook's order are {names}; they must begin with the chapter's contract "
        f"{list(c.contract)} (autograder/chapters.py): add a new exercise to the contract, or move its cells so "
        "that both orders agree")
    concepts = names[len(c.contract):]
    assert 1 <= len(concepts) <= 3, (
        f"{where}: after the contract's exercises come one to three concept checks, and these follow: {concepts}. "
        "An exercise among them that is not a concept check belongs in the chapter's contract in "
        "autograder/chapters.py (and its cells before the concept checks)")
    reference = importlib.import_module(c.reference)
    for name in concepts:
        assert inspect.isfunction(getattr(reference, name, None)), (
            f"concept check {name!r} has no reference: add a function {name} to solutions/{c.module}.py and "
            "to its __all__")


@pytest.mark.parametrize("assignment", ALL)
def test_the_notebooks_answers_agree_with_the_reference_on_every_hidden_case(assignment) -> None:
    """solutions/ is the canonical answer; the notebook's solution regions are the same answers as a learner
    would write them, and may read differently. Every hidden check compares with the reference on its own
    cases, so the notebook's answers passing all of them is the two agreeing on every case the grader asks."""
    answers = notebook_answers(assignment)
    for name, obj in answers.items():
        assert obj is not getattr(importlib.import_module(chapter(assignment).reference), name), name
    failed = {g: r.message for g, r in grade_in_process(assignment, answers).items() if not r.passed}
    assert not failed, failed


@pytest.mark.parametrize("assignment", ALL)
def test_release_hides_solutions_and_hidden_tests(assignment) -> None:
    text = release_notebook(assignment).read_text()
    for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "run_check", "autograder", "solutions"):
        assert marker not in text, f"the release of {assignment} contains {marker!r}"
