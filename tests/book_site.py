"""The built book as the tests see it: one `jupyter-book build --all -W` per session, the pages of `_toc.yml`,
and a local web server for the browser test."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from autograder.release import REPO_ROOT, nbgrader_env


def build_book(out: Path) -> Path:
    """Build the whole book from scratch into ``out`` with warnings as errors; return the HTML folder."""
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    run = subprocess.run([str(jupyter_book), "build", str(REPO_ROOT), "--all", "-W", "--path-output", str(out)],
                         env=nbgrader_env(), capture_output=True, text=True, timeout=1800)
    log = run.stdout + run.stderr
    assert run.returncode == 0 and "build succeeded" in log, log[-6000:]
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
