"""Run the book's narrative notebooks that its execution cache lacks, several at once, into the cache that
``jupyter-book build`` reads.

The book executes its narratives in cache mode (``execute_notebooks: cache`` in ``_config.yml``): a notebook
whose code cells match a cached run is not run again. ``jupyter-book build`` runs the others one after another,
so a fresh build of nine chapters takes as long as all nine together, one core working while the others wait.
This runs them first, ``--jobs`` at a time, the slowest first (``ESTIMATES``), the way myst-nb would (in the
notebook's folder, the book's timeout per cell, no errors allowed), and caches each one that succeeds as myst-nb
caches it; the build then takes them from the cache. A notebook that fails is left out of the cache and named
here: the build runs it again and fails with the usual report.

    python -m autograder.narratives [--path-output DIR] [--jobs N]

``make book`` runs it before ``jupyter-book build``; the tests' build of the book does too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from fnmatch import fnmatch
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent

#: Seconds each narrative took to execute, alone on 2 cores (a fresh `make book`, stop 36): the order to start them
#: in when the cache has no run of them yet. A figure that goes stale costs time, never a result.
ESTIMATES = {"book/01_self_attention.ipynb": 10, "book/02_causal_masking.ipynb": 18,
             "book/03_cross_attention.ipynb": 28, "book/04_multi_head.ipynb": 17,
             "book/05_positional_encoding.ipynb": 53, "book/06_transformer.ipynb": 374, "book/07_gpt.ipynb": 57,
             "book/08_trained_attention.ipynb": 84, "book/09_flash_attention.ipynb": 27}


def toc_pages(root: Path = ROOT) -> list[str]:
    """Every page of ``root``'s ``_toc.yml``, root first, in the book's order, as paths without suffix
    (``book/intro``)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries: list) -> None:
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            for key in ("sections", "chapters", "parts"):
                walk(entry.get(key, []))

    walk(toc.get("parts", []))
    walk(toc.get("chapters", []))
    return pages


def book_settings(root: Path = ROOT) -> tuple[list[Path], dict]:
    """The notebooks of ``_toc.yml`` that the book executes, and the ``execute`` section of ``_config.yml``."""
    execute = yaml.safe_load((root / "_config.yml").read_text()).get("execute", {})
    skipped = execute.get("exclude_patterns", [])
    notebooks = [root / f"{name}.ipynb" for name in toc_pages(root) if (root / f"{name}.ipynb").exists()
                 and not any(fnmatch(f"{name}.ipynb", pattern) for pattern in skipped)]
    return notebooks, execute


def _run(path: str, name: str, timeout: int | None, allow_errors: bool,
         threads: int) -> tuple[str, object, float, str | None]:
    """Execute one notebook as myst-nb does; in a worker process of its own."""
    from jupyter_cache.executors.utils import single_nb_execution

    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # the kernel inherits it: jobs do not fight for cores
    print(f"{name}: started", flush=True)
    nb = nbformat.read(path, 4)
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout, allow_errors=allow_errors,
                                 meta_override=True)
    return path, nb, result.time, (result.exc_string or repr(result.err)) if result.err else None


def fill_cache(build: Path, jobs: int, root: Path = ROOT, say=print) -> dict[str, str]:
    """Execute the narratives that ``build/.jupyter_cache`` lacks, ``jobs`` at a time, and cache those that succeed.
    Returns {notebook: error} of those that failed."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    notebooks, execute = book_settings(root)
    if execute.get("execute_notebooks") != "cache":
        say(f"the book executes its notebooks with execute_notebooks: {execute.get('execute_notebooks')}, "
            "not cache: nothing to do")
        return {}
    cache = get_cache(str(build / ".jupyter_cache"))
    todo = {}  # path -> its notebook, not in the cache
    for path in notebooks:
        nb = nbformat.read(path, 4)
        try:
            cache.match_cache_notebook(nb)
        except KeyError:
            todo[path] = nb
    if not todo:
        say("every narrative is in the cache")
        return {}
    before = {Path(r.uri): r.data.get("execution_seconds", 0) for r in cache.list_cache_records()}
    # the slowest first (as long as a previous run took, else ESTIMATES, else by the size of its code), so that no
    # job is left with a long one at the end
    order = sorted(todo, key=lambda p: (before.get(p) or ESTIMATES.get(p.relative_to(root).as_posix(), 0),
                                        sum(len(c.source) for c in todo[p].cells if c.cell_type == "code")),
                   reverse=True)
    jobs = max(1, min(jobs, len(todo)))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    say(f"executing {len(todo)} narrative(s), {jobs} at a time, {threads} thread(s) each: "
        + ", ".join(p.relative_to(root).as_posix() for p in order), flush=True)
    failed = {}
    started = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        runs = [pool.submit(_run, str(p), p.relative_to(root).as_posix(), execute.get("timeout"),
                            bool(execute.get("allow_errors", False)), threads) for p in order]
        for run in as_completed(runs):
            path, nb, seconds, error = run.result()
            name = Path(path).relative_to(root).as_posix()
            if error:
                failed[name] = error
                say(f"{name}: failed after {seconds:.0f} s; the build runs it again and reports the error", flush=True)
                continue
            cache.add_nb_to_project(path)
            cache.cache_notebook_bundle(CacheBundleIn(nb, path, data={"execution_seconds": seconds}),
                                        check_validity=False, overwrite=True)
            say(f"{name}: {seconds:.0f} s, cached", flush=True)
    say(f"the narratives took {time.perf_counter() - started:.0f} s of wall-clock time")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.narratives", description=__doc__.split("\n\n")[0])
    parser.add_argument("--path-output", type=Path, default=ROOT,
                        help="the folder jupyter-book builds into (its _build/.jupyter_cache is the cache); "
                             "default: the course's own")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="notebooks run at once (default: the number of cores)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    fill_cache(args.path_output / "_build", args.jobs)
    return 0  # a failed notebook is the build's to report


if __name__ == "__main__":
    sys.exit(main())
