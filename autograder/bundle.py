"""The public student repository: what learners get, and nothing they should not.

    python -m autograder student-repo OUT [--html _build/html] [--student-repository URL]
    (``make student-repo OUT=DIR`` builds the book first)

``OUT`` becomes a folder ready to be pushed as its own git repository, the public face of a course run for
credit (the course repository, with ``solutions/`` and ``autograder/``, stays private):

- ``docs/``: the built website (GitHub Pages can serve it from the ``docs/`` folder; or open
  ``docs/index.html``);
- ``notebooks/``: the exercise notebooks as released (stubs, visible tests);
- ``book/``: the chapters' narrative notebooks, which the chapter pages' launch buttons open, and their
  ``images/``;
- ``attention_course/``: the helper package the notebooks import, with a ``pyproject.toml`` and a
  ``requirements.txt`` (``-e .``: this repository holds no solutions, so installing it is safe; ``pip install
  .`` of its root, or of its GitHub archive, as the notebooks' Colab set-up cell does, gives
  ``attention_course`` alone);
- no ``benchmarks/``: the measuring code Chapter 6 runs is in the helper package
  (``attention_course.benchmark_attention`` and ``attention_course.benchmark_training``, each a command line
  with ``python -m``), so it runs wherever the package is installed, Colab included. The course's
  ``benchmarks/`` holds their command lines with the options that time the reference solutions
  (``reference.py``) and the grading benchmarks, which import the grader: all of it stays out;
- ``binder/requirements.txt``: Binder's environment, the course's ``binder/`` pins and ``-e .``;
- ``README.md`` and ``.gitignore``.

**Buttons.** The built site's repository and launch buttons (Binder, Colab) come from ``repository.url`` of
``_config.yml``, the course repository. In the bundle every link to the course repository, in pages and
notebooks alike, is rewritten to the student repository: ``student_repository`` of ``_config.yml``, or
``--student-repository URL``, the one setting, on the same branch (``repository.branch``). Paths stay: the
student repository holds each launched notebook at the path it has in the course repository.

**Checks.** Once written, the bundle is scanned for any line of a solution or a hidden test
(:mod:`autograder.leaks`), for instructor-only files, for any remaining mention of the course repository,
and for launch buttons that open a notebook the bundle lacks; a bundle that fails is removed and the command
fails, naming the files. A rerun replaces an earlier bundle, all but its ``.git``, so ``OUT`` may be a clone of
the student repository (an empty clone, holding only ``.git``, counts as empty).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from autograder.leaks import TEXT_SUFFIXES, _vendored, scan
from autograder.release import NOTEBOOKS, REPO_ROOT

MARKER = ".attention-from-scratch-bundle"  # marks a folder this command made, so a rerun may replace it
FORBIDDEN = ("solutions", "autograder", "source", "gradebook.db", "release")
CONFIG = REPO_ROOT / "_config.yml"
SETTING = "student_repository"
KEEP = ".git"  # a clone's history: a rerun replaces everything else
#: The files whose text may carry a link: the scanned kinds, configuration, and files without a suffix.
LINK_SUFFIXES = TEXT_SUFFIXES | {".yml", ".yaml", ".toml", ".cfg", ".in", ""}

_GITHUB = re.compile(r"https://github\.com/([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/([A-Za-z0-9._-]+?)(?:\.git)?/?")
_NAME_END = r"(?![\w-])(?!\.(?!git\b)\w)"  # a repository name ends here: not ``name-extras``, but ``name.git``


@dataclass(frozen=True)
class Repositories:
    """The private course repository the book was built from, and the public student repository (owner/name)."""

    course: str
    student: str
    branch: str
    binderhub: str

    @property
    def student_url(self) -> str:
        return f"https://github.com/{self.student}"


def github_slug(url: object, setting: str) -> str:
    """``owner/name`` of a GitHub repository URL; ValueError naming ``setting`` for anything else."""
    match = _GITHUB.fullmatch(url.strip()) if isinstance(url, str) else None
    if not match or match.group(2) in (".", ".."):
        raise ValueError(f"{setting} must be a GitHub repository URL, https://github.com/OWNER/NAME, "
                         f"not {url!r}")
    return f"{match.group(1)}/{match.group(2)}"


def repositories(student: str | None = None, config: Path = CONFIG) -> Repositories:
    """The course and student repositories from ``config`` (``student``, when given, overrides the setting).

    Raises ValueError naming the setting when it is missing, not a GitHub repository URL, or the course
    repository itself (whose buttons would lead learners to the solutions)."""
    settings = yaml.safe_load(config.read_text()) or {}
    repository = settings.get("repository") or {}
    course = github_slug(repository.get("url"), f"repository.url in {config.name}")
    where = "--student-repository" if student is not None else f"{SETTING} in {config.name}"
    if student is None:
        student = settings.get(SETTING)
        if student in (None, ""):
            raise ValueError(f"{SETTING} is not set in {config.name}: set it to the URL of the public student "
                             "repository, e.g. https://github.com/your-org/attention-students, or pass "
                             "--student-repository URL")
    slug = github_slug(student, where)
    if slug.lower() == course.lower():
        raise ValueError(f"{where} is the course repository itself, {repository['url']}: the public site's "
                         "buttons would lead learners to solutions/ and autograder/; give the student "
                         "repository's URL")
    binderhub = ((settings.get("launch_buttons") or {}).get("binderhub_url") or "https://mybinder.org").rstrip("/")
    return Repositories(course, slug, str(repository.get("branch") or "main"), binderhub)


def _mentions(slug: str) -> re.Pattern:
    """``owner/name`` (or URL-encoded, ``owner%2Fname``) as a whole repository, in any case."""
    owner, name = (re.escape(part) for part in slug.split("/"))
    return re.compile(rf"(?:(?<![\w.-])|(?<=%2F)){owner}(?:/|%2F){name}{_NAME_END}", re.I)


def retarget(text: str, course: str, student: str) -> str:
    """``text`` with every link to the course repository ``course`` (owner/name) made a link to ``student``.

    A link is the repository's path after a slash, as every button spells it: ``https://github.com/o/n``
    (repository, issues, edit, ``git+https``), ``https://mybinder.org/v2/gh/o/n/BRANCH?...``,
    ``https://colab.research.google.com/github/o/n/blob/BRANCH/...``, and URL-encoded (``o%2Fn``) in a query.
    Other repositories, ``o/n-extras`` among them, and plain words are left alone."""
    owner, name = (re.escape(part) for part in course.split("/"))
    new_owner, new_name = student.split("/")
    link = re.compile(rf"(?:(?<=/)|(?<=%2F)){owner}(/|%2F){name}{_NAME_END}", re.I)
    return link.sub(lambda match: f"{new_owner}{match.group(1)}{new_name}", text)


def _text_files(root: Path) -> list[Path]:
    """The bundle's files that may carry a link (not ``.git``, not the vendored MathJax)."""
    return [path for path in sorted(root.rglob("*")) if path.is_file() and path.relative_to(root).parts[0] != KEEP
            and path.suffix in LINK_SUFFIXES and not _vendored(path)]


