"""The contributor guide's walk-through, followed on a scratch copy of the repository (CONTRIBUTING.md, "Adding an
exercise"): ``python -m autograder new-exercise`` for a small exercise, then what the guide says a contributor
writes by hand, then the suite's convention tests and the catalogue's status, run in the copy. The files changed
at each step are compared with the ones the guide names. The repository itself is never written to: the scaffold
runs in the copy, as the copy's own code (its ``PYTHONPATH``, checked)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from notebook_grading import ASSIGNMENTS, copy_repository

from autograder.release import REPO_ROOT
from autograder.scaffold import PLACEHOLDERS, ScaffoldError, make_request, parse_tests

ASSIGNMENT, MODULE, NAME = "05_positional_encoding", "positional", "relative_distance"
#: the guide's example chapter, whose paths the walk-through maps onto this one
EXAMPLE = (ASSIGNMENT, MODULE)


@dataclass(frozen=True)
class Walk:
    """The chapter the walk-through adds ``relative_distance`` to."""

    assignment: str
    module: str

    @property
    def source(self) -> str:
        return f"autograder/source/{self.assignment}/{self.module}.ipynb"

    @property
    def release(self) -> str:
        return f"notebooks/{self.assignment}/{self.module}.ipynb"

    @property
    def scaffolded(self) -> set[str]:
        """What the scaffold writes, besides the student notebook it regenerates."""
        m = self.module
        return {self.source, "autograder/chapters.py", f"solutions/{m}.py", f"autograder/checks/{m}.py",
                f"autograder/judges/{m}.py", f"tests/catalogue/{m}.py", "book/notation.md", "README.md",
                "book/intro.md", self.release, f"attention_course/mistakes/{m}.py"}


#: the guide's own chapter, and Chapter 4, whose judges and visible checks wrote each mistake twice before it was
#: declared (issue 34): the five files hold there too
WALKS = [Walk(*EXAMPLE), Walk("04_multi_head", "multi_head")]


# ---------------------------------------------------------------- refusals, in-process (nothing is written)

@pytest.mark.parametrize(("args", "says"), [
    (("07_x", NAME, 2), "unknown assignment '07_x'"),
    ((ASSIGNMENT, "2d_table", 2), "not a name an exercise can have"),
    ((ASSIGNMENT, "class", 2), "not a name an exercise can have"),
    ((ASSIGNMENT, "apply_rotary", 2), "already an exercise"),
    ((ASSIGNMENT, "encoded_shape", 2), "already an exercise"),  # a concept check
    ((ASSIGNMENT, NAME, 0), "at least 1"),
    ((ASSIGNMENT, NAME, 3, None, "values:1,errors:1"), "add up to 2, not --points 3"),
    ((ASSIGNMENT, NAME, 1, None, "values,errors"), "2 tests cannot share 1 point"),
    ((ASSIGNMENT, NAME, 2, None, "values,values"), "names a test twice"),
    ((ASSIGNMENT, NAME, 2, None, None, "(x: Tensor"), "not a Python signature"),
])
def test_the_scaffold_refuses_a_bad_request_saying_why(args, says) -> None:
    with pytest.raises(ScaffoldError, match=re.escape(says)):
        make_request(*args)


def test_the_tests_points_are_shared_out_or_given() -> None:
    assert parse_tests(None, 1) == (("values", 1),)
    assert parse_tests(None, 5) == (("values", 3), ("errors", 2))
    assert parse_tests("values:3,contract:1", 4) == (("values", 3), ("contract", 1))


def test_no_notebook_or_reference_keeps_a_placeholder_of_the_scaffold() -> None:
    for path in [*sorted((REPO_ROOT / "autograder" / "source").glob("*/*.ipynb")),
                 *sorted((REPO_ROOT / "solutions").glob("*.py"))]:
        found = [words for words in PLACEHOLDERS if words in path.read_text(encoding="utf-8")]
        assert not found, (f"{path.relative_to(REPO_ROOT)} still holds words the scaffold wrote for you to replace, "
                           f"{found}: write the text, the answer or the check they stand for")


# ---------------------------------------------------------------- the walk-through

def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts}


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def _run(copy: Path, *args: str, ok: bool = True) -> str:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert (done.returncode == 0) == ok, f"{' '.join(args)} exited {done.returncode}:\n{out[-4000:]}"
    return out


def _guide_files(walk: Walk) -> list[str]:
    """The files CONTRIBUTING.md's walk-through has the contributor write by hand, mapped onto ``walk``'s chapter."""
    guide = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    steps = guide[guide.index("## Adding an exercise"):]
    steps = steps[: steps.index("\n## ", 5)]
    files = re.findall(r"^\d+\. \*\*`([^`]+)`\*\*", steps, re.M)
    return [f.replace(EXAMPLE[0], walk.assignment).replace(EXAMPLE[1], walk.module) for f in files]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: {old!r} found {text.count(old)} times"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _edit_cells(path: Path, sources: dict[str, str]) -> None:
    """Replace the source of the cells with these grade_ids (or, for a key starting with '#', these ids)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        key = cell["metadata"].get("nbgrader", {}).get("grade_id") or "#" + cell["id"]
        key = key if key in sources else "#" + cell["id"]
        if key in sources:
            cell["source"] = sources.pop(key).splitlines(keepends=True)
    assert not sources, f"no cells {sorted(sources)}"
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_by_hand(copy: Path, walk: Walk) -> None:
    """What the guide's five steps have the contributor write, for ``relative_distance(T)``: ``(T, T)``, entry
    ``[i, j] = j - i``."""
    stub = f'    raise NotImplementedError("the reference of {NAME}: write it in solutions/{walk.module}.py")'
    for words, text in (("(the equation, in words)", "entry [i, j] = j - i"),
                        ("(what it is, and its shape)", "the length, at least 1"),
                        ("(what it returns, and its shape)", "(T, T) integers, key minus query")):
        _edit(copy / f"solutions/{walk.module}.py", words, text)
    _edit(copy / f"solutions/{walk.module}.py", stub, textwrap.indent(textwrap.dedent("""\
        if T < 1:
            raise ValueError(f"T must be at least 1, got T={T}")
        positions = torch.arange(T)  # (T,)
        return positions[None, :] - positions[:, None]  # (1, T) - (T, 1) -> (T, T): key minus query"""), "    "))
    _edit_cells(copy / walk.source, {
        NAME: textwrap.dedent(f'''\
            def {NAME}(T: int) -> Tensor:
                """The distance from each query to each key: (T, T), entry [i, j] = j - i.

                Args:
                    T: the length, at least 1.

                Returns:
                    (T, T) integers.
                """
                ### BEGIN SOLUTION
                if T < 1:
                    raise ValueError(f"T must be at least 1, got T={{T}}")
                return torch.arange(T)[None, :] - torch.arange(T)[:, None]
                ### END SOLUTION'''),
        "#relative-distance-try": "**Try it.** Three positions. Expected output:\n\n```text\ntensor([[ 0,  1,  2],\n"
                                  "        [-1,  0,  1],\n        [-2, -1,  0]])\n```",
        "#relative-distance-try-code": f"print({NAME}(3))",
        f"{NAME}_values": textwrap.dedent(f'''\
            ### BEGIN HIDDEN TESTS
            from autograder.checks import run_check

            run_check("{NAME}_values", {NAME})
            ### END HIDDEN TESTS
            def by_hand(T):
                return torch.tensor([[j - i for j in range(T)] for i in range(T)])


            assert_close({NAME}(3), by_hand(3), "{NAME}(3)", suspects=known.RELATIVE_DISTANCE.suspects(by_hand, 3))'''),
        f"{NAME}_errors": textwrap.dedent(f'''\
            ### BEGIN HIDDEN TESTS
            from autograder.checks import run_check

            run_check("{NAME}_errors", {NAME})
            ### END HIDDEN TESTS
            what, words = known.RELATIVE_DISTANCE_REFUSED[0]
            expect_value_error(lambda: {NAME}(0), what, must_mention=words)'''),
    })
    _edit(copy / walk.source, f"(What `{NAME}` computes, its equation, and the shapes it takes and returns; raise "
          "`ValueError` naming the shapes for bad arguments.)",
          "How far key j is from query i: a `(T, T)` tensor whose entry `[i, j]` is `j - i`. A `T` below 1 raises "
          "a `ValueError` that names it.")
    checks = copy / f"autograder/checks/{walk.module}.py"
    _edit(checks, "    # (T,): each case an argument tuple built from fixed seeds\n", "    (1,), (4,), (7,),\n")
    _edit(checks, "    # (T,): every case must raise ValueError\n", "    (0,), (-2,),\n")
    mistakes = copy / f"attention_course/mistakes/{walk.module}.py"
    _edit(mistakes, "    # KnownMistake(name, message, lambda right, T: what the mistake gives, from torch and "
                    "right)\n",
          '    KnownMistake("sign flipped", "entry [i, j] is key j minus query i, not i - j",\n'
          '                 lambda right, T: -right(T), when=lambda T: T > 1),\n')
    _edit(mistakes, "RELATIVE_DISTANCE_REFUSED = [\n]",
          f'RELATIVE_DISTANCE_REFUSED = [("{NAME}(0)", ("T",)), ("{NAME}(-2)", ("T",))]')
    catalogue = copy / f"tests/catalogue/{walk.module}.py"
    text = catalogue.read_text(encoding="utf-8")
    text = text.replace("\nWRONG = [\n", f"\nWRONG = [\n    Entry(\"{NAME}\", \"query minus key\", {NAME}_flipped, "
                        f"\"sign flipped\", \"{NAME}_values\"),\n", 1)
    text = text.replace("\nCORRECT = [\n", f"\nCORRECT = [\n    Entry(\"{NAME}\", \"a loop\", {NAME}_by_loop),\n", 1)
    functions = textwrap.dedent(f"""\


        def {NAME}_flipped(T):
            if T < 1:
                raise ValueError(f"T must be at least 1, got T={{T}}")
            return torch.arange(T)[:, None] - torch.arange(T)[None, :]


        def {NAME}_by_loop(T):
            if T < 1:
                raise ValueError(f"T must be at least 1, got T={{T}}")
            return torch.tensor([[j - i for j in range(T)] for i in range(T)])
        """)
    at = text.index("\nWRONG = [\n")
    catalogue.write_text(text[:at].rstrip("\n") + functions + "\n" + text[at:], encoding="utf-8")


