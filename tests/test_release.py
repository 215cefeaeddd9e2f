"""`make student-repo OUT=DIR`: the public student repository holds the book, the notebooks and the helper package,
and no solution or hidden-test text (with controls that plant each kind of leak and see it caught); its site's
repository and launch buttons name the student repository, never the course's."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
import yaml
from book_site import toc_files
from learner_env import fresh_env, run_cells, run_python
from notebook_grading import ASSIGNMENTS, nbgrader_meta, solution_cells, source_notebook

from autograder.bundle import MARKER, check_bundle, launch_targets, make_bundle, repositories, retarget
from autograder.leaks import all_secrets
from autograder.release import NOTEBOOKS, REPO_ROOT

CONFIG = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
COURSE = CONFIG["repository"]["url"].removeprefix("https://github.com/").strip("/")
STUDENT = CONFIG["student_repository"].removeprefix("https://github.com/").strip("/")
BRANCH = CONFIG["repository"]["branch"]


@pytest.fixture(scope="module")
def bundle(built_html, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "students"
    make_bundle(out, built_html)
    return out


def test_the_bundle_has_the_book_the_notebooks_and_the_helpers(bundle) -> None:
    names = {p.name for p in bundle.iterdir()}
    assert {"docs", "book", "notebooks", "attention_course", "binder", "README.md", "requirements.txt",
            "pyproject.toml", ".gitignore"} <= names
    assert (bundle / "docs" / "index.html").is_file() and (bundle / "docs" / "_static" / "mathjax").is_dir()
    assert (bundle / "docs" / ".nojekyll").is_file(), "GitHub Pages would hide docs/_static"
    released = sorted(p.relative_to(NOTEBOOKS) for p in NOTEBOOKS.rglob("*.ipynb"))
    assert len(released) == len(ASSIGNMENTS) and released == sorted(p.relative_to(bundle / "notebooks")
                                                     for p in (bundle / "notebooks").rglob("*.ipynb"))
    for path in released:  # as released, less any link to the course repository
        expected = retarget((NOTEBOOKS / path).read_text(), COURSE, STUDENT)
        assert (bundle / "notebooks" / path).read_text() == expected, f"{path} differs"
    chapters = sorted(p.relative_to(bundle).as_posix() for p in (bundle / "book").rglob("*.ipynb"))
    assert chapters == sorted(f"{page}.ipynb" for page in toc_files()
                              if page.startswith("book/") and (REPO_ROOT / f"{page}.ipynb").is_file())
    for chapter in chapters:  # as in the course, less any link to the course repository (the set-up cell's URL)
        expected = retarget((REPO_ROOT / chapter).read_text(), COURSE, STUDENT)
        assert (bundle / chapter).read_text() == expected, f"{chapter} differs"
        for figure in re.findall(r"images/[\w.-]+\.(?:svg|png|jpe?g|gif)", (bundle / chapter).read_text()):
            assert (bundle / "book" / figure).is_file(), f"{chapter} shows {figure}, which the bundle lacks"
    assert "-e ." in (bundle / "requirements.txt").read_text().splitlines()


def test_nothing_for_instructors_is_in_the_bundle(bundle) -> None:
    assert not check_bundle(bundle), check_bundle(bundle)[:10]
    paths = [p.relative_to(bundle).as_posix() for p in bundle.rglob("*")]
    assert not [p for p in paths if p.split("/")[0] in ("solutions", "autograder")], "instructor folders shipped"
    assert not [p for p in paths if "source/" in p and p.endswith(".ipynb")], "source notebooks shipped"


#: The tests that run the bundle as a learner does (its helpers installed, its notebooks executed) use a bundle of
#: a stub site: what they run (notebooks, chapters, helper package) does not depend on the built HTML, and so they
#: run beside the book build, on the other pytest-xdist worker, instead of after it.
LEARNER = pytest.mark.xdist_group("learner-bundle")


@pytest.fixture(scope="module")
def notebooks_bundle(tmp_path_factory):
    """The student repository written from a stub site (an index page only): the same notebooks, chapters and
    helper package as the real bundle (test_the_bundle_has_the_book_the_notebooks_and_the_helpers checks those)."""
    site = tmp_path_factory.mktemp("stub-site")
    (site / "index.html").write_text("<p>stub site: the real one is tested from the built book</p>")
    out = tmp_path_factory.mktemp("notebooks-bundle") / "students"
    make_bundle(out, site)
    return out


@pytest.fixture(scope="module")
def learner(notebooks_bundle, tmp_path_factory):
    """The bundle installed as its README says (``pip install -e .`` of its own pyproject), in a fresh environment
    that has the third-party packages and nothing of this repository: the learner's python."""
    python = fresh_env(tmp_path_factory.mktemp("learner") / "venv")
    run = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
                          "-q", "-e", str(notebooks_bundle)], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(notebooks_bundle.parent)})
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


