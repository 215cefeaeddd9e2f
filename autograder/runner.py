"""Runs INSIDE the grading sandbox: execute one assembled notebook, cell by cell.

    python -m autograder.runner IN.ipynb OUT.ipynb OBSERVATIONS.jsonl

Every cell runs whatever the previous one did (errors are kept as outputs);
the hidden checks append their observations to OBSERVATIONS.jsonl (see
``autograder.checks.core``). On stdout, one JSON line maps each graded cell's
``grade_id`` to the byte range of the observations written while it ran, so
that a record a learner's own code writes outside a test cell is not taken for
the test's. A kernel that dies or a cell that runs out of time ends the run,
and the line says where. Each test cell's range is also printed as soon as the
cell has run (``AUTOGRADER-CELL``), so that a notebook killed at the wall-clock
limit still keeps the points it earned before. The kernel's own stdout goes to
/dev/null, so nothing a learner prints can be taken for these lines. (Code that
sets out to forge them can, like the observations themselves: the sandbox keeps
such code away from everything else, and the grader flags the patterns it uses.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

MAX_OUTPUT_CHARS = 20_000  # per cell: a flood of output is cut, not stored
PREAMBLE = "import autograder.checks.core as _autograder_checks\ndel _autograder_checks"


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def _trim(cell: nbformat.NotebookNode) -> None:
    for output in cell.get("outputs", []):
        for key in ("text", "traceback"):
            value = output.get(key)
            text = "\n".join(value) if isinstance(value, list) else value
            if isinstance(text, str) and len(text) > MAX_OUTPUT_CHARS:
                output[key] = text[:MAX_OUTPUT_CHARS] + "\n... [output cut by the grader]"
        data = output.get("data", {})
        for mime in list(data):
            if len(str(data[mime])) > MAX_OUTPUT_CHARS:
                data[mime] = "[output cut by the grader]" if mime == "text/plain" else ""


def main(source: str, target: str, observations: str, cell_timeout: int) -> dict:
    nb = nbformat.read(source, as_version=4)
    # "immediate": the kernel is killed, not asked to stop, once the last cell has run (saves ~0.8 s a notebook).
    client = NotebookClient(nb, timeout=cell_timeout, allow_errors=True, kernel_name="python3",
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": os.path.dirname(source) or "."}})
    ranges: dict[str, list[int]] = {}
    summary: dict = {"ranges": ranges, "stopped": None}
    with client.setup_kernel(stdout=subprocess.DEVNULL):
        # Before the notebook's first cell: the checks take the observations path (see checks.core).
        client.execute_cell(nbformat.v4.new_code_cell(PREAMBLE), 0)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            start = _size(observations)
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError:
                summary["stopped"] = {"why": "timeout", "cell": index}
            except DeadKernelError:
                summary["stopped"] = {"why": "crashed", "cell": index}
            finally:
                _trim(cell)
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade"):
                ranges[meta["grade_id"]] = [start, _size(observations)]
                sys.stdout.write("AUTOGRADER-CELL " + json.dumps({meta["grade_id"]: ranges[meta["grade_id"]]}) + "\n")
                sys.stdout.flush()
            if summary["stopped"]:
                break
    nbformat.write(nb, target)
    return summary


if __name__ == "__main__":
    source, target, observations = sys.argv[1:4]
    timeout = int(sys.argv[4]) if len(sys.argv) > 4 else 120
    os.environ["AUTOGRADER_OBSERVATIONS"] = observations
    result = main(source, target, observations, timeout)
    sys.stdout.write("AUTOGRADER-RESULT " + json.dumps(result) + "\n")
