"""`make release OUT=DIR`: the student bundle holds the book, the notebooks and the helper package, and no
solution or hidden-test text (with controls that plant each kind of leak and see it caught)."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys

import pytest

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


def test_the_helper_package_imports_from_the_bundle_alone(bundle) -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import attention_course.testing as t; "
            "assert t.__file__.startswith(sys.argv[1]), t.__file__; "
            "import importlib.util as u; assert u.find_spec('solutions') is None or 'solutions' not in sys.modules")
    run = subprocess.run([sys.executable, "-c", code, str(bundle)], capture_output=True, text=True, cwd=bundle)
    assert run.returncode == 0, run.stderr[-2000:]


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
