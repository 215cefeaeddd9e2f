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

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLE_MOUNT, WORK_MOUNT = "/bundle", "/submission"


@dataclass(frozen=True)
class Limits:
    wall_seconds: int = 600  # the whole notebook, killed (SIGKILL) past this
    cell_seconds: int = 120  # one cell, interrupted past this
    memory_bytes: int = 6 << 30  # address space of every process in the sandbox
    processes: int = 512  # processes and threads
    file_bytes: int = 64 << 20  # largest file it may write
    workspace_bytes: int = 256 << 20  # its /tmp
    output_bytes: int = 8 << 20  # what is read back of its stdout and stderr


def build_bundle(destination: Path) -> Path:
    """Copy what the sandbox may see into ``destination``: the helper package, the runner and the sandbox
    side of the checks (cases and probes). Neither the reference (``solutions``) nor the judges go in."""
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO_ROOT / "attention_course", destination / "attention_course",
                    ignore=shutil.ignore_patterns("__pycache__"))
    package = destination / "autograder"
    (package / "checks").mkdir(parents=True)
    for name in ("__init__.py", "runner.py"):
        shutil.copy(REPO_ROOT / "autograder" / name, package / name)
    for module in (REPO_ROOT / "autograder" / "checks").glob("*.py"):
        shutil.copy(module, package / "checks" / module.name)
    from autograder.checks.core import index  # which module holds which probe: a kernel loads only its chapter

    (package / "checks" / "index.json").write_text(json.dumps(index(), indent=0))
    # jsonschema (imported through nbformat) builds an IRI grammar at import when rfc3987_syntax is
    # installed: ~1 s per notebook for a check the runner never makes. In the bundle the import fails instead.
    (destination / "rfc3987_syntax.py").write_text(
        'raise ImportError("rfc3987_syntax is left out of the grading sandbox (slow import, not needed)")\n')
    return destination


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


def command(argv: list[str], bundle: Path, workspace: Path, limits: Limits) -> list[str]:
    """The bwrap command line that runs ``argv`` inside the sandbox."""
    return [
        "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        # the private /tmp first: bwrap mounts in order, and the venv may itself live under /tmp
        "--size", str(limits.workspace_bytes), "--tmpfs", "/tmp",
        *_system_binds(),
        "--ro-bind", str(bundle), BUNDLE_MOUNT,
        "--bind", str(workspace), WORK_MOUNT,
        "--proc", "/proc", "--dev", "/dev",
        "--chdir", WORK_MOUNT,
        "--clearenv",
        "--setenv", "PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "--setenv", "HOME", WORK_MOUNT,
        "--setenv", "PYTHONPATH", BUNDLE_MOUNT,
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", "JUPYTER_RUNTIME_DIR", "/tmp/jupyter",
        "--setenv", "MPLBACKEND", "Agg",
        "--setenv", "OMP_NUM_THREADS", "1",
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
        bundle, workspace = build_bundle(Path(tmp) / "bundle"), Path(tmp) / "work"
        workspace.mkdir()
        probe = [sys.executable, "-c", "import os; print(os.getpid())"]
        result = run(probe, bundle, workspace, Limits(wall_seconds=60))
    if result.returncode != 0:
        return f"bubblewrap cannot create a sandbox here ({result.stderr.strip()[:300] or 'no reason given'})"
    if result.stdout.strip() != "2":  # bwrap is pid 1 of the new pid namespace, the command pid 2
        return f"the sandbox did not get its own process namespace (pid {result.stdout.strip()})"
    return None
