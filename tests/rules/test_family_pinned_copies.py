"""The unpinned non_blocking copy family (``rules/families/pinned_copies.py``), from
hand-written check records."""

from __future__ import annotations

import pytest

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import pinned_copies as pc

(RULE,) = pc.RULES


def test_non_blocking_copies_from_pageable_memory_are_named_by_site() -> None:
    rows = [
        {"site": "/w/t.py:30", "copies": 20, "bytes": 50 * 2**20},
        {"site": "/w/t.py:31", "copies": 5, "bytes": 0},
    ]
    f = fire(RULE, record(syncs={"unpinned_non_blocking": rows}))
    assert f is not None and f.id == "unpinned-non-blocking"
    # 5 copies and 10 MiB per measured step, at PAGEABLE_GBPS
    assert f.title.startswith("5.0 non_blocking copies per step from unpinned memory (10.0 MiB)")
    assert f.saving_ms_per_step == pytest.approx(10 * 2**20 / 8e9 * 1e3, abs=1e-4)  # 1.31 ms
    assert f.where == ["/w/t.py:30", "/w/t.py:31"] and "pin_memory=True" in f.fix


def test_no_such_copy_is_quiet() -> None:
    assert fire(RULE, record(syncs={"unpinned_non_blocking": []})) is None
    assert fire(RULE, record()) is None
