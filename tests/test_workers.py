"""The grader's warm workers: one worker runs notebook after notebook, each in a fork with its own namespaces.

What one submission does must not reach the next one on the same worker, nor the worker itself: these tests
run a hostile notebook and then the instructor's answers on the *same* worker (the one ``grading.execute``
takes from the pool, as ``python -m autograder grade`` does) and look at what the second one could see.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest
from notebook_grading import graded_cells, nbgrader_meta, replace_solution, source_notebook

from autograder import grading, sandbox

A = "01_self_attention"
FULL = sum(float(nbgrader_meta(c)["points"]) for c in graded_cells(nbformat.read(source_notebook(A), 4)))
LEFT = "left-by-the-first"
SLEEPER = "601.25"  # a background `sleep` the first notebook leaves running: the host looks for it by this

#: The first notebook's extra cell: it leaves files everywhere it can write, signals and traces what could be
#: the worker (PID 2 in the sandbox), writes on every descriptor it has, patches modules, built-ins and the
#: hidden checks in memory, and leaves a process behind. What it managed goes to stderr as ATTACK {...}.
ATTACK = f"""
import builtins, ctypes, json, os, signal, subprocess, sys
import torch
import torch.nn.functional as F
import attention_course
import autograder.checks.core as core

report = {{}}

def attempt(name, action):
    try:
        result = action()
        report[name] = "done" if result is None else result
    except Exception as err:
        report[name] = type(err).__name__

for path in ("/tmp/{LEFT}", "{LEFT}", "/dev/shm/{LEFT}", "/{LEFT}", "/dev/{LEFT}", "/jobs/{LEFT}",
             "/bundle/{LEFT}"):
    attempt("write " + path, lambda p=path: open(p, "w").write("x") and None)
libc = ctypes.CDLL(None, use_errno=True)

def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False

report["visible pids"] = [p for p in range(1, 4096) if _alive(p)]
report["ppid"] = os.getppid()
attempt("kill pid 2", lambda: os.kill(2, signal.SIGKILL))
report["ptrace pid 2"] = libc.ptrace(16, 2, 0, 0)  # PTRACE_ATTACH
report["ptrace parent"] = libc.ptrace(16, os.getppid(), 0, 0) if os.getppid() > 0 else "no parent"
attempt("read /proc/2/mem", lambda: open("/proc/2/mem", "rb").read(1) and None)
attempt("list /proc", lambda: os.listdir("/proc"))
report["umount /jobs"] = libc.umount2(b"/jobs", 2)
report["umount /tmp"] = libc.umount2(b"/tmp", 2)
for fd in range(0, 64):
    try:
        os.write(fd, b'{{"done": true}}\\ngarbage\\n')
    except OSError:
        pass
subprocess.Popen(["sleep", "{SLEEPER}"], start_new_session=True)
attempt("kill everyone", lambda: os.kill(-1, signal.SIGTERM))
subprocess.Popen(["sleep", "{SLEEPER}"], start_new_session=True)
torch.allclose = lambda *a, **k: True
F.softmax = lambda x, dim=-1: x
core.run_check = lambda *a, **k: None
builtins.LEFT_BY_THE_FIRST = True
attention_course.LEFT_BY_THE_FIRST = True
print("ATTACK " + json.dumps(report), file=sys.stderr, flush=True)
"""

#: The second notebook's extra cell: what it can see of the first. SEEN {...} on stderr.
LOOK = f"""
import builtins, json, os, sys
import torch
import torch.nn.functional as F
import attention_course
import autograder.checks.core as core

def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False