def test_the_scaffold_writes_lint_clean_code_for_long_words_and_a_one_line_all(tmp_path) -> None:
    """A long signature, title and return text, a name near nbformat's limit for cell ids, and the reference's
    ``__all__`` written on one line: what the scaffold writes passes ruff (``make chapter`` lints the chapter's
    own files), and the new name is exported."""
    copy = copy_repository(tmp_path / "repo")
    reference = copy / f"solutions/{MODULE}.py"
    text = reference.read_text(encoding="utf-8")
    listed = re.search(r"^__all__ = \[(.*?)\]", text, re.M | re.S)
    names = re.findall(r'"(\w+)"', listed[1])
    one_line = "__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]"
    assert len(one_line) > 120, "the one-line __all__ must be too long for its row, as a contributor's may become"
    reference.write_text(text.replace(listed[0], one_line), encoding="utf-8")
    name = "relative_distance_of_each_query_to_each_key"
    _run(copy, "-m", "autograder", "new-exercise", ASSIGNMENT, name, "--points", "3", "--tests",
         "values:1,errors:1,contract:1", "--title", "Relative distances between every query and every key position",
         "--signature", "(T: int, max_distance: int | None = None, clip_to_the_largest_distance: bool = False) -> "
         "Tensor", "--returns", "`(T, T)`: key minus query, clipped to the largest distance when asked, for every "
         "pair of positions of the table")
    owned = _run(copy, "-m", "autograder.chapters", ASSIGNMENT).split()
    assert f"solutions/{MODULE}.py" in owned and Walk(*EXAMPLE).source in owned, owned
    linted = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", *owned], cwd=copy,
                            capture_output=True, text=True, timeout=120)
    assert linted.returncode == 0, linted.stdout[-4000:]
    exported = _run(copy, "-c", f"import solutions.{MODULE} as m; print(m.__all__)")
    assert f"'{name}'" in exported and exported.index("'alibi_bias'") < exported.index(f"'{name}'"), exported
    too_long = "relative_distance_of_each_query_to_each_key_in_the_table_"
    refused = _run(copy, "-m", "autograder", "new-exercise", ASSIGNMENT, too_long, "--points", "2", ok=False)
    assert "is too long: its cells' ids" in refused, refused