@LEARNER
def test_the_bundle_alone_gives_the_helpers_and_no_solutions(notebooks_bundle, learner) -> None:
    bundle = notebooks_bundle
    for folder in ("notebooks/01_self_attention", "book"):
        found = _imports(learner, bundle / folder)
        assert found["attention_course.testing"] and found["attention_course.testing"].startswith(str(bundle)), found
        assert found["solutions"] is None and found["autograder"] is None, f"the learner's kernel can import {found}"


@LEARNER
@pytest.mark.parametrize("assignment", sorted(ASSIGNMENTS))
def test_each_notebook_runs_in_the_bundle_alone(notebooks_bundle, learner, assignment, tmp_path) -> None:
    """The release notebook as a learner runs it in the bundle: the set-up cell, then, with a correct answer in
    every stub (the instructor's), each Try-it cell and each visible test, in order, in the notebook's folder."""
    bundle = notebooks_bundle
    name = ASSIGNMENTS[assignment][0]
    released = nbformat.read(bundle / "notebooks" / assignment / name, 4)
    answers = {nbgrader_meta(c)["grade_id"]: c.source for c in solution_cells(nbformat.read(
        source_notebook(assignment), 4))}
    cells = [(i, answers.get(nbgrader_meta(c).get("grade_id"), c.source) if nbgrader_meta(c).get("solution")
              else c.source) for i, c in enumerate(released.cells) if c.cell_type == "code"]
    assert sum(nbgrader_meta(released.cells[i]).get("solution", False) for i, _ in cells) == len(answers)
    result = run_cells(learner, cells, bundle / "notebooks" / assignment, tmp_path)
    assert result["failed"] is None and result["ran"] == len(cells), result


#: Chapter 6's measuring code, in the helper package: what its ``bench-setup`` cell imports.
BENCHMARK_MODULES = ("benchmark_attention.py", "benchmark_training.py")


def test_the_bundle_carries_chapter_6s_benchmarks_in_the_helper_package_and_nothing_of_the_grader(bundle) -> None:
    """No ``benchmarks/`` (the course's holds the reference options and the grading benchmarks): Chapter 6 measures
    with ``attention_course.benchmark_attention`` and ``benchmark_training``, shipped as they are in the course,
    whose imports are the standard library, torch, Matplotlib and attention_course."""
    assert not (bundle / "benchmarks").exists(), sorted(p.name for p in (bundle / "benchmarks").iterdir())
    allowed = set(sys.stdlib_module_names) | {"torch", "matplotlib", "attention_course"}
    for name in BENCHMARK_MODULES:
        path = bundle / "attention_course" / name
        assert path.read_bytes() == (REPO_ROOT / "attention_course" / name).read_bytes(), f"{name} differs"
        tree = ast.parse(path.read_text())
        modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
        others = {m for m in modules if m.split(".")[0] not in allowed}
        assert not others, f"{name} imports {others}"


#: Chapter 6's benchmarks, as small as they go, after its set-up, imports and `bench-setup` cells: one call of each
#: module's measuring function, and the attention module run as a script, as the chapter's `bench-attention-run`
#: runs it, in a folder that holds the notebook and nothing else, with nothing importable but attention_course.
BENCH_PROBE = """
import importlib.util, os
import attention_course
assert attention_course.__file__.startswith(sys.prefix), (attention_course.__file__, sys.prefix)  # site-packages
assert [n for n in os.listdir(".") if not n.startswith(".")] == ["06_transformer.ipynb"], os.listdir(".")
assert [n for n in ("benchmarks", "solutions", "autograder") if importlib.util.find_spec(n) is not None] == []
probe = argparse.Namespace(dtype=None, batch=1, heads=2, d_head=8, causal=False, repeats=1, budget=0.1)
row = attention_bench.measure(torch.device("cpu"), 16, "manual", "forward", probe, False)
assert row.ms is not None and row.ms > 0, row
with tempfile.TemporaryDirectory() as out:
    run = subprocess.run([sys.executable, "-m", "attention_course.benchmark_attention", "--device", "cpu",
                          "--lengths", "16", "--heads", "2", "--d-head", "8", "--repeats", "1", "--modes", "forward",
                          "--out", out], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(list(csv.DictReader(open(Path(out) / "attention.csv")))) == 2  # manual and fused, forward
args = argparse.Namespace(model="torch", steps=1, warmup=0, data="dates", src_len=0, tgt_len=0, peak_tflops=None,
                          peak_tflops_fp32=None)
result = training_bench.run_variant(args, replace(TINY, batch_size=2), dates_task(), "fp32", True, False,
                                    torch.device("cpu"))
assert result.note == "" and result.tokens_per_s > 0, result
assert sorted(attention_bench.IMPLS) == ["fused", "manual"] and list(training_bench.MODELS) == ["torch"]
assert not [m for m in sys.modules if m.split(".")[0] in ("benchmarks", "solutions", "autograder")]
"""


