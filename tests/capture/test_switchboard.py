"""The switchboard: one plan of which instrument is armed in which window, kept by a real run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from torchdoctor.capture import guest
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import RankInfo
from torchdoctor.capture.session import Session
from torchdoctor.capture.switchboard import PLAN, WINDOWS, Instrument, Switchboard

REPO = Path(__file__).resolve().parents[2]
# Instruments that bend the numbers of the ones they would share a window with.
BENDS = {
    "profiler": {"kernel profiler", "step events", "sync-debug mode"},
    "line sampler": {"kernel profiler", "step events", "sync-debug mode"},
    "sync-debug mode": {"step events", "kernel profiler"},
    "toggles": {"step events", "profiler", "kernel profiler"},
}


def test_the_plan_never_stacks_an_instrument_on_one_it_bends() -> None:
    for window in PLAN:
        here = set(window.instruments)
        # "measured" runs inside "profiled": the two share their steps
        if window.name == "measured":
            here |= set(WINDOWS["profiled"].instruments)
        for inst, bent in BENDS.items():
            if inst in here:
                assert not (here & bent), (window.name, inst, here & bent)
    # every timed window is timed by step events and by nothing that records operators
    for window in PLAN:
        assert window.timed == ("step events" in window.instruments), window.name
    names = [i for w in PLAN for i in w.instruments if i != "step events"]
    assert len(names) == len(set(names)), "an instrument in two windows"


def test_the_docs_list_the_plan() -> None:
    text = (REPO / "docs" / "check.md").read_text()
    for w in PLAN:
        row = re.search(rf"^\| `{re.escape(w.name)}` \| (.*?) \| (.*?) \|$", text, re.M)
        assert row is not None, f"docs/check.md has no row for the {w.name} window"
        assert row.group(1) == w.steps + (" (GPU only)" if w.gpu_only else ""), w.name
        assert row.group(2) == ", ".join(w.instruments), w.name


class Probe:
    def __init__(self, name: str, log: list[str], fail: str | None = None) -> None:
        self.name, self.log, self.fail = name, log, fail

    def instrument(self, gpu: bool = False) -> Instrument:
        return Instrument(self.name, self.arm, self.disarm, self.abort, gpu=gpu)

    def arm(self, window: str) -> None:
        if self.fail == "arm":
            raise RuntimeError("no")
        self.log.append(f"arm {self.name}")

    def disarm(self, window: str) -> None:
        if self.fail == "disarm":
            raise RuntimeError("no")
        self.log.append(f"disarm {self.name}")

    def abort(self, window: str) -> None:
        self.log.append(f"abort {self.name}")


def _board(cuda: bool, fail: dict[str, str] | None = None) -> tuple[Switchboard, list[str]]:
    log: list[str] = []
    board = Switchboard(lambda: cuda)
    for name in ("profiler", "NVML sampler", "memory history", "kernel profiler", "step events"):
        gpu = name in ("NVML sampler", "memory history", "kernel profiler")
        board.add(Probe(name, log, (fail or {}).get(name)).instrument(gpu))
    return board, log


def test_a_window_arms_its_instruments_in_order_and_disarms_them_in_reverse() -> None:
    board, log = _board(cuda=True)
    assert board.enter("profiled", 11) == ["profiler", "NVML sampler", "memory history"]
    board.leave("profiled", 14)
    assert log == [
        "arm profiler",
        "arm NVML sampler",
        "arm memory history",
        "disarm memory history",
        "disarm NVML sampler",
        "disarm profiler",
    ]
    (entry,) = board.record()
    assert entry == {
        "window": "profiled",
        "after_step": 11,
        "last_step": 14,
        "armed": ["profiler", "NVML sampler", "memory history"],
    }


def test_gpu_instruments_and_windows_stay_off_on_a_cpu() -> None:
    board, log = _board(cuda=False)
    assert board.enter("profiled", 1) == ["profiler"]
    board.leave("profiled", 2)
    assert board.enter("kernels", 2) == []  # a GPU-only window arms nothing on a CPU
    assert log == ["arm profiler", "disarm profiler"]


def test_a_failing_instrument_is_a_note_and_the_others_go_on() -> None:
    guest.reset()
    board, log = _board(cuda=True, fail={"NVML sampler": "arm", "profiler": "disarm"})
    assert board.enter("profiled", 1) == ["profiler", "memory history"]
    board.leave("profiled", 3)
    assert "disarm memory history" in log and board.armed == []
    notes = " ".join(str(n) for n in guest.notes())
    assert "NVML sampler" in notes and "profiler" in notes
    assert board.record()[0]["failed"] == ["NVML sampler"]


def test_abort_discards_and_close_all_keeps() -> None:
    board, log = _board(cuda=True)
    board.enter("profiled", 1)
    board.enter("kernels", 2)
    board.abort(3, "kernels")
    assert log[-2:] == ["abort step events", "abort kernel profiler"]
    board.close_all(4)
    assert log[-1] == "disarm profiler" and board.armed == []
    assert [e.get("aborted", False) for e in board.record()] == [False, True]


def test_an_instrument_outside_the_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="no window"):
        Switchboard(lambda: False).add(Instrument("stethoscope", print, print))


def _train(steps: int) -> None:
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        model(torch.ones(4, 8)).sum().backward()
        opt.step()


def test_a_cpu_run_arms_each_instrument_only_in_its_window(tmp_path: Path) -> None:
    opts = CheckOptions(warmup_steps=3, clean_steps=4, profile_steps=2, full=True)
    session = Session(opts, tmp_path, RankInfo())
    session.install()
    try:
        _train(20)
    finally:
        session.uninstall()
    rec: dict[str, Any] = session.record(
        {"status": "completed", "code": 0, "exception": None}, "t.py", []
    )
    sched = rec["steps"]["schedule"]
    got = [
        (w["window"], w["after_step"], w.get("last_step"), w["armed"]) for w in sched["instruments"]
    ]
    # warm-up 1-3 (step 3 counted), clean 4-7, the profiler's own step 8, measured 9-10,
    # after 11-14; no kernel or sync-debug window without a GPU
    assert got == [
        ("probe", 2, 3, ["work count", "forward watch"]),
        ("clean", 3, 7, ["step events"]),
        ("profiled", 7, 10, ["profiler"]),
        ("measured", 8, 10, ["line sampler", "sync and copy counters", "CPU usage"]),
        ("after", 10, 14, ["step events"]),
    ]
    assert sched["kernels"] is None and sched["sync_debug"] is None
    assert rec["steps"]["clean"]["steps"] == 4 and rec["steps"]["after"]["steps"] == 4
