"""JupyterLab, where learners do the exercises and instructors open the formgrader, in a real browser (Debian's
Chromium, as ``test_browser.py`` drives it).

- The learner: Chapter 1's exercise notebook from the student release, one answer right and one wrong, run in
  JupyterLab with "Restart the kernel and run all cells": the run stops at the wrong answer's test cell, whose
  output names the mistake; nbgrader's Validate button reports that cell.
- The instructor: the formgrader, opened the way the instructor guide says (``make formgrader``, that is
  ``python -m autograder formgrader``), after the class grader has written the gradebook; and release, fetch,
  submit and collect through the course's own exchange, without root.

Everything runs on copies, so the repository is never written to."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from notebook_grading import copy_repository
from selenium.webdriver.common.by import By
from test_browser import _driver

from autograder import deadlines, reports
from autograder.grading import CellResult, Result
from autograder.release import NOTEBOOKS, REPO_ROOT, SOURCE, assignments, make_course_copy, nbgrader_env

ASSIGNMENT, NOTEBOOK = "01_self_attention", "self_attention.ipynb"
DUE = datetime(2026, 12, 1, 17)


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
    grades recorded as ``grade`` records them (kim full marks and on time, lee the first test cell only and two
    hours late); its formgrader served on a free port."""
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
    late = {"kim": deadlines.Lateness(DUE - timedelta(minutes=5), deadlines.FROM_FILE, DUE, None, 0.0, 0.0),
            "lee": deadlines.Lateness(DUE + timedelta(hours=2), deadlines.FROM_FILE, DUE, None, 7200.0, 0.0)}
    deadlines.record(late, ASSIGNMENT, Path(NOTEBOOK).stem, DUE, {}, f"sqlite:///{course / 'gradebook.db'}")
    with _serving([sys.executable, "-m", "autograder", "formgrader", "--course", str(course), "--port", "{port}",
                   "--"], REPO_ROOT, course.parent) as base:
        yield base, course


