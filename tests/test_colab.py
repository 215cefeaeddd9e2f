"""The set-up cell that opens every notebook a learner launches (every chapter and every exercise), for
Colab or any machine without the course installed: one text (``autograder.release.setup_cell``), naming the one
configured repository and branch (the student repository in the student bundle); where ``attention_course`` is
importable it does nothing; where it is missing it installs it, offline here from a local copy of the student
repository, and the next cell imports it in the same kernel."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import zipfile

import pytest
import yaml
from learner_env import fresh_env, run_python

from autograder.bundle import make_bundle, retarget
from autograder.chapters import CHAPTERS as MANIFEST
from autograder.release import NOTEBOOKS, REPO_ROOT, SETUP_CELL_ID, SOURCE, course_archive, setup_cell

CONFIG = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
COURSE = CONFIG["repository"]["url"].removeprefix("https://github.com/").strip("/")
STUDENT = CONFIG["student_repository"].removeprefix("https://github.com/").strip("/")
BRANCH = CONFIG["repository"]["branch"]

CHAPTERS = sorted(REPO_ROOT.glob("book/[0-9][0-9]_*.ipynb"))
SOURCES = sorted(SOURCE.glob("*/*.ipynb"))
RELEASES = sorted(NOTEBOOKS.glob("*/*.ipynb"))
ARCHIVE = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+)/archive/refs/heads/(\S+?)\.zip")
FIX = "run `.venv/bin/python -c 'from autograder.release import write_setup_cell as w; w(PATH)'`, then `make notebooks`"


def _code_cells(path) -> list[dict]:
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def _setup_id(cell: dict) -> str | None:
    return (cell["metadata"].get("nbgrader") or {}).get("grade_id")


def test_every_notebook_a_learner_launches_is_listed() -> None:
    assert CHAPTERS == [c.narrative for c in MANIFEST]
    assert SOURCES == sorted(c.source for c in MANIFEST) and RELEASES == sorted(c.notebook for c in MANIFEST)


@pytest.mark.parametrize("path", [*CHAPTERS, *SOURCES, *RELEASES], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_notebook_opens_with_the_setup_cell(path) -> None:
    """The first code cell is exactly the one text, before anything imports attention_course: in a chapter,
    without outputs and with its input removed from the page; in an exercise, right before the locked `setup`
    cell, locked itself (read-only, no points), in the source and in the release generated from it."""
    cells = _code_cells(path)
    first = cells[0]
    assert "".join(first["source"]) == setup_cell(), f"{path.name}: the first code cell is not the set-up cell: {FIX}"
    assert first["id"] == SETUP_CELL_ID and first["outputs"] == [] and first["execution_count"] is None
    assert not any(SETUP_CELL_ID == cell.get("id") for cell in cells[1:]), f"{path.name}: two set-up cells"
    if path in CHAPTERS:
        assert first["metadata"] == {"tags": ["remove-input"]}, first["metadata"]
        assert "attention_course" in "".join(cells[1]["source"]), f"{path.name}: the cell after it imports nothing"
    else:
        assert _setup_id(cells[1]) == "setup", f"{path.name}: the set-up cell is not right before `setup`"
        meta = first["metadata"]["nbgrader"]
        assert meta["locked"] and not meta["grade"] and not meta["solution"] and "points" not in meta, meta


def test_the_cell_names_the_configured_repository_and_branch(tmp_path) -> None:
    """One URL, the archive of `repository.branch` of `repository.url`; a fork's settings change it, nothing else."""
    cell = setup_cell()
    assert re.findall(r"https?://\S+", cell) == [f'{course_archive()}"'], cell
    assert [m.groups() for m in ARCHIVE.finditer(cell)] == [(*COURSE.split("/"), BRANCH)]
    fork = {**CONFIG, "repository": {**CONFIG["repository"], "url": "https://github.com/uni/attention-fork/",
                                     "branch": "term-2"}}
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(fork))
    expected = cell.replace(f"{COURSE}/archive/refs/heads/{BRANCH}.zip",
                            "uni/attention-fork/archive/refs/heads/term-2.zip")
    assert expected != cell and setup_cell(tmp_path / "_config.yml") == expected