@LEARNER
def test_chapter_6_benchmarks_run_with_nothing_but_the_helper_package(notebooks_bundle, tmp_path) -> None:
    """Chapter 6 opened alone, as on Colab: a fresh environment where the bundle's helper package is installed (not
    in editable mode: nothing of the bundle's folder is on the path), the notebook alone in a folder; its set-up,
    imports and `bench-setup` cells, then the probe above, run there."""
    bundle = notebooks_bundle
    python = fresh_env(tmp_path / "venv")
    package = tmp_path / "package"  # pip builds in the source tree: build from a copy, not from the bundle
    shutil.copytree(bundle / "attention_course", package / "attention_course",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(bundle / "pyproject.toml", package / "pyproject.toml")
    run = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
                          "-q", str(package)], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    shutil.rmtree(package)
    alone = tmp_path / "colab"
    alone.mkdir()
    shutil.copyfile(bundle / "book" / "06_transformer.ipynb", alone / "06_transformer.ipynb")
    cells = {cell.get("id"): cell for cell in nbformat.read(alone / "06_transformer.ipynb", 4).cells}
    run = [(i, source) for i, source in enumerate([cells["colab-setup"].source, cells["imports"].source,
                                                   cells["bench-setup"].source, BENCH_PROBE])]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = run_cells(python, run, alone, scratch)
    assert result["failed"] is None and result["ran"] == len(run), result


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
                                   "solution line in a MathJax file", "a solutions folder", "a gradebook",
                                   "a link to the course repository", "a launch button to a missing notebook"])
