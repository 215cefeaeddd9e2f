"""One verdict on both paths: ``python -m autograder grade`` gives every test cell the points that stock
``nbgrader autograde`` gives it, visible asserts and stderr included (SPEC.md, "Grading command line").

The catalogue's samples (``tests/test_catalogue.py``) compare the two on answers that the hidden checks catch.
Here the answers are the other kind: their hidden checks pass, and only the rest of a test cell fails it, as a
learner sees in the notebook. Each test first shows that from the class grader's own messages (the hidden
check passed, then a visible assert failed or the cell wrote to stderr), so that the comparison is about such
cells; then it grades the same notebooks with stock nbgrader and compares cell by cell.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from class_grading import grade_class
from notebook_grading import autograde, nbgrader_meta, replace_solution, solution_cells, source_notebook

from autograder import grading

#: A softmax that is right on every input but copies it with torch.tensor(x), which warns (UserWarning: "To copy
#: construct from a tensor ..."): the hidden checks silence warnings, nbgrader scores the warning that a visible
#: check's call prints to stderr as a failure.
SOFTMAX_THAT_WARNS = '''def softmax(x, dim=-1):
    x = torch.tensor(x)
    shifted = x - x.amax(dim=dim, keepdim=True).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True).clamp_min(1e-30)
'''


def _gpt_without_its_length_check(source: str) -> str:
    """Chapter 7's GPT as the notebook answers it, less the ValueError for more positions than max_len: the
    position table's nn.Embedding then raises IndexError (issue 23's example), which a visible check names."""
    check = ('        if end > self.config.max_len:\n'
             '            raise ValueError(f"{start} cached + {tokens.shape[1]} new positions exceed '
             'max_len={self.config.max_len}")\n')
    assert check in source, "the notebook's GPT no longer has the length check this answer removes"
    return source.replace(check, "")


def _answer(assignment: str, grade_id: str) -> str:
    nb = nbformat.read(source_notebook(assignment), 4)
    return next(c.source for c in solution_cells(nb) if nbgrader_meta(c)["grade_id"] == grade_id)


#: assignment -> {student: {exercise: the answer's source}}
CLASSES = {
    "01_self_attention": {"warns": {"softmax": SOFTMAX_THAT_WARNS}},
    "07_gpt": {"no_length_check": {"GPT": lambda: _gpt_without_its_length_check(_answer("07_gpt", "GPT"))}},
}
VISIBLY = ("a visible check of this test failed", "this test wrote to stderr")


@pytest.mark.parametrize("assignment", sorted(CLASSES))
def test_answers_that_fail_only_outside_the_hidden_checks_score_the_same_on_both_paths(assignment, tmp_path) -> None:
    notebooks = {}
    for student, answers in CLASSES[assignment].items():
        nb = nbformat.read(source_notebook(assignment), 4)
        for exercise, code in answers.items():
            replace_solution(nb, exercise, code() if callable(code) else code)
        notebooks[student] = nb
    folder = tmp_path / "submissions"
    name = source_notebook(assignment).name
    for student, nb in notebooks.items():
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / name)
    graded = grade_class(assignment, folder, tmp_path / "out")
    assert graded.returncode == 0, graded.log[-3000:]
    stock = autograde(assignment, notebooks, tmp_path / "stock")
    for student in notebooks:
        cells = graded.cells(student)
        visibly = {gid: c["message"] for gid, c in cells.items() if c["message"].startswith(VISIBLY)}
        assert visibly, f"{student}: no test cell failed outside its hidden check, so this proves nothing: " + \
            json.dumps({gid: c["message"][:120] for gid, c in cells.items() if c["message"]})
        assert graded.rows[student]["status"] == "ok", graded.rows[student]
        ours = {gid: c["points"] for gid, c in cells.items()}
        theirs = {gid: score for gid, (score, _) in stock.scores[student].items()}
        differ = {gid: (ours[gid], theirs.get(gid)) for gid in ours if ours[gid] != theirs.get(gid)}
        assert not differ, f"{student}: (class grader, nbgrader) points differ on {differ}"


# ---------------------------------------------------------------- nbgrader's rule, cell by cell

def _outcome(error=None, stderr=None, shown=None) -> dict:
    return {"error": error, "stderr": stderr, "shown": shown}


@pytest.mark.parametrize(("outcome", "points", "says"), [
    (_outcome(), 3.0, ""),
    (_outcome(error=["CheckFailed", "softmax(x) is off (softmax over the wrong axis)"]), 0.0,
     "a visible check of this test failed: CheckFailed: softmax(x) is off"),
    (_outcome(error=["IndexError", "index out of range in self"]), 0.0, "IndexError"),
    (_outcome(stderr="UserWarning: To copy construct from a tensor"), 0.0, "wrote to stderr"),
    (_outcome(shown="1.5"), 1.5, ""),  # a number displayed by the cell is nbgrader's partial credit
    (_outcome(shown="GPT(...)"), 3.0, ""),  # anything else displayed: full marks, as nbgrader gives
    (_outcome(shown="7"), 0.0, "not a grade it can have"),  # more than the cell's points: nbgrader refuses it
])
def test_a_cell_whose_hidden_check_passed_is_scored_by_nbgraders_rule(outcome, points, says) -> None:
    message, flag, _, got = grading._cell_verdict(outcome, 3.0)
    assert (got, flag) == (points, "") and says in message and bool(message) == bool(says), (message, got)


def test_a_visible_checks_failure_keeps_the_name_of_its_mistake() -> None:
    _, _, name, _ = grading._cell_verdict(
        _outcome(error=["CheckFailed", "weights sum to 1 along dim 0 (softmax over the wrong axis)"]), 2.0)
    assert name == "softmax over the wrong axis"
    _, _, name, _ = grading._cell_verdict(_outcome(error=["ValueError", "learner's own words (not a name)"]), 2.0)
    assert name is None  # only the checks' own failures carry names


@pytest.mark.parametrize("outcome", [None, {"error": None}, _outcome(error="not a list"), _outcome(error=[1, 2])])
def test_a_missing_or_forged_outcome_scores_nothing_and_is_flagged(outcome) -> None:
    message, flag, _, points = grading._cell_verdict(outcome, 2.0)
    assert points == 0.0 and message and flag


def test_what_follows_the_last_test_is_not_run() -> None:
    """Chapter 6 ends with an ungraded training run of the learner's model: after the last test, it can change no
    test's points, so the class grader leaves it out (nbgrader runs it, and scores the same)."""
    source = json.loads(source_notebook("06_transformer").read_text())
    tail = source["cells"][max(i for i, c in enumerate(source["cells"]) if grading._nbgrader(c).get("grade")) + 1:]
    assert any(c["cell_type"] == "code" and "greedy_decode(" in "".join(c["source"]) for c in tail), \
        "chapter 6 no longer ends with its ungraded training run"
    assembled, _ = grading.assemble(source, source, source)
    assert grading._nbgrader(assembled["cells"][-1]).get("grade"), "the assembled notebook goes on after its last test"