def test_the_cell_keeps_the_machines_own_packages() -> None:
    cell = setup_cell()
    assert '"--no-deps"' in cell and "importlib.invalidate_caches()" in cell, "pip must not replace Colab's torch"
    assert len(cell.splitlines()) <= 15 and cell.startswith("# For Colab"), "short, and says what it is for"


def test_the_cell_does_nothing_where_the_course_is_installed(monkeypatch) -> None:
    """This venv (the book build's, the graders'): no process, no connection, no change to the path."""
    def refuse(*args, **kwargs):
        raise AssertionError("the set-up cell started a process or opened a connection")

    for module, name in ((subprocess, "Popen"), (os, "system"), (os, "posix_spawn"), (socket.socket, "connect")):
        monkeypatch.setattr(module, name, refuse)
    path = list(sys.path)
    namespace: dict = {}
    exec(compile(setup_cell(), "<colab-setup>", "exec"), namespace)  # noqa: S102
    assert sys.path == path and sorted(set(namespace) - {"__builtins__"}) == ["importlib"]


# ---- the student repository: its notebooks' cells name it, and it installs from its root ------------------------


@pytest.fixture(scope="module")
def student_repository(tmp_path_factory):
    """The student repository as `make student-repo` writes it. Its notebooks, helper package and pyproject do not
    depend on the built site, so a stand-in for the site will do (tests/test_release.py bundles the real one)."""
    root = tmp_path_factory.mktemp("student-repository")
    (root / "html").mkdir()
    (root / "html" / "index.html").write_text("<html><body>the site</body></html>\n")
    make_bundle(root / "students", root / "html")
    return root / "students"


def test_the_student_repositorys_notebooks_name_the_student_repository(student_repository) -> None:
    launched = sorted(path for pattern in ("book/[0-9][0-9]_*.ipynb", "notebooks/*/*.ipynb")
                      for path in student_repository.glob(pattern))
    assert len(launched) == 2 * len(MANIFEST), launched
    expected = retarget(setup_cell(), COURSE, STUDENT)
    assert expected != setup_cell()
    for path in launched:
        cell = "".join(_code_cells(path)[0]["source"])
        assert cell == expected, f"{path.relative_to(student_repository)}: {cell}"
        assert [m.groups() for m in ARCHIVE.finditer(cell)] == [(*STUDENT.split("/"), BRANCH)], cell


@pytest.fixture(scope="module")
def archive(student_repository, tmp_path_factory):
    """The student repository as GitHub serves its branch's archive: a zip with one top folder, NAME-BRANCH/."""
    path = tmp_path_factory.mktemp("archive") / f"{BRANCH}.zip"
    top = f"{STUDENT.split('/')[1]}-{BRANCH}"
    with zipfile.ZipFile(path, "w") as zipped:
        for file in sorted(student_repository.rglob("*")):
            if file.is_file() and ".git" not in file.relative_to(student_repository).parts:
                zipped.write(file, f"{top}/{file.relative_to(student_repository).as_posix()}")
    return path


#: pip offline: no index, and the build backend (setuptools) from the environment instead of a download.
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_CACHE_DIR": "1"}

MISSING = r"""
import importlib.util, json, sys
assert importlib.util.find_spec("attention_course") is None, "the fresh environment already has attention_course"
namespace = {"__name__": "__main__"}
exec(compile(open(sys.argv[1]).read(), "<colab-setup>", "exec"), namespace)
exec(compile("import attention_course.testing", "<the next cell>", "exec"), namespace)  # the same kernel
import sysconfig
print(json.dumps({"file": namespace["attention_course"].testing.__file__,
                  "purelib": sysconfig.get_paths()["purelib"],
                  "others": [name for name in ("solutions", "autograder", "benchmarks")
                             if importlib.util.find_spec(name) is not None]}))
"""


