"""Test-session settings.

One thread for torch, here and in every kernel the tests start: the tensors in the tests are tiny, and on
a small machine a second thread only adds contention (measured 4-6x slower per training step on 2 cores).

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``): most of it waits on
one serial process or another (a kernel, a book build, nbgrader), so two keep both cores busy. Tests that
share an expensive fixture or a kernel run on the same worker (see ``pytest_collection_modifyitems``).
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def built_html(tmp_path_factory):
    """`jupyter-book build --all -W` of the whole book into a fresh directory (narratives executed), once."""
    from book_site import build_book

    return build_book(tmp_path_factory.mktemp("book"))


#: Test files that use the built book: one worker builds it once for all of them.
BOOK_FILES = {"test_book.py", "test_browser.py", "test_release.py"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    """Put each test in a pytest-xdist group (used by ``--dist loadgroup``): a file's tests stay together
    (module fixtures are built once; nbval's cells share one kernel), the files that use the built book share
    one group, and the catalogue is grouped per chapter, so that two chapters' classes grade at once."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        group = "book" if item.path.name in BOOK_FILES else item.path.name
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.path.name == "test_catalogue.py" and params:
            chapter = params.get("assignment") or params["case"][0]
            group = f"catalogue-{chapter}"
        item.add_marker(pytest.mark.xdist_group(group))
