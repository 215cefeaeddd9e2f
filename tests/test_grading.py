"""Adversarial tests of `python -m autograder grade`: a class of honest, broken and hostile submissions.

Each hostile submission pairs an attack with a wrong (or missing) answer, so
that an attack that worked would show up as points it should not have, or as
a trace on the host (a file, a connection, a process) that the test looks for.
"""

from __future__ import annotations

import csv
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from notebook_grading import release_notebook, replace_solution, source_notebook

from autograder import grading, sandbox
from autograder.release import REPO_ROOT, nbgrader_env

A = "01_self_attention"
FULL = 28.0
MARKER = Path("/tmp/autograder-test-marker")

WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    return x\n"
LOOP = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"
NO_ASSERTS = ("import ast\nclass _NoAssert(ast.NodeTransformer):\n    def visit_Assert(self, node):\n"
              "        return ast.Pass()\nget_ipython().ast_transformers.append(_NoAssert())")


def _with(answers: dict[str, str] | None = None, extra: list[str] | None = None, base: str = "source") -> dict:
    """The source (or release) notebook with some solution cells replaced and extra cells after the set-up."""
    nb = nbformat.read(source_notebook(A) if base == "source" else release_notebook(A), 4)
    for gid, code in (answers or {}).items():
        replace_solution(nb, gid, code)
    for index, code in enumerate(extra or []):
        nb.cells.insert(2 + index, nbformat.v4.new_code_cell(code))
    return nb


def _server() -> tuple[int, list[bytes]]:
    """A TCP server on the host's loopback that records whatever reaches it."""
    received: list[bytes] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(1.0)

    def serve() -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            received.append(conn.recv(100))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], received


PORT, RECEIVED = _server()

HOSTILE = {
    # attacks on the comparison, the asserts and the checks, each with a wrong softmax
    "patch_allclose": ({"softmax": WRONG_SOFTMAX},
                       ["import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True"]),
    "asserts_to_pass": ({"softmax": WRONG_SOFTMAX}, [NO_ASSERTS]),
    "blank_later_cells": ({"softmax": WRONG_SOFTMAX},
                          ["get_ipython().input_transformers_post.append(lambda lines: [])"]),
    "replace_run_check": ({"softmax": WRONG_SOFTMAX}, [
        "import autograder.checks, autograder.checks.core as core\n"
        "autograder.checks.run_check = core.run_check = lambda *a, **k: None"]),
    "lying_subclass": ({"softmax": (
        "import torch\nclass Liar(torch.Tensor):\n    def __eq__(self, other):\n        return True\n"
        "    def allclose(self, *a, **k):\n        return True\n"
        "def softmax(x, dim=-1):\n    return torch.zeros_like(x).as_subclass(Liar)\n")}, []),
    "import_reference": ({"softmax": "from solutions.self_attention import softmax\n"}, []),
    "frames_and_memory": ({"softmax": (
        "import gc, inspect, torch\n"
        "def softmax(x, dim=-1):\n"
        "    for frame in inspect.stack():\n"
        "        ref = frame.frame.f_globals.get('ref')\n"
        "        if ref is not None and hasattr(ref, 'softmax'):\n"
        "            return ref.softmax(x, dim)\n"
        "    for obj in gc.get_objects():\n"
        "        if callable(obj) and getattr(obj, '__module__', '') == 'solutions.self_attention':\n"
        "            return obj(x, dim)\n"
        "    return x\n")}, []),
    "stray_records": ({"softmax": WRONG_SOFTMAX}, [
        "import torch\nfrom autograder.checks import run_check\n"
        "run_check('softmax_sums_to_one', lambda x, dim=-1: torch.softmax(x, dim))"]),
    # attacks on the host
    "read_host_files": ({}, [
        f"import pathlib\nrepo = pathlib.Path({str(REPO_ROOT)!r})\n"
        "paths = [repo / 'solutions' / 'self_attention.py', repo / 'autograder' / 'gradebook.db',\n"
        "         repo / 'autograder' / 'source', pathlib.Path('/root')]\n"
        "print('FOUND', [str(p) for p in paths if p.exists()])"]),
    "network": ({}, [
        f"import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {PORT}), timeout=2)\n"
        "    s.sendall(b'pwned')\n    print('CONNECTED')\nexcept OSError as e:\n    print('NO NETWORK', e)"]),
    "write_host": ({}, [
        f"import pathlib\ntry:\n    pathlib.Path({str(MARKER)!r}).write_text('pwned')\nexcept OSError as e:\n"
        "    print('CANNOT WRITE', e)"]),
    "background_process": ({}, [
        "import subprocess\nsubprocess.Popen(['sh', '-c', "
        f"'sleep 5; echo late > {MARKER}.late; sleep 600'], start_new_session=True)"]),
    # robustness
    # (in the last exercise, so that the points earned before the failure can be seen to count)
    "crash": ({"SelfAttention": "import os\nos._exit(3)\n"}, []),
    "infinite_loop": ({"SelfAttention": LOOP}, []),
    "memory_bomb": ({"SelfAttention": "blocks = []\nwhile True:\n    blocks.append(bytearray(256 << 20))\n"}, []),
    "output_flood": ({}, ["for i in range(300_000):\n    print('flood', i)"]),
    "warning_but_correct": ({}, ["import warnings\nwarnings.warn('a library warning', UserWarning)"]),
}


