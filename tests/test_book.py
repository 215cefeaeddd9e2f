"""The book builds from scratch with warnings as errors, and nothing a learner can see leaks a solution."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from leak_scan import all_secrets, scan

from autograder.release import REPO_ROOT, nbgrader_env


@pytest.fixture(scope="session")
def built_html(tmp_path_factory) -> Path:
    """`jupyter-book build --all -W` of the whole book into a fresh directory (narratives executed)."""
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    run = subprocess.run([str(jupyter_book), "build", str(REPO_ROOT), "--all", "-W", "--path-output", str(out)],
                         env=nbgrader_env(), capture_output=True, text=True, timeout=1800)
    log = run.stdout + run.stderr
    assert run.returncode == 0 and "build succeeded" in log, log[-6000:]
    return out / "_build" / "html"


def _toc_files() -> list[str]:
    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    for part in toc.get("parts", []):
        walk(part["chapters"])
    return files


def test_every_toc_page_is_built(built_html) -> None:
    for page in _toc_files():
        assert (built_html / f"{page}.html").is_file(), f"{page} is in _toc.yml but was not built"


def test_home_page_shows_the_chapter_plan(built_html) -> None:
    home = (built_html / "book" / "intro.html").read_text()
    for chapter in ("Self-attention", "Causal masking", "Cross-attention and teacher forcing",
                    "Multi-head attention", "Positional encoding", "A full transformer"):
        assert chapter in home, f"the home page does not list {chapter!r}"


def test_chapter_1_was_executed_and_links_its_exercises(built_html) -> None:
    page = (built_html / "book" / "01_self_attention.html").read_text()
    assert 'class="cell_output' in page, "the narrative shows no outputs: was it executed?"
    assert "Traceback" not in page, "a narrative cell raised during the build"
    assert 'href="../notebooks/01_self_attention/self_attention.html"' in page, "no link to the exercises"
    exercises = (built_html / "notebooks" / "01_self_attention" / "self_attention.html").read_text()
    assert "YOUR CODE HERE" in exercises and "NotImplementedError" in exercises
    assert 'class="cell_output' not in exercises, "the exercise page must show the stubs unexecuted"


def test_nothing_learners_see_leaks_a_solution(built_html) -> None:
    secrets = all_secrets()
    leaks = scan([REPO_ROOT / "notebooks", built_html], secrets)
    assert not leaks, "solution or hidden-test text is visible to learners:\n" + "\n".join(leaks[:20])
    assert (built_html / "_sources").is_dir(), "the scan must cover the downloadable _sources"


def test_the_leak_scan_finds_a_planted_leak(tmp_path) -> None:
    secrets = all_secrets()
    assert scan([REPO_ROOT / "autograder" / "source"], secrets), "the scanner finds nothing even in the sources"
    line = sorted(s for s in secrets if "masked_fill" in s)[0]
    planted = tmp_path / "page.html"
    planted.write_text(f"<pre><span>{line[:10]}</span><span>{line[10:]}</span></pre>")
    assert scan([planted], secrets), "a solution line split across highlighted spans went unnoticed"
