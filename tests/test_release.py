"""`make release OUT=DIR`: the student bundle holds the book, the notebooks and the helper package, and no
solution or hidden-test text (with controls that plant each kind of leak and see it caught)."""

from __future__ import annotations

import filecmp
import json
import re
import shutil
import subprocess

import nbformat
import pytest
from learner_env import fresh_env, run_cells, run_python
from notebook_grading import ASSIGNMENTS, nbgrader_meta, solution_cells, source_notebook

from autograder.bundle import MARKER, check_bundle, make_bundle
from autograder.leaks import all_secrets
from autograder.release import NOTEBOOKS, REPO_ROOT


@pytest.fixture(scope="module")
def bundle(built_html, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "students"
    make_bundle(out, built_html)
    return out


def test_the_bundle_has_the_book_the_notebooks_and_the_helpers(bundle) -> None:
    names = {p.name for p in bundle.iterdir()}
    assert {"book", "notebooks", "attention_course", "README.md", "requirements.txt", "pyproject.toml"} <= names
    assert (bundle / "book" / "index.html").is_file() and (bundle / "book" / "_static" / "mathjax").is_dir()
    released = sorted(p.relative_to(NOTEBOOKS) for p in NOTEBOOKS.rglob("*.ipynb"))
    assert len(released) == 6 and released == sorted(p.relative_to(bundle / "notebooks")
                                                     for p in (bundle / "notebooks").rglob("*.ipynb"))
    for path in released:
        assert filecmp.cmp(NOTEBOOKS / path, bundle / "notebooks" / path, shallow=False), f"{path} differs"
    assert "-e ." in (bundle / "requirements.txt").read_text().splitlines()


def test_nothing_for_instructors_is_in_the_bundle(bundle) -> None:
    assert not check_bundle(bundle), check_bundle(bundle)[:10]
    paths = [p.relative_to(bundle).as_posix() for p in bundle.rglob("*")]
    assert not [p for p in paths if p.split("/")[0] in ("solutions", "autograder")], "instructor folders shipped"
    assert not [p for p in paths if "source/" in p and p.endswith(".ipynb")], "source notebooks shipped"


@pytest.fixture(scope="module")
def learner(bundle, tmp_path_factory):
    """The bundle installed as its README says (``pip install -e .`` of its own pyproject), in a fresh environment
    that has the third-party packages and nothing of this repository: the learner's python."""
    python = fresh_env(tmp_path_factory.mktemp("learner") / "venv")
    run = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
                          "-q", "-e", str(bundle)], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(bundle.parent)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return python


IMPORTS = """
import importlib, json
found = {}
for name in ("attention_course.testing", "solutions", "autograder", "autograder.checks"):
    try:
        found[name] = importlib.import_module(name).__file__
    except ModuleNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


def _imports(python, cwd, **env) -> dict:
    run = run_python(python, IMPORTS, cwd=cwd, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_bundle_alone_gives_the_helpers_and_no_solutions(bundle, learner) -> None:
    found = _imports(learner, bundle / "notebooks" / "01_self_attention")
    assert found["attention_course.testing"] and found["attention_course.testing"].startswith(str(bundle)), found
    assert found["solutions"] is None and found["autograder"] is None, f"the learner's kernel can import {found}"


@pytest.mark.parametrize("assignment", sorted(ASSIGNMENTS))
def test_each_notebook_runs_in_the_bundle_alone(bundle, learner, assignment, tmp_path) -> None:
    """The release notebook as a learner runs it in the bundle: the set-up cell, then, with a correct answer in
    every stub (the instructor's), each Try-it cell and each visible test, in order, in the notebook's folder."""
    name = ASSIGNMENTS[assignment][0]
    released = nbformat.read(bundle / "notebooks" / assignment / name, 4)
    answers = {nbgrader_meta(c)["grade_id"]: c.source for c in solution_cells(nbformat.read(
        source_notebook(assignment), 4))}
    cells = [(i, answers.get(nbgrader_meta(c).get("grade_id"), c.source) if nbgrader_meta(c).get("solution")
              else c.source) for i, c in enumerate(released.cells) if c.cell_type == "code"]
    assert sum(nbgrader_meta(released.cells[i]).get("solution", False) for i, _ in cells) == len(answers)
    result = run_cells(learner, cells, bundle / "notebooks" / assignment, tmp_path)
    assert result["failed"] is None and result["ran"] == len(cells), result


def _requirement_lines(path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def _project(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement)[0].lower()


def test_binder_installs_the_helpers_and_no_solutions(tmp_path) -> None:
    """Binder's launch buttons build from binder/: its requirements install no path of this repository (the
    root's `-e .` would put the reference solutions and the grader in the learner's kernel), its pins are the
    repository's, and its postBuild makes attention_course, and only it, importable from the notebooks."""
    lines = _requirement_lines(REPO_ROOT / "binder" / "requirements.txt")
    local = [line for line in lines if line.startswith(("-e", ".", "/", "file:")) or "://" in line]
    assert not local, f"binder/requirements.txt installs from a path: {local}"
    pins = {_project(line): line for line in _requirement_lines(REPO_ROOT / "requirements.txt")}
    differ = [line for line in lines if _project(line) in pins and pins[_project(line)] != line]
    assert not differ, f"binder/requirements.txt pins differ from requirements.txt: {differ}"
    python = fresh_env(tmp_path / "venv")
    home = tmp_path / "home"
    home.mkdir()
    run = subprocess.run(["bash", str(REPO_ROOT / "binder" / "postBuild")], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=120, env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home)})
    assert run.returncode == 0, run.stderr[-2000:]
    for folder in ("notebooks/01_self_attention", "book"):
        found = _imports(python, REPO_ROOT / folder, HOME=str(home))
        assert found["attention_course.testing"], f"Binder's kernel cannot import attention_course from {folder}"
        assert found["solutions"] is None and found["autograder"] is None, f"Binder's kernel in {folder}: {found}"


