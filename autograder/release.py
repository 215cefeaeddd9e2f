"""Generate the student release of an assignment into ``notebooks/``.

``nbgrader generate_assignment`` runs in a throwaway copy of the course root,
so no gradebook or release folder is left behind in the repository and the
result depends only on ``autograder/source/`` and ``nbgrader_config.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parent
REPO_ROOT = COURSE_ROOT.parent
SOURCE = COURSE_ROOT / "source"
NOTEBOOKS = REPO_ROOT / "notebooks"


def assignments() -> list[str]:
    """Every assignment id, in the chapters' order (:data:`autograder.chapters.CHAPTERS`)."""
    from autograder.chapters import CHAPTERS

    return [c.assignment for c in CHAPTERS]


def nbgrader_env() -> dict[str, str]:
    """The environment nbgrader needs: this interpreter's ``bin`` first on ``PATH`` (for ``alembic``)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


#: ``python -c`` code that runs nbgrader's command line with :func:`fast_gradebook_creation` in place
FAST_NBGRADER = ("import sys; from autograder.release import fast_gradebook_creation; fast_gradebook_creation(); "
                 "from nbgrader.apps.nbgraderapp import main; sys.argv[0] = 'nbgrader'; sys.exit(main())")


def run_nbgrader(args: list[str], course: Path, fast: bool = False,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``nbgrader ARGS`` in the course root ``course``, with ``env`` added to the environment; raise with its
    output if it fails. ``fast``: with :func:`fast_gradebook_creation` (the course's own tools; the tests that
    compare with stock nbgrader run it as it comes)."""
    launcher = ["-c", FAST_NBGRADER] if fast else ["-m", "nbgrader"]
    result = subprocess.run(
        [sys.executable, *launcher, *args], cwd=course, env={**nbgrader_env(), **(env or {})}, capture_output=True,
        text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def fast_gradebook_creation() -> None:
    """Make nbgrader read the gradebook schema version in-process (milliseconds) instead of running
    ``alembic heads`` in a subprocess (3 s) each time it creates a new gradebook. Same answer, same database;
    nothing changes if a future nbgrader no longer has the function this replaces."""
    import nbgrader.api

    if not hasattr(nbgrader.api, "get_alembic_version"):
        return

    def alembic_head() -> str:
        from alembic.config import Config
        from alembic.script import ScriptDirectory
        from nbgrader.dbutil import _temp_alembic_ini

        with _temp_alembic_ini("sqlite:///:memory:") as ini:
            return ScriptDirectory.from_config(Config(ini)).get_current_head()

    nbgrader.api.get_alembic_version = alembic_head


def make_course_copy(destination: Path, assignment_ids: list[str]) -> Path:
    """A fresh course root at ``destination`` with the config and the given assignments' sources."""
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copy(COURSE_ROOT / "nbgrader_config.py", destination / "nbgrader_config.py")
    for assignment in assignment_ids:
        if not (SOURCE / assignment).is_dir():
            raise ValueError(f"unknown assignment {assignment!r}; known: {', '.join(assignments())}")
        shutil.copytree(SOURCE / assignment, destination / "source" / assignment)
    return destination


#: ``python -c`` code that runs ``nbgrader generate_assignment ID --force`` for each ID of its arguments, in turn,
#: in one process (nbgrader's own API, as the formgrader calls it), in the course root it is started in: nbgrader and
#: its converters are imported once, not once per assignment (1.2 s each).
GENERATE_ALL = """
import os, sys
from autograder.release import fast_gradebook_creation
fast_gradebook_creation()
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader
config = PyFileConfigLoader("nbgrader_config.py", path=os.getcwd()).load_config()
config.CourseDirectory.root = os.getcwd()
api = NbGraderAPI(CourseDirectory(config=config), config=config)
for assignment in sys.argv[1:]:
    result = api.generate_assignment(assignment, force=True)
    if not result["success"]:
        sys.exit("\\n".join([f"nbgrader generate_assignment {assignment} --force failed:", result.get("log") or "",
                              result.get("error") or ""]))
"""


def generate_releases(assignment_ids: list[str], out_root: Path = NOTEBOOKS) -> dict[str, Path]:
    """Write the student version of each assignment to ``out_root/<assignment>``, all in one nbgrader process;
    return {assignment: its folder}. An unknown assignment is refused before anything is written."""
    assignment_ids = list(dict.fromkeys(assignment_ids))  # each once, in the order given
    with tempfile.TemporaryDirectory() as tmp:
        course = make_course_copy(Path(tmp) / "course", assignment_ids)
        run = subprocess.run([sys.executable, "-c", GENERATE_ALL, *assignment_ids], cwd=course, env=nbgrader_env(),
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"generating {', '.join(assignment_ids)} failed ({run.returncode}):\n{run.stdout}\n"
                               f"{run.stderr}")
        targets = {}
        for assignment in assignment_ids:
            targets[assignment] = target = out_root / assignment
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(course / "release" / assignment, target)
    return targets


def generate_release(assignment: str, out_root: Path = NOTEBOOKS) -> Path:
    """Write the student version of ``assignment`` to ``out_root/assignment`` and return that folder."""
    return generate_releases([assignment], out_root)[assignment]


# ---------------------------------------------------------------- the set-up cell for Colab

#: The id of the cell that opens every notebook a learner launches (the six chapters and the six exercises).
SETUP_CELL_ID = "colab-setup"
CONFIG = REPO_ROOT / "_config.yml"

SETUP_CELL = '''\
# For Colab, or any machine without this course installed: install the course's helper package, attention_course.
import importlib.util

if importlib.util.find_spec("attention_course") is None:
    import site
    import subprocess
    import sys

    course = "{archive}"
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", course])  # keeps your torch
    importlib.invalidate_caches()  # the next cell imports it without a restart
    if importlib.util.find_spec("attention_course") is None:  # pip fell back to your user folder: add it
        site.addsitedir(site.getusersitepackages())'''


def course_archive(config: Path = CONFIG) -> str:
    """The zip archive of ``repository.branch`` of ``repository.url`` (``_config.yml``), as GitHub serves it.

    An archive, not ``git+https://...``: pip installs it without git and downloads one snapshot, not the
    history. In this repository it installs the root ``pyproject.toml``, which packages ``solutions`` and
    ``autograder`` besides ``attention_course``: fine for the full course, which self-study learners have
    anyway. The student repository (``make student-repo``) rewrites the URL to itself, and its ``pyproject.toml``
    packages ``attention_course`` alone."""
    import yaml

    from autograder.bundle import github_slug

    repository = (yaml.safe_load(config.read_text()) or {}).get("repository") or {}
    slug = github_slug(repository.get("url"), f"repository.url in {config.name}")
    return f"https://github.com/{slug}/archive/refs/heads/{repository.get('branch') or 'main'}.zip"


def setup_cell(config: Path = CONFIG) -> str:
    """The first code cell of every notebook a learner launches, from this one text.

    Where ``attention_course`` can be imported (this repository's venv, Binder, the grading sandbox, the book
    build) it only looks it up: no process, no network. Elsewhere (Colab) it pip-installs the course's
    repository with ``--no-deps``, so that pip never replaces the machine's torch, NumPy or Matplotlib, and
    makes the package importable in the running kernel."""
    return SETUP_CELL.format(archive=course_archive(config))


def with_setup_cell(nb: dict, config: Path = CONFIG) -> dict:
    """``nb`` (a notebook's JSON) with the set-up cell first among its code cells, added or brought up to date.

    In an exercise source it goes right before the locked ``setup`` cell, itself locked (read-only, no points):
    the grader then runs the instructor's copy and never mistakes it for the learner's code (it imports
    ``importlib``, ``subprocess`` and ``sys``, which ``autograder.grading.suspicious`` flags in a learner's
    cells). In a chapter it carries the tag ``remove-input``: the page, executed where the package is
    installed, shows nothing for it; the launched notebook shows it."""
    cells = [cell for cell in nb["cells"] if cell.get("id") != SETUP_CELL_ID]
    setup = [i for i, cell in enumerate(cells) if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
             == "setup"]
    if setup:
        metadata = {"nbgrader": {"grade": False, "grade_id": SETUP_CELL_ID.replace("-", "_"), "locked": True,
                                 "schema_version": 3, "solution": False, "task": False}}
        at = setup[0]
    else:
        metadata = {"tags": ["remove-input"]}
        at = next(i for i, cell in enumerate(cells) if cell["cell_type"] == "code")
    cell = {"cell_type": "code", "execution_count": None, "id": SETUP_CELL_ID, "metadata": metadata, "outputs": [],
            "source": setup_cell(config).splitlines(keepends=True)}
    nb["cells"] = [*cells[:at], cell, *cells[at:]]
    return nb


def write_setup_cell(path: Path, config: Path = CONFIG) -> bool:
    """Put the set-up cell in the notebook at ``path`` (see :func:`with_setup_cell`), keeping the file's JSON
    layout; True when the file changed."""
    text = path.read_text(encoding="utf-8")
    new = json.dumps(with_setup_cell(json.loads(text), config), indent=1, ensure_ascii=False) + "\n"
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
