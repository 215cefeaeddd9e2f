"""The book builds from scratch with warnings as errors, and nothing a learner can see leaks a solution."""

from __future__ import annotations

import re

import pytest
import yaml
from book_site import toc_files

from autograder.chapters import CHAPTERS
from autograder.leaks import all_secrets, scan
from autograder.release import REPO_ROOT


def test_every_toc_page_is_built(built_html) -> None:
    for page in toc_files():
        assert (built_html / f"{page}.html").is_file(), f"{page} is in _toc.yml but was not built"


def test_home_page_shows_the_chapter_plan(built_html) -> None:
    home = (built_html / "book" / "intro.html").read_text()
    for chapter in CHAPTERS:
        assert chapter.title in home, f"the home page does not list {chapter.title!r}"


def test_every_chapter_was_executed_and_links_its_exercises(built_html) -> None:
    """The build ran every narrative without an error (nbval runs only Chapter 1 again, cell by cell)."""
    chapters = [page for page in toc_files() if page.startswith("book/0")]
    assert chapters == [f"book/{c.assignment}" for c in CHAPTERS], chapters
    for page in chapters:
        html = (built_html / f"{page}.html").read_text()
        assert 'class="cell_output' in html, f"{page} shows no outputs: was it executed?"
        assert "Traceback" not in html, f"a cell of {page} raised during the build"
        exercises = next(p for p in toc_files() if p.startswith(f"notebooks/{page[5:7]}_"))
        assert f'href="../{exercises}.html"' in html, f"{page} does not link to {exercises}"
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


def _notebook_pages() -> list[str]:
    return [page for page in toc_files() if (REPO_ROOT / f"{page}.ipynb").is_file()]


def test_launch_buttons_come_from_the_repository_settings(built_html) -> None:
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/").strip("/")
    branch, prefix = config["repository"]["branch"], config["repository"].get("path_to_book") or ""
    buttons = config["launch_buttons"]
    for page in _notebook_pages():
        html = (built_html / f"{page}.html").read_text()
        path = f"{prefix}{page}.ipynb"
        colab = f'{buttons["colab_url"]}/github/{repo}/blob/{branch}/{path}'
        binder = f'{buttons["binderhub_url"]}/v2/gh/{repo}/{branch}?urlpath=lab/tree/{path}'
        assert f'href="{colab}"' in html, f"{page}: no Colab button opening {colab}"
        assert f'href="{binder}"' in html, f"{page}: no Binder button opening {binder}"


def test_download_buttons_serve_student_material_only(built_html) -> None:
    sources = {p.read_bytes() for p in (REPO_ROOT / "autograder" / "source").rglob("*.ipynb")}
    for page in toc_files():
        html = (built_html / f"{page}.html").read_text()
        links = re.findall(r'href="([^"]*_sources/[^"]*)"', html)
        assert links, f"{page}: no download button"
        for link in links:
            served = (built_html / page).parent.joinpath(link).resolve()
            assert served.is_file(), f"{page}: download link {link} is broken"
            data = served.read_bytes()
            assert data not in sources, f"{page}: the download button serves an instructor notebook"
            if page.startswith("notebooks/"):
                assert data == (REPO_ROOT / f"{page}.ipynb").read_bytes(), f"{page}: download is not the release"


def test_every_misconception_call_out_renders_as_one(built_html) -> None:
    """A directive fence that MyST fails to parse becomes a plain paragraph without a warning, even under -W:
    count the call-outs in each chapter's source against the rendered admonitions."""
    for page in [p for p in toc_files() if p.startswith("book/0")]:
        source = (REPO_ROOT / f"{page}.ipynb").read_text()
        written = source.count("{admonition} Misconception")
        html = (built_html / f"{page}.html").read_text()
        title = (r'<div class="(?=[^"]*\badmonition\b)(?=[^"]*\bwarning\b)[^"]*">\s*'
                 r'<p class="admonition-title">Misconception')
        rendered = len(re.findall(title, html))
        assert written >= 1, f"{page} names no misconception"
        assert rendered == written, f"{page}: {written} misconception call-outs written, {rendered} rendered"


def test_a_build_that_runs_too_long_names_the_notebook_it_was_executing(tmp_path, monkeypatch) -> None:
    """The suite builds the book under a timeout: past it, the failure names the notebooks the narratives' step was
    running, or the page the build was on."""
    import book_site

    log = ("reading sources... [ 40%] book/06_transformer\n"
           "/repo/book/06_transformer.ipynb: Executing notebook using local CWD [mystnb]\n"
           "reading sources... [ 45%] book/07_gpt\n"
           "/repo/book/07_gpt.ipynb: Executing notebook using local CWD [mystnb]\n")
    assert book_site.last_page(log) == "/repo/book/07_gpt.ipynb"
    assert book_site.last_page(log.rsplit("/repo", 1)[0]) == "book/07_gpt"
    assert book_site.last_page("") is None
    steps = ("book/06_transformer.ipynb: started\nbook/01_self_attention.ipynb: started\n"
             "book/01_self_attention.ipynb: 9 s, cached\nbook/07_gpt.ipynb: started\n")
    assert book_site.running(steps) == ["book/06_transformer.ipynb", "book/07_gpt.ipynb"]

    def fake(name: str, text: str) -> None:
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\n{text}")
        path.chmod(0o755)

    monkeypatch.setattr(book_site.sys, "executable", str(tmp_path / "python"))
    fake("python", "echo 'book/06_transformer.ipynb: started'\necho 'book/01_self_attention.ipynb: started'\n"
                   "echo 'book/01_self_attention.ipynb: 9 s, cached'\nsleep 30\n")  # the narratives' step hangs
    with pytest.raises(AssertionError, match=r"ran past 2 s while executing book/06_transformer\.ipynb;"):
        book_site.build_book(tmp_path / "out", timeout=2)
    fake("python", "exit 0\n")  # every narrative cached: then the build itself hangs
    fake("jupyter-book", "echo 'reading sources... [ 10%] book/01_self_attention'\n"
                         "echo '/r/book/01_self_attention.ipynb: Executing notebook using local CWD [mystnb]'\n"
                         "sleep 30\n")
    with pytest.raises(AssertionError, match=r"ran past 2 s while on /r/book/01_self_attention\.ipynb"):
        book_site.build_book(tmp_path / "out", timeout=2)