def _offline_cell(archive) -> str:
    """The set-up cell of the student repository with its URL, and nothing else, made the local archive's."""
    cell = retarget(setup_cell(), COURSE, STUDENT)
    url = f"https://github.com/{STUDENT}/archive/refs/heads/{BRANCH}.zip"
    assert cell.count(url) == 1, cell
    offline = cell.replace(url, archive.as_uri())
    assert offline.count(archive.as_uri()) == 1 and "https://" not in offline
    return offline


def test_where_the_course_is_missing_the_cell_installs_it_for_the_next_cell(archive, tmp_path) -> None:
    """A fresh learner's environment without attention_course: the cell pip-installs the student repository's
    archive (a local copy: there is no network here), and the next statement of the same process imports it from
    the environment's site-packages; installing it gives attention_course alone, none of the instructors' code."""
    python = fresh_env(tmp_path / "venv")
    (tmp_path / "cell.py").write_text(_offline_cell(archive))
    run = run_python(python, MISSING, str(tmp_path / "cell.py"), cwd=tmp_path, env=OFFLINE, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["file"].startswith(found["purelib"]) and found["purelib"].startswith(str(tmp_path / "venv")), found
    assert found["others"] == [], f"installing the student repository gave {found['others']}"
    installed = sorted(p.name for p in (tmp_path / "venv").glob("lib/python*/site-packages/*")
                       if p.name != "course-third-party.pth")
    assert installed == ["attention_course", "attention_course-0.1.0.dist-info"], installed
    # every module of the package, subpackages too (attention_course.mistakes): an editable install here finds
    # them all, a learner's pip install only those its pyproject.toml lists
    package = next((tmp_path / "venv").glob("lib/python*/site-packages/attention_course"))
    shipped = sorted(str(f.relative_to(package)) for f in package.rglob("*.py"))
    source = REPO_ROOT / "attention_course"
    ours = sorted(str(f.relative_to(source)) for f in source.rglob("*.py"))
    assert shipped == ours, f"the learner's install lacks {sorted(set(ours) - set(shipped))}"


PRESENT = r"""
import json, os, site, socket, subprocess, sys

def refuse(*args, **kwargs):
    raise AssertionError("the set-up cell started a process, opened a connection or changed the path")

for module, names in ((subprocess, ("Popen", "run", "call", "check_call", "check_output")), (site, ("addsitedir",)),
                      (os, ("system", "posix_spawn", "posix_spawnp", "fork", "execv", "execve")),
                      (socket, ("create_connection",)), (socket.socket, ("connect",))):
    for name in names:
        if hasattr(module, name):
            setattr(module, name, refuse)

def files():
    return sorted((os.path.join(d, f), os.stat(os.path.join(d, f)).st_mtime_ns)
                  for d, _, fs in os.walk(sys.prefix) for f in fs if "__pycache__" not in d)

before, path = files(), list(sys.path)
namespace = {"__name__": "__main__"}
exec(compile(open(sys.argv[1]).read(), "<colab-setup>", "exec"), namespace)
print(json.dumps({"path": sys.path == path, "files": files() == before,
                  "names": sorted(set(namespace) - {"__name__", "__builtins__"})}))
"""


def test_where_the_course_is_installed_the_cell_does_nothing(archive, tmp_path) -> None:
    """A learner's environment with the student repository installed: the cell starts no process (pip cannot even
    be called), touches no file, and changes neither the path nor anything but its own name, importlib."""
    python = fresh_env(tmp_path / "venv")
    run = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(archive)], capture_output=True,
                         text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **OFFLINE})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (tmp_path / "cell.py").write_text(retarget(setup_cell(), COURSE, STUDENT))  # the real cell: it never uses the URL
    run = run_python(python, PRESENT, str(tmp_path / "cell.py"), cwd=tmp_path, env=OFFLINE)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"path": True, "files": True, "names": ["importlib"]}
