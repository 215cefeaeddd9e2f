"""The grading sandbox: bubblewrap, a throwaway workspace, and hard limits.

What a submission sees: the Python installation and the venv (read-only), a
*bundle* (read-only) holding the learner helper package and the sandbox side of
the hidden checks (:mod:`autograder.checks`: cases and probes), and its own
workspace (read-write, size-capped). The reference package and the judges are
not in the bundle. It does not see the
repository, the reference, the source notebooks, the gradebook, other
submissions or the output directory. It has no network (its own, empty,
network namespace), its own process namespace (everything it starts dies with
it), and limits on memory, processes, file size and wall-clock time.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLE_MOUNT, WORK_MOUNT = "/bundle", "/submission"
#: set to 1, the grader's sandboxes refuse namespaces inside them (to try the one-sandbox-per-notebook fallback)
DISABLE_NESTED = "AUTOGRADER_DISABLE_NESTED_NAMESPACES"
SANDBOX_ID = 1000  # the uid and gid of the code inside the sandbox (mapped to the grader's own outside)


@dataclass(frozen=True)
class Limits:
    wall_seconds: int = 600  # the whole notebook, killed (SIGKILL) past this
    cell_seconds: int = 120  # one cell, interrupted past this
    memory_bytes: int = 6 << 30  # address space of every process in the sandbox
    processes: int = 512  # processes and threads
    file_bytes: int = 64 << 20  # largest file it may write
    workspace_bytes: int = 256 << 20  # its /tmp
    output_bytes: int = 8 << 20  # what is read back of its stdout and stderr


def build_bundle(destination: Path, index: bool = True) -> Path:
    """Copy what the sandbox may see into ``destination``: the helper package, the runner and the sandbox
    side of the checks (cases and probes). Neither the reference (``solutions``) nor the judges go in.

    ``index=False`` leaves out the checks' index (:func:`write_index`), whose making imports torch and every
    check here: a worker can start on the bundle first (it loads every check itself) and warm up meanwhile."""
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO_ROOT / "attention_course", destination / "attention_course",
                    ignore=shutil.ignore_patterns("__pycache__"))
    package = destination / "autograder"
    (package / "checks").mkdir(parents=True)
    for name in ("__init__.py", "runner.py"):
        shutil.copy(REPO_ROOT / "autograder" / name, package / name)
    for module in (REPO_ROOT / "autograder" / "checks").glob("*.py"):
        shutil.copy(module, package / "checks" / module.name)
    if index:
        write_index(destination)
    # jsonschema (imported through nbformat) builds an IRI grammar at import when rfc3987_syntax is
    # installed: ~1 s per notebook for a check the runner never makes. In the bundle the import fails instead.
    (destination / "rfc3987_syntax.py").write_text(
        'raise ImportError("rfc3987_syntax is left out of the grading sandbox (slow import, not needed)")\n')
    return destination


def write_index(bundle: Path) -> None:
    """Which module holds which probe, into the bundle: a kernel that needs one check loads only its chapter."""
    from autograder.checks.core import index

    (bundle / "autograder" / "checks" / "index.json").write_text(json.dumps(index(), indent=0))


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("bin", "lib", "lib64", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    for prefix in sorted({sys.base_prefix, sys.prefix}):
        if not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
    return args


def command(argv: list[str], bundle: Path, workspace: Path, limits: Limits, binds: list[str] | None = None,
            env: dict[str, str] | None = None) -> list[str]:
    """The bwrap command line that runs ``argv`` inside the sandbox, ``workspace`` at /submission (or, with
    ``binds``, those bwrap arguments instead) and ``env`` set on top of the sandbox's environment."""
    mounts = binds if binds is not None else ["--bind", str(workspace), WORK_MOUNT, "--chdir", WORK_MOUNT]
    settings = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": WORK_MOUNT,
                "PYTHONPATH": BUNDLE_MOUNT, "PYTHONDONTWRITEBYTECODE": "1", "JUPYTER_RUNTIME_DIR": "/tmp/jupyter",
                "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", **(env or {})}
    # bwrap's --disable-userns makes every namespace the runner would create for a notebook fail, as Ubuntu's
    # AppArmor profile for bubblewrap and Docker's seccomp profile do: the suite's way to try the fallback.
    refuse_nested = ["--disable-userns"] if os.environ.get(DISABLE_NESTED) == "1" else []
    return [
        "bwrap", "--unshare-all", "--unshare-user", *refuse_nested, "--die-with-parent", "--new-session",
        "--cap-drop", "ALL",
        # not root even inside: a worker's namespaces can then map the sandbox's user into each job's own
        "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID),
        # the private /tmp first: bwrap mounts in order, and the venv may itself live under /tmp
        "--size", str(limits.workspace_bytes), "--tmpfs", "/tmp",
        *_system_binds(),
        "--ro-bind", str(bundle), BUNDLE_MOUNT,
        *mounts,
        "--proc", "/proc", "--dev", "/dev", "--size", str(limits.workspace_bytes), "--tmpfs", "/dev/shm",
        # nothing written outside the workspace, /tmp and /dev/shm, with or without a job's own namespaces
        "--remount-ro", "/dev", "--remount-ro", "/",
        "--clearenv",
        *[arg for name, value in settings.items() for arg in ("--setenv", name, value)],
        "--",
        *argv,
    ]


