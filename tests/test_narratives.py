"""``python -m autograder.narratives``: the book's narratives run several at once into the cache that
``jupyter-book build`` reads, on a book of three notebooks: one that runs, one that fails, one that the book's
``execute.exclude_patterns`` leaves unexecuted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.narratives import ESTIMATES, book_settings, fill_cache
from autograder.release import nbgrader_env

CONFIG = """title: three notebooks
execute:
  execute_notebooks: cache
  timeout: 60
  allow_errors: false
  exclude_patterns:
    - skipped.ipynb
"""
TOC = """format: jb-book
root: intro
parts:
  - caption: All
    chapters:
      - file: good
        sections:
          - file: skipped
      - file: bad
"""


def _book(root: Path) -> Path:
    root.mkdir()
    (root / "_config.yml").write_text(CONFIG)
    (root / "_toc.yml").write_text(TOC)
    (root / "intro.md").write_text("# Three notebooks\n")
    for name, code in (("good", "print(6 * 7)"), ("bad", "1 / 0"), ("skipped", "raise SystemExit('never run')")):
        nb = new_notebook(cells=[new_markdown_cell(f"# {name.title()}"), new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, root / f"{name}.ipynb")
    return root


def test_the_narratives_are_the_toc_s_executed_notebooks() -> None:
    notebooks, execute = book_settings()
    names = [path.relative_to(path.parent.parent).as_posix() for path in notebooks]
    assert names == sorted(names) and len(names) == 9 and all(n.startswith("book/0") for n in names), names
    assert execute["execute_notebooks"] == "cache"
    assert set(names) == set(ESTIMATES), "autograder/narratives.py's ESTIMATES names another set of narratives"


def test_a_cached_narrative_is_not_run_again_and_a_failed_one_is_left_to_the_build(tmp_path) -> None:
    root = _book(tmp_path / "book")
    said: list[str] = []
    failed = fill_cache(root / "_build", jobs=2, root=root, say=lambda text, **_: said.append(text))
    assert list(failed) == ["bad.ipynb"] and "ZeroDivisionError" in failed["bad.ipynb"], failed
    assert said[0].startswith("executing 2 narrative(s), 2 at a time") and "skipped" not in said[0], said
    assert any(re.fullmatch(r"good\.ipynb: \d+ s, cached", line) for line in said), said
    said.clear()
    assert list(fill_cache(root / "_build", jobs=2, root=root, say=lambda text, **_: said.append(text))) == [
        "bad.ipynb"]
    assert said[0] == "executing 1 narrative(s), 1 at a time, 2 thread(s) each: bad.ipynb", said
    build = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", str(root), "--all", "-W"],
                           capture_output=True, text=True, env=nbgrader_env(), timeout=300)
    log = build.stdout + build.stderr
    assert re.search(r"good\.ipynb: Using cached notebook", log), log[-3000:]
    assert re.findall(r"(\w+)\.ipynb: Executing notebook", log) == ["bad"], log[-3000:]
    assert build.returncode != 0 and "bad.ipynb:Executing notebook failed" in log, log[-3000:]
