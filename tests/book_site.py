"""The built book as the tests see it: one `jupyter-book build --all -W` per session, the pages of `_toc.yml`,
and a local web server for the browser test."""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from autograder.release import REPO_ROOT, nbgrader_env

#: The most seconds the whole book's build may take in the suite (about 9 minutes on two quiet cores).
BUILD_TIMEOUT = 1800

#: What Sphinx and myst-nb print as they go: the page being read, and a notebook starting to execute.
_READING = re.compile(r"reading sources\.\.\. \[\s*\d+%\] (\S+)")
_EXECUTING = re.compile(r"(\S+\.ipynb)(?::\d+)?: [^\n]*Executing notebook")


def last_page(log: str) -> str | None:
    """The page a book build was on when its log stops: the last notebook it started executing, or the last page it
    read (None if it had read none)."""
    found = [(m.start(), m.group(1)) for pattern in (_READING, _EXECUTING) for m in pattern.finditer(log)]
    return max(found)[1] if found else None


def build_book(out: Path, timeout: int = BUILD_TIMEOUT) -> Path:
    """Build the whole book from scratch into ``out`` with warnings as errors; return the HTML folder. A build that
    runs past ``timeout`` seconds fails naming the page it was on, with the end of its log."""
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    with tempfile.TemporaryFile(mode="w+") as sink:
        process = subprocess.Popen([str(jupyter_book), "build", str(REPO_ROOT), "--all", "-W", "--path-output",
                                    str(out)], env=nbgrader_env(), stdout=sink, stderr=subprocess.STDOUT, text=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            sink.seek(0)
            log = sink.read()
            raise AssertionError(f"the book's build ran past {timeout} s while on {last_page(log) or 'no page yet'}; "
                                 f"the end of its log:\n{log[-3000:]}") from None
        sink.seek(0)
        log = sink.read()
    assert process.returncode == 0 and "build succeeded" in log, log[-6000:]
    return out / "_build" / "html"


def toc_files() -> list[str]:
    """Every page of `_toc.yml`, root first, as paths without suffix (``book/intro``)."""
    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    for part in toc.get("parts", []):
        walk(part["chapters"])
    return files


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