def _apply_limits(limits: Limits) -> None:  # runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@dataclass
class Completed:
    returncode: int | None  # None when killed at the wall-clock limit
    stdout: str
    stderr: str
    timed_out: bool


def run(argv: list[str], bundle: Path, workspace: Path, limits: Limits, sandbox: bool = True) -> Completed:
    """Run ``argv`` (inside bwrap unless ``sandbox`` is False) with the limits; never raises on its failure."""
    if sandbox:
        full = command(argv, bundle, workspace, limits)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    else:
        full = argv
        env = {**os.environ, "PYTHONPATH": str(bundle), "HOME": str(workspace), "MPLBACKEND": "Agg",
               "JUPYTER_RUNTIME_DIR": str(workspace / ".jupyter-runtime")}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(full, cwd=workspace, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   start_new_session=True, preexec_fn=lambda: _apply_limits(limits))
        timed_out = False
        try:
            process.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:  # the whole process group: bwrap, the runner, the kernel and anything they started
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read(limits.output_bytes).decode("utf-8", "replace")
        stderr = err.read(limits.output_bytes).decode("utf-8", "replace")
    return Completed(None if timed_out else process.returncode, stdout, stderr, timed_out)


def problem() -> str | None:
    """Why the sandbox cannot be used here, or None if it works (checked by running a command in it)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (`bwrap`) is not installed; on Debian or Ubuntu: apt-get install bubblewrap"
    with tempfile.TemporaryDirectory() as tmp:
        bundle, workspace = Path(tmp) / "bundle", Path(tmp) / "work"  # the trial needs neither the bundle's files
        bundle.mkdir()  # nor the checks' index, which would import torch and every check here
        workspace.mkdir()
        probe = [sys.executable, "-c", "import os; print(os.getpid())"]
        result = run(probe, bundle, workspace, Limits(wall_seconds=60))
    if result.returncode != 0:
        return (f"bubblewrap cannot create a sandbox here ({result.stderr.strip()[:300] or 'no reason given'}). "
                + " ".join(platform_advice(_readings())))
    if result.stdout.strip() != "2":  # bwrap is pid 1 of the new pid namespace, the command pid 2
        return f"the sandbox did not get its own process namespace (pid {result.stdout.strip()})"
    return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _readings() -> dict[str, object]:
    """What tells which platform refuses user namespaces (see :func:`platform_advice`)."""
    return {"apparmor_restrict": _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
            "unprivileged_clone": _read("/proc/sys/kernel/unprivileged_userns_clone"),
            "max_user_namespaces": _read("/proc/sys/user/max_user_namespaces"),
            "container": Path("/.dockerenv").exists() or "docker" in (_read("/proc/1/cgroup") or ""),
            "root": os.geteuid() == 0}


def platform_advice(readings: dict[str, object]) -> list[str]:
    """The fixes for a bubblewrap that cannot create its namespaces, the likeliest for these readings first,
    and always the way to grade without a sandbox."""
    advice = []
    if readings.get("apparmor_restrict") == "1":
        advice.append("This kernel's AppArmor restricts unprivileged user namespaces (Ubuntu 23.10 and later): "
                      "load an AppArmor profile for bwrap (Ubuntu's bwrap-userns-restrict, from the "
                      "apparmor-profiles package: `apparmor_parser -r` on it) or allow them for all "
                      "(`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`).")
    if readings.get("unprivileged_clone") == "0":
        advice.append("This kernel forbids unprivileged user namespaces: "
                      "`sysctl -w kernel.unprivileged_userns_clone=1`.")
    if readings.get("max_user_namespaces") == "0":
        advice.append("User namespaces are switched off: `sysctl -w user.max_user_namespaces=15000`.")
    if readings.get("container"):
        advice.append("Inside a Docker container, whose default seccomp and AppArmor profiles refuse the "
                      "namespaces bubblewrap needs, start it with `--security-opt seccomp=unconfined "
                      "--security-opt apparmor=unconfined` (or grade on the host).")
    if not advice:
        advice.append("bubblewrap needs user namespaces: on Ubuntu 23.10 and later allow them for bwrap through "
                      "AppArmor; in Docker, start the container with `--security-opt seccomp=unconfined "
                      "--security-opt apparmor=unconfined`; elsewhere check `sysctl user.max_user_namespaces`.")
    advice.append("The instructor guide's 'What works where' lists the platforms. To grade anyway, without a "
                  "sandbox, pass --no-sandbox: only for notebooks you trust.")
    return advice


# ---------------------------------------------------------------- warm workers

JOBS_MOUNT = "/jobs"
READY_SECONDS = 300  # a worker's start-up (Python, torch, IPython, the probes), on a loaded machine
REPLY_GRACE = 60  # past the wall clock, how long the grader waits for a worker's reply before killing it
MAX_STDERR_TAIL = 8192


class WorkerFailed(RuntimeError):
    """A worker could not start (the reason holds the tail of its stderr)."""


@dataclass
class Execution:
    """What a worker reports of one notebook."""

    summary: dict | None  # {"ranges": {grade_id: [start, end]}, "stopped": None | {"why", "cell"}, "done": bool}
    observations: bytes
    timed_out: bool  # killed at the wall clock
    exit_code: int | None  # of the process that ran the cells; None when the worker itself failed
    stderr: str  # its tail: why a notebook could not run to the end
    timings: dict[str, float]
    worker_died: bool = False  # the worker, not the notebook, failed: the grader runs it again on a fresh one


class _Shared:
    """The process (bubblewrap and the warm runner in it) that a worker and its siblings share, and its folders:
    it ends when the last of them is closed, or at once with :meth:`end`."""

    def __init__(self, process: subprocess.Popen, jobs: Path, stderr, users: int) -> None:
        self.process, self.jobs, self.stderr, self.users = process, jobs, stderr, users
        self._lock = threading.Lock()

    def leave(self) -> None:
        with self._lock:
            self.users -= 1
            last = self.users == 0
        if last:
            self.end()

    def end(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        _remove(self.jobs)


class Worker:
    """One warm ``python -m autograder.runner`` (in its own bubblewrap sandbox unless ``use_sandbox`` is False),
    which runs the notebooks it is given one at a time, each in a fresh fork (see :mod:`autograder.runner`).

    ``single``: the fallback where the platform refuses namespaces inside the sandbox: the worker runs one
    notebook, its folder bound at /submission by bubblewrap, without namespaces of its own, and is then closed
    (:func:`worker` does).

    ``siblings``: that many more workers forked from the same warm process after its start-up (in ``siblings``,
    each on a pipe of its own), so that a class graded several at a time pays for one start-up. They share its
    sandbox, as one worker's notebooks always did one after another; each notebook has its own namespaces."""

    def __init__(self, bundle: Path, limits: Limits, use_sandbox: bool = True, single: bool = False,
                 wait: bool = True, siblings: int = 0, warm_dynamo: bool = True) -> None:
        self._started = time.perf_counter()
        jobs = Path(tempfile.mkdtemp(prefix="autograder-jobs-"))
        self.count, self.index, self._closed = 0, 0, False
        self.start_timings: dict[str, float] = {}  # when it is ready (wait_ready)
        self.single = single and use_sandbox
        siblings = 0 if self.single else siblings
        stderr = tempfile.TemporaryFile()
        mode = ["--sandboxed"] if self.single else ["--isolate"] if use_sandbox else []
        pipes = [(os.pipe(), os.pipe()) for _ in range(siblings)]  # ((to it: r, w), (from it: r, w)) each
        theirs = [fd for (to_r, _), (_, from_w) in pipes for fd in (to_r, from_w)]
        channels = ["--channels", ",".join(f"{to_r}:{from_w}" for (to_r, _), (_, from_w) in pipes)] if pipes else []
        argv = [sys.executable, "-m", "autograder.runner", *mode, *channels]
        env = {"AUTOGRADER_OBSERVATIONS": f"{WORK_MOUNT}/observations.jsonl" if use_sandbox else
               "observations.jsonl", "HOME": "/tmp", "IPYTHONDIR": "/tmp/ipython",
               "AUTOGRADER_WARM_DYNAMO": "1" if warm_dynamo else "0"}
        if use_sandbox:
            if self.single:  # its one notebook's folder, made now, is the sandbox's /submission
                (jobs / "1").mkdir()
                binds = ["--bind", str(jobs / "1"), WORK_MOUNT, "--chdir", WORK_MOUNT]
            else:
                binds = ["--bind", str(jobs), JOBS_MOUNT, "--dir", WORK_MOUNT, "--chdir", "/"]
            full, host_env = command(argv, bundle, jobs, limits, binds, env), {"PATH": os.environ.get("PATH", "")}
        else:
            full = argv
            host_env = {**os.environ, **env, "PYTHONPATH": str(bundle), "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
                        "HOME": str(jobs), "IPYTHONDIR": str(jobs / ".ipython")}
        try:
            process = subprocess.Popen(full, cwd=jobs, env=host_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=stderr, start_new_session=True, pass_fds=theirs,
                                       preexec_fn=lambda: _apply_limits(limits))
        except OSError:
            for fd in [fd for pair in pipes for end in pair for fd in end]:
                os.close(fd)
            raise
        for fd in theirs:
            os.close(fd)
        self._shared = _Shared(process, jobs, stderr, 1 + siblings)
        self._in, self._out, self._buffer = process.stdin, process.stdout.fileno(), b""
        #: the workers forked from the same start-up (see the class's docstring), not yet ready
        self.siblings = [self._sibling(k + 1, to_w, from_r) for k, ((_, to_w), (from_r, _)) in enumerate(pipes)]
        if wait:
            self.wait_ready()

    def _sibling(self, index: int, to_it: int, from_it: int) -> Worker:
        other = object.__new__(Worker)
        other._started, other._shared, other.single, other.siblings = self._started, self._shared, False, []
        other.count, other.index, other._closed, other.start_timings = 0, index, False, {}
        other._in, other._out, other._buffer = os.fdopen(to_it, "wb"), from_it, b""
        return other

    # what a worker shares with its siblings
    process = property(lambda self: self._shared.process)  # bubblewrap (or, unsandboxed, the runner)
    jobs = property(lambda self: self._shared.jobs)  # the notebooks' folders, one a job
    stderr = property(lambda self: self._shared.stderr)

    def wait_ready(self) -> None:
        """Wait for the worker's ready line (the constructor does, unless told not to); raise WorkerFailed if it
        does not come."""
        ready = self._reply(time.monotonic() + READY_SECONDS)
        if not (isinstance(ready, dict) and ready.get("ready")):
            self.close()
            raise WorkerFailed(f"the grading worker did not start ({self._stderr_tail() or 'no output'})")
        if ready.get("threads") != 1:  # a fork copies one thread only: another could hold a lock forever
            self.close()
            raise WorkerFailed(f"the grading worker started {ready.get('threads')} threads; forking needs one")
        #: what the worker's load of the probes found: modules that failed, the checks registered, and which of
        #: the reference and the judges a notebook could import there (must be none)
        self.failures: dict[str, str] = ready.get("failures") or {}
        self.ids: list[str] = ready.get("ids") or []
        self.reachable: list[str] = ready.get("reachable") or []
        #: why the notebooks could not have namespaces of their own inside this worker's sandbox (None: they can)
        self.nested_refused: str | None = ready.get("nested_refused") if isinstance(
            ready.get("nested_refused"), str) else None
        warm = {k: float(v) for k, v in (ready.get("timings") or {}).items() if isinstance(v, (int, float))}
        total = time.perf_counter() - self._started
        #: its start-up: in all, importing torch, importing the rest; other_s is bubblewrap and Python itself. A
        #: sibling's start-up is its first worker's: it records only when it was ready, and that it shared it.
        self.start_timings = ({"start_s": total, **warm, "other_s": total - sum(warm.values())} if self.index == 0
                              else {"start_s": total, "shared": 1.0})

    @property
    def alive(self) -> bool:
        return not self._closed and self.process.poll() is None

    def run(self, notebook: dict, limits: Limits) -> Execution:
        """Run ``notebook`` (the assembled notebook, as JSON) in a fresh fork; never raises on its failure."""
        self.count += 1
        name = str(self.count) if self.index == 0 else f"{self.index}-{self.count}"  # siblings share the folder
        folder = self.jobs / name
        folder.mkdir(exist_ok=self.single)
        (folder / "assembled.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
        seen_as = WORK_MOUNT if self.single else str(folder)  # where the runner finds it, if not in namespaces
        job = {"id": name, "folder": seen_as, "cell_seconds": limits.cell_seconds,
               "wall_seconds": limits.wall_seconds, "memory_bytes": limits.memory_bytes,
               "file_bytes": limits.file_bytes, "processes": limits.processes,
               "workspace_bytes": limits.workspace_bytes}
        timings: dict[str, float] = {}
        try:
            self._in.write((json.dumps(job) + "\n").encode())
            self._in.flush()
            reply = self._reply(time.monotonic() + limits.wall_seconds + REPLY_GRACE)
        except OSError:
            reply = None
        if not isinstance(reply, dict) or not isinstance(reply.get("summary"), dict):
            late = self.alive  # alive but silent past the wall clock: it did not enforce the limit
            if late:  # nothing it is told reaches it now: its whole sandbox goes (its siblings' notebooks are
                self._shared.end()  # graded again on a fresh worker, as after any worker's death)
            self.close()
            _remove(folder)
            return Execution(None, b"", late, None, self._stderr_tail(), timings, worker_died=not late)
        observations = _read_capped(folder / "observations.jsonl", 64 << 20)
        stderr = _tail(folder / "stderr.txt", MAX_STDERR_TAIL)
        _remove(folder)
        timings.update({k: float(v) for k, v in (reply.get("timings") or {}).items() if isinstance(v, (int, float))})
        return Execution(reply["summary"], observations, bool(reply.get("timed_out")), reply.get("exit"), stderr,
                         timings)

    def _reply(self, deadline: float) -> dict | None:
        """The worker's next JSON line, or None at EOF or past ``deadline``."""
        fd = self._out
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _stderr_tail(self) -> str:
        # pread, not seek and read: sibling workers in other threads read the same file
        fd = self.stderr.fileno()
        size = os.fstat(fd).st_size
        return os.pread(fd, MAX_STDERR_TAIL, max(0, size - MAX_STDERR_TAIL)).decode("utf-8", "replace").strip()

    def close(self) -> None:
        """End this worker: its pipe closes, so it stops once idle; the sandbox goes with the last of its siblings."""
        if self._closed:
            return
        self._closed = True
        closing = [self._in.close] + ([lambda: os.close(self._out)] if self.index else [])  # the first worker's
        for close in closing:  # stdout is the process's, closed when the sandbox ends
            try:
                close()
            except OSError:
                pass
        self._shared.leave()


def _read_capped(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def _tail(path: Path, size: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - size))
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _remove(folder: Path) -> None:
    """Remove what a job left, whatever permissions it set on it."""
    def writable(function, path, _info) -> None:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        function(path)

    shutil.rmtree(folder, onerror=writable) if folder.exists() else None


_IDLE: dict[tuple, list[Worker]] = {}
_ALL: list[Worker] = []
_LOCK = threading.Lock()


#: Why this machine refuses namespaces inside the sandbox, once a worker has found out (None: not refused, or
#: not known yet); from then on every notebook gets a sandbox of its own (:class:`Worker`'s ``single``).
_NESTED_REFUSED: list[str] = []


_STARTING: dict[tuple, list[Worker]] = {}  # started by prestart, not yet asked whether they are ready


def prestart(bundle: Path, limits: Limits, use_sandbox: bool = True, count: int = 1,
             warm_dynamo: bool = True) -> None:
    """Start ``count`` workers for these settings, forked from one start-up, and return at once: they warm up
    (bubblewrap, Python, torch, the checks; ``torch._dynamo`` too unless ``warm_dynamo`` is False) on another core
    while the caller goes on, and the next :func:`worker` calls for the same settings take them. A worker that
    fails to start is started again there, which then says why."""
    try:
        started = Worker(bundle, limits, use_sandbox, wait=False, siblings=max(0, count - 1), warm_dynamo=warm_dynamo)
    except OSError:
        return
    with _LOCK:
        _ALL.extend([started, *started.siblings])
        # popped from the end: the first worker first, whose ready line comes first
        _STARTING.setdefault((str(bundle), limits, use_sandbox), []).extend([*reversed(started.siblings), started])


def _prestarted(bundle: Path, limits: Limits, use_sandbox: bool) -> Worker | None:
    """A worker that :func:`prestart` started for these settings, once ready (or, where it found nested namespaces
    refused, the single-notebook worker :func:`_start` gives instead); None if there is none or it failed."""
    with _LOCK:
        waiting = _STARTING.get((str(bundle), limits, use_sandbox)) or []
        started = waiting.pop() if waiting else None
    if started is None:
        return None
    try:
        started.wait_ready()
    except WorkerFailed:
        return None
    return _start(bundle, limits, use_sandbox, refused=started) if started.nested_refused else started


@contextlib.contextmanager
def worker(bundle: Path, limits: Limits, use_sandbox: bool = True) -> Iterator[Worker]:
    """A warm worker for these settings (an idle one, else one that :func:`prestart` started, else a new one);
    back to the idle ones after, if alive. Where the platform refuses namespaces inside the sandbox, a fresh
    single-notebook worker each time, closed after (the first time, a warning says why and what it costs)."""
    key = (str(bundle), limits, use_sandbox)
    with _LOCK:
        idle = _IDLE.setdefault(key, [])
        chosen = None
        while idle and chosen is None:
            candidate = idle.pop()
            chosen = candidate if candidate.alive else None
    if chosen is None and not _NESTED_REFUSED:
        chosen = _prestarted(bundle, limits, use_sandbox)
    if chosen is None:
        chosen = _start(bundle, limits, use_sandbox)
    try:
        yield chosen
    finally:
        if chosen.single:
            chosen.close()
        elif chosen.alive:
            with _LOCK:
                _IDLE.setdefault(key, []).append(chosen)


def _start(bundle: Path, limits: Limits, use_sandbox: bool, refused: Worker | None = None) -> Worker:
    """A new worker, ready; ``refused``: one already started that found nested namespaces refused."""
    started = refused or Worker(bundle, limits, use_sandbox, single=bool(_NESTED_REFUSED))
    if started.nested_refused:  # found out now: this one cannot isolate its notebooks, nor can its siblings
        started.close()
        with _LOCK:
            first = not _NESTED_REFUSED
            _NESTED_REFUSED.append(started.nested_refused)
            waiting = [each for group in _STARTING.values() for each in group]
            _STARTING.clear()
        for each in waiting:
            each.close()
        started = Worker(bundle, limits, use_sandbox, single=True)
        if first:
            print(f"warning: this machine refuses namespaces inside the grading sandbox "
                  f"({_NESTED_REFUSED[0]}); each notebook gets a bubblewrap sandbox of its own instead, which "
                  f"costs a worker's start-up per notebook (measured here: {started.start_timings['start_s']:.1f} s). "
                  "The isolation is the same but for one thing: a notebook can signal the grading process that "
                  "runs it, only ever stopping its own grading (see the instructor guide, 'What works where')",
                  file=sys.stderr, flush=True)
    with _LOCK:
        _ALL.append(started)
    return started


def nested_refused() -> str | None:
    """Why namespaces inside the sandbox were refused, if a worker of this process found they were."""
    with _LOCK:
        return _NESTED_REFUSED[0] if _NESTED_REFUSED else None


def worker_starts() -> list[dict[str, float]]:
    """The start-up timings of every worker this process started and used (see ``Worker.start_timings``)."""
    with _LOCK:
        return [each.start_timings for each in _ALL if each.start_timings]


@atexit.register
def close_workers() -> None:
    """Stop every worker of this process (at exit; a worker's sandbox also dies with the thread that started it)."""
    with _LOCK:
        workers, _ALL[:] = list(_ALL), []
        _IDLE.clear()
    for each in workers:
        each.close()
