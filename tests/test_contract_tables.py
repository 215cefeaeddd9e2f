"""The contract tables: every sentence of a chapter's stated contract, the hidden case that checks it and the wrong
answer that breaks it (``autograder/checks/<module>_contract.md``).

For every chapter that has a table: a section per exercise (the concept checks share one), every row names at least
one of the chapter's checks that exists on both sides (probe and judge), every test cell of the chapter is named by
some row, and every wrong answer a row cites is an entry of the chapter's catalogue. A table that falls behind its
notebook fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from class_grading import catalogue_module
from notebook_grading import graded_cells, nbgrader_meta, source_notebook

from autograder.chapters import CHAPTERS
from autograder.checks import core as checks
from autograder.judges import core as judges

CHECKS = Path(checks.__file__).parent
TABLED = [c for c in CHAPTERS if (CHECKS / f"{c.module}_contract.md").exists()]


def _sections(text: str) -> dict[str, list[list[str]]]:
    """{section title: the cells of each body row of its table}."""
    found = {}
    for title, body in re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S):
        rows = [line for line in body.splitlines() if line.startswith("| ")][1:]  # the header row is first
        found[title.strip()] = [[cell.strip() for cell in row.strip().strip("|").split(" | ")] for row in rows]
    return found


def _cited(entry_cell: str) -> list[str]:
    """The catalogue labels a row's last cell cites: separated by semicolons, without a trailing note in
    parentheses ("... (also)", "... (suspect)")."""
    labels = [re.sub(r"\s+\([^()]*\)$", "", part).strip() for part in entry_cell.split(";")]
    return [label for label in labels if label]


def test_every_chapter_has_a_table() -> None:
    missing = [c.assignment for c in CHAPTERS if c not in TABLED]
    assert not missing, f"no contract table (autograder/checks/<module>_contract.md) for {missing}"


@pytest.mark.parametrize("chapter", TABLED, ids=lambda c: c.assignment)
def test_the_contract_table_covers_every_exercise_and_test_cell_with_existing_checks(chapter) -> None:
    text = (CHECKS / f"{chapter.module}_contract.md").read_text()
    sections = _sections(text)
    cells = {nbgrader_meta(c)["grade_id"] for c in graded_cells(nbformat.read(source_notebook(chapter.assignment), 4))}
    probes, judged = set(checks.ids()), set(judges.ids())
    labels = {entry.label for entry in catalogue_module(chapter.assignment).WRONG}
    named: set[str] = set()
    for exercise in chapter.exercises():
        title = exercise if exercise in chapter.contract else "Concept checks"
        assert sections.get(title), f"{chapter.module}_contract.md has no table for {title}"
    for title, rows in sections.items():
        for row in rows:
            assert len(row) == 3, f"{title}: a row is (sentence, hidden case, entry): {row}"
            ids = set(re.findall(r"`([A-Za-z]\w*_\w+)`", row[1]))
            assert ids, f"{title}: a sentence without a hidden case: {row[0]!r}"
            missing = sorted(ids - (probes & judged & cells))
            assert not missing, f"{title}: {missing} are not checks of {chapter.assignment}: {row[0]!r}"
            named |= ids
            if chapter.assignment != "07_gpt":  # Chapter 7's table predates the rule and cites in prose
                unknown = [label for label in _cited(row[2]) if label not in labels]
                assert not unknown, f"{title}: {unknown} are not wrong answers of the catalogue: {row[0]!r}"
    assert cells <= named, f"test cells no row of the table names: {sorted(cells - named)}"


def test_the_cited_labels_are_read_without_their_notes() -> None:
    assert _cited("no D; dK scaled twice (also)") == ["no D", "dK scaled twice"]
    assert _cited("no 1/sqrt(d_k)") == ["no 1/sqrt(d_k)"]
    assert _cited("") == []