@pytest.mark.parametrize("walk", WALKS, ids=[w.assignment for w in WALKS])
def test_the_guides_walk_through_with_the_scaffold(tmp_path, walk: Walk) -> None:
    copy = copy_repository(tmp_path / "repo")
    where = _run(copy, "-c", "import attention_course, autograder, solutions, autograder.scaffold; "
                 "print(autograder.__file__, solutions.__file__, attention_course.__file__)")
    assert all(Path(p).is_relative_to(copy) for p in where.split()), f"not the copy's packages: {where}"

    before = _snapshot(copy)
    out = _run(copy, "-m", "autograder", "new-exercise", walk.assignment, NAME, "--points", "2", "--title",
               "Relative distances", "--signature", "(T: int) -> Tensor", "--returns", "`(T, T)`: key minus query")
    scaffolded = _snapshot(copy)
    assert _changed(before, scaffolded) == walk.scaffolded, out
    written = (copy / walk.source).read_text("utf-8") + (copy / f"solutions/{walk.module}.py").read_text("utf-8")
    unwritten = [words for words in PLACEHOLDERS if words not in written and words != "(what it checks)"]
    assert not unwritten, f"PLACEHOLDERS lists {unwritten}, which the scaffold no longer writes"  # the others' tests
    # until the contributor writes them, the checks refuse to load, naming what is missing
    refused = _run(copy, "-c", f"import autograder.checks.{walk.module}", ok=False)
    assert f"check '{NAME}_values' has no cases" in refused
    # ... and the convention tests that need nothing more pass already
    _run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_chapters.py",
         "tests/test_reference_pages.py", "tests/test_assignments.py", "-k",
         f"not test_assignments or ({walk.assignment} and (conventions or release_is_current))")

    _write_by_hand(copy, walk)
    by_hand = _snapshot(copy)
    assert _changed(scaffolded, by_hand) == set(_guide_files(walk)), _guide_files(walk)
    _run(copy, "-m", "autograder", "notebooks", walk.assignment)  # the guide's `make notebooks`
    assert _changed(by_hand, _snapshot(copy)) == {walk.release}

    # one run: the chapter's notebook conventions, contracts and release, and every test of the checks, the names
    # and the declarations, of this chapter where a test is given one
    others = " or ".join(a for a in ASSIGNMENTS if a != walk.assignment)
    _run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_assignments.py",
         "tests/test_reference_pages.py", "tests/test_chapters.py", "tests/test_names.py",
         "tests/test_known_mistakes.py",
         "tests/test_scaffold.py::test_no_notebook_or_reference_keeps_a_placeholder_of_the_scaffold", "-k",
         f"not ({others}) and (not test_assignments or conventions or contracts or release_is_current)")
    status = _run(copy, "tests/catalogue_status.py", walk.assignment, "--exercise", NAME, "--all",
                  "--jobs", "1")
    assert f"ok  {NAME}: 'query minus key' -> (sign flipped) in {NAME}_values" in status, status
    assert f"FIX correct {NAME}" not in status and f"{walk.assignment} ({NAME}): 0 entries to fix" in status, status
