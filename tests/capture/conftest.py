"""Fixtures for the ``check`` tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_intra_op_thread() -> Iterator[None]:
    """Run watched scripts with one intra-op thread: on a small shared machine, OpenMP threads
    spinning against other processes make step times swing tenfold; the verdicts compare
    shares of a step, which one thread keeps stable. Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
