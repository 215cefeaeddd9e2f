"""A learner's machine, simulated: a fresh virtual environment that has the course's third-party packages
(torch, NumPy, Matplotlib, pip, setuptools) but none of this repository's own packages.

The fresh environment reaches the course venv's site-packages through a plain path line in a ``.pth`` file.
Python does not process the ``.pth`` files of a directory added that way, so the repository's editable installs
(``solutions``, ``autograder``, ``attention_course``, whose finders live in such files) stay out of reach: what
the learner's kernel can import is exactly what the bundle, or Binder's set-up, gives it.
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
import venv
from pathlib import Path

#: Runs in the learner's environment: execute a notebook's code cells in order, in the notebook's folder, as a
#: kernel would; print a JSON line {"ran": N, "failed": null | {"cell": i, "error": "..."}}.
RUN_CELLS = r"""
import contextlib, io, json, sys, traceback
cells = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
ran, failed = 0, None
for index, source in cells:
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, f"<cell {index}>", "exec"), namespace)
        ran += 1
    except BaseException as err:
        failed = {"cell": index, "error": "".join(traceback.format_exception_only(type(err), err)).strip()}
        break
print(json.dumps({"ran": ran, "failed": failed}))
"""


def fresh_env(root: Path) -> Path:
    """A new venv at ``root`` with the course's third-party packages and none of the repository's; its python."""
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "course-third-party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run_python(python: Path, code: str, *args: str, cwd: Path, env: dict | None = None,
               timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -c code args`` in the learner's environment, isolated from this process's PYTHONPATH."""
    return subprocess.run([str(python), "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "MPLBACKEND": "Agg",
                                                "OMP_NUM_THREADS": "1", **(env or {})})


def run_cells(python: Path, cells: list[tuple[int, str]], cwd: Path, scratch: Path) -> dict:
    """Execute ``cells`` ([(index, source)]) in order in the learner's environment; {"ran", "failed"}."""
    listing = scratch / "cells.json"
    listing.write_text(json.dumps(cells))
    run = run_python(python, RUN_CELLS, str(listing), cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])

