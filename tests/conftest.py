"""Test-session settings.

One thread for torch, here and in every kernel the tests start: the tensors in the tests are tiny, and on
a small machine a second thread only adds contention (measured 4-6x slower per training step on 2 cores).
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
