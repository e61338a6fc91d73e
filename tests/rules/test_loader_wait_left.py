"""The DataLoader fix on few CPUs (``rules/user_fixes.py``): workers share the CPUs the
training process leaves, so a fix that adds them also says how long the step will still wait
for each batch when they cannot keep up (the held-out ``augmenting_dataset.py``: 2 workers on 2
CPUs, 0.209 ms per item, batches of 32, 4.8 ms of compute)."""

from __future__ import annotations

import pytest

from torchdoctor.record.run import LoaderConfig
from torchdoctor.rules.user_fixes import dataloader_user_fix, wait_left


def _raw(cpus: int) -> dict:
    return {
        "batch_size": 32,
        "num_workers": 0,
        "cpus_per_rank": cpus,
        "call": {
            "func": "DataLoader",
            "args": ["JitterDataset(2048)"],
            "kwargs": {"batch_size": "32", "shuffle": "True"},
            "site": "/w/augmenting_dataset.py:35",
        },
    }


def _loader(cpus: int) -> LoaderConfig:
    return LoaderConfig.from_dict(_raw(cpus))


def test_two_workers_on_two_cpus_still_leave_a_wait_and_the_fix_says_so() -> None:
    per_batch, still = wait_left(_loader(2), 2, step_ms=11.5, wait_ms=6.7, item_ms=0.209)
    assert per_batch == pytest.approx(0.209 * 32)  # one CPU left: one batch at a time
    assert still == pytest.approx(0.209 * 32 - 4.8)
    fix = dataloader_user_fix(_loader(2), 2, False, 11.5, 6.7, 0.209)
    call, note = fix.splitlines()
    assert call.startswith(
        "DataLoader(JitterDataset(2048), batch_size=32, shuffle=True, num_workers=2"
    )
    assert note.startswith("# the training process keeps one of the 2 CPUs: 2 worker(s) make a ")
    assert "batch about every 6.7 ms against 4.8 ms of compute" in note
    assert "still wait about 1.9 ms" in note


def test_workers_that_keep_up_get_no_such_line() -> None:
    # eight CPUs: two workers in parallel make a batch every 3.3 ms, under 4.8 ms of compute
    assert wait_left(_loader(8), 2, step_ms=11.5, wait_ms=6.7, item_ms=0.209) is None
    assert len(dataloader_user_fix(_loader(8), 2, False, 11.5, 6.7, 0.209).splitlines()) == 1
    assert (
        wait_left(LoaderConfig.from_dict({**_raw(2), "batch_size": None}), 2, 11.5, 6.7, 0.209)
        is None
    )
