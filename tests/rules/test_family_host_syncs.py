"""The host syncs family (``rules/families/host_syncs.py``): lines of the loop that read a device
value every step, and what CUDA's sync-debug mode saw, from hand-written check records."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import host_syncs as hs

(SYNCS,) = hs.RULES


def sync(site: str, calls: int, seconds: float, device: str = "cuda") -> dict[str, Any]:
    return {"kind": "item", "device": device, "site": site, "calls": calls, "seconds": seconds}


def test_a_site_every_step_costs_the_time_blocked_in_it() -> None:
    # 5 measured steps: t.py:9 every step (blocked 4 ms a step), t.py:30 once (not the loop's)
    rows = [sync("t.py:9", 5, 0.02), sync("t.py:30", 1, 0.5)]
    f = fire(SYNCS, record(syncs={"host_syncs": rows}))
    assert f is not None and f.id == "host-syncs-in-step"
    assert f.title == "1.0 host syncs per step (item)"
    assert f.saving_ms_per_step == pytest.approx(4.0) and f.severity == "info"  # 4% of 100 ms
    assert f.where == ["t.py:9"] and f.evidence["sites"] == rows[:1]


def test_syncs_on_cpu_tensors_are_info_and_rare_ones_are_quiet() -> None:
    f = fire(SYNCS, record(syncs={"host_syncs": [sync("t.py:9", 50, 2.0, "cpu")]}))
    assert f is not None and f.severity == "info"  # 400 ms of a 100 ms step, but on the CPU
    assert f.title.endswith("(CPU tensors here: free now, a full sync on a GPU)")
    # two calls in five steps: under SYNC_PER_STEP (every other step)
    assert fire(SYNCS, record(syncs={"host_syncs": [sync("t.py:9", 2, 0.5)]})) is None
    assert fire(SYNCS, record()) is None


def test_sync_debug_mode_alone_fires_counted_over_its_own_window() -> None:
    debug = [{"site": "amp.py:7", "count": 8}]
    f = fire(SYNCS, record(syncs={"sync_debug": debug, "sync_debug_steps": 4}))
    assert f is not None and f.severity == "info"  # nothing timed: no saving
    assert f.title == "2.0 host syncs per step (found by CUDA sync-debug mode)"
    assert f.where == ["amp.py:7"] and f.evidence["sync_debug_per_step"] == 2.0
