"""Generate the student release of an assignment into ``notebooks/``.

``nbgrader generate_assignment`` runs in a throwaway copy of the course root,
so no gradebook or release folder is left behind in the repository and the
result depends only on ``autograder/source/`` and ``nbgrader_config.py``.
"""

from __future__ import annotations

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
    """Every assignment id under ``autograder/source/``, in order."""
    return sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and not p.name.startswith("."))


def nbgrader_env() -> dict[str, str]:
    """The environment nbgrader needs: this interpreter's ``bin`` first on ``PATH`` (for ``alembic``)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_nbgrader(args: list[str], course: Path) -> subprocess.CompletedProcess[str]:
    """Run ``nbgrader ARGS`` in the course root ``course``; raise with its output if it fails."""
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=course, env=nbgrader_env(), capture_output=True, text=True
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


def generate_release(assignment: str, out_root: Path = NOTEBOOKS) -> Path:
    """Write the student version of ``assignment`` to ``out_root/assignment`` and return that folder."""
    with tempfile.TemporaryDirectory() as tmp:
        course = make_course_copy(Path(tmp) / "course", [assignment])
        run_nbgrader(["generate_assignment", assignment, "--force"], course)
        target = out_root / assignment
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(course / "release" / assignment, target)
    return target
