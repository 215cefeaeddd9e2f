"""The instructor's side in nbgrader's own tools: the formgrader, opened the way the instructor guide says
(``make formgrader``, that is ``python -m autograder formgrader``), in JupyterLab and in a real browser, after the
class grader has written the gradebook; and release, fetch, submit and collect through the course's own exchange,
without root. Everything runs on a copy of the course root, so the repository is never written to."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_browser import _driver

from autograder import reports
from autograder.grading import CellResult, Result
from autograder.release import NOTEBOOKS, REPO_ROOT, assignments, make_course_copy, nbgrader_env

ASSIGNMENT, NOTEBOOK = "01_self_attention", "self_attention.ipynb"


def _graded_cells() -> dict[str, float]:
    release = json.loads((NOTEBOOKS / ASSIGNMENT / NOTEBOOK).read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: float(c["metadata"]["nbgrader"]["points"])
            for c in release["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def formgrader(tmp_path_factory):
    """A course copy with every assignment's source, Chapter 1 generated (which makes its gradebook entry), then
    grades recorded as ``grade`` records them (kim full marks, lee the first test cell only); its formgrader served
    on a free port."""
    course = make_course_copy(tmp_path_factory.mktemp("formgrader") / "course", assignments())
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"], cwd=course,
                   env=nbgrader_env(), check=True, capture_output=True, timeout=300)
    cells = _graded_cells()
    first = next(iter(cells))
    results = [Result(student, ASSIGNMENT, "ok", "",
                      {gid: CellResult(gid, points if (student == "kim" or gid == first) else 0.0, points)
                       for gid, points in cells.items()})
               for student in ("kim", "lee")]
    reports.write_gradebook(results, NOTEBOOK, json.loads((NOTEBOOKS / ASSIGNMENT / NOTEBOOK).read_text()),
                            f"sqlite:///{course / 'gradebook.db'}")
    port = _free_port()
    log = (course.parent / "jupyter.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "autograder", "formgrader", "--course", str(course), "--port", str(port), "--",
         "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.allow_root=True", "--ServerApp.ip=127.0.0.1"],
        cwd=REPO_ROOT, env={**nbgrader_env(), "JUPYTER_CONFIG_DIR": str(course.parent / "jupyter-config")},
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            _get(base + "/api/status")
            break
        except (urllib.error.URLError, ConnectionError, OSError):
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("the formgrader's JupyterLab did not start:\n"
                            + (course.parent / "jupyter.log").read_text()[-3000:])
            time.sleep(0.5)
    yield base, course
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def test_the_formgrader_lists_every_assignment_and_the_grades_grade_wrote(formgrader) -> None:
    base, course = formgrader
    listed = {a["name"]: a for a in _get(base + "/formgrader/api/assignments")}
    assert set(assignments()) <= set(listed), f"the formgrader lists {sorted(listed)}"
    chapter = listed[ASSIGNMENT]
    # (its "submissions" count is of the notebooks in submitted/, where nbgrader collect puts them; the grades
    # are in the gradebook either way)
    assert chapter["average_score"] > 0, chapter
    assert chapter["releaseable"], "the formgrader cannot release: the course's exchange is not writable"
    scores = {s["student"]: (s["score"], s["max_score"]) for s in
              _get(base + f"/formgrader/api/submissions/{ASSIGNMENT}")}
    total = sum(_graded_cells().values())
    assert scores["kim"] == (total, total), scores
    assert 0 < scores["lee"][0] < total, scores
    log = (course.parent / "jupyter.log").read_text()
    assert "Unwritable directory" not in log and "formgrader encountered an error" not in log, log[-3000:]


def test_an_instructor_sees_the_class_in_the_formgrader_in_a_browser(formgrader) -> None:
    base, _ = formgrader
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not try to download a browser or driver
    driver = _driver()
    try:
        for page, expected in (("/formgrader", ASSIGNMENT), (f"/formgrader/manage_submissions/{ASSIGNMENT}", "lee")):
            driver.get(base + page)
            deadline = time.monotonic() + 60
            text = ""
            while time.monotonic() < deadline:
                text = driver.execute_script("return document.body.innerText")
                if expected in text:
                    break
                time.sleep(0.5)
            assert expected in text, f"{page} never showed {expected!r}; it shows:\n{text[:2000]}"
            assert "encountered an error" not in text, text[:2000]
        total = sum(_graded_cells().values())
        rows = {line.split("\t")[1]: line for line in text.splitlines() if line.count("\t") >= 4}
        assert f"{total:g} / {total:g}" in rows["kim"] and f"/ {total:g}" in rows["lee"], rows
        # graded by the class grader, nothing is left to grade by hand (nbgrader's own autograde says the same)
        assert not [line for line in rows.values() if "needs manual grading" in line], rows
    finally:
        driver.quit()


def test_release_fetch_submit_and_collect_work_through_the_courses_exchange(tmp_path) -> None:
    """nbgrader's own exchange commands, as the instructor guide gives them, with no root: the exchange is a folder
    of the course (``autograder/exchange``, or ``NBGRADER_EXCHANGE``)."""
    course = make_course_copy(tmp_path / "course", [ASSIGNMENT])
    env = {**nbgrader_env(), "NBGRADER_EXCHANGE": ""}  # the course's own

    def nbgrader(*args: str, cwd: Path) -> str:
        run = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, f"nbgrader {' '.join(args)}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        return run.stdout + run.stderr

    nbgrader("generate_assignment", ASSIGNMENT, "--force", cwd=course)
    nbgrader("release_assignment", ASSIGNMENT, cwd=course)
    assert (course / "exchange" / "attention-from-scratch" / "outbound" / ASSIGNMENT / NOTEBOOK).is_file()
    learner = tmp_path / "learner"
    learner.mkdir()
    where = [f"--Exchange.root={course / 'exchange'}", "--CourseDirectory.course_id=attention-from-scratch"]
    nbgrader("fetch_assignment", ASSIGNMENT, *where, cwd=learner)
    assert (learner / ASSIGNMENT / NOTEBOOK).is_file()
    nbgrader("submit", ASSIGNMENT, *where, cwd=learner)
    nbgrader("collect", ASSIGNMENT, cwd=course)
    submitted = [p for p in (course / "submitted").glob(f"*/{ASSIGNMENT}") if (p / NOTEBOOK).is_file()]
    assert len(submitted) == 1 and (submitted[0] / "timestamp.txt").is_file(), list((course / "submitted").rglob("*"))
