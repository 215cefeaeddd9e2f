"""Runs INSIDE the grading sandbox: a warm worker that runs one submission after another, each in a fork.

    python -m autograder.runner [--isolate | --sandboxed] [--channels R:W,R:W,...]

Starting Python, importing torch and IPython and the hidden checks' probes costs
seconds; running a notebook's checks costs well under one. So a worker does
the first once, then, for each job the grader sends on stdin (one JSON line),
forks a copy of itself in which the notebook's cells run, in-process, with
IPython's own machinery (magics, ``In``, ``get_ipython()`` behave as in a
kernel). The copy starts from the worker's untouched state; nothing one
submission does to modules, objects or files reaches the next.

Several workers can share one warm-up: given ``--channels`` (pipes the grader
passed in, beside stdin and stdout), the warm process forks one worker per
channel and serves none itself (:func:`_split`). A class graded three at a
time then pays for one start-up, not three.

With ``--isolate`` (in the bubblewrap sandbox) each copy also gets, through
Linux namespaces created inside the sandbox: its own user, mount, PID, IPC,
UTS and network namespaces; its job's folder as ``/submission`` and nothing of the other
jobs' folders; fresh ``/tmp`` and ``/dev/shm``; an empty ``/proc`` and a
read-only ``/dev`` and root; no capabilities. It is PID 1 of its namespace, so
everything it starts dies with it, and the worker that forked it is outside
that namespace: it can neither signal nor see it, and the worker is not
dumpable, so it cannot be traced either.

Where the platform refuses namespaces inside the sandbox (Ubuntu's AppArmor profile for bubblewrap, Docker's
default seccomp profile), the worker says so when it starts (:func:`nested_refusal`) and the grader falls back
to one sandbox per submission: a worker started with ``--sandboxed`` runs a single job, in a plain fork, its
folder bound at ``/submission`` by bubblewrap itself, and is then closed.

The worker, not the submission, keeps the clock: the copy reports on a pipe
when each cell starts and ends (with the byte range of the observations the
hidden checks wrote meanwhile, see ``autograder.checks.core``); a cell that
runs past its limit, or a notebook past the wall clock, is killed (SIGKILL), and
a copy that dies says where by the last cell it started. Code that sets out to
write on that pipe can forge the report, as it could forge the observations
themselves: the sandbox keeps such code away from everything else, and the
grader flags the patterns it needs (``os``, ``ctypes``, ``open``, ...).

The reply to each job is one JSON line on stdout: the summary (``ranges``,
``stopped``), whether it ran out of time, its exit status and timings.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

WORK_MOUNT, JOBS_MOUNT = "/submission", "/jobs"
NOTEBOOK, STDERR = "assembled.ipynb", "stderr.txt"
MAX_EVENT_BYTES = 4 << 20  # what the worker reads of one job's event pipe
MAX_ERRORS = 20  # the errors of cells other than tests that a job's summary keeps (the first ones)

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 4, 24
_LIBC = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------- warming up (once per worker)

def warm() -> dict:
    """Import what every notebook needs and create the shell: what each fork would otherwise pay for."""
    timings = {}
    started = time.perf_counter()
    # The sandbox has no GPU: Chapter 9's Triton kernels run in Triton's interpreter, which Triton must be told before
    # its first import, and torch's meta kernels below import it.
    os.environ["TRITON_INTERPRET"] = "1"
    import torch  # noqa: F401

    # The first operation on the "meta" device imports torch's meta kernels and torch._dynamo (about 2 s); checks of
    # where a result is made use it, so each notebook would pay it again. Workers of a chapter that never needs it
    # are told so (AUTOGRADER_WARM_DYNAMO=0, see autograder.chapters.WARM_DYNAMO).
    if os.environ.get("AUTOGRADER_WARM_DYNAMO", "1") != "0":
        torch.ones(2, 2, device="meta").tril()
    # The first torch.broadcast_shapes imports torch's reference implementations (about a second); Chapter 9's
    # answers and checks broadcast their leading dimensions with it.
    torch.broadcast_shapes((2, 1), (1, 2))
    timings["torch_s"] = time.perf_counter() - started
    mark = time.perf_counter()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    import attention_course.testing  # noqa: F401
    from autograder.checks import core

    failures = core.load_all()  # the probes of every chapter (and their cases, built once here)
    reachable = [name for name in ("solutions", "autograder.judges") if _reachable(name)]
    config = Config()
    config.HistoryManager.enabled = False  # no SQLite file, no saving thread: the fork must be the only thread
    shell = InteractiveShell.instance(config=config)
    # A cell that raises gets IPython's traceback printed on its stdout, which grading never reads (the verdict
    # takes the exception itself). The default, verbose mode reads the source around every frame (stack_data):
    # a release's 27 stubs that raise cost 1.8 s of the 2.0 s its notebook took here. Plain mode prints the same
    # frames as Python does.
    shell.InteractiveTB.set_mode(mode="Plain")
    timings["imports_s"] = time.perf_counter() - mark
    return {"timings": timings, "failures": failures, "shell": shell, "ids": core.ids(), "reachable": reachable}


def _reachable(name: str) -> bool:
    """Could a notebook import ``name`` here? (The reference and the judges must never be in the sandbox.)"""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


# ---------------------------------------------------------------- the job's copy

def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_LIBC.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def _flags(path: str) -> int:
    """The mount flags of ``path`` that a remount must keep (a mount inherited from the sandbox is locked)."""
    keep = os.ST_RDONLY | os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC
    return os.statvfs(path).f_flag & keep  # the same bits as MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC


def _enter_namespaces() -> None:
    """In the job's first process: a user namespace (mapping our own ids only), and mount, PID, IPC and UTS
    namespaces owned by it. The next fork is PID 1 of the new PID namespace."""
    uid, gid = os.geteuid(), os.getegid()
    _LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # the worker is not dumpable; its job may be (to map its own ids)
    _check(_LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS | _CLONE_NEWNET),
           "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing mounted here is seen by the worker, nor back


def _under_tmp() -> list[str]:
    """The Python installation's folders (the venv's and the interpreter's own) that lie under /tmp, outermost
    first."""
    found = {os.path.normpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return sorted(p for p in found if p.startswith("/tmp/"))


def _confine(job: str, workspace_bytes: int) -> None:
    """In PID 1 of the job's namespaces: its folder as the workspace, fresh /tmp and /dev/shm, the other jobs,
    /proc and the worker's files out of sight, the root and /dev read-only."""
    _mount(f"{JOBS_MOUNT}/{job}", WORK_MOUNT, None, _MS_BIND | _MS_REC)
    _mount("tmpfs", JOBS_MOUNT, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY, "size=4k,mode=0555")
    # Python and its venv may live under /tmp (a course cloned there): hold them open before the fresh /tmp
    # covers them, then bind them back at their own paths, read-only, through the open descriptors.
    kept = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in _under_tmp()}
    _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={workspace_bytes},mode=1777")
    for path, handle in kept.items():
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", path, None, _MS_BIND | _MS_REC)
        _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _flags(path))
        os.close(handle)
    # An empty /proc: a new proc cannot be mounted under bubblewrap's (it covers parts of its own), and the
    # sandbox's shows the worker; nothing a notebook needs reads it.
    _mount("tmpfs", "/proc", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY, "size=4k,mode=0555")
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={workspace_bytes},mode=1777")
    for path in ("/dev", "/"):  # where a file left behind would outlive the job
        _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _flags(path))


