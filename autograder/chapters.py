"""The chapters of the course: the one list that the commands, the tests and the checks of the README and the
table of contents read.

A chapter is named once, here, with its nbgrader assignment id and the name of its module. Everything else
follows from them:

- the narrative ``book/<assignment>.ipynb``;
- the exercise notebook ``autograder/source/<assignment>/<module>.ipynb`` (the source) and
  ``notebooks/<assignment>/<module>.ipynb`` (the student notebook generated from it);
- the reference ``solutions/<module>.py``, the hidden checks ``autograder/checks/<module>.py`` and their judges
  ``autograder/judges/<module>.py``, the catalogue of answers ``tests/catalogue/<module>.py``.

The exercises and their points are read from the source notebook (its solution cells and test cells), never
written down twice. ``contract`` is the part of the exercise API that instructors' scripts rely on (the
contributor guide, CONTRIBUTING.md, states it): the notebook must have these exercises; it may have more, such
as the concept checks that end every notebook.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parent
REPO_ROOT = COURSE_ROOT.parent


@dataclass(frozen=True)
class Chapter:
    number: int
    title: str
    assignment: str  # the nbgrader assignment id
    module: str  # solutions/<module>.py, autograder/checks|judges/<module>.py, tests/catalogue/<module>.py
    contract: tuple[str, ...]  # the exercises instructors' scripts rely on, in the notebook's order

    @property
    def reference(self) -> str:
        """The reference module, importable: ``solutions.<module>``."""
        return f"solutions.{self.module}"

    @property
    def narrative(self) -> Path:
        return REPO_ROOT / "book" / f"{self.assignment}.ipynb"

    @property
    def source(self) -> Path:
        """The exercise notebook with solutions and hidden tests (nbgrader's source)."""
        return COURSE_ROOT / "source" / self.assignment / f"{self.module}.ipynb"

    @property
    def notebook(self) -> Path:
        """The student notebook, generated from the source by ``python -m autograder notebooks``."""
        return REPO_ROOT / "notebooks" / self.assignment / f"{self.module}.ipynb"

    def owned_files(self) -> list[Path]:
        """The files that are this chapter's alone (those that exist): what ``make chapter`` lints."""
        found = [REPO_ROOT / "solutions" / f"{self.module}.py", COURSE_ROOT / "checks" / f"{self.module}.py",
                 COURSE_ROOT / "judges" / f"{self.module}.py",
                 REPO_ROOT / "attention_course" / "mistakes" / f"{self.module}.py",
                 REPO_ROOT / "tests" / "catalogue" / f"{self.module}.py", self.source, self.notebook, self.narrative]
        return [path for path in found if path.exists()]

    def _cells(self) -> list[dict]:
        return json.loads(self.source.read_text(encoding="utf-8"))["cells"]

    def exercises(self) -> list[str]:
        """The names the learner implements, in the notebook's order: the grade_id of every solution cell."""
        return [meta["grade_id"] for meta in _nbgrader(self._cells()) if meta.get("solution")]

    def points(self) -> dict[str, float]:
        """{grade_id: points} of every test cell, in the notebook's order."""
        return {meta["grade_id"]: float(meta["points"]) for meta in _nbgrader(self._cells()) if meta.get("grade")}

    def total(self) -> float:
        return sum(self.points().values())


def _nbgrader(cells: list[dict]) -> list[dict]:
    return [cell.get("metadata", {}).get("nbgrader") or {} for cell in cells]


CHAPTERS: tuple[Chapter, ...] = (
    Chapter(1, "Self-attention", "01_self_attention", "self_attention",
            ("softmax", "attention_scores", "scaled_dot_product_attention", "SelfAttention")),
    Chapter(2, "Causal masking", "02_causal_masking", "masking",
            ("causal_mask", "padding_mask", "combine_masks", "additive_mask", "CausalSelfAttention")),
    Chapter(3, "Cross-attention and teacher forcing", "03_cross_attention", "cross_attention",
            ("CrossAttention", "shift_right", "teacher_forcing_pair", "sequence_cross_entropy")),
    Chapter(4, "Multi-head attention", "04_multi_head", "multi_head",
            ("split_heads", "merge_heads", "MultiHeadAttention")),
    Chapter(5, "Positional encoding", "05_positional_encoding", "positional",
            ("sinusoidal_encoding", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding", "apply_rotary",
             "alibi_bias")),
    Chapter(6, "A full transformer, trained on a GPU when you have one, on the CPU otherwise", "06_transformer",
            "transformer",
            ("FeedForward", "EncoderLayer", "DecoderLayer", "TransformerConfig", "Transformer", "greedy_decode",
             "label_smoothed_cross_entropy", "noam_lr")),
    Chapter(7, "A GPT that writes: sampling, a KV cache, grouped-query attention", "07_gpt", "gpt",
            ("sample_next", "KVCache", "GroupedQueryAttention", "GPTBlock", "GPT", "generate")),
    Chapter(8, "What trained attention does", "08_trained_attention",
            "trained_attention",
            ("attention_entropy", "previous_token_score", "induction_score", "ablate_head", "repeat_loss", "ov_circuit",
             "copying_score", "patch_head")),
    Chapter(9, "Attention at the speed of the hardware: FlashAttention from scratch", "09_flash_attention",
            "flash_attention",
            ("merge_states", "online_softmax_attention", "attention_backward", "FlashAttention", "attention_kernel",
             "flash_decode")),
)


#: The chapters whose instructor notebook, run as the grader runs it, imports ``torch._dynamo`` (through torch's
#: meta kernels, which Chapters 2 to 6 use to check where results are made, or a torch.optim optimiser, which
#: Chapter 7's training cell makes): their grading workers import it once, while they warm up (about 2 s), instead
#: of in every notebook. Measured on 2026-11-30 (``"torch._dynamo" in sys.modules`` after each notebook's cells,
#: in-process): yes for Chapters 2 to 7, no for 1, 8 and 9. A stale entry costs time, never a grade.
WARM_DYNAMO = frozenset({"02_causal_masking", "03_cross_attention", "04_multi_head", "05_positional_encoding",
                         "06_transformer", "07_gpt"})


def chapter(assignment: str) -> Chapter:
    """The chapter of ``assignment``; ValueError naming the known ids for any other."""
    for found in CHAPTERS:
        if found.assignment == assignment:
            return found
    raise ValueError(f"unknown assignment {assignment!r}; known: {', '.join(c.assignment for c in CHAPTERS)}")


if __name__ == "__main__":  # python -m autograder.chapters ASSIGNMENT: the chapter's own files, for `make chapter`
    import sys

    try:
        print(" ".join(str(path.relative_to(REPO_ROOT)) for path in chapter(sys.argv[1]).owned_files()))
    except (IndexError, ValueError) as err:
        sys.exit(f"usage: python -m autograder.chapters ASSIGNMENT: {err}")
