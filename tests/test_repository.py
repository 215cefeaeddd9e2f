"""Repository hygiene: notebook sources carry no outputs, and the quickstart is what the README says."""

from __future__ import annotations

import json

import pytest

from autograder.release import REPO_ROOT

NOTEBOOKS = sorted(
    p for folder in ("book", "notebooks", "autograder/source") for p in (REPO_ROOT / folder).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
)


def test_there_are_notebooks_to_check() -> None:
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_notebook_has_no_outputs(path) -> None:
    nb = json.loads(path.read_text())
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {index} has outputs: clear them before committing"
            assert cell.get("execution_count") is None, f"{path.name} cell {index} has an execution count"


def test_readme_quickstart_is_the_two_make_commands() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    makefile = (REPO_ROOT / "Makefile").read_text()
    for target in ("book:", "test:", "notebooks:"):
        assert f"\n{target}" in makefile, f"the Makefile has no {target} target"


def test_solutions_never_sit_beside_a_source_notebook() -> None:
    """nbgrader copies every file beside a source notebook into the student release."""
    for folder in (REPO_ROOT / "autograder" / "source").iterdir():
        extra = [p.name for p in folder.iterdir() if p.suffix != ".ipynb" and p.name != ".ipynb_checkpoints"]
        assert not extra, f"{folder.name} holds {extra}: they would be copied into the student release"


@pytest.mark.parametrize("where", ["autograder/checks", "attention_course"])
def test_lint_stops_the_reference_and_the_judges_on_the_sandbox_side(where, tmp_path) -> None:
    """`make lint` fails, at the line, on an import of the reference or the judges in what the sandbox carries;
    the same lines are allowed on the trusted side (autograder/judges)."""
    import subprocess
    import sys
    from pathlib import Path

    lines = "from solutions import masking\nimport autograder.judges.core\n\nprint(masking, autograder)\n"
    ruff = Path(sys.executable).parent / "ruff"
    for folder, banned in ((where, True), ("autograder/judges", False)):
        # linted as if it were a file there, without writing one (a grader running beside this test would load it)
        run = subprocess.run([str(ruff), "check", "--select", "TID251", "--output-format", "concise",
                              "--stdin-filename", f"{folder}/zz_lint_probe.py", "-"], input=lines,
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        found = [line for line in run.stdout.splitlines() if "TID251" in line]
        if banned:
            assert run.returncode == 1 and len(found) == 2, run.stdout
            assert f"{folder}/zz_lint_probe.py:1:" in found[0] and "zz_lint_probe.py:2:" in found[1], found
        else:
            assert run.returncode == 0 and not found, run.stdout