seen = {{
    "left": [p for p in ("/tmp/{LEFT}", "{LEFT}", "/dev/shm/{LEFT}", "/{LEFT}", "/dev/{LEFT}") if os.path.exists(p)],
    "workspace": sorted(os.listdir(".")),
    "tmp": sorted(os.listdir("/tmp")),
    "allclose patched": type(torch.allclose).__name__ != "builtin_function_or_method",
    "softmax patched": F.softmax.__module__ != "torch.nn.functional",
    "run_check patched": core.run_check.__name__ != "run_check",
    "built-ins patched": hasattr(builtins, "LEFT_BY_THE_FIRST"),
    "module patched": hasattr(attention_course, "LEFT_BY_THE_FIRST"),
    "visible pids": [p for p in range(1, 4096) if _alive(p)],
}}
print("SEEN " + json.dumps(seen), file=sys.stderr, flush=True)
"""


def _line(stderr: str, tag: str) -> dict:
    lines = [line for line in stderr.splitlines() if line.startswith(tag + " ")]
    assert lines, f"no {tag} line in the notebook's stderr:\n{stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix(tag + " "))


def _assembled(extra: str | None = None, answers: dict[str, str] | None = None) -> dict:
    """The instructor's answers (with ``answers`` replaced), ``extra`` as the learner's cell after the set-up,
    assembled as the grader assembles a submission."""
    nb = nbformat.read(source_notebook(A), 4)
    for gid, code in (answers or {}).items():
        replace_solution(nb, gid, code)
    if extra:
        nb.cells.insert(2, nbformat.v4.new_code_cell(extra))
    source = json.loads(nbformat.writes(nbformat.read(source_notebook(A), 4)))
    release = json.loads(Path(grading.REPO_ROOT / "notebooks" / A / source_notebook(A).name).read_text())
    return grading.assemble(source, release, json.loads(nbformat.writes(nb)))[0]


@pytest.fixture(scope="module")
def settings():
    with tempfile.TemporaryDirectory(prefix="workers-") as scratch:
        name, source, release, bundle = grading.prepare(A, Path(scratch))
        yield grading.Settings(A, name, source, release, bundle, sandbox.Limits(wall_seconds=120, cell_seconds=10))
        sandbox.close_workers()


def _the_worker(settings) -> sandbox.Worker:
    idle = sandbox._IDLE[(str(settings.bundle), settings.limits, settings.use_sandbox)]
    assert len(idle) == 1, f"expected one warm worker for these settings, found {len(idle)}"
    return idle[0]


def _points(settings, assembled: dict, execution: sandbox.Execution) -> float:
    cells, flags = grading._judge(settings, execution.summary, execution.observations, assembled)
    assert not flags, flags
    return sum(c.points for c in cells.values())


def test_the_next_notebook_on_the_same_worker_sees_nothing_of_a_hostile_one(settings) -> None:
    first = _assembled(ATTACK)
    attack = grading.execute(first, settings)
    worker = _the_worker(settings)
    pid, jobs = worker.process.pid, worker.count
    report = _line(attack.stderr, "ATTACK")
    second = _assembled(LOOK)
    looked = grading.execute(second, settings)
    assert _the_worker(settings) is worker and worker.process.pid == pid and worker.count == jobs + 1, \
        "the second notebook did not run on the same, still living, worker"
    seen = _line(looked.stderr, "SEEN")

    # the attacks that should fail did, and for the right reason
    assert report["write /dev/shm/" + LEFT] == "done" and report["write /tmp/" + LEFT] == "done", report
    assert report["write " + LEFT] == "done", report  # its own workspace: allowed, and thrown away after
    for path in ("/" + LEFT, "/dev/" + LEFT, "/jobs/" + LEFT, "/bundle/" + LEFT):
        assert report["write " + path] in ("OSError", "PermissionError"), (path, report)
    assert report["visible pids"] == [1] and report["ppid"] == 0, report  # alone in its PID namespace
    assert report["kill pid 2"] == "ProcessLookupError" and report["ptrace pid 2"] == -1, report
    assert report["ptrace parent"] == "no parent", report
    assert report["read /proc/2/mem"] == "FileNotFoundError" and report["list /proc"] == [], report
    assert report["umount /jobs"] == -1 and report["umount /tmp"] == -1, report  # no capabilities left
    assert attack.summary["done"] and attack.summary["stopped"] is None, attack.summary

    # nothing of it reached the second notebook
    assert seen["left"] == [] and LEFT not in seen["tmp"], seen
    assert set(seen["workspace"]) <= {"assembled.ipynb", "stderr.txt", "observations.jsonl"}, seen
    for what in ("allclose patched", "softmax patched", "run_check patched", "built-ins patched", "module patched"):
        assert seen[what] is False, (what, seen)
    assert seen["visible pids"] == [1], seen
    assert _points(settings, second, looked) == FULL, looked.summary

    # and its background process died with it
    left = subprocess.run(["pgrep", "-f", f"sleep {SLEEPER}"], capture_output=True, text=True).stdout.strip()
    assert not left, f"the first notebook's background process outlived it: {left}"


def test_a_notebook_stopped_at_its_limits_leaves_the_worker_whole(settings) -> None:
    """A loop that ignores SIGINT (killed at the cell limit), a process that kills itself, a flood of memory:
    the worker stops each, says where, and then gives the instructor's answers full marks."""
    worker_before = None
    loop = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"
    crash = "import os\nos._exit(3)\n"
    for answer, why in ((loop, "timeout"), (crash, "crashed")):
        assembled = _assembled(answers={"SelfAttention": answer})
        execution = grading.execute(assembled, settings)
        stopped = execution.summary["stopped"]
        assert stopped and stopped["why"] == why, execution.summary
        assert grading._nbgrader(assembled["cells"][stopped["cell"]])["grade_id"] == "SelfAttention", stopped
        worker = _the_worker(settings)
        assert worker_before is None or worker is worker_before, "the worker was replaced"
        worker_before = worker
    honest = _assembled()
    execution = grading.execute(honest, settings)
    assert _the_worker(settings) is worker_before
    assert _points(settings, honest, execution) == FULL