def _hostile_notebook(name: str) -> dict:
    answers, extra = HOSTILE[name]
    return _with(answers, extra)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    """One class graded by the command line, sandbox on: {student: row of grades.csv}, and the output folder."""
    MARKER.unlink(missing_ok=True)
    Path(f"{MARKER}.late").unlink(missing_ok=True)
    root = tmp_path_factory.mktemp("class")
    submissions = root / "submissions"
    def put(student: str, nb: dict | str, name: str = "self_attention.ipynb") -> None:
        folder = submissions / student
        folder.mkdir(parents=True, exist_ok=True)
        if isinstance(nb, str):
            (folder / name).write_text(nb)
        else:
            nbformat.write(nb, folder / name)

    put("honest", _with())
    put("untouched", nbformat.read(release_notebook(A), 4))
    put("wrong_name", _with(), name="My Attempt (1).ipynb")
    put("invalid_json", '{"cells": [')
    put("not_a_notebook", '{"hello": 1}')
    (submissions / "empty").mkdir(parents=True)
    unknown = _with()
    for cell in unknown.cells:
        cell.metadata["lms_plugin"] = {"weird": [1, 2, 3]}
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata["nbgrader"]["schema_version"] = 99
    put("unknown_metadata", unknown)
    deleted = _with()
    deleted.cells = [c for c in deleted.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    put("deleted_tests", deleted)
    altered = _with({"softmax": WRONG_SOFTMAX})
    for cell in altered.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "pass"
    altered.cells += [c for c in _with().cells if c.metadata.get("nbgrader", {}).get("grade")][:3]  # duplicated
    put("altered_tests", altered)
    for name in HOSTILE:
        put(name, _hostile_notebook(name))
    out = root / "out"
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", A, str(submissions), "--out", str(out), "--workers", "2",
         "--timeout", "90", "--cell-timeout", "15", "--memory-gb", "4",
         "--gradebook", f"sqlite:///{root / 'gradebook.db'}"],
        cwd=REPO_ROOT, env=nbgrader_env(), capture_output=True, text=True, timeout=1500)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with (out / "grades.csv").open() as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    return {"rows": rows, "out": out, "root": root, "submissions": submissions, "log": run.stdout + run.stderr,
            "seconds": seconds}


def test_every_submission_has_a_row(graded) -> None:
    expected = {"honest", "untouched", "wrong_name", "invalid_json", "not_a_notebook", "empty", "unknown_metadata",
                "deleted_tests", "altered_tests", *HOSTILE}
    assert set(graded["rows"]) == expected
    for student, row in graded["rows"].items():
        assert row["status"] in grading.STATUSES, row
        assert row["status"] == "ok" or row["reason"], f"{student}: status {row['status']} without a reason"
        assert float(row["max_score"]) == FULL


def _score(graded, student: str) -> float:
    return float(graded["rows"][student]["score"])


@pytest.mark.parametrize("student", ["honest", "wrong_name", "unknown_metadata", "deleted_tests",
                                     "read_host_files", "network", "write_host", "background_process",
                                     "output_flood", "warning_but_correct"])
def test_correct_answers_keep_full_marks(graded, student) -> None:
    assert _score(graded, student) == FULL, graded["rows"][student]


def test_untouched_release_scores_zero(graded) -> None:
    assert _score(graded, "untouched") == 0 and graded["rows"]["untouched"]["status"] == "ok"


@pytest.mark.parametrize("student", ["patch_allclose", "asserts_to_pass", "blank_later_cells", "replace_run_check",
                                     "lying_subclass", "import_reference", "frames_and_memory", "stray_records",
                                     "altered_tests"])
def test_cheating_gains_nothing(graded, student) -> None:
    row = graded["rows"][student]
    for gid in ("softmax_sums_to_one", "softmax_stable", "softmax_masked_entries"):
        assert float(row[gid]) == 0, f"{student} scored {row[gid]} on {gid}"
    assert _score(graded, student) < FULL


