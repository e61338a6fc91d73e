"""The accounting watchers hand their ``run.json`` sections over as the record's own rows
(``Modes``, ``Repeat``, ``Forwards``), and ``recorded`` writes them with the keys, in the order,
that ``modes``, ``repeats`` and ``forwards`` have always had in the record."""

from __future__ import annotations

import sys

import torch
from torch import nn

from torchdoctor.capture.forward_watch import ForwardWatch
from torchdoctor.capture.modes import ModeWatch
from torchdoctor.capture.repeats import RepeatWatch
from torchdoctor.code_paths import CodePaths
from torchdoctor.record.account import Forwards, ForwardSite, Modes, Repeat, SetterCall
from torchdoctor.record.run import RunRecord
from torchdoctor.record.typed import recorded

HERE = __file__
MODE_KEYS = [
    "anomaly_detection",
    "anomaly_check_nan",
    "deterministic_algorithms",
    "deterministic_warn_only",
    "intra_op_threads",
    "interop_threads",
    "cores_per_rank",
    "thread_env",
    "mkldnn_enabled",
    "mkldnn_available",
    "cudnn_enabled",
    "cudnn_deterministic",
    "cudnn_benchmark",
    "setter_calls",
]


def _line() -> int:
    return sys._getframe(1).f_lineno


def test_the_mode_watch_hands_over_modes() -> None:
    watch = ModeWatch(CodePaths())
    threads = torch.get_num_threads()
    watch.install()
    try:
        torch.set_num_threads(threads)
        line = _line() - 1
        watch.note_window()
    finally:
        watch.uninstall()
    modes = watch.snapshot()
    assert isinstance(modes, Modes)
    assert modes.intra_op_threads == threads and modes.anomaly_detection is False
    assert modes.setter_calls == (SetterCall("set_num_threads", threads, f"{HERE}:{line}"),)
    written = recorded(modes)
    assert list(written) == MODE_KEYS
    assert written["setter_calls"] == [
        {"call": "set_num_threads", "value": threads, "site": f"{HERE}:{line}"}
    ]
    assert written["cudnn_benchmark"] is torch.backends.cudnn.benchmark
    assert RunRecord.from_dict({"modes": written}).modes == modes


def test_a_call_without_a_user_line_is_recorded_with_a_null_site() -> None:
    written = recorded(Modes(setter_calls=(SetterCall("double"),)))
    assert written["setter_calls"] == [{"call": "double", "value": None, "site": None}]
    assert Modes.from_dict(written).setter_calls == ()  # a reader sees the sited calls only


def test_the_repeat_watch_hands_over_repeat_rows() -> None:
    watch = RepeatWatch(CodePaths())
    model = nn.Linear(3, 1)
    watch.install()
    try:
        watch.measuring = True
        for _ in range(3):
            torch.optim.SGD(model.parameters(), lr=0.1)
            line = _line() - 1
    finally:
        watch.measuring = False
        watch.uninstall()
    (row,) = [r for r in watch.snapshot() if r.kind == "optimizer"]
    assert isinstance(row, Repeat)
    assert (row.site, row.calls, row.what) == (f"{HERE}:{line}", 3, "SGD")
    written = recorded(row)
    assert list(written) == ["kind", "site", "what", "calls", "seconds", "hook_functions"]
    assert written["hook_functions"] == [] and written["seconds"] > 0


def test_the_forward_watch_hands_over_forwards() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    watch = ForwardWatch(CodePaths())
    watch.begin()
    try:
        model(torch.ones(2, 4)).sum().backward()
        trained = _line() - 1
        model(torch.ones(2, 4))  # an evaluation forward that records a graph
        evaluated = _line() - 1
    finally:
        watch.end()
    fw = watch.snapshot()
    assert isinstance(fw, Forwards)
    unreached = ForwardSite(f"{HERE}:{evaluated}", "Sequential", 1, 1, 0)
    assert fw.forwards == (ForwardSite(f"{HERE}:{trained}", "Sequential", 1, 1, 1), unreached)
    assert fw.unreached == (unreached,) and fw.any_backward and fw.watched_calls == 2
    written = recorded(fw)
    assert list(written) == ["watched_calls", "forwards", "unreached", "any_backward", "loops"]
    assert written["unreached"] == [
        {
            "site": f"{HERE}:{evaluated}",
            "module": "Sequential",
            "calls": 1,
            "graphs": 1,
            "reached": 0,
        }
    ]
    assert recorded(RunRecord.from_dict({"forwards": written}).forwards) == written