def test_the_bundle_check_catches_a_planted_leak(bundle, tmp_path, plant) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("mathjax"))
    secrets = all_secrets()
    if plant == "solution line in a page":
        line = sorted(s for s in secrets if "masked_fill" in s)[0]
        page = copy / "docs" / "book" / "intro.html"
        page.write_text(page.read_text() + f"<pre><span>{line[:12]}</span>{line[12:]}</pre>")
    elif plant == "hidden-test marker in a notebook":
        notebook = next((copy / "notebooks").rglob("*.ipynb"))
        notebook.write_text(notebook.read_text().replace("YOUR CODE HERE", "BEGIN HIDDEN TESTS", 1))
    elif plant == "solution line in a MathJax file":  # the scan skips MathJax only while it is the package's own
        line = sorted(s for s in secrets if "masked_fill" in s)[0]
        script = bundle / "docs" / "_static" / "mathjax" / "tex-chtml.js"
        (copy / "docs" / "_static" / "mathjax").mkdir(parents=True)
        (copy / "docs" / "_static" / "mathjax" / "tex-chtml.js").write_bytes(script.read_bytes() + line.encode())
    elif plant == "a link to the course repository":
        page = copy / "docs" / "book" / "glossary.html"
        page.write_text(page.read_text().replace("</body>", f'<a href="https://github.com/{COURSE}">code</a></body>'))
    elif plant == "a launch button to a missing notebook":
        (copy / "book" / "01_self_attention.ipynb").unlink()
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
    run = subprocess.run(["make", "-n", "student-repo", "OUT=/tmp/students"], cwd=REPO_ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    build = next(i for i, line in enumerate(lines) if "jupyter-book build" in line)
    bundle = next(i for i, line in enumerate(lines) if "-m autograder student-repo /tmp/students" in line)
    assert build < bundle, run.stdout


def test_the_sites_buttons_name_the_student_repository(bundle) -> None:
    """Every page's repository button, and every notebook page's Binder and Colab buttons, open the student
    repository, where the notebook they launch is; no file of the bundle names the course repository."""
    buttons = CONFIG["launch_buttons"]
    for page in toc_files():
        html = (bundle / "docs" / f"{page}.html").read_text()
        assert f'href="https://github.com/{STUDENT}"' in html, f"{page}: no repository button to {STUDENT}"
        if (REPO_ROOT / f"{page}.ipynb").is_file():
            colab = f'{buttons["colab_url"]}/github/{STUDENT}/blob/{BRANCH}/{page}.ipynb'
            binder = f'{buttons["binderhub_url"]}/v2/gh/{STUDENT}/{BRANCH}?urlpath=lab/tree/{page}.ipynb'
            assert f'href="{colab}"' in html, f"{page}: no Colab button opening {colab}"
            assert f'href="{binder}"' in html, f"{page}: no Binder button opening {binder}"
            assert launch_targets(html) == {f"{page}.ipynb"} and (bundle / f"{page}.ipynb").is_file(), page
    assert COURSE.lower() not in STUDENT.lower(), "choose a student repository whose name does not hold the course's"
    named = [p for p in bundle.rglob("*") if p.is_file() and COURSE.lower() in p.read_bytes().decode(
        errors="replace").lower()]
    assert not named, f"the bundle names the course repository {COURSE} in {named[:5]}"


def test_the_student_repositorys_binder_installs_its_helpers_only(bundle) -> None:
    """Binder builds the student repository from its binder/: the course's Binder pins and `-e .`, which is safe
    there because its pyproject packages attention_course alone and it holds no solutions or grader."""
    lines = _requirement_lines(bundle / "binder" / "requirements.txt")
    local = [line for line in lines if line.startswith(("-e", "--editable", ".", "/", "file:"))
             or not line.startswith("-") and "://" in line]  # index options (--extra-index-url URL) are not
    assert local == ["-e ."], f"the student repository's Binder installs {local}"
    course = [line for line in _requirement_lines(REPO_ROOT / "binder" / "requirements.txt")]
    assert [line for line in lines if line not in local] == course, "the student Binder's pins differ from the course's"
    packages = re.findall(r"^packages\s*=\s*(.*)$", (bundle / "pyproject.toml").read_text(), re.M)
    names = re.findall(r'"([^"]+)"', packages[0]) if len(packages) == 1 else []
    assert names and all(n == "attention_course" or n.startswith("attention_course.") for n in names), \
        f"the student repository's pyproject installs {packages}: attention_course and its subpackages only"
    assert not (bundle / "solutions").exists() and not (bundle / "autograder").exists()


# Fast: a fake built site whose pages carry the buttons as sphinx-book-theme renders them, for the course repository.

def _buttons(repo: str, page: str | None) -> str:
    launch = "" if page is None else (
        f'<li><a href="https://mybinder.org/v2/gh/{repo}/{BRANCH}?urlpath=lab/tree/{page}.ipynb" target="_blank"\n'
        f'   class="btn btn-sm dropdown-item" title="Launch on Binder">Binder</a></li>\n'
        f'<li><a href="https://colab.research.google.com/github/{repo}/blob/{BRANCH}/{page}.ipynb" target="_blank"\n'
        f'   class="btn btn-sm dropdown-item" title="Launch on Colab">Colab</a></li>\n')
    return (f'<html><body>{launch}<a href="https://github.com/{repo}" target="_blank"\n'
            f'   class="btn btn-sm btn-source-repository-button" title="Source repository">repo</a></body></html>')


@pytest.fixture
def fake_site(tmp_path):
    html = tmp_path / "html"
    (html / "book").mkdir(parents=True)
    (html / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/intro.html" />')
    for page in toc_files():
        notebook = (REPO_ROOT / f"{page}.ipynb").is_file()
        (html / f"{page}.html").parent.mkdir(parents=True, exist_ok=True)
        (html / f"{page}.html").write_text(_buttons(COURSE, page if notebook else None))
    return html


def test_retarget_rewrites_links_to_the_course_repository_and_nothing_else() -> None:
    course, student = "Course-Org/attn", "uni/attn-2026"
    assert retarget(_buttons(course, "book/01_x"), course, student) == _buttons(student, "book/01_x")
    kept = ["https://github.com/course-org/attn-extras", "https://github.com/other/attn", "course-org/attn in words",
            "https://github.com/xcourse-org/attn", "https://github.com/course-org/attn.github.io"]
    for text in kept:
        assert retarget(text, course, student) == text, text
    rewritten = {"https://github.com/course-org/attn.git": "https://github.com/uni/attn-2026.git",
                 "git+https://github.com/Course-Org/ATTN@main#egg=x": "git+https://github.com/uni/attn-2026@main#egg=x",
                 "https://github.com/course-org/attn/issues/new?title=x": "https://github.com/uni/attn-2026/issues/new?"
                                                                         "title=x",
                 "hub/git-pull?repo=https%3A%2F%2Fgithub.com%2Fcourse-org%2Fattn&urlpath=lab":
                     "hub/git-pull?repo=https%3A%2F%2Fgithub.com%2Funi%2Fattn-2026&urlpath=lab",
                 "https://github.com/course-org/attn.": "https://github.com/uni/attn-2026."}
    for text, expected in rewritten.items():
        assert retarget(text, course, student) == expected, text
    named_after = "course-org/attn-students"  # holds the course's name: a second pass must change nothing
    once = retarget("https://github.com/course-org/attn", course, named_after)
    assert once == f"https://github.com/{named_after}" and retarget(once, course, named_after) == once


def test_a_bundle_of_a_site_names_only_the_student_repository(fake_site, tmp_path) -> None:
    student = "uni-example/attention-2026"
    make_bundle(tmp_path / "students", fake_site, f"https://github.com/{student}/")
    for page in toc_files():
        html = (tmp_path / "students" / "docs" / f"{page}.html").read_text()
        notebook = (REPO_ROOT / f"{page}.ipynb").is_file()
        assert html == _buttons(student, page if notebook else None), f"{page}: {html}"
        for target in launch_targets(html):
            assert (tmp_path / "students" / target).is_file(), f"{page} launches {target}, which is not there"
    for path in (tmp_path / "students").rglob("*"):
        if path.is_file() and "mathjax" not in path.parts:
            assert COURSE.lower() not in path.read_bytes().decode(errors="replace").lower(), path
    readme = (tmp_path / "students" / "README.md").read_text()
    assert f"https://mybinder.org/v2/gh/{student}/{BRANCH}?urlpath=lab/tree/notebooks" in readme


COURSE_URL = f"https://github.com/{COURSE}"


@pytest.mark.parametrize("value", [None, "", "github.com/uni/attention", "https://gitlab.com/uni/attention",
                                   "https://github.com/uni", "https://github.com/uni/attention/tree/main",
                                   "https://github.com/uni/attention extra", 42, COURSE_URL,
                                   f"https://github.com/{COURSE.upper()}/"])
def test_a_misconfigured_student_repository_is_refused_naming_the_setting(fake_site, tmp_path, value) -> None:
    config = dict(CONFIG)
    if value is None:
        del config["student_repository"]
    else:
        config["student_repository"] = value
    path = tmp_path / "_config.yml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "students"
    with pytest.raises(ValueError, match="^student_repository (in _config.yml )?(is|must)") as raised:
        make_bundle(out, fake_site, config=path)
    if value in (None, ""):
        assert "is not set" in str(raised.value)
    elif str(value).lower().rstrip("/") == COURSE_URL.lower():
        assert "is the course repository itself" in str(raised.value)
    else:
        assert f"not {value!r}" in str(raised.value), raised.value
    assert not out.exists(), "a refused bundle wrote its folder"


def test_the_command_names_the_option_it_refuses(fake_site, tmp_path) -> None:
    out = tmp_path / "students"
    for value in ("https://example.org/uni/attention", COURSE_URL + ".git"):
        run = subprocess.run([sys.executable, "-m", "autograder", "student-repo", str(out), "--html", str(fake_site),
                              "--student-repository", value], cwd=REPO_ROOT, capture_output=True, text=True)
        assert run.returncode == 2 and "error: --student-repository" in run.stderr, run.stderr
        assert not out.exists()
    assert repositories("https://github.com/uni/attention.git").student == "uni/attention"


def test_a_clone_of_the_student_repository_keeps_its_history(fake_site, tmp_path) -> None:
    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    (clone / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    make_bundle(clone, fake_site)  # an empty clone counts as empty
    (clone / "notebooks" / "stale.ipynb").write_text("{}")
    make_bundle(clone, fake_site)  # and the next term's bundle replaces all of it but the history
    assert (clone / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (clone / MARKER).is_file() and not (clone / "notebooks" / "stale.ipynb").exists()
    foreign = tmp_path / "foreign"
    (foreign / ".git").mkdir(parents=True)
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(ValueError, match="not a bundle made by this command"):
        make_bundle(foreign, fake_site)
    assert (foreign / "thesis.tex").read_text() == "precious"
