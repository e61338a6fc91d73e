"""Fixtures for the framework integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_intra_op_thread() -> Iterator[None]:
    """One intra-op thread, as in the check tests: on a small shared machine two threads
    against other jobs make every operator wait (check rightly reports that, as
    cpu-oversubscribed); these tests are about the frameworks' findings. Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