@pytest.mark.parametrize("student", ["patch_allclose", "replace_run_check", "import_reference", "frames_and_memory",
                                     "stray_records"])
def test_cheating_is_flagged_for_a_person(graded, student) -> None:
    row = graded["rows"][student]
    assert row["status"] == "flagged" and row["reason"], row


def test_invalid_and_empty_submissions_say_why(graded) -> None:
    rows = graded["rows"]
    assert rows["invalid_json"]["status"] == "invalid" and "invalid JSON" in rows["invalid_json"]["reason"]
    assert rows["not_a_notebook"]["status"] == "invalid" and "no list of cells" in rows["not_a_notebook"]["reason"]
    assert rows["empty"]["status"] == "invalid" and "empty submission" in rows["empty"]["reason"]
    assert "graded My Attempt (1).ipynb as self_attention.ipynb" in rows["wrong_name"]["reason"]


def test_crash_loop_and_memory_bomb_are_contained(graded) -> None:
    rows = graded["rows"]
    assert rows["crash"]["status"] == "crashed" and "kernel died" in rows["crash"]["reason"], rows["crash"]
    assert rows["infinite_loop"]["status"] == "timeout" and "time limit" in rows["infinite_loop"]["reason"]
    assert rows["memory_bomb"]["status"] in ("crashed", "ok") and _score(graded, "memory_bomb") < FULL
    for student in ("crash", "infinite_loop", "memory_bomb"):  # what was earned before the failure counts
        assert _score(graded, student) == FULL - 5, rows[student]  # all but SelfAttention's 5 points


def test_the_host_is_untouched(graded) -> None:
    assert not RECEIVED, f"a submission reached a server on the host's loopback: {RECEIVED}"
    assert not MARKER.exists(), "a submission wrote a file on the host"
    time.sleep(6)
    assert not Path(f"{MARKER}.late").exists(), "a background process outlived its submission"
    leftover = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.strip()
    assert not leftover, f"processes started by a submission are still running: {leftover}"


def test_what_a_submission_could_see(tmp_path) -> None:
    """Inside the sandbox: no repository, no reference, no gradebook, no network (checked from the output)."""
    bundle = sandbox.build_bundle(tmp_path / "bundle")
    workspace = tmp_path / "work"
    workspace.mkdir()
    code = (f"import os, pathlib, socket\nprint(sorted(os.listdir('/')))\n"
            f"print(pathlib.Path({str(REPO_ROOT)!r}, 'solutions').exists())\n"
            "import solutions.self_attention as s\ntry:\n    s.softmax(1)\nexcept RuntimeError as e:\n    print(e)\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {PORT}), timeout=2)\n"
            "except OSError:\n    print('offline')\n"
            "print(os.getpid())")
    run = sandbox.run([sys.executable, "-c", code], bundle, workspace, sandbox.Limits(wall_seconds=60))
    lines = run.stdout.splitlines()
    assert run.returncode == 0, run.stderr
    assert "work" not in lines[0] or str(REPO_ROOT) not in lines[0]
    assert lines[1] == "False", "the repository is visible inside the sandbox"
    assert "not available inside the grading sandbox" in lines[2]
    assert lines[3] == "offline" and lines[4] == "2"


def test_feedback_names_the_mistake_and_the_report_exists(graded) -> None:
    feedback = (graded["out"] / "feedback" / "patch_allclose" / f"{A}.html").read_text()
    assert "softmax_sums_to_one" in feedback and "failed" in feedback
    report = (graded["out"] / "report.html").read_text()
    assert "Pass rate per check" in report and "data:image/png;base64," in report
    assert "Most common named mistakes" in report


def test_nbgrader_export_sees_the_grades(graded, tmp_path) -> None:
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(REPO_ROOT / "autograder" / "nbgrader_config.py", course)
    db = graded["root"] / "gradebook.db"
    run = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--db=sqlite:///{db}", "--to", "export.csv"],
                         cwd=course, env=nbgrader_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    with (course / "export.csv").open() as handle:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    for student, row in graded["rows"].items():
        assert exported[student] == float(row["score"]), student


