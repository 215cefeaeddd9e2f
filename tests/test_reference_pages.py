"""The book's reference pages against the one list of chapters (autograder/chapters.py): the notation page's
table of exercises, the instructor guide's list of assignments, the introduction's dependency diagram and
table, and the glossary. Each check returns the problems it finds, one line each, naming the page and what it
misses, so that a chapter added to the manifest fails here until every page covers it. Nothing is executed: the
exercises are read from the source notebooks' metadata, and the pages as text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autograder.chapters import CHAPTERS, Chapter
from autograder.release import REPO_ROOT

BOOK = REPO_ROOT / "book"

#: The terms the glossary must define, each with the chapters its entry must link (a learner looking a term up
#: is sent where it is taught). The expert review of 2026-11-27 listed the missing ones; Chapters 7 and 8 added
#: the rest.
REQUIRED_TERMS: dict[str, tuple[int, ...]] = {
    "alignment": (3,),
    "shift right": (3,),
    "bucketing": (6,),
    "MFU": (6,),
    "bfloat16": (6,),
    "fused kernel": (6,),
    "FlashAttention": (9,),
    "label smoothing": (6,),
    "warm-up": (6,),
    "learning-rate schedule": (6,),
    "temperature": (7,),
    "top-k sampling": (7,),
    "nucleus sampling": (7,),
    "top-p sampling": (7,),
    "online softmax": (9,),
    "grouped-query attention": (7,),
    "multi-query attention": (7,),
    "weight tying": (7,),
    "perplexity": (7,),
    "KV cache": (2, 7),
    "GPT": (7,),
    "prefill": (7,),
    "attention entropy": (8,),
    "attention sink": (8,),
    "previous-token head": (8,),
    "induction head": (8,),
    "ablation": (8,),
}


def _read(name: str) -> str:
    return (BOOK / name).read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The part of ``text`` from the Markdown heading ``heading`` to the next heading of any level."""
    start = text.index(heading) + len(heading)
    following = re.search(r"^#+ ", text[start:], re.M)
    return text[start: start + following.start()] if following else text[start:]


def _rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``text`` (header and separator rows included)."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("|")]


# The checks: each returns a list of problems, empty when the page covers every chapter.

def notation_problems(text: str, chapters: tuple[Chapter, ...] = CHAPTERS) -> list[str]:
    """notation.md's table "Every exercise and its shapes": one row per exercise of every chapter (the solution
    cells of its notebook, concept checks included), no row for an exercise that does not exist, and the
    chapter's narrative linked from its first row."""
    rows = _rows(_section(text, "## Every exercise and its shapes"))[2:]
    listed: dict[int, list[str]] = {}
    links: dict[int, set[str]] = {}
    for row in rows:
        number = re.fullmatch(r"\[?(\d+)\]?(?:\(([^)]+)\))?", row[0])
        name = re.search(r"`([A-Za-z_]\w*)", row[1])
        if number is None or name is None:
            return [f"notation.md: the exercise table has a row it cannot read: {' | '.join(row)}"]
        listed.setdefault(int(number[1]), []).append(name[1])
        if number[2]:
            links.setdefault(int(number[1]), set()).add(number[2])
    problems = []
    for c in chapters:
        exercises, names = c.exercises(), listed.get(c.number, [])
        missing = [e for e in exercises if e not in names]
        if missing:
            problems.append(f"notation.md: Chapter {c.number} ({c.assignment}) has no row for "
                            + ", ".join(f"`{e}`" for e in missing))
        extra = [n for n in names if n not in exercises]
        if extra:
            problems.append(f"notation.md: Chapter {c.number} lists " + ", ".join(f"`{n}`" for n in extra)
                            + f", which {c.source.name} does not have")
        if names and links.get(c.number) != {f"{c.assignment}.ipynb"}:
            problems.append(f"notation.md: Chapter {c.number}'s rows do not link {c.assignment}.ipynb once "
                            f"(links: {sorted(links.get(c.number, ()))})")
    for number in sorted(set(listed) - {c.number for c in chapters}):
        problems.append(f"notation.md: rows for Chapter {number}, which autograder/chapters.py does not have")
    return problems


def instructor_problems(text: str, chapters: tuple[Chapter, ...] = CHAPTERS) -> list[str]:
    """instructor.md's list of assignments: every assignment id, and the name of its notebook."""
    listing = _section(text, "## What is where")
    problems = []
    for c in chapters:
        for what in (f"`{c.assignment}`", f"`{c.module}.ipynb`"):
            if what not in listing:
                problems.append(f"instructor.md: \"What is where\" does not name {what} (Chapter {c.number})")
    return problems