def test_a_worker_reports_its_phases(settings) -> None:
    """Each run says where its time went; a worker's start-up is recorded once, when it starts."""
    grading.execute(_assembled(), settings)  # a warm worker for these settings, whichever test ran before this one
    starts = len(sandbox.worker_starts())
    execution = grading.execute(_assembled(), settings)
    assert len(sandbox.worker_starts()) == starts, "a warm worker was started again"
    assert 0 < execution.timings["start_s"] < execution.timings["cells_s"], execution.timings
    start = sandbox.worker_starts()[-1]
    assert 0 < start["torch_s"] < start["start_s"] and start["other_s"] > 0, start


def test_without_the_sandbox_the_same_workers_grade_the_same(settings) -> None:
    """``--no-sandbox`` (trusted notebooks only): the same warm worker and forks, without bubblewrap or
    namespaces; the instructor's answers still get full marks, twice on one worker."""
    import dataclasses

    plain = dataclasses.replace(settings, use_sandbox=False)
    honest = _assembled()
    for _ in range(2):
        execution = grading.execute(honest, plain)
        assert execution.summary["done"], execution.stderr[-2000:]
        assert _points(plain, honest, execution) == FULL
    assert _the_worker(plain).count == 2


#: The hostile notebook less its signals: in the fallback a notebook shares its process namespace with the
#: worker that runs it, so a signal to everyone stops its own grading (tested below); the rest still runs.
ATTACK_WITHOUT_SIGNALS = "\n".join(line for line in ATTACK.splitlines() if not line.startswith("attempt(\"kill"))