@pytest.mark.parametrize("plant", ["solution line in a page", "hidden-test marker in a notebook",
                                   "solution line in a MathJax file", "a solutions folder", "a gradebook"])
def test_the_bundle_check_catches_a_planted_leak(bundle, tmp_path, plant) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("mathjax"))
    secrets = all_secrets()
    if plant == "solution line in a page":
        line = sorted(s for s in secrets if "masked_fill" in s)[0]
        page = copy / "book" / "book" / "intro.html"
        page.write_text(page.read_text() + f"<pre><span>{line[:12]}</span>{line[12:]}</pre>")
    elif plant == "hidden-test marker in a notebook":
        notebook = next((copy / "notebooks").rglob("*.ipynb"))
        notebook.write_text(notebook.read_text().replace("YOUR CODE HERE", "BEGIN HIDDEN TESTS", 1))
    elif plant == "solution line in a MathJax file":  # the scan skips MathJax only while it is the package's own
        line = sorted(s for s in secrets if "masked_fill" in s)[0]
        script = bundle / "book" / "_static" / "mathjax" / "tex-chtml.js"
        (copy / "book" / "_static" / "mathjax").mkdir(parents=True)
        (copy / "book" / "_static" / "mathjax" / "tex-chtml.js").write_bytes(script.read_bytes() + line.encode())
    elif plant == "a solutions folder":
        (copy / "solutions").mkdir()
        (copy / "solutions" / "__init__.py").write_text("")
    else:
        (copy / "gradebook.db").write_bytes(b"SQLite format 3\x00")
    assert check_bundle(copy, secrets), f"the bundle check missed {plant}"


def test_the_bundle_refuses_to_overwrite_a_foreign_folder(built_html, tmp_path) -> None:
    foreign = tmp_path / "thesis"
    foreign.mkdir()
    (foreign / "chapter1.tex").write_text("precious")
    with pytest.raises(ValueError, match="not a bundle made by this command"):
        make_bundle(foreign, built_html)
    assert (foreign / "chapter1.tex").read_text() == "precious"
    with pytest.raises(ValueError, match="no built book"):
        make_bundle(tmp_path / "new", tmp_path / "nothing-built")


def test_a_rebuilt_bundle_replaces_the_old_one(bundle, built_html) -> None:
    (bundle / "stale.txt").write_text("from an older release")
    assert (bundle / MARKER).is_file()
    make_bundle(bundle, built_html)
    assert not (bundle / "stale.txt").exists()


def test_make_release_builds_the_book_then_the_bundle() -> None:
    run = subprocess.run(["make", "-n", "release", "OUT=/tmp/students"], cwd=REPO_ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    build = next(i for i, line in enumerate(lines) if "jupyter-book build" in line)
    bundle = next(i for i, line in enumerate(lines) if "-m autograder bundle /tmp/students" in line)
    assert build < bundle, run.stdout