def intro_problems(text: str, chapters: tuple[Chapter, ...] = CHAPTERS) -> list[str]:
    """intro.md's "How the chapters build on each other": the diagram names every chapter (its number and the
    start of its title), and the table has one row per chapter, in order, each needing earlier chapters only."""
    part = _section(text, "## How the chapters build on each other")
    diagram = re.search(r"```text\n(.*?)```", part, re.S)
    if diagram is None:
        return ["intro.md: \"How the chapters build on each other\" has no ```text diagram"]
    problems = []
    for c in chapters:
        head = " ".join(c.title.replace(",", "").split()[:2])
        if not re.search(rf"(?<!\d){c.number} {re.escape(head)}", diagram[1]):
            problems.append(f"intro.md: the dependency diagram does not show \"{c.number} {head}\"")
    rows = _rows(part)[2:]
    named = [re.match(r"(\d+) ", row[0]) for row in rows]
    numbers = [int(m[1]) for m in named if m]
    if numbers != [c.number for c in chapters]:
        problems.append(f"intro.md: the dependency table has chapters {numbers}, "
                        f"not {[c.number for c in chapters]}")
    for row, m in zip(rows, named, strict=True):
        if m is None or row[1] == "nothing":
            continue
        needs = [int(n) for n in re.findall(r"\d+", row[1])]
        if not needs or max(needs) >= int(m[1]):
            problems.append(f"intro.md: Chapter {m[1]} needs \"{row[1]}\": not earlier chapters")
    return problems


def glossary_entries(text: str) -> list[tuple[list[str], str]]:
    """The glossary's entries as (terms, definition): the lines of the ```{glossary} block that start in the
    first column are terms (several in a row name one entry), the indented ones below them its definition."""
    block = re.search(r"```\{glossary\}\n(.*?)\n```", text, re.S)
    if block is None:
        return []
    entries: list[tuple[list[str], str]] = []
    terms: list[str] = []
    for line in block[1].splitlines():
        if not line.strip() or line.startswith(":"):
            continue
        if line[0].isspace():
            if not terms and not entries:
                continue
            if terms:
                entries.append((terms, ""))
                terms = []
            entries[-1] = (entries[-1][0], entries[-1][1] + line.strip() + "\n")
        else:
            terms.append(line.strip())
    return entries


def glossary_problems(text: str, required: dict[str, tuple[int, ...]] = REQUIRED_TERMS,
                      chapters: tuple[Chapter, ...] = CHAPTERS) -> list[str]:
    """Every required term is defined, and its entry links the chapters where it is taught; every chapter is
    linked from some entry."""
    entries = glossary_entries(text)
    by_term = {term.lower(): definition for terms, definition in entries for term in terms}
    problems = []
    for term, numbers in required.items():
        definition = by_term.get(term.lower())
        if definition is None:
            problems.append(f"glossary.md: no entry for \"{term}\"")
            continue
        for c in chapters:
            if c.number in numbers and f"({c.assignment}.ipynb)" not in definition:
                problems.append(f"glossary.md: the entry \"{term}\" does not link Chapter {c.number} "
                                f"({c.assignment}.ipynb)")
    every = "".join(definition for _, definition in entries)
    for c in chapters:
        if f"({c.assignment}.ipynb)" not in every:
            problems.append(f"glossary.md: no entry links Chapter {c.number} ({c.assignment}.ipynb)")
    return problems


def _pages_with_terms() -> list[Path]:
    pages = sorted(BOOK.glob("*.md")) + sorted(BOOK.glob("*.ipynb"))
    return pages + [c.notebook for c in CHAPTERS]


def undefined_terms(glossary: str, pages: dict[str, str]) -> list[str]:
    """Every {term}`...` of the pages names a glossary entry (``{term}`text <term>``` names ``term``), as the
    book's build would demand; found here in a second instead of six minutes."""
    defined = {term.lower() for terms, _ in glossary_entries(glossary) for term in terms}
    problems = []
    for name, text in pages.items():
        for role in re.findall(r"\{term\}`([^`]+)`", text):
            target = re.search(r"<([^>]+)>\s*$", role)
            term = (target[1] if target else role).strip()
            if term.lower() not in defined:
                problems.append(f"{name}: {{term}}`{role}` names no glossary entry")
    return problems


def _text_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text(encoding="utf-8"))["cells"])
    return path.read_text(encoding="utf-8")


# The pages as they are.

def test_the_notation_page_lists_every_exercise_of_every_chapter() -> None:
    problems = notation_problems(_read("notation.md"))
    assert not problems, "\n".join(problems)


