"""host-syncs-in-step when only CUDA's sync-debug mode saw the syncs (GradScaler's found_inf
read inside torch, which the tensor-method wrappers skip): the title counts them per step of the
profiled window, never "0.0 host syncs per step"."""

from __future__ import annotations

from tests.capture.test_check_rules import record
from torchdoctor.rules.run_rules import run_findings


def test_sync_debug_sites_alone_are_counted_per_window_step() -> None:
    debug = [{"site": "train.py:30", "count": 20}, {"site": "train.py:34", "count": 10}]
    rec = record(
        steps={"window": [4, 13], "measured_steps": 10},  # a 10-step profiled window
        syncs={"sync_debug": debug},
        gpu={"memory": {}},
    )
    (f,) = [f for f in run_findings(rec) if f.id == "host-syncs-in-step"]
    assert f.title.startswith("3.0 host syncs per step (found by CUDA sync-debug mode)")
    assert f.evidence["sync_debug_per_step"] == 3.0 and f.evidence["syncs_per_step"] == 3.0
    assert f.where == ["train.py:30", "train.py:34"]


def test_wrapper_counts_win_when_they_are_larger() -> None:
    row = {"kind": "item", "device": "cuda", "site": "t.py:9", "calls": 40, "seconds": 0.02}
    rec = record(
        steps={"window": [6, 10]},
        syncs={"host_syncs": [row], "sync_debug": [{"site": "t.py:9", "count": 5}]},
    )
    (f,) = [f for f in run_findings(rec) if f.id == "host-syncs-in-step"]
    assert f.title.startswith("4.0 host syncs per step (item)")  # 40 calls / 10 measured steps
