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
import importlib
import io
import json
import shutil
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbgrader.api import Gradebook

from autograder.release import REPO_ROOT, SOURCE, make_course_copy, run_nbgrader

#: SPEC's assignment ids -> the reference module; the notebook is named after the module.
SPEC_ASSIGNMENTS = {
    "01_self_attention": "solutions.self_attention",
    "02_causal_masking": "solutions.masking",
    "03_cross_attention": "solutions.cross_attention",
    "04_multi_head": "solutions.multi_head",
    "05_positional_encoding": "solutions.positional",
    "06_transformer": "solutions.transformer",
}

#: SPEC's exercise names of each chapter.
SPEC_EXERCISES = {
    "01_self_attention": {"softmax", "attention_scores", "scaled_dot_product_attention", "SelfAttention"},
    "02_causal_masking": {"causal_mask", "padding_mask", "combine_masks", "additive_mask", "CausalSelfAttention"},
    "03_cross_attention": {"CrossAttention", "shift_right", "teacher_forcing_pair", "sequence_cross_entropy"},
    "04_multi_head": {"split_heads", "merge_heads", "MultiHeadAttention"},
    "05_positional_encoding": {"sinusoidal_encoding", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding",
                               "apply_rotary"},
    "06_transformer": {"FeedForward", "EncoderLayer", "DecoderLayer", "TransformerConfig", "Transformer",
                       "greedy_decode"},
}

#: The concept checks that end each exercise notebook: short questions, each a small function of the sizes or
#: tokens involved, whose wrong answers are the misreadings of the course's seed notes. Not SPEC's exercises, but
#: graded like them, against the reference of the same name in the chapter's module.
CONCEPT_CHECKS = {
    "01_self_attention": {"score_position", "score_count"},
    "02_causal_masking": {"masked_attention_shapes", "visible_keys"},
    "03_cross_attention": {"loss_positions", "cross_weights_shape"},
    "04_multi_head": {"head_query_shape", "attention_parameters"},
    "05_positional_encoding": {"encoded_shape", "same_without_positions"},
    "06_transformer": {"decoder_passes", "scored_positions"},
}

#: assignment id -> (notebook file name, reference module), for every assignment that has a source.
ASSIGNMENTS = {
    assignment: (module.rsplit(".", 1)[1] + ".ipynb", module)
    for assignment, module in SPEC_ASSIGNMENTS.items()
    if (SOURCE / assignment).is_dir()
}


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
    return [nbgrader_meta(c)["grade_id"] for c in solution_cells(nbformat.read(source_notebook(assignment), 4))]


def exercise_of(grade_id: str, exercises: list[str]) -> str:
    """The exercise a test cell belongs to: its grade_id is ``<exercise>_<property>``."""
    return max((e for e in exercises if grade_id.startswith(e + "_")), key=len)


def reference_objects(assignment: str) -> dict[str, Any]:
    module = importlib.import_module(ASSIGNMENTS[assignment][1])
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


def grade_in_process(assignment: str, overrides: dict[str, Any] | None = None,
                     visible_only: bool = False, exercise: str | None = None) -> dict[str, CellResult]:
    """Grade the reference implementations, with ``overrides`` swapped in, through the notebook's test cells.

    With ``visible_only`` the test cells are the release's, as a learner runs them: the visible checks alone,
    without the hidden ones; with ``exercise``, only that exercise's test cells. A cell scores its points
    when it raises nothing and writes nothing to stderr (nbgrader's rule: a warning in a test cell is a
    failure).
    """
    nb = nbformat.read(release_notebook(assignment) if visible_only else source_notebook(assignment), 4)
    namespace: dict[str, Any] = {"__name__": "__graded__"}
    setup = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "setup"]
    exec(compile(setup[0].source, "<setup>", "exec"), namespace)  # noqa: S102
    namespace.update(reference_objects(assignment))
    namespace.update(overrides or {})
    results = {}
    cells = graded_cells(nb)
    if exercise is not None:
        names = [nbgrader_meta(c)["grade_id"] for c in solution_cells(nb)]
        cells = [c for c in cells if exercise_of(nbgrader_meta(c)["grade_id"], names) == exercise]
    for cell in cells:
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

    def total(self, student: str) -> tuple[float, float]:
        cells = self.scores[student].values()
        return sum(s for s, _ in cells), sum(m for _, m in cells)

    def error_text(self, student: str, grade_id: str) -> str:
        """Everything the graded cell ``grade_id`` printed or raised, as plain text."""
        for cell in graded_cells(self.notebooks[student]):
            if nbgrader_meta(cell)["grade_id"] == grade_id:
                return json.dumps(cell.get("outputs", []))
        raise KeyError(grade_id)


def autograde(assignment: str, submissions: dict[str, Any], workdir: Path) -> Autograded:
    """Run ``nbgrader generate_assignment`` and ``nbgrader autograde`` on ``submissions`` (student -> notebook)."""
    course = make_course_copy(workdir / "course", [assignment])
    run_nbgrader(["generate_assignment", assignment, "--force"], course)
    name = ASSIGNMENTS[assignment][0]
    for student, nb in submissions.items():
        target = course / "submitted" / student / assignment
        target.mkdir(parents=True)
        nbformat.write(nb, target / name)
    run_nbgrader(["autograde", assignment, "--force"], course)
    scores: dict[str, dict[str, tuple[float, float]]] = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in submissions:
            submitted = gradebook.find_submission_notebook(Path(name).stem, assignment, student)
            scores[student] = {g.name: (float(g.score), float(g.max_score)) for g in submitted.grades}
    notebooks = {s: nbformat.read(course / "autograded" / s / assignment / name, 4) for s in submissions}
    shutil.rmtree(course, ignore_errors=True)
    return Autograded(scores, notebooks)