def test_the_instructor_guide_names_every_assignment() -> None:
    problems = instructor_problems(_read("instructor.md"))
    assert not problems, "\n".join(problems)


def test_the_introduction_shows_how_every_chapter_builds_on_the_others() -> None:
    problems = intro_problems(_read("intro.md"))
    assert not problems, "\n".join(problems)


def test_the_glossary_defines_the_required_terms_and_links_every_chapter() -> None:
    problems = glossary_problems(_read("glossary.md"))
    assert not problems, "\n".join(problems)


def test_every_term_role_names_a_glossary_entry() -> None:
    pages = {str(p.relative_to(REPO_ROOT)): _text_of(p) for p in _pages_with_terms()}
    assert sum(text.count("{term}`") for text in pages.values()) > 20  # the scan reads the roles at all
    problems = undefined_terms(_read("glossary.md"), pages)
    assert not problems, "\n".join(problems)


# The checks can fail: each is run on its page with one chapter's part taken out.

def _last() -> Chapter:
    return CHAPTERS[-1]


def test_the_notation_check_reports_a_chapter_whose_rows_are_gone() -> None:
    c = _last()
    text = "\n".join(line for line in _read("notation.md").splitlines()
                     if not re.match(rf"\| \[?{c.number}\]?[ (]", line))
    problems = notation_problems(text)
    assert problems[0] == (f"notation.md: Chapter {c.number} ({c.assignment}) has no row for "
                           + ", ".join(f"`{e}`" for e in c.exercises()))
    assert len(problems) == 1


def test_the_notation_check_reports_one_missing_exercise_and_one_that_does_not_exist() -> None:
    c = CHAPTERS[1]
    gone, text = c.exercises()[-1], _read("notation.md")
    text = "\n".join(line for line in text.splitlines() if f"`{gone}(" not in line)
    text = text.replace(f"| `{c.exercises()[0]}(", "| `no_such_exercise(", 1)  # the row, not the mask table
    assert notation_problems(text) == [
        f"notation.md: Chapter {c.number} ({c.assignment}) has no row for `{c.exercises()[0]}`, `{gone}`",
        f"notation.md: Chapter {c.number} lists `no_such_exercise`, which {c.source.name} does not have",
    ]


def test_the_instructor_check_reports_a_missing_assignment() -> None:
    c = _last()
    text = _read("instructor.md").replace(f"`{c.assignment}`", "`some_other_id`")
    assert instructor_problems(text) == [
        f"instructor.md: \"What is where\" does not name `{c.assignment}` (Chapter {c.number})"]


def test_the_intro_check_reports_a_chapter_left_out_of_the_diagram_and_the_table() -> None:
    c = _last()
    lines = _read("intro.md").splitlines()
    text = "\n".join(line.replace(f"─► {c.number} ", "─► ") if "─►" in line else line
                     for line in lines if not line.startswith(f"| {c.number} "))
    problems = intro_problems(text)
    assert problems[0].startswith(f"intro.md: the dependency diagram does not show \"{c.number} ")
    assert problems[1].startswith("intro.md: the dependency table has chapters [1, ")
    assert len(problems) == 2


def test_the_glossary_check_reports_a_missing_term_a_missing_link_and_an_unlinked_chapter() -> None:
    text = _read("glossary.md")
    entries = glossary_entries(text)
    assert len(entries) > 50 and all(definition for _, definition in entries)
    # "perplexity" renamed, and every link to Chapter 8 pointed elsewhere
    text = re.sub(r"^perplexity$", "perplexities", text, flags=re.M)
    text = text.replace("(08_trained_attention.ipynb)", "(closing.md)")
    problems = glossary_problems(text)
    assert "glossary.md: no entry for \"perplexity\"" in problems
    assert ("glossary.md: the entry \"induction head\" does not link Chapter 8 (08_trained_attention.ipynb)"
            in problems)
    assert problems[-1] == "glossary.md: no entry links Chapter 8 (08_trained_attention.ipynb)"


def test_the_term_check_reports_a_term_with_no_entry() -> None:
    pages = {"page.md": "A {term}`KV cache`, {term}`caches <KV cache>` and a {term}`kv cachet`."}
    assert undefined_terms(_read("glossary.md"), pages) == ["page.md: {term}`kv cachet` names no glossary entry"]


@pytest.mark.parametrize("page", ["notation.md", "instructor.md", "glossary.md", "grading.md"])
def test_each_reference_page_is_linked_from_the_introduction(page: str) -> None:
    assert f"]({page})" in _read("intro.md"), f"intro.md does not link {page}"
