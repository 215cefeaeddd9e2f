"""A real term's batch: progress lines with an ETA, ``--resume`` from the progress store, and ``--compare``.

The command-line tests drive ``python -m autograder grade`` with the sandbox on, on a class of four
(a correct notebook, the untouched release, a wrong softmax and a file that is not JSON), graded once by the
module's fixture; each test copies what it changes. Reuse is proved by editing a stored result's reason in
a copy of the store: a reused result comes back with the edit, a regraded one without it.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from notebook_grading import graded_cells, nbgrader_meta, release_notebook, replace_solution, source_notebook

from autograder import batch, grading, sandbox
from autograder.release import REPO_ROOT, nbgrader_env

A = "01_self_attention"
NAME = "self_attention.ipynb"
POINTS = {nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c)["points"])
          for c in graded_cells(nbformat.read(source_notebook(A), 4))}
FULL = sum(POINTS.values())
WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    return x\n"
MARK = "edited in the store by the test"
LINE = re.compile(r"^\[ *(\d+)/(\d+)\] (\S+): (\w+), ([\d.]+)/([\d.]+) — (\d+):(\d\d) elapsed, "
                  r"(?:~(\d+):(\d\d) left|done) \(([\d.]+) s/submission\)$")
OPTIONS = ["--timeout", "90", "--cell-timeout", "15", "--memory-gb", "4"]


def _notebook(kind: str) -> nbformat.NotebookNode:
    if kind == "untouched":
        return nbformat.read(release_notebook(A), 4)
    nb = nbformat.read(source_notebook(A), 4)
    if kind == "wrong_softmax":
        replace_solution(nb, "softmax", WRONG_SOFTMAX)
    return nb


def _put(folder: Path, student: str, kind: str) -> None:
    (folder / student).mkdir(parents=True, exist_ok=True)
    if kind == "not_json":
        (folder / student / NAME).write_text('{"cells": [')
    else:
        nbformat.write(_notebook(kind), folder / student / NAME)


def _command(submissions: Path, out: Path, *extra: str, workers: int = 2, options: list[str] = OPTIONS) -> list:
    return [sys.executable, "-m", "autograder", "grade", A, str(submissions), "--out", str(out), "--workers",
            str(workers), *options, "--gradebook", f"sqlite:///{out.parent / (out.name + '.db')}", *extra]


def _grade(submissions: Path, out: Path, *extra: str, **kwargs) -> subprocess.CompletedProcess:
    run = subprocess.run(_command(submissions, out, *extra, **kwargs), cwd=REPO_ROOT, env=nbgrader_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def _reused(stderr: str) -> tuple[int, int]:
    found = re.search(r"resume: reused (\d+) of (\d+) stored results", stderr)
    assert found, stderr[-2000:]
    return int(found.group(1)), int(found.group(2))


def _progress(stderr: str) -> list[re.Match]:
    return [m for m in (LINE.match(line) for line in stderr.splitlines()) if m]


def _mark(out: Path, students: list[str]) -> None:
    """Edit the stored reason of ``students`` in ``out``'s progress store."""
    store = batch.ProgressStore(out / ".progress")
    for student in students:
        path = store.path(student)
        stored = json.loads(path.read_text())
        stored["result"]["reason"] = MARK
        path.write_text(json.dumps(stored))


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> dict:
    """The class graded once, from scratch."""
    root = tmp_path_factory.mktemp("batch")
    submissions = root / "class"
    for student, kind in {"ann": "correct", "bob": "untouched", "cy": "wrong_softmax", "dee": "not_json"}.items():
        _put(submissions, student, kind)
    run = _grade(submissions, root / "out")
    return {"root": root, "submissions": submissions, "out": root / "out", "stderr": run.stderr,
            "rows": _rows(root / "out" / "grades.csv")}


def _copy_class(first: dict, into: Path, students: list[str]) -> Path:
    for student in students:
        shutil.copytree(first["submissions"] / student, into / student)
    return into