def retarget_tree(root: Path, repos: Repositories) -> list[Path]:
    """Rewrite every link to the course repository under ``root`` to the student repository; the files changed."""
    changed = []
    for path in _text_files(root):
        text = path.read_text(errors="surrogateescape")
        if repos.course.split("/")[1].lower() not in text.lower():
            continue
        new = retarget(text, repos.course, repos.student)
        if new != text:
            path.write_text(new, errors="surrogateescape")
            changed.append(path)
    return changed


_COLAB_PATH = re.compile(r'href="[^"]*/github/[^/"]+/[^/"]+/blob/[^/"]+/([^"?#]+)"')
_BINDER_PATH = re.compile(r'href="[^"]*/v2/gh/[^"]*[?&](?:urlpath=(?:lab/)?tree/|filepath=)([^"&#]+)"')


def launch_targets(page: str) -> set[str]:
    """The repository paths of the notebooks a built page's Colab and Binder buttons open."""
    return set(_COLAB_PATH.findall(page)) | set(_BINDER_PATH.findall(page))


def _toc_notebooks() -> list[str]:
    """The book's narrative notebooks (pages of ``_toc.yml`` that are notebooks, outside ``notebooks/``)."""
    from autograder.narratives import toc_pages

    return [f"{page}.ipynb" for page in toc_pages(REPO_ROOT)
            if (REPO_ROOT / f"{page}.ipynb").is_file() and not page.startswith("notebooks/")]


