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
# Chapter 9's Triton kernels run in Triton's interpreter, on the CPU tensors of the tests: Triton reads this when it
# is first imported, and some of torch's own modules import it (attention_course.flash sets it too, if it comes
# first).
os.environ.setdefault("TRITON_INTERPRET", "1")

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


#: Seconds each long group of tests took in a whole run on two workers (2 cores, ``--durations=0``, summed per
#: group; measured at 0dc9bff while other work shared the cores, so each figure is high, by about the same share):
#: the groups are handed out longest first (``--no-loadscope-reorder`` keeps this order), so that the book's build
#: and audit, one worker's work for about 20 minutes, does not start last. Left to pytest-xdist, groups go out by
#: their number of tests, and the book's build began 20 minutes into that run (the whole run took about as long
#: either way: the two cores are busy throughout). Groups not listed follow, in the order of collection; a figure
#: that goes stale costs time, never a test.
GROUP_SECONDS = {
    "book": 1408, "test_assignments.py": 432, "catalogue-09_flash_attention": 320, "test_grading.py": 303,
    "test_helper_package.py": 230, "test_scaffold.py": 225, "catalogue-06_transformer": 216,
    "catalogue-07_gpt": 171, "catalogue-04_multi_head": 157, "learner-bundle": 146, "test_batch.py": 139,
    "test_parity.py": 119, "catalogue-02_causal_masking": 100, "test_workers.py": 94,
    "catalogue-01_self_attention": 77, "test_install_places.py": 77, "catalogue-05_positional_encoding": 73,
    "catalogue-03_cross_attention": 64, "catalogue-08_trained_attention": 58, "test_reference_gpt.py": 37,
    "test_training.py": 34, "test_probe_fuzz.py": 28,
    "test_jupyterlab.py": 160,  # added at e706a7e (the term's commands), estimated from its runs alone
}


def _group(item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return (marker.args[0] if marker.args else marker.kwargs.get("name", "")) if marker else ""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    """Put each test in a pytest-xdist group (used by ``--dist loadgroup``): a file's tests stay together
    (module fixtures are built once; nbval's cells share one kernel), the files that use the built book share
    one group, and the catalogue is grouped per chapter, so that two chapters' classes grade at once. Then the
    longest groups first (``GROUP_SECONDS``), each group's tests in their own order."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        group = "book" if item.path.name in BOOK_FILES else item.path.name
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.path.name == "test_catalogue.py" and params:
            chapter = params.get("assignment") or params["case"][0]
            group = f"catalogue-{chapter}"
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: -GROUP_SECONDS.get(_group(item), 0))  # stable: a group's own order is kept