def test_grading_twice_gives_the_same_grades(graded, tmp_path) -> None:
    subset = tmp_path / "subset"
    for student in ("honest", "untouched", "patch_allclose", "invalid_json"):
        shutil.copytree(graded["submissions"] / student, subset / student)
    out = tmp_path / "again"
    run = subprocess.run([sys.executable, "-m", "autograder", "grade", A, str(subset), "--out", str(out),
                          "--workers", "2", "--gradebook", f"sqlite:///{tmp_path / 'gb.db'}"],
                         cwd=REPO_ROOT, env=nbgrader_env(), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    with (out / "grades.csv").open() as handle:
        again = {row["student_id"]: row for row in csv.DictReader(handle)}
    for student, row in again.items():
        assert row == graded["rows"][student], student


def test_lms_zip_and_nbgrader_layouts(graded, tmp_path) -> None:
    honest = graded["submissions"] / "honest" / "self_attention.ipynb"
    archive = tmp_path / "canvas.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(honest, "smithjane_12345_67890_self_attention.ipynb")
        zipped.writestr("doejohn_22222_33333_self_attention.ipynb", "not json")
    layout = tmp_path / "course" / "submitted" / "kim" / A
    layout.mkdir(parents=True)
    shutil.copy(honest, layout / "self_attention.ipynb")
    with __import__("tempfile").TemporaryDirectory() as scratch:
        from_zip = grading.collect(archive, A, "self_attention.ipynb", Path(scratch))
        assert [(s.student_id, s.notebook is not None) for s in from_zip] == [("doejohn", True), ("smithjane", True)]
        from_nbgrader = grading.collect(tmp_path / "course", A, "self_attention.ipynb", Path(scratch))
        assert [s.student_id for s in from_nbgrader] == ["kim"]
        assert from_nbgrader[0].notebook.name == "self_attention.ipynb"


def test_a_dask_cluster_gives_the_same_grades(graded, tmp_path) -> None:
    from dask.distributed import LocalCluster

    subset = tmp_path / "subset"
    for student in ("honest", "untouched", "stray_records"):
        shutil.copytree(graded["submissions"] / student, subset / student)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        command = [sys.executable, "-m", "autograder", "grade", A, str(subset), "--out", str(tmp_path / "o"),
                   "--scheduler", cluster.scheduler_address, "--gradebook", f"sqlite:///{tmp_path / 'g.db'}"]
        run = subprocess.run(command, cwd=REPO_ROOT, env=nbgrader_env(), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    with (tmp_path / "o" / "grades.csv").open() as handle:
        on_dask = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(on_dask) == {"honest", "untouched", "stray_records"}
    for student, row in on_dask.items():
        assert row == graded["rows"][student], student


def test_a_worker_on_another_machine_needs_neither_the_files_nor_the_bundle(graded, tmp_path) -> None:
    """What a Dask worker elsewhere gets: the notebook's bytes in the task, and a bundle path it cannot see."""
    notebook = next((graded["submissions"] / "honest").glob("*.ipynb"))
    moved = grading.Submission("honest", tmp_path / "not-on-this-machine.ipynb", data=notebook.read_bytes())
    with grading.tempfile.TemporaryDirectory() as scratch:
        name, source, release, bundle = grading.prepare(A, Path(scratch))
    assert not bundle.exists()
    settings = grading.Settings(A, name, source, release, bundle, sandbox.Limits(wall_seconds=300))
    result = grading.grade_one(moved, settings)
    assert (result.status, result.score) == ("ok", FULL), result.reason
    assert grading.Submission("x", notebook).carried().data == notebook.read_bytes()


def test_a_notebook_killed_at_the_wall_clock_keeps_what_it_earned(tmp_path) -> None:
    """A loop that ignores SIGINT, with a per-cell limit longer than the whole notebook's: SIGKILL at the wall
    clock, and the tests that ran before the loop still count."""
    path = tmp_path / "self_attention.ipynb"
    nbformat.write(_with({"SelfAttention": LOOP}), path)
    with grading.tempfile.TemporaryDirectory() as scratch:
        name, source, release, bundle = grading.prepare(A, Path(scratch))
        settings = grading.Settings(A, name, source, release, bundle, sandbox.Limits(wall_seconds=25, cell_seconds=600))
        result = grading.grade_one(grading.Submission("looper", path), settings)
    assert result.status == "timeout" and "25 s limit" in result.reason and "keep their points" in result.reason
    assert result.score == FULL - 5, {g: c.message for g, c in result.cells.items() if c.points < c.max_points}


def test_refuses_without_a_working_sandbox(tmp_path) -> None:
    env = {**nbgrader_env(), "PATH": str(Path(sys.executable).parent)}  # no bwrap on this PATH
    run = subprocess.run([sys.executable, "-m", "autograder", "grade", A, str(tmp_path), "--out", str(tmp_path / "o")],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "refusing to grade" in run.stderr and "bubblewrap" in run.stderr
    assert "--no-sandbox" in run.stderr


def test_batch_summary_is_printed(graded) -> None:
    assert f"graded {len(graded['rows'])} submissions of {A}" in graded["log"]
    assert f"[{len(graded['rows'])}/{len(graded['rows'])}]" in graded["log"], "no progress lines"
