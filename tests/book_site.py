"""The built book as the tests see it: one `jupyter-book build --all -W` per session, the pages of `_toc.yml`,
and a local web server for the browser test."""

from __future__ import annotations

import functools
import http.server
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autograder.narratives import toc_pages
from autograder.release import REPO_ROOT, nbgrader_env

#: The most seconds the whole book's build may take in the suite, its narratives' execution included.
BUILD_TIMEOUT = 1800

#: Narratives executed at once before the build (``python -m autograder.narratives``), as ``make book`` does on
#: two cores.
JOBS = 2

#: What Sphinx and myst-nb print as they go: the page being read, and a notebook starting to execute.
_READING = re.compile(r"reading sources\.\.\. \[\s*\d+%\] (\S+)")
_EXECUTING = re.compile(r"(\S+\.ipynb)(?::\d+)?: [^\n]*Executing notebook")
#: What ``autograder.narratives`` prints as a notebook starts and as it ends.
_STARTED = re.compile(r"^(\S+\.ipynb): started$", re.M)
_ENDED = re.compile(r"^(\S+\.ipynb): (?:failed after|\d+ s, cached)", re.M)


def last_page(log: str) -> str | None:
    """The page a book build was on when its log stops: the last notebook it started executing, or the last page it
    read (None if it had read none)."""
    found = [(m.start(), m.group(1)) for pattern in (_READING, _EXECUTING) for m in pattern.finditer(log)]
    return max(found)[1] if found else None


def running(log: str) -> list[str]:
    """The narratives that ``autograder.narratives`` had started and not finished when its log stops."""
    ended = set(_ENDED.findall(log))
    return [name for name in _STARTED.findall(log) if name not in ended]


def _run(command: list[str], deadline: float, timeout: int, where) -> tuple[int, str]:
    """Run ``command``, its output in a file; past ``deadline`` fail naming ``where(log)``, with the log's end."""
    with tempfile.TemporaryFile(mode="w+") as sink:
        process = subprocess.Popen(command, env=nbgrader_env(), stdout=sink, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)  # a group of its own: its kernels and workers too
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            sink.seek(0)
            log = sink.read()
            raise AssertionError(f"the book's build ran past {timeout} s while {where(log)}; the end of its "
                                 f"log:\n{log[-3000:]}") from None
        sink.seek(0)
        return process.returncode, sink.read()


def build_book(out: Path, timeout: int = BUILD_TIMEOUT, jobs: int = JOBS) -> Path:
    """Build the whole book from scratch into ``out`` with warnings as errors, as ``make book`` does: the narratives
    first, ``jobs`` at a time, into the build's cache, then ``jupyter-book build --all -W``, which must find every
    one of them there. Return the HTML folder. A build that runs past ``timeout`` seconds fails naming the
    notebooks or the page it was on, with the end of its log."""
    deadline = time.monotonic() + timeout
    command = [sys.executable, "-m", "autograder.narratives", "--path-output", str(out), "--jobs", str(jobs)]
    code, narratives = _run(command, deadline, timeout,
                            lambda log: f"executing {', '.join(running(log)) or 'no narrative yet'}")
    assert code == 0, narratives[-6000:]
    failed = set(re.findall(r"^(\S+\.ipynb): failed after", narratives, re.M))
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    code, log = _run([str(jupyter_book), "build", str(REPO_ROOT), "--all", "-W", "--path-output", str(out)], deadline,
                     timeout, lambda log: f"on {last_page(log) or 'no page yet'}")
    assert code == 0 and "build succeeded" in log, log[-6000:]
    executed = {Path(name).resolve() for name in _EXECUTING.findall(log)}
    again = {path.relative_to(REPO_ROOT).as_posix() for path in executed} - failed
    assert not again, (f"the build executed {sorted(again)} again: the cache `python -m autograder.narratives` "
                       f"wrote does not match what myst-nb looks for\n{narratives[-2000:]}")
    return out / "_build" / "html"


def toc_files() -> list[str]:
    """Every page of `_toc.yml`, root first, as paths without suffix (``book/intro``)."""
    return toc_pages(REPO_ROOT)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the tests report what matters themselves
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on a free localhost port; yields the base URL (ending in /)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