def test_without_nested_namespaces_each_notebook_gets_a_sandbox_of_its_own(settings, monkeypatch, capsys) -> None:
    """Where the platform refuses namespaces inside the sandbox (forced here with bwrap --disable-userns), the
    grader says so once and gives every notebook a bubblewrap sandbox of its own: a hostile notebook, then one
    that looks for what it left, each in its own. What isolated the notebooks from each other still does; the
    notebook's own namespaces are gone, so it sees the worker that runs it and can stop its own grading."""
    import dataclasses

    monkeypatch.setenv(sandbox.DISABLE_NESTED, "1")
    alone = dataclasses.replace(settings, limits=sandbox.Limits(wall_seconds=121, cell_seconds=10))  # its own pool
    try:
        attack = grading.execute(_assembled(ATTACK_WITHOUT_SIGNALS), alone)
        killer = grading.execute(_assembled(ATTACK), alone)
        looked = grading.execute(_assembled(LOOK), alone)
        honest = _assembled()
        execution = grading.execute(honest, alone)
        idle = sandbox._IDLE.get((str(alone.bundle), alone.limits, True), [])
        assert sandbox.nested_refused() and not idle, "a single-notebook worker was kept for another notebook"
    finally:
        sandbox.close_workers()
        sandbox._NESTED_REFUSED.clear()
    warned = capsys.readouterr().err
    assert warned.count("refuses namespaces inside the grading sandbox") == 1, warned
    report, seen = _line(attack.stderr, "ATTACK"), _line(looked.stderr, "SEEN")
    for path in ("/" + LEFT, "/dev/" + LEFT, "/bundle/" + LEFT):
        assert report["write " + path] in ("OSError", "PermissionError"), (path, report)
    assert report["umount /tmp"] == -1, report  # no capabilities
    assert killer.worker_died and killer.summary is None, "a notebook that signals everyone stops its own grading"
    assert seen["left"] == [] and LEFT not in seen["tmp"], seen
    assert set(seen["workspace"]) <= {"assembled.ipynb", "stderr.txt", "observations.jsonl"}, seen
    for what in ("allclose patched", "softmax patched", "run_check patched", "built-ins patched", "module patched"):
        assert seen[what] is False, (what, seen)
    assert _points(alone, honest, execution) == FULL
    left = subprocess.run(["pgrep", "-f", f"sleep {SLEEPER}"], capture_output=True, text=True).stdout.strip()
    assert not left, f"the first notebook's background process outlived it: {left}"


#: Two notebooks at once on two workers forked from one start-up (so in one bubblewrap sandbox): the first binds an
#: abstract Unix socket (scoped by network namespace) and waits for a caller; the second calls it again and again.
LISTEN = """
import json, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(b"\\0autograder-siblings")
listener.listen(1)
listener.settimeout(6)
try:
    listener.accept()
    accepted = True
except OSError:
    accepted = False
print("HEARD " + json.dumps({"bound": True, "accepted": accepted}), file=sys.stderr, flush=True)
"""
CALL = """
import json, socket, sys, time
reached, tries = False, 0
end = time.monotonic() + 5
while time.monotonic() < end and not reached:
    tries += 1
    caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        caller.connect(b"\\0autograder-siblings")
        reached = True
    except OSError:
        time.sleep(0.1)
print("CALLED " + json.dumps({"reached": reached, "tries": tries}), file=sys.stderr, flush=True)
"""


def test_workers_forked_from_one_start_up_grade_at_once_and_see_nothing_of_each_other(settings) -> None:
    """``prestart(count=2)``, as ``python -m autograder grade`` starts its ``--workers``: two workers forked from
    one warm process, in one sandbox, after one start-up. Two notebooks run at the same time, one on each: the
    first waits for a caller on an abstract Unix socket, the second tries to call it; each notebook has its own
    network namespace, so no call arrives (in one namespace it would, within a tenth of a second). Closing one
    worker leaves the other grading; the sandbox ends with the last."""
    from concurrent.futures import ThreadPoolExecutor

    limits = sandbox.Limits(wall_seconds=122, cell_seconds=30)  # a pool of its own
    sandbox.prestart(settings.bundle, limits, True, count=2)
    with sandbox.worker(settings.bundle, limits) as first, sandbox.worker(settings.bundle, limits) as second:
        assert first.process is second.process and {first.index, second.index} == {0, 1}
        assert sorted(len(w.start_timings) for w in (first, second))[0] == 2, "the sibling shares the start-up"
        with ThreadPoolExecutor(2) as pool:
            heard = pool.submit(first.run, _assembled(LISTEN), limits)
            called = pool.submit(second.run, _assembled(CALL), limits)
            listener, caller = _line(heard.result().stderr, "HEARD"), _line(called.result().stderr, "CALLED")
    assert listener == {"bound": True, "accepted": False} and caller["reached"] is False, (listener, caller)
    assert caller["tries"] > 10, caller  # it kept calling while the other listened
    second.close()
    honest = _assembled()
    execution = first.run(honest, limits)
    assert _points(settings, honest, execution) == FULL, execution.stderr[-2000:]
    assert first.alive and first.process.poll() is None
    first.close()
    assert first.process.wait(timeout=30) is not None, "the sandbox outlived its last worker"
