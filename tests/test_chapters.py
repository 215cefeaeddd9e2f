"""The one list of chapters (autograder/chapters.py) against everything that names the chapters: the folders and
modules, the table of contents, the README's table and the book's introduction."""

from __future__ import annotations

import re

import pytest
import yaml

from autograder.chapters import CHAPTERS, chapter
from autograder.release import REPO_ROOT, SOURCE, assignments


def test_the_manifest_lists_every_source_folder_and_nothing_else() -> None:
    folders = sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert folders == [c.assignment for c in CHAPTERS] == assignments()
    assert [c.number for c in CHAPTERS] == list(range(1, len(CHAPTERS) + 1))


@pytest.mark.parametrize("c", CHAPTERS, ids=lambda c: c.assignment)
def test_every_file_of_a_chapter_is_where_the_manifest_says(c) -> None:
    for path in (c.narrative, c.source, c.notebook, REPO_ROOT / "solutions" / f"{c.module}.py",
                 REPO_ROOT / "autograder" / "checks" / f"{c.module}.py",
                 REPO_ROOT / "autograder" / "judges" / f"{c.module}.py",
                 REPO_ROOT / "tests" / "catalogue" / f"{c.module}.py"):
        assert path.is_file(), f"{c.assignment}: {path.relative_to(REPO_ROOT)} is missing"
    assert c.total() > 0


def test_an_unknown_assignment_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown assignment '07_x'.*01_self_attention"):
        chapter("07_x")


def test_the_table_of_contents_has_each_chapter_with_its_exercises_in_order() -> None:
    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text())
    part = next(p for p in toc["parts"] if p["caption"] == "Chapters")
    listed = [(entry["file"], [s["file"] for s in entry.get("sections", [])]) for entry in part["chapters"]]
    assert listed == [(f"book/{c.assignment}", [f"notebooks/{c.assignment}/{c.module}"]) for c in CHAPTERS]


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table that starts with ``header``, below its separator, as lists of cells."""
    rows = []
    for line in text[text.index(header):].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_readmes_table_is_the_manifest_with_the_notebooks_points() -> None:
    rows = _table((REPO_ROOT / "README.md").read_text(), "| # | Chapter | Assignment |")
    assert rows == [[str(c.number), c.title, f"`{c.assignment}`", f"`solutions/{c.module}.py`", f"{c.total():g}"]
                    for c in CHAPTERS]


def test_the_introductions_table_is_the_manifest() -> None:
    rows = _table((REPO_ROOT / "book" / "intro.md").read_text(), "| # | Chapter | You implement |")
    assert len(rows) == len(CHAPTERS)
    for row, c in zip(rows, CHAPTERS, strict=True):
        assert row[0] == str(c.number)
        assert row[1] == f"[{c.title}]({c.assignment}.ipynb)", row
        assert re.findall(r"`(\w+)`", row[2]) == list(c.contract), row


def test_the_contributor_guide_walks_through_five_files_that_exist() -> None:
    """CONTRIBUTING.md's walk-through names every file to touch to add an exercise: at most five besides the
    narrative, each one a real file of the chapter it uses as its example."""
    guide = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    walk = guide[guide.index("## Adding an exercise"):]
    walk = walk[: walk.index("\n## ", 5)]
    files = re.findall(r"^\d+\. \*\*`([^`]+)`\*\*", walk, re.M)
    assert 1 <= len(files) <= 5, files
    for path in files:
        assert (REPO_ROOT / path).is_file(), f"CONTRIBUTING.md names {path}, which does not exist"
    assert "CONTRIBUTING.md" in (REPO_ROOT / "README.md").read_text(), "the README should link the guide"