def _copy_store(first: dict, out: Path) -> None:
    shutil.copytree(first["out"] / ".progress", out / ".progress")


# ---------------------------------------------------------------- the command line

def test_the_first_run_grades_as_expected(first) -> None:
    """The fixture's grades themselves, so that the tests below compare with something right."""
    rows = first["rows"]
    assert {s: float(r["score"]) for s, r in rows.items() if s != "cy"} == {"ann": FULL, "bob": 0, "dee": 0}
    assert 0 < float(rows["cy"]["score"]) < FULL and rows["dee"]["status"] == "invalid"


def test_progress_lines_show_elapsed_time_and_an_eta(first) -> None:
    stderr = first["stderr"]
    assert "\r" not in stderr
    lines = _progress(stderr)
    assert [int(m.group(1)) for m in lines] == [1, 2, 3, 4] and {m.group(2) for m in lines} == {"4"}, stderr
    assert sorted(m.group(3) for m in lines) == ["ann", "bob", "cy", "dee"]
    assert "[4/4]" in stderr and lines[-1].group(9) is None, "the last line says done, not a time left"
    elapsed = [int(m.group(7)) * 60 + int(m.group(8)) for m in lines]
    assert elapsed == sorted(elapsed)
    for m, seconds in zip(lines, elapsed, strict=True):
        done, rate = int(m.group(1)), float(m.group(11))
        # the rate is the time so far over the work done: the submissions graded and the preflight's turn
        assert abs(rate * (done + 1) - seconds) <= 0.5 + 0.05 * (done + 1), m.group(0)
        if m.group(9) is not None:  # the estimate is the rate times the submissions still to come
            left = int(m.group(9)) * 60 + int(m.group(10))
            assert abs(left - rate * (4 - done)) <= 0.5 + 0.05 * (4 - done), m.group(0)
    for m in lines:
        row = first["rows"][m.group(3)]
        assert (m.group(4), float(m.group(5)), float(m.group(6))) == (
            row["status"], float(row["score"]), float(row["max_score"]))


def test_every_result_is_stored_as_it_arrives(first) -> None:
    store = batch.ProgressStore(first["out"] / ".progress")
    assert len(list(store.folder.glob("*.json"))) == 4 and not list(store.folder.glob("*.tmp"))
    for student, row in first["rows"].items():
        stored = json.loads(store.path(student).read_text())
        result = batch.result_from_json(stored["result"])
        assert (result.student_id, f"{result.score:g}", result.status, result.reason) == (
            student, row["score"], row["status"], row["reason"])
        assert {g: f"{c.points:g}" for g, c in result.cells.items()} == {g: row[g] for g in POINTS}


def test_resume_reuses_unchanged_students_and_regrades_a_changed_notebook(first, tmp_path) -> None:
    submissions = _copy_class(first, tmp_path / "class", ["ann", "bob", "cy", "dee"])
    nbformat.write(_notebook("correct"), submissions / "cy" / NAME)  # cy fixed the softmax
    out = tmp_path / "out"
    _copy_store(first, out)
    _mark(out, ["ann", "bob", "cy", "dee"])
    run = _grade(submissions, out, "--resume")
    assert _reused(run.stderr) == (3, 4)
    assert [m.group(0).split("]")[0] + "] " + m.group(3) for m in _progress(run.stderr)] == ["[4/4] cy"]
    rows = _rows(out / "grades.csv")
    assert {s: r["reason"] for s, r in rows.items() if s != "cy"} == {"ann": MARK, "bob": MARK, "dee": MARK}
    assert rows["cy"]["reason"] != MARK and float(rows["cy"]["score"]) == FULL
    for student in ("ann", "bob", "dee"):
        assert {k: v for k, v in rows[student].items() if k != "reason"} == {
            k: v for k, v in first["rows"][student].items() if k != "reason"}
    assert (out / "feedback" / "cy" / f"{A}.html").exists() and (out / "report.html").exists()