@contextlib.contextmanager
def _serving(command: list[str], cwd: Path, scratch: Path):
    """JupyterLab started by ``command`` (``{port}`` in it becomes a free port), with no token, on 127.0.0.1; its
    address once it answers. Its log is ``scratch/jupyter.log``."""
    port = _free_port()
    command = [part.replace("{port}", str(port)) for part in command]
    command += ["--ServerApp.token=", "--ServerApp.password=", "--ServerApp.allow_root=True",
                "--ServerApp.ip=127.0.0.1"]
    with (scratch / "jupyter.log").open("w") as log:
        server = subprocess.Popen(command, cwd=cwd, env={**nbgrader_env(), "JUPYTER_CONFIG_DIR": str(scratch / "cfg")},
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
                    pytest.fail("JupyterLab did not start:\n" + (scratch / "jupyter.log").read_text()[-3000:])
                time.sleep(0.5)
        try:
            yield base
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        # the server is gone with the process the command started (the formgrader's command once left JupyterLab
        # running as an orphan, serving after the tests had ended)
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _get(base + "/api/status")


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
    # the late flag as nbgrader keeps it: the submission's time against the assignment's due date
    assert chapter["duedate"].startswith("2026-12-01T17:00:00"), chapter
    times = {s["student"]: s["timestamp"] for s in _get(base + f"/formgrader/api/submissions/{ASSIGNMENT}")}
    assert times["lee"].startswith("2026-12-01T19:00:00") and times["kim"].startswith("2026-12-01T16:55:00"), times
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
            if page == "/formgrader":  # the assignments page gives the due date
                row = next((line for line in text.splitlines() if line.startswith(ASSIGNMENT)), "")
                assert "2026-12-01 17:00:00" in row, text[:2000]
        total = sum(_graded_cells().values())
        rows = {line.split("\t")[1]: line for line in text.splitlines() if line.count("\t") >= 4}
        assert f"{total:g} / {total:g}" in rows["kim"] and f"/ {total:g}" in rows["lee"], rows
        # each row shows when it came in: lee's, two hours after the due date the assignments page shows
        assert "2026-12-01 19:00:00" in rows["lee"] and "2026-12-01 16:55:00" in rows["kim"], rows
        # graded by the class grader, nothing is left to grade by hand (nbgrader's own autograde says the same)
        assert not [line for line in rows.values() if "needs manual grading" in line], rows
    finally:
        driver.quit()


def _guide_block(section: str, language: str) -> str:
    """The first ``language`` code block of the instructor guide's ``section``."""
    text = (REPO_ROOT / "book" / "instructor.md").read_text(encoding="utf-8")
    body = text[text.index(f"\n## {section}\n"):]
    body = body[:body.find("\n## ", 1)]
    return re.search(rf"```{language}\n(.*?)```", body, re.S).group(1)


def test_the_term_runs_as_the_instructor_guide_gives_it(tmp_path) -> None:
    """"The term", command by command, on a scratch copy of the repository, with the guide's late plugin in its
    nbgrader_config.py: release through the course's own exchange (no root), a due date half an hour ago, two
    learners who fetch and submit (kim with answers, one of them wrong, and late; lee untouched, within the
    extension the guide gives), collect, grade, the regrade's dry run and the real one, the export to Canvas."""
    from nbgrader.api import Gradebook

    repo = copy_repository(tmp_path / "repo")
    config = repo / "autograder" / "nbgrader_config.py"
    config.write_text(config.read_text() + "\n" + _guide_block("The term", "python"))
    env = {**nbgrader_env(), "NBGRADER_EXCHANGE": ""}  # the course's own exchange
    due = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0) - timedelta(minutes=30)
    block = _guide_block("The term", "bash").replace("\\\n", " ")
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert any(c.startswith("nbgrader collect") for c in commands), block
    cwd, ran = repo, []
    exchange = repo / "autograder" / "exchange"
    for command in filter(None, commands):
        words = shlex.split(command.replace("2026-12-01 17:00:00 UTC", f"{due:%Y-%m-%d %H:%M:%S} UTC"))
        if words[0] == "cd":
            cwd = (cwd / words[1]).resolve()
            continue
        if words[0] == "nbgrader" and words[1] == "collect":  # the learners' turn comes first
            for student in ("kim", "lee"):
                learner = tmp_path / student
                learner.mkdir()
                where = [f"--Exchange.root={exchange}", f"--CourseDirectory.student_id={student}",
                         "--CourseDirectory.course_id=attention-from-scratch"]
                for step in ("fetch_assignment", "submit"):
                    if step == "submit" and student == "kim":
                        _answers_filled(learner / ASSIGNMENT)
                    run = subprocess.run([sys.executable, "-m", "nbgrader", step, ASSIGNMENT, *where], cwd=learner,
                                         env=env, capture_output=True, text=True, timeout=300)
                    assert run.returncode == 0, f"{student}: nbgrader {step}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        argv = ([sys.executable, "-m", "nbgrader", *words[1:]] if words[0] == "nbgrader" else
                [sys.executable, *words[1:]] if words[0] == ".venv/bin/python" else words)
        run = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, f"{command}:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
        ran.append(command)
    assert (repo / "autograder" / "submitted" / "kim" / ASSIGNMENT / "timestamp.txt").is_file()

    grades = repo / "grades" / ASSIGNMENT
    with Gradebook(f"sqlite:///{repo / 'autograder' / 'gradebook.db'}") as gradebook:
        assert gradebook.find_assignment(ASSIGNMENT).duedate == due
        kim, lee = (gradebook.find_submission(ASSIGNMENT, s) for s in ("kim", "lee"))
        assert 30 * 60 < kim.total_seconds_late < 60 * 60 and kim.late_submission_penalty == 1.0
        assert lee.extension == timedelta(hours=48) and lee.total_seconds_late == 0
        assert not lee.late_submission_penalty, lee.late_submission_penalty
        points = kim.score
    assert 1 < points < sum(_graded_cells().values())
    with (grades / "grades.csv").open() as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert float(rows["kim"]["score"]) == points - 1 and "late penalty 1 point(s)" in rows["kim"]["reason"], rows
    assert "late" not in rows["lee"]["reason"], rows["lee"]
    assert (grades / "changes.csv").read_text().count("\n") == 1, "the dry run found changes in a class unchanged"
    canvas = list(csv.reader((repo / "canvas.csv").open()))
    assert [row[-1] for row in canvas if row[2] == "kim"] == [f"{points - 1:g}"], canvas
    assert len(ran) == len([c for c in commands if c and not c.startswith("cd ")]), ran