def _drop_capabilities() -> None:
    """No capabilities left, in the bounding set either (so that exec'ing a program cannot bring them back)."""
    cap = 0
    while _LIBC.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    data = (ctypes.c_uint32 * 6)()  # two sets of (effective, permitted, inheritable), all empty
    _check(_LIBC.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")


def _set_up(events: int, step) -> None:
    """Run ``step`` of a job's confinement; if it fails, tell the worker why (the grader must not grade without
    it) and end the job."""
    try:
        step()
    except BaseException as err:  # noqa: BLE001
        _send(events, {"setup_failed": f"{type(err).__name__}: {err}"})
        os._exit(70)


def _limit(job: dict) -> None:
    for name, value in (("RLIMIT_AS", job["memory_bytes"]), ("RLIMIT_FSIZE", job["file_bytes"]),
                        ("RLIMIT_NPROC", job["processes"]), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))


def _redirect(events: int) -> None:
    """stdin and stdout from/to nowhere (stdout is the worker's channel to the grader), stderr to a file in the
    workspace (its tail explains a crash); every other inherited descriptor closed but the event pipe."""
    null = os.open(os.devnull, os.O_RDWR)
    err = os.open(STDERR, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(err, 2)
    os.closerange(3, events)
    os.closerange(events + 1, 1 << 16)


def _send(events: int, message: dict) -> None:
    os.write(events, (json.dumps(message) + "\n").encode())


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _read_from(path: str, offset: int, limit: int) -> str:
    """What was written to ``path`` from ``offset`` on: its first ``limit`` bytes, as text."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _text(value, limit: int) -> str:
    """``str(value)``, cut to ``limit`` characters; a learner's object whose ``__str__`` fails still gives a line."""
    try:
        return str(value)[:limit]
    except Exception as err:  # noqa: BLE001
        return f"<{type(value).__name__} that cannot be shown: {type(err).__name__}>"


def _outcome(shell, result, stderr: str, stderr_from: int) -> dict:
    """What nbgrader's rule for a test cell reads of its run (``nbgrader.utils.determine_grade``): an error, output
    on stderr (a warning included) or, failing both, the value the cell displayed (a number there is a partial
    grade)."""
    error = result.error_before_exec or result.error_in_exec
    shown = None
    if error is None and result.result is not None:
        try:
            shown = shell.display_formatter.format(result.result)[0].get("text/plain")
        except Exception:  # noqa: BLE001 - a repr that fails: the value is no number, so no partial grade
            shown = f"<{type(result.result).__name__}>"
    return {"error": [type(error).__name__, _text(error, 2000)] if error is not None else None,
            "stderr": _read_from(stderr, stderr_from, 2000) or None,
            "shown": None if shown is None else _text(shown, 200)}


def _run_cells(shell, cells: list, events: int, observations: str, stderr: str) -> None:
    """Every code cell in turn, errors kept (as a kernel with allow_errors would); the worker hears when each
    starts and, for a test cell, which observations it wrote and how the whole cell, visible asserts included,
    ended (:func:`_outcome`)."""
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        _send(events, {"start": index})
        start, stderr_from = _size(observations), _size(stderr)
        result = shell.run_cell(source, store_history=True)
        sys.stdout.flush()
        sys.stderr.flush()
        graded = meta.get("grade") and isinstance(meta.get("grade_id"), str)
        event = {"end": index, "grade_id": meta["grade_id"] if graded else None,
                 "range": [start, _size(observations)]}
        if graded:
            event["outcome"] = _outcome(shell, result, stderr, stderr_from)
        elif result.error_before_exec or result.error_in_exec:  # why a notebook could not be graded, if it cannot
            error = result.error_before_exec or result.error_in_exec
            event["error"] = [type(error).__name__, _text(error, 500)]
        _send(events, event)
        if shell.exit_now:  # exit() or quit(): in a kernel, the kernel would be gone
            _send(events, {"exited": index})
            return
    # whether the notebook's training imported torch._dynamo, which the worker then imports for the next forks
    _send(events, {"done": True, "dynamo": "torch._dynamo" in sys.modules})


def warm_optimizers() -> None:
    """An optimizer's first step imports ``torch._dynamo`` (3.5 s on the 2-core machine): a worker whose notebook
    trained (Chapter 7's training checks do) takes that step once, so that its next forks do not pay it.
    A notebook could claim to have trained when it did not; the worker then imports a part of torch early."""
    import torch

    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.AdamW([weight])
    weight.sum().backward()
    optimizer.step()


def nested_refusal() -> str | None:
    """Why a job could not get its own namespaces here (None when it can): a trial in a throwaway fork of the
    steps each job takes, up to a first mount. Ubuntu's AppArmor profile for bubblewrap and Docker's seccomp
    profile refuse them, and ``bwrap --disable-userns`` does on purpose (the suite's way to try the fallback)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        try:
            _enter_namespaces()
            _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=4k")
            os._exit(0)
        except BaseException as err:  # noqa: BLE001 - the reason goes to the parent
            os.write(write, f"{type(err).__name__}: {err}".encode()[:500])
            os._exit(1)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        why = handle.read().decode("utf-8", "replace")
    _, status = os.waitpid(child, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else (why or f"the trial ended with status {status}")


def _job_process(job: dict, state: dict, events: int, isolate: bool) -> None:
    """The job's PID 1 (or, unisolated, just a fork): confine, limit, run the notebook, exit."""
    if isolate:
        _set_up(events, lambda: (_confine(job["id"], job["workspace_bytes"]), os.chdir(WORK_MOUNT),
                                 _drop_capabilities()))
    else:  # without namespaces: the job's folder as the worker sees it (the sandbox's /submission, or on the host)
        os.chdir(job["folder"])
    _redirect(events)
    _limit(job)
    os.environ["HOME"] = os.getcwd()
    with open(NOTEBOOK, encoding="utf-8") as handle:
        cells = json.load(handle)["cells"]
    from autograder.checks import core

    _run_cells(state["shell"], cells, events, core.observations_path(), os.path.abspath(STDERR))


def _fork_job(job: dict, state: dict, isolate: bool) -> tuple[int, int, int]:
    """Start the job: (pid of its first process, pid of the process running the cells, read end of its events)."""
    events_r, events_w = os.pipe()
    pid_r, pid_w = os.pipe()
    first = os.fork()
    if first == 0:  # the job's first process: namespaces, then PID 1 in them
        status = 70
        try:
            os.close(events_r)
            os.close(pid_r)
            if isolate:
                _set_up(events_w, _enter_namespaces)
            runner = os.fork() if isolate else 0
            if runner == 0:
                os.close(pid_w)
                try:
                    _job_process(job, state, events_w, isolate)
                    status = 0
                except BaseException:  # noqa: BLE001 - the worker must not go on in the job's process
                    import traceback

                    traceback.print_exc()
                    status = 71
                finally:
                    os._exit(status)
            os.write(pid_w, str(runner).encode())
            os.close(pid_w)
            os.close(events_w)
            _, wait_status = os.waitpid(runner, 0)
            status = os.waitstatus_to_exitcode(wait_status)
            status = status if status >= 0 else 128 - status
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(events_w)
    os.close(pid_w)
    with os.fdopen(pid_r, "rb") as handle:
        told = handle.read().decode() if isolate else ""
    return first, int(told) if told.strip().isdigit() else first, events_r


def serve_job(job: dict, state: dict, isolate: bool) -> dict:
    """Run one job and watch it: the summary the grader judges from."""
    started = time.perf_counter()
    first, runner, events = _fork_job(job, state, isolate)
    pidfd = os.pidfd_open(first)
    wall_deadline = started + job["wall_seconds"]
    ranges: dict[str, list[int]] = {}
    summary: dict = {"ranges": ranges, "outcomes": {}, "errors": [], "stopped": None, "done": False}
    current, cell_deadline, buffer, received = None, None, b"", 0
    timed_out, killed = False, False
    first_cell = None
    open_fds = [events, pidfd]
    while True:
        deadline = min(d for d in (wall_deadline, cell_deadline) if d is not None)
        ready, _, _ = select.select(open_fds, [], [], max(0.0, deadline - time.perf_counter()))
        if events in ready:
            chunk = os.read(events, 65536)
            if not chunk:
                open_fds.remove(events)
            received += len(chunk)
            buffer += chunk if received <= MAX_EVENT_BYTES else b""
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                current, cell_deadline = _event(line, summary, current, cell_deadline, job)
                if first_cell is None and current is not None:
                    first_cell = time.perf_counter()
        if pidfd in ready:
            break
        now = time.perf_counter()
        if killed and now >= wall_deadline:
            break  # killed, and still not gone: waitpid below waits for it
        if not killed and (now >= wall_deadline or (cell_deadline is not None and now >= cell_deadline)):
            if now >= wall_deadline:
                timed_out = True
            else:
                summary["stopped"] = {"why": "timeout", "cell": current}
            killed = True
            _kill(runner, first)
            wall_deadline, cell_deadline = now + 30, None  # wait for the namespace to go
    _, wait_status = os.waitpid(first, 0)
    os.close(pidfd)
    while events in open_fds and select.select([events], [], [], 0)[0]:  # what it wrote last, before it died
        chunk = os.read(events, 65536)
        received += len(chunk)
        buffer += chunk if received <= MAX_EVENT_BYTES else b""
        if not chunk:
            break
    for line in buffer.split(b"\n"):
        current, _ = _event(line, summary, current, None, job)
    os.close(events)
    exit_code = os.waitstatus_to_exitcode(wait_status)
    if not summary["done"] and summary["stopped"] is None and not timed_out and current is not None:
        summary["stopped"] = {"why": "crashed", "cell": current}  # it died (or exited) inside this cell
    finished = time.perf_counter()
    return {"summary": summary, "timed_out": timed_out, "exit": exit_code,
            "timings": {"start_s": (first_cell or finished) - started, "cells_s": finished - (first_cell or finished)}}


def _event(line: bytes, summary: dict, current, cell_deadline, job: dict):
    """Apply one event line; returns the cell now running and its deadline."""
    try:
        event = json.loads(line)
    except ValueError:
        return current, cell_deadline
    if not isinstance(event, dict):
        return current, cell_deadline
    if isinstance(event.get("start"), int):
        return event["start"], time.perf_counter() + job["cell_seconds"]
    if "end" in event:
        if isinstance(event.get("grade_id"), str) and isinstance(event.get("range"), list):
            summary["ranges"][event["grade_id"]] = event["range"]
            summary["outcomes"][event["grade_id"]] = event.get("outcome")
        if isinstance(event.get("error"), list) and len(summary["errors"]) < MAX_ERRORS:
            summary["errors"].append([event["end"], *event["error"][:2]])
        return None, None
    if "exited" in event:
        summary["stopped"] = {"why": "crashed", "cell": event["exited"]}
        return None, None
    if isinstance(event.get("setup_failed"), str):
        summary["setup_failed"] = event["setup_failed"][:500]
        return current, cell_deadline
    if event.get("done") is True:
        summary["done"] = True
        job["dynamo"] = event.get("dynamo") is True  # for the worker (main), not for the judges
        return None, None
    return current, cell_deadline


def _kill(runner: int, first: int) -> None:
    for pid in (runner, first):  # PID 1 of the job's namespace first: everything in it dies with it
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _channels(argv: list[str]) -> list[tuple[int, int]]:
    """The (read, write) descriptors of the workers this process is to start, after ``--channels``: the first is
    always stdin and stdout, the others were inherited from the grader (``R:W,R:W``)."""
    extra = argv[argv.index("--channels") + 1] if "--channels" in argv else ""
    return [(0, 1)] + [(int(r), int(w)) for r, w in (pair.split(":") for pair in extra.split(",") if pair)]


def _split(channels: list[tuple[int, int]], argv: list[str]) -> None:
    """Fork one worker per channel, each then serving its own on its stdin and stdout, and wait for them all.

    The warm-up is paid once for all of them: each is a copy of this warm process (its memory shared until
    written). They share this sandbox, as the jobs of one worker always did, one after another; each job has its
    own namespaces (network included), so two running at once see nothing of each other. This process keeps no
    channel: a worker whose channel the grader closes ends, and the others go on."""
    children = []
    for k, (read, write) in enumerate(channels):
        child = os.fork()
        if child == 0:
            try:
                os.dup2(read, 0)
                os.dup2(write, 1)
                for fd in {fd for pair in channels for fd in pair} - {0, 1}:
                    os.close(fd)
                status = _serve(argv, k)
            except BaseException:  # noqa: BLE001 - a worker that fails says why on stderr and ends alone
                import traceback

                traceback.print_exc()
                status = 70
            finally:
                sys.stdout.flush()
            os._exit(status)
        children.append(child)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in {fd for pair in channels for fd in pair}:
        os.dup2(null, fd) if fd in (0, 1) else os.close(fd)
    for child in children:
        os.waitpid(child, 0)


_STATE: dict = {}


def _serve(argv: list[str], index: int = 0) -> int:
    """One worker's life on stdin and stdout, after the warm-up (in ``_STATE``): the ready line, then jobs."""
    isolate = "--isolate" in argv
    state = _STATE
    import threading

    ready = {"ready": True, "threads": threading.active_count(), "nested_refused": state["refused"],
             "index": index, **{key: state[key] for key in ("timings", "failures", "ids", "reachable")}}
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        sys.stdout.write(json.dumps(serve_job(job, state, isolate)) + "\n")
        sys.stdout.flush()
        if job.get("dynamo") and "torch._dynamo" not in sys.modules:
            warm_optimizers()
    return 0


def main(argv: list[str]) -> int:
    isolate = "--isolate" in argv
    channels = _channels(argv)
    _STATE.update(warm())
    _STATE["refused"] = nested_refusal() if isolate else None
    if isolate or "--sandboxed" in argv:
        _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # no job can trace a worker or read its memory (forks keep it)
    if len(channels) == 1:
        return _serve(argv)
    _split(channels, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
