"""The grader works wherever the course and its venv are: under /tmp (where each notebook gets a fresh /tmp of its
own, which must not hide the venv), in a folder whose name has a space, in a checkout it cannot write to; and
when it cannot work, it says why.

The copy here is the course's packages and a copy of the venv (hard links where /tmp shares the filesystem, else
a full copy): the interpreter's prefix under /tmp is what matters (issue 23). ``.ci/run`` proves the rest on
every run: a fresh clone under /tmp in a folder with a space, its venv, selftest as an ordinary user it creates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder import sandbox
from autograder.release import REPO_ROOT

PACKAGES = ("autograder", "solutions", "attention_course", "notebooks")


def _copy_venv(source: Path, target: Path) -> None:
    try:
        subprocess.run(["cp", "-al", str(source), str(target)], check=True, capture_output=True)
    except subprocess.CalledProcessError:  # another filesystem: a real copy
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(["cp", "-a", str(source), str(target)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def course_in_tmp():
    """A copy of the course, with its venv, in /tmp/<...>/a course with spaces/course."""
    venv = Path(sys.prefix)
    assert venv != Path(sys.base_prefix), "the suite runs in the course's venv"
    top = Path(tempfile.mkdtemp(prefix="install-", dir="/tmp"))
    course = top / "a course with spaces" / "course"
    course.mkdir(parents=True)
    for name in PACKAGES:
        shutil.copytree(REPO_ROOT / name, course / name, ignore=shutil.ignore_patterns("__pycache__"))
    _copy_venv(venv, course / ".venv")
    try:
        yield course
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _selftest(course: Path) -> subprocess.CompletedProcess:
    python = course / ".venv" / "bin" / "python"
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    return subprocess.run([str(python), "-m", "autograder", "selftest", "01_self_attention"], cwd=course,
                          env=env, capture_output=True, text=True, timeout=900)


def test_a_course_under_tmp_with_a_space_grades_its_instructor_full_marks(course_in_tmp) -> None:
    assert str(course_in_tmp).startswith("/tmp/") and " " in str(course_in_tmp)
    run = _selftest(course_in_tmp)
    assert run.returncode == 0 and "1 of 1 assignment(s) give the instructor full marks" in run.stdout, \
        run.stdout[-3000:] + run.stderr[-3000:]


def test_a_read_only_checkout_grades_a_class_and_says_where_it_cannot_write(course_in_tmp, tmp_path) -> None:
    """The copy mounted read-only (EROFS, which holds for root too): the grades go where --out says, nbgrader's
    gradebook beside them (said so), and without --out the command refuses before grading anyone, naming the
    folder it cannot write and the option."""
    python = course_in_tmp / ".venv" / "bin" / "python"
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    (tmp_path / "class" / "ada").mkdir(parents=True)
    shutil.copy(course_in_tmp / "notebooks" / "01_self_attention" / "self_attention.ipynb", tmp_path / "class" / "ada")
    read_only = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(course_in_tmp), str(course_in_tmp), "--"]
    probe = subprocess.run([*read_only, "touch", str(course_in_tmp / "autograder" / "x")], capture_output=True,
                           text=True)
    assert probe.returncode != 0 and "Read-only file system" in probe.stderr, probe
    grade = [*read_only, str(python), "-m", "autograder", "grade", "01_self_attention", str(tmp_path / "class")]
    run = subprocess.run([*grade, "--out", str(tmp_path / "grades")], cwd=course_in_tmp, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "is read-only, so nbgrader's gradebook is written to" in run.stderr, run.stderr[-2000:]
    assert (tmp_path / "grades" / "gradebook.db").exists() and "ada" in (tmp_path / "grades" / "grades.csv").read_text()
    refused = subprocess.run(grade, cwd=course_in_tmp, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "cannot write the grades to grades/01_self_attention" in refused.stderr \
        and "--out" in refused.stderr and "preflight" not in refused.stderr, refused.stderr[-2000:]


# ---------------------------------------------------------------- when it cannot work, it says why

def test_a_broken_setup_says_which_import_failed(tmp_path) -> None:
    """The preflight's refusal carries the worker's own words: here the set-up cell's import of a module that
    is not there (as a venv hidden under a fresh /tmp once made every lazy import fail)."""
    from autograder import grading

    settings_source = json.loads((REPO_ROOT / "autograder" / "source" / "01_self_attention" /
                                  "self_attention.ipynb").read_text())
    for cell in settings_source["cells"]:
        if grading._nbgrader(cell).get("grade_id") == "setup":
            cell["source"] = "import a_module_that_is_not_there\n" + "".join(cell["source"])
    source = tmp_path / "self_attention.ipynb"
    source.write_text(json.dumps(settings_source))
    name, _, release, bundle = grading.prepare("01_self_attention", tmp_path)
    settings = grading.Settings("01_self_attention", name, source, release, bundle,
                                sandbox.Limits(wall_seconds=120, cell_seconds=30))
    problems = grading.preflight_problems(grading.grade_one(grading.instructor_submission(settings), settings))
    assert problems and problems[0].startswith("why: cell"), problems[:3]
    assert "No module named 'a_module_that_is_not_there'" in problems[0], problems[:3]


@pytest.mark.parametrize(("readings", "expected"), [
    ({"apparmor_restrict": "1"}, "apparmor_restrict_unprivileged_userns=0"),
    ({"container": True}, "--security-opt seccomp=unconfined"),
    ({"unprivileged_clone": "0"}, "kernel.unprivileged_userns_clone=1"),
    ({"max_user_namespaces": "0"}, "user.max_user_namespaces"),
    ({}, "AppArmor"),
])
def test_the_refusal_names_the_platforms_fix_and_the_way_without_a_sandbox(readings, expected) -> None:
    advice = " ".join(sandbox.platform_advice(readings))
    assert expected in advice and "--no-sandbox" in advice, advice


def test_a_bwrap_that_cannot_start_is_refused_with_the_fixes(tmp_path, monkeypatch) -> None:
    """A bubblewrap that fails as it does under Ubuntu's AppArmor restriction or Docker's seccomp profile."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    why = sandbox.problem()
    assert why and "setting up uid map: Permission denied" in why and "--no-sandbox" in why, why
    assert "security-opt" in why or "AppArmor" in why, why