def _answers_filled(folder: Path) -> Path:
    """Chapter 1's student notebook with ``softmax`` answered right (the reference's cell) and ``attention_scores``
    wrong (the same, without the division by sqrt(d_k)), as a learner would leave it, in ``folder``."""
    source = json.loads((SOURCE / ASSIGNMENT / NOTEBOOK).read_text())
    answers = {c["metadata"]["nbgrader"]["grade_id"]: re.sub(r"(?m)^[ \t]*### (BEGIN|END) SOLUTION\n?", "",
                                                             "".join(c["source"]))
               for c in source["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    unscaled = answers["attention_scores"].replace(" / math.sqrt(q.shape[-1])", "")
    assert unscaled != answers["attention_scores"], "the reference's attention_scores no longer divides that way"
    notebook = json.loads((NOTEBOOKS / ASSIGNMENT / NOTEBOOK).read_text())
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id == "softmax":
            cell["source"] = answers["softmax"]
        elif grade_id == "attention_scores":
            cell["source"] = unscaled
    path = folder / NOTEBOOK
    path.write_text(json.dumps(notebook, indent=1))
    return path


def _wait(driver, script: str, timeout: float = 120):
    """The first truthy value of ``script`` in the page, polled until ``timeout`` seconds; None if none came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.5)
    return None


def test_a_learner_runs_the_exercises_in_jupyterlab_and_validates(tmp_path) -> None:
    learner = tmp_path / "learner"
    learner.mkdir()
    path = _answers_filled(learner)
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not try to download a browser or driver
    with _serving([str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--port={port}",
                   f"--ServerApp.root_dir={learner}"], learner, tmp_path) as base:
        driver = _driver()
        try:
            driver.get(f"{base}/lab/tree/{NOTEBOOK}")
            ready = _wait(driver, "return document.querySelector('.jp-Notebook .jp-Cell') && "
                                  "document.querySelector('[data-command=\"notebook:restart-run-all\"]')")
            assert ready, "JupyterLab did not open the notebook:\n" + driver.execute_script(
                "return document.body.innerText")[:2000]
            # as a learner would, wait for the toolbar's "Kernel status: Idle": a restart asked for while the kernel
            # is still starting raced its first connection, and once in about 15 runs left every cell queued ([*])
            idle = _wait(driver, "const s = document.querySelector('.jp-Notebook-ExecutionIndicator'); "
                                 "return s && s.dataset.status === 'idle'")
            assert idle, "the notebook's kernel never became idle:\n" + (tmp_path / "jupyter.log").read_text()[-3000:]
            driver.find_element(By.CSS_SELECTOR, '[data-command="notebook:restart-run-all"]').click()
            restart = _wait(driver, "return Array.from(document.querySelectorAll('.jp-Dialog button'))"
                                    ".find(b => b.innerText.trim() == 'Restart')", 30)
            assert restart, "no dialog to confirm the restart"
            restart.click()
            # the run stops at the first failing test cell; its output names the mistake
            named = _wait(driver, "return document.querySelector('.jp-Notebook').textContent.includes('(no scaling)')")
            assert named, "no output names the mistake (no scaling):\n" + driver.execute_script(
                "return document.querySelector('.jp-Notebook').textContent")[-3000:]
            driver.find_element(By.CSS_SELECTOR, '[data-command="docmanager:save"]').click()
            validate = [item for item in driver.find_elements(By.CSS_SELECTOR, ".jp-Toolbar-item")
                        if item.text.strip() == "Validate"]
            assert validate, "the notebook's toolbar has no Validate button (nbgrader's labextension)"
            (validate[0].find_elements(By.CSS_SELECTOR, "button") or [validate[0]])[0].click()
            report = _wait(driver, "const d = document.querySelector('.jp-Dialog'); return d && "
                                   "d.innerText.includes('Validation Results') ? d.innerText : null", 180)
            assert report, "Validate showed no results"
        finally:
            driver.quit()
    assert "attention_scores of 2 queries and 3 keys" in report and "(no scaling)" in report, report[:3000]
    assert "every row's maximum is 2" not in report, "Validate reports a softmax test, which the right answer passes"
    saved = json.loads(path.read_text())  # what the run left, as JupyterLab saved it
    ran = [c for c in saved["cells"] if c["cell_type"] == "code" and c.get("execution_count")
           and c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    errors = {c["metadata"]["nbgrader"]["grade_id"]: [o["evalue"] for o in c["outputs"] if o["output_type"] == "error"]
              for c in ran}
    assert [g for g, e in errors.items() if e] == ["attention_scores_values"], errors
    assert {"softmax_sums_to_one", "softmax_stable", "softmax_masked_entries"} <= set(errors), errors