def test_a_changed_grader_version_regrades_everyone(first, tmp_path) -> None:
    submissions = _copy_class(first, tmp_path / "class", ["ann", "dee"])
    out = tmp_path / "out"
    _copy_store(first, out)
    _mark(out, ["ann", "dee"])
    options = [*OPTIONS[:3], "16", *OPTIONS[4:]]
    assert OPTIONS[2:4] == ["--cell-timeout", "15"]
    run = _grade(submissions, out, "--resume", options=options)
    assert _reused(run.stderr) == (0, 2) and "[2/2]" in run.stderr
    rows = _rows(out / "grades.csv")
    assert set(rows) == {"ann", "dee"} and MARK not in {r["reason"] for r in rows.values()}
    assert rows["ann"]["score"] == first["rows"]["ann"]["score"]


def test_an_interrupted_run_resumed_gives_the_same_grades(first, tmp_path) -> None:
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()  # the killed grader cannot remove its bundle and jobs folders: they are left here, not in /tmp
    process = subprocess.Popen(_command(first["submissions"], out, workers=1), cwd=REPO_ROOT,
                               env={**nbgrader_env(), "TMPDIR": str(scratch)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    try:
        for line in process.stderr:
            seen.append(line)
            if line.startswith("[1/4]"):
                break
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # as hard as an interruption gets: no clean-up at all
        process.wait(timeout=60)
        process.stderr.close()
    assert seen and seen[-1].startswith("[1/4]"), "".join(seen)[-2000:]
    assert not (out / "grades.csv").exists()
    assert any(scratch.glob("autograder-*")), "the grader's scratch folders were not under TMPDIR"
    run = _grade(first["submissions"], out, "--resume")
    reused, total = _reused(run.stderr)
    assert 1 <= reused < total == 4, run.stderr[-2000:]
    assert (out / "grades.csv").read_text() == (first["out"] / "grades.csv").read_text()


def test_compare_lists_whose_score_would_change_and_writes_nothing_else(first, tmp_path) -> None:
    """cy fixed the softmax (a score changes), bob and dee did not (unchanged, not listed), eve is new and
    ann is missing. Then the real run, with --resume, grades nobody again."""
    submissions = _copy_class(first, tmp_path / "class", ["bob", "cy", "dee"])
    nbformat.write(_notebook("correct"), submissions / "cy" / NAME)
    _put(submissions, "eve", "untouched")
    out = tmp_path / "out"
    _copy_store(first, out)
    run = _grade(submissions, out, "--resume", "--compare", str(first["out"] / "grades.csv"))
    assert _reused(run.stderr) == (2, 4) and "dry run" in run.stderr
    assert sorted(p.name for p in out.iterdir()) == [".progress", "changes.csv"]
    assert not (tmp_path / "out.db").exists(), "the gradebook was written"
    changes = _rows(out / "changes.csv")
    assert {s: r["change"] for s, r in changes.items()} == {"ann": "missing", "cy": "score", "eve": "new"}
    old = first["rows"]["cy"]
    lost = {gid for gid in POINTS if float(old[gid]) < POINTS[gid]}
    assert lost and changes["cy"]["cells"].split("; ") == [
        f"{gid} {old[gid]}→{POINTS[gid]:g}" for gid in POINTS if gid in lost]
    assert (changes["cy"]["old_score"], changes["cy"]["new_score"]) == (old["score"], f"{FULL:g}")
    assert (changes["eve"]["new_score"], changes["ann"]["old_score"]) == ("0", first["rows"]["ann"]["score"])
    assert "cy: " in run.stdout and "1 score(s) would change, 1 new, 1 missing" in run.stdout

    real = _grade(submissions, out, "--resume")
    assert _reused(real.stderr) == (4, 4) and not _progress(real.stderr)
    rows = _rows(out / "grades.csv")
    assert set(rows) == {"bob", "cy", "dee", "eve"} and float(rows["cy"]["score"]) == FULL
    assert (tmp_path / "out.db").exists()


def _foreign_grades(path: Path) -> Path:
    path.write_text("student_id,assignment,score,max_score,status,reason\nkim,02_causal_masking,3,20,ok,\n")
    return path


def _not_grades(path: Path) -> Path:
    path.write_text("name,points\nkim,3\n")
    return path


@pytest.mark.parametrize(("make", "says"), [
    (lambda tmp: tmp / "nowhere" / "grades.csv", "does not exist"),
    (lambda tmp: _foreign_grades(tmp / "grades.csv"), "02_causal_masking"),
    (lambda tmp: _not_grades(tmp / "points.csv"), "is not a grades.csv"),
])
def test_compare_with_a_missing_or_wrong_file_stops_at_once(tmp_path, make, says) -> None:
    previous = make(tmp_path)
    out = tmp_path / "out"
    run = subprocess.run(_command(tmp_path, out, "--compare", str(previous)), cwd=REPO_ROOT, env=nbgrader_env(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr[-2000:]
    message = run.stderr.strip().splitlines()[-1]
    assert "--compare" in message and str(previous) in message and says in message, message
    assert "preflight" not in run.stderr and not out.exists()


# ---------------------------------------------------------------- the pieces, in process

class _Lines:
    """A stream that is not a terminal, keeping what is written to it."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def _arrive(progress: batch.Progress, times: list[float]) -> str:
    clock = iter(times)
    progress.clock = lambda: next(clock)
    progress.start(units=progress.units)
    line = ""
    for _ in times[1:]:
        line = progress.arrived(grading.Result("kim", A, "ok", "", {"t": grading.CellResult("t", 25, 28)}))
    return line


def test_the_eta_is_the_rate_so_far_times_what_is_left() -> None:
    stream = _Lines()
    pool = batch.Progress(total=300, stream=stream)
    pool.units = 1  # the preflight took one worker's turn: 41 s for 12 submissions and it, 288 to go
    assert _arrive(pool, [0.0, *range(1, 12), 41.0]) == (
        "[ 12/300] kim: ok, 25/28 — 0:41 elapsed, ~15:08 left (3.2 s/submission)")
    resumed = batch.Progress(total=300, done=150, stream=stream)  # 150 reused from the store took no time
    assert _arrive(resumed, [0.0, 10.0]) == "[151/300] kim: ok, 25/28 — 0:10 elapsed, ~24:50 left (10.0 s/submission)"
    last = batch.Progress(total=1, stream=stream)
    assert _arrive(last, [0.0, 3725.0]) == "[1/1] kim: ok, 25/28 — 1:02:05 elapsed, done (3725.0 s/submission)"
    assert stream.text.count("\n") == 14 and "\r" not in stream.text


def test_clock_text() -> None:
    assert [batch.clock_text(s) for s in (0, 41, 980, 3723, 59.6)] == ["0:00", "0:41", "16:20", "1:02:03", "1:00"]


def _settings(tmp_path: Path, cell_seconds: int = 15) -> grading.Settings:
    return grading.Settings(A, NAME, source_notebook(A), release_notebook(A), tmp_path / "no-bundle",
                            sandbox.Limits(wall_seconds=90, cell_seconds=cell_seconds))


def test_the_grader_version_follows_what_decides_a_grade(tmp_path, monkeypatch) -> None:
    """A copy of the repository's code: a judge, a probe, a reference module or a limit changes the version;
    a file dropped into the course's nbgrader folders does not."""
    for package in ("autograder", "solutions", "attention_course"):
        shutil.copytree(REPO_ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("source", "*.ipynb", "__pycache__", "*.db"))
    monkeypatch.setattr(batch, "REPO_ROOT", tmp_path)
    settings = _settings(tmp_path)
    before = batch.grader_version(settings)
    assert batch.grader_version(settings) == before
    (tmp_path / "autograder" / "submitted" / "kim").mkdir(parents=True)
    (tmp_path / "autograder" / "submitted" / "kim" / "helper.py").write_text("x = 1\n")
    assert batch.grader_version(settings) == before
    assert batch.grader_version(_settings(tmp_path, cell_seconds=16)) != before
    for module in ("autograder/judges/self_attention.py", "autograder/checks/core.py", "solutions/masking.py",
                   "autograder/grading.py"):
        path = tmp_path / module
        original = path.read_text()
        path.write_text(original + "\n# changed\n")
        assert batch.grader_version(settings) != before, module
        path.write_text(original)
    assert batch.grader_version(settings) == before


def test_a_submission_key_follows_its_bytes(tmp_path) -> None:
    notebook = tmp_path / NAME
    notebook.write_text('{"cells": []}')
    key = batch.submission_key(grading.Submission("kim", notebook), "v1")
    assert key == batch.submission_key(grading.Submission("kim", notebook, data=notebook.read_bytes()), "v1")
    assert key != batch.submission_key(grading.Submission("kim", notebook), "v2")
    assert key != batch.submission_key(grading.Submission("kim", notebook, note="graded x as y"), "v1")
    notebook.write_text('{"cells": [] }')
    assert key != batch.submission_key(grading.Submission("kim", notebook), "v1")
    empty = grading.Submission("kim", None, problem="empty submission")
    assert batch.submission_key(empty, "v1") != batch.submission_key(
        grading.Submission("kim", None, problem="2 notebooks"), "v1")
    assert batch.submission_key(grading.Submission("kim", tmp_path / "gone.ipynb"), "v1") is None


def test_a_damaged_store_entry_means_grading_again(tmp_path) -> None:
    store = batch.ProgressStore(tmp_path / ".progress")
    result = grading.Result("a b", A, "ok", "", {"t": grading.CellResult("t", 1, 2, "why")})
    store.save(result, "k")
    assert store.load("a b", "k") == result and store.load("a b", "other") is None
    assert store.path("a b") != store.path("a_b") and store.load("a_b", "k") is None
    store.path("a b").write_text(store.path("a b").read_text()[:40])  # cut short
    assert store.load("a b", "k") is None


def test_compare_in_process(tmp_path) -> None:
    previous = tmp_path / "grades.csv"
    previous.write_text("student_id,assignment,score,max_score,status,reason,t1,t2\n"
                        f"kim,{A},3,5,ok,,1,2\nlee,{A},5,5,ok,,3,2\nmo,{A},0,5,invalid,no notebook,0,0\n")
    rows = batch.read_previous(previous, A)
    cell = grading.CellResult
    results = [grading.Result("kim", A, "ok", "", {"t1": cell("t1", 3, 3), "t2": cell("t2", 2, 2)}),
               grading.Result("lee", A, "ok", "", {"t1": cell("t1", 2, 3), "t2": cell("t2", 1, 2),
                                                   "t3": cell("t3", 2, 2)}),  # same total, a new cell
               grading.Result("new", A, "timeout", "slow", {"t1": cell("t1", 0, 3), "t2": cell("t2", 0, 2)})]
    changes = {c.student_id: c for c in batch.compare(rows, results)}
    assert set(changes) == {"kim", "new", "mo"}
    assert (changes["kim"].old_score, changes["kim"].new_score, changes["kim"].cells) == ("3", "5", ["t1 1→3"])
    assert changes["new"].change == "new" and changes["mo"].change == "missing"
    with pytest.raises(ValueError, match="line 2: score is 'x'"):
        previous.write_text(f"student_id,assignment,score,max_score,status,reason\nkim,{A},x,5,ok,\n")
        batch.read_previous(previous, A)
    with pytest.raises(ValueError, match="'kim' appears twice"):
        previous.write_text(f"student_id,assignment,score,max_score,status,reason\nkim,{A},1,5,ok,\nkim,{A},1,5,ok,\n")
        batch.read_previous(previous, A)
    with pytest.raises(ValueError, match="is not a file"):
        batch.read_previous(tmp_path, A)