README = """# Attention from Scratch

An open course on the attention mechanism and the transformer, in which you implement every piece yourself.

- **Read** the course website at {pages}
  (GitHub Pages serves it from `docs/`), or open `docs/index.html` in a browser, or serve it:
  `python -m http.server --directory docs 8000` and visit http://localhost:8000.
- **Run it in the cloud**: each chapter and exercise page has launch buttons that open its notebook from this
  repository on Binder or Colab. All of it on Binder: {binder}
- **Run it on your machine** (Python 3.10 or newer):

      python -m venv .venv
      .venv/bin/pip install -r requirements.txt
      .venv/bin/jupyter lab

| Folder | What |
|---|---|
| `notebooks/` | one exercise notebook per chapter: fill in the stubs, run the tests beneath them |
| `book/` | the chapters' notebooks: every worked example, to rerun and change |
| `attention_course/` | the helper package the notebooks import: tests, plots, data, the trainer, the benchmarks |
| `docs/` | the course website, built |
| `binder/` | the environment Binder builds for the launch buttons |

`requirements.txt` installs PyTorch, Triton (on Linux), NumPy, Matplotlib, JupyterLab and this repository's
`attention_course`.
"""

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "attention-course"
version = "0.1.0"
description = "Helpers for the exercise notebooks of Attention from Scratch: visible tests, plots, toy data."
requires-python = ">=3.10"
dependencies = ["torch", "numpy", "matplotlib", "triton; platform_system == 'Linux'"]

[tool.setuptools]
packages = ["attention_course", "attention_course.mistakes"]

