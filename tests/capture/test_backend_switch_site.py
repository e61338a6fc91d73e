"""Where the script switched a kernel backend off: ``torch.backends.mkldnn.enabled = False``
and ``with torch.backends.mkldnn.flags(enabled=False):`` are recorded at the user's line (never
check's own toggles), and the backend-disabled remedy turns it back on at that line; without a
line it says where to look, with no code to paste anywhere."""

from __future__ import annotations

import sys
from typing import Any

import torch

from torchdoctor.capture.modes import ModeWatch
from torchdoctor.capture.toggles import backend_on
from torchdoctor.code_paths import CodePaths
from torchdoctor.rules.run_rules import run_findings

HERE = __file__


def _line() -> int:
    return sys._getframe(1).f_lineno


def test_both_ways_of_switching_onednn_off_are_recorded_at_the_users_line() -> None:
    watch = ModeWatch(CodePaths())
    before = torch.backends.mkldnn.enabled
    watch.install()
    try:
        torch.backends.mkldnn.enabled = False
        assign = _line() - 1
        with torch.backends.mkldnn.flags():  # enabled defaults to False
            ctx = _line() - 1
            assert torch.backends.mkldnn.enabled is False
        toggle = backend_on(torch.backends.mkldnn, "mkldnn")
        toggle.apply()  # check's own switch for the extra steps
        toggle.restore()
        assert torch.backends.mkldnn.enabled is False
    finally:
        watch.uninstall()
        torch.backends.mkldnn.enabled = before
    calls = [c for c in watch.calls if c["call"].startswith("mkldnn.")]
    assert calls == [
        {"call": "mkldnn.enabled", "value": False, "site": f"{HERE}:{assign}"},
        {"call": "mkldnn.flags", "value": False, "site": f"{HERE}:{ctx}"},
    ]
    assert type(torch.backends.mkldnn).__dict__["enabled"].__class__.__name__ == "ContextProp"


def record(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "steps": {"mean_step_ms": 100.0, "median_step_ms": 100.0, "measured_steps": 5,
                  "count": 10},
        "modes": {"mkldnn_enabled": False, "mkldnn_available": True, "setter_calls": calls},
    }  # fmt: skip


def test_the_remedy_turns_it_back_on_at_the_line_that_switched_it_off() -> None:
    rec = record([{"call": "mkldnn.flags", "value": False, "site": "t.py:7"}])
    (b,) = [f for f in run_findings(rec) if f.id == "backend-disabled"]
    assert b.where == ["t.py:7"]
    assert b.fix.splitlines()[0].startswith("torch.backends.mkldnn.enabled = True  # at t.py:7")
    assert "or drop the `with torch.backends.mkldnn.flags(...)`" in b.fix
    on = record([{"call": "mkldnn.enabled", "value": True, "site": "t.py:3"}])
    (c,) = [f for f in run_findings(on) if f.id == "backend-disabled"]
    assert c.where == []  # switching it on is not where it was switched off
    code = [ln for ln in c.fix.splitlines() if not ln.lstrip().startswith("#")]
    assert code == [] and "flags(enabled=False)" in c.fix
