"""The student bundle: what learners get, and nothing they should not.

    python -m autograder bundle OUT [--html _build/html]      (``make release OUT=DIR`` builds the book first)

``OUT`` receives:

- ``book/``: the built website (open ``book/index.html``, or serve the folder);
- ``notebooks/``: the exercise notebooks as released (stubs, visible tests);
- ``attention_course/``: the helper package the notebooks import, with a ``pyproject.toml`` and
  ``requirements.txt`` so that ``pip install -r requirements.txt`` sets a learner up;
- ``README.md``: how to start.

Never ``solutions/``, ``autograder/`` or the instructor's source notebooks. Once written, the bundle is
scanned for any line of a solution or a hidden test (:mod:`autograder.leaks`) and for instructor-only files;
a bundle that leaks is removed and the command fails, naming the files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from autograder.leaks import scan
from autograder.release import NOTEBOOKS, REPO_ROOT

MARKER = ".attention-from-scratch-bundle"  # marks a folder this command made, so a rerun may replace it
FORBIDDEN = ("solutions", "autograder", "source", "gradebook.db", "release")

README = """# Attention from Scratch: student bundle

- `book/`: the course website. Open `book/index.html` in a browser, or serve it:
  `python -m http.server --directory book 8000` and visit http://localhost:8000.
- `notebooks/`: one exercise notebook per chapter. Fill in the stubs, run the tests beneath them.
- `attention_course/`: the helper package the notebooks import (visible tests, plots, toy data).

Set up once (Python 3.10 or newer):

    python -m venv .venv
    .venv/bin/pip install -r requirements.txt
    .venv/bin/jupyter lab notebooks/

`requirements.txt` installs PyTorch, NumPy, Matplotlib, JupyterLab and this folder's `attention_course`.
"""

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "attention-course"
version = "0.1.0"
description = "Helpers for the exercise notebooks of Attention from Scratch: visible tests, plots, toy data."
requires-python = ">=3.10"
dependencies = ["torch", "numpy", "matplotlib"]

[tool.setuptools]
packages = ["attention_course"]
"""


def _requirements() -> str:
    """The learner's requirements: the repository's pins for what the notebooks use, plus this package."""
    wanted = ("torch", "numpy", "matplotlib", "ipykernel")
    pins = [line.strip() for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#") and line.strip().startswith(wanted)]
    return "\n".join([*pins, "jupyterlab>=4", "-e .", ""])


def _prepare(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise ValueError(f"{out} exists and is not a bundle made by this command: choose an empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def make_bundle(out: Path, html: Path) -> list[Path]:
    """Write the student bundle into ``out`` from the built book in ``html``; returns the top-level entries.

    Raises ValueError when the book is not built, ``out`` is someone else's folder, or the bundle leaks.
    """
    if not (html / "index.html").is_file():
        raise ValueError(f"no built book in {html}: run `make book` first (or pass --html)")
    _prepare(out)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", ".buildinfo", ".doctrees")
    shutil.copytree(html, out / "book", ignore=ignore)
    shutil.copytree(NOTEBOOKS, out / "notebooks", ignore=ignore)
    shutil.copytree(REPO_ROOT / "attention_course", out / "attention_course", ignore=ignore)
    (out / "README.md").write_text(README)
    (out / "pyproject.toml").write_text(PYPROJECT)
    (out / "requirements.txt").write_text(_requirements())
    (out / MARKER).write_text("made by `python -m autograder bundle`; safe to replace with a new bundle\n")
    problems = check_bundle(out)
    if problems:
        shutil.rmtree(out)
        raise ValueError("the bundle leaked and was removed:\n" + "\n".join(problems[:20]))
    return sorted(out.iterdir())


def check_bundle(out: Path, secrets: set[str] | None = None) -> list[str]:
    """Everything wrong with a bundle: instructor-only folders or files, and leaked solution text."""
    problems = [f"{path}: instructor-only material" for path in out.rglob("*")
                if path.name in FORBIDDEN and path.is_dir() or path.name == "gradebook.db"]
    problems += scan([out], secrets)
    return problems