[tool.setuptools.package-data]
attention_course = ["python_help.txt.gz"]
"""

GITIGNORE = """.venv/
__pycache__/
*.pyc
*.egg-info/
.ipynb_checkpoints/
"""


def _requirements() -> str:
    """The learner's requirements: the repository's pins for what the notebooks use, plus this package."""
    wanted = ("torch", "triton", "numpy", "matplotlib", "ipykernel")
    pins = [line.strip() for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#") and line.strip().startswith(wanted)]
    return "\n".join([*pins, "jupyterlab>=4", "-e .", ""])


def _is_local(requirement: str) -> bool:
    """An install from a path or a repository (the course's own, say), not a pin or an index option."""
    return requirement.startswith(("-e", "--editable", ".", "/", "file:")) or (
        not requirement.startswith("-") and "://" in requirement)


def _binder_requirements() -> str:
    """Binder's environment: the course's ``binder/requirements.txt`` (what the notebooks import), and this
    repository's helper package with ``-e .``, which the course's ``binder/postBuild`` puts on the path there."""
    lines = [line.strip() for line in (REPO_ROOT / "binder" / "requirements.txt").read_text().splitlines()]
    kept = [line for line in lines if line and not line.startswith("#") and not _is_local(line)]
    header = ["# Binder builds the launch buttons' environment from this file: what the notebooks import, and this",
              "# repository's helper package, attention_course (it holds no solutions)."]
    return "\n".join([*header, *kept, "-e .", ""])


def _clear(out: Path) -> None:
    """Remove everything in ``out`` but ``.git``; ``out`` itself too when nothing is left."""
    if not out.is_dir():
        return
    for entry in out.iterdir():
        if entry.name == KEEP:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if not any(out.iterdir()):
        out.rmdir()


def _prepare(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file: choose a folder")
    if out.exists() and any(entry.name != KEEP for entry in out.iterdir()):
        if not (out / MARKER).is_file():
            raise ValueError(f"{out} exists and is not a bundle made by this command: choose an empty folder "
                             "(a fresh clone of the student repository, holding only .git, will do)")
        _clear(out)
    out.mkdir(parents=True, exist_ok=True)


def make_bundle(out: Path, html: Path, student_repository: str | None = None, config: Path = CONFIG) -> list[Path]:
    """Write the student repository into ``out`` from the built book in ``html``; returns the top-level entries.

    ``student_repository`` (a GitHub URL) overrides the ``student_repository`` setting of ``config``. Raises
    ValueError, before touching ``out``, when the setting is missing or invalid or the book is not built, or
    when ``out`` is someone else's folder; and, after removing what it wrote, when the bundle leaks."""
    repos = repositories(student_repository, config)
    if not (html / "index.html").is_file():
        raise ValueError(f"no built book in {html}: run `make book` first (or pass --html)")
    _prepare(out)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", ".buildinfo", ".doctrees")
    shutil.copytree(html, out / "docs", ignore=ignore)
    (out / "docs" / ".nojekyll").write_text("")  # GitHub Pages: serve _static/ and _sources/ as they are
    shutil.copytree(NOTEBOOKS, out / "notebooks", ignore=ignore)
    for page in _toc_notebooks():
        (out / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / page, out / page)
        images = (REPO_ROOT / page).parent / "images"  # the figures the chapters show, for Binder and Jupyter
        if images.is_dir() and not (out / page).parent.joinpath("images").exists():
            shutil.copytree(images, (out / page).parent / "images", ignore=ignore)
    shutil.copytree(REPO_ROOT / "attention_course", out / "attention_course", ignore=ignore)
    owner, name = repos.student.split("/")
    (out / "README.md").write_text(README.format(
        pages=f"https://{owner.lower()}.github.io/{name}/",
        binder=f"{repos.binderhub}/v2/gh/{repos.student}/{repos.branch}?urlpath=lab/tree/notebooks"))
    (out / "pyproject.toml").write_text(PYPROJECT)
    (out / "requirements.txt").write_text(_requirements())
    (out / "binder").mkdir()
    (out / "binder" / "requirements.txt").write_text(_binder_requirements())
    (out / ".gitignore").write_text(GITIGNORE)
    (out / MARKER).write_text("made by `python -m autograder student-repo`: the next bundle written here replaces "
                              "everything in this folder but .git\n")
    retarget_tree(out, repos)
    problems = check_bundle(out, course=repos.course)
    if problems:
        _clear(out)
        raise ValueError("the bundle leaked and was removed:\n" + "\n".join(problems[:20]))
    return sorted(out.iterdir())


def check_bundle(out: Path, secrets: set[str] | None = None, course: str | None = None) -> list[str]:
    """Everything wrong with a bundle: instructor-only folders or files, leaked solution text, any mention of
    the course repository ``course`` (owner/name; default: ``repository.url`` of ``_config.yml``), and launch
    buttons that open a notebook the bundle lacks."""
    if course is None:
        course = github_slug((yaml.safe_load(CONFIG.read_text()).get("repository") or {}).get("url"),
                             f"repository.url in {CONFIG.name}")
    entries = [path for path in out.iterdir() if path.name != KEEP]
    problems = [f"{path}: instructor-only material" for entry in entries for path in [entry, *entry.rglob("*")]
                if path.name in FORBIDDEN and path.is_dir() or path.name == "gradebook.db"]
    problems += scan(entries, secrets)
    mention = _mentions(course)
    for path in _text_files(out):
        text = path.read_text(errors="replace")
        if mention.search(text):
            problems.append(f"{path}: names the course repository {course}")
        if path.suffix == ".html":
            problems += [f"{path}: its launch button opens {target}, which the bundle lacks"
                         for target in sorted(launch_targets(text)) if not (out / target).is_file()]
    return problems
