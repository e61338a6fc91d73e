"""The config and compile rows as the watchers record them, typed (``record/rows.py``): each
reads the fields its readers use and writes back the watcher's dict byte for byte, and the
readers keep what the dicts meant (a call whose source was read, with or without keywords)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from torchdoctor.record import typed
from torchdoctor.record.account import Experiment
from torchdoctor.record.rows import Checkpointing, CompileCall, ConstructionCall, Optimizer
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.optimizer_fixes import optimizer_line

torch = pytest.importorskip("torch")


def _same(row: object, recorded: dict[str, object]) -> bool:
    return json.dumps(row.to_dict()) == json.dumps(recorded)  # type: ignore[attr-defined]


def test_an_optimizer_as_the_probe_records_it() -> None:
    from torchdoctor.capture.config_probe import optimizer_record

    built = optimizer_record(torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1))
    recorded = typed.recorded(built)
    assert "call" not in recorded  # built in library code: the record has no call
    opt = Optimizer.from_dict(recorded)
    assert opt == replace(built, raw=recorded)
    assert (opt.class_name, opt.impl, opt.param_bytes, opt.param_devices) == (
        "SGD",
        "for-loop",
        12,
        ("cpu",),
    )
    assert opt.impl_options is not None and "foreach" in opt.impl_options
    assert opt.call is None and _same(opt, recorded)
    # a record older than impl_options: None, so the class decides (not "no options")
    assert Optimizer.from_dict({"class": "SGD"}).impl_options is None
    assert Optimizer.from_dict({"class": "LBFGS", "impl_options": []}).impl_options == ()


def test_a_call_read_without_keywords_is_still_rebuilt_from_its_source() -> None:
    site = {"site": "/w/train.py:9", "func": "torch.optim.SGD", "args": ["net.parameters()"]}
    read = Optimizer.from_dict({"class": "SGD", "impl": "for-loop", "call": {**site, "kwargs": {}}})
    assert read.call == ConstructionCall(
        "/w/train.py:9", "torch.optim.SGD", ("net.parameters()",), {}, raw={**site, "kwargs": {}}
    )
    assert optimizer_line(read).startswith("torch.optim.SGD(net.parameters(), fused=True)  # at ")
    # only the site: the call's source was not read, the class name stands in
    unread = Optimizer.from_dict({"class": "SGD", "impl": "for-loop", "call": {"site": "a:1"}})
    assert unread.call is not None and unread.call.kwargs is None
    assert optimizer_line(unread).startswith("SGD(params, ..., fused=True)")
    assert Optimizer.from_dict({"class": "SGD", "call": {}}).call is None
    # a call whose source was not read is recorded with its site alone, one read with it all
    assert typed.recorded(ConstructionCall("a:1")) == {"site": "a:1"}
    assert typed.recorded(ConstructionCall("a:1", "f", (), {})) == {
        "site": "a:1",
        "func": "f",
        "args": [],
        "kwargs": {},
    }


def test_compile_calls_and_checkpointing_as_their_watchers_record_them() -> None:
    from torchdoctor.capture.checkpointing import CheckpointWatch
    from torchdoctor.capture.compile_watch import compile_call

    built = compile_call((torch.nn.Linear(2, 2),), {"mode": "max-autotune", "dynamic": False})
    recorded = typed.recorded(built)
    assert list(recorded) == [
        "target",
        "mode",
        "backend",
        "dynamic",
        "fullgraph",
        "options",
        "disable",
    ]
    call = CompileCall.from_dict(recorded)
    assert call.mode == "max-autotune" and _same(call, recorded)
    assert call == replace(built, raw=recorded)  # read back, the watcher's row
    assert compile_call((), {}).mode is None
    watch = CheckpointWatch()
    watch.calls, watch.forward_s = 4, 0.25
    watch.use_reentrant = {"False"}
    ck = Checkpointing.from_dict(typed.recorded(watch.snapshot()))
    assert (ck.calls_measured, ck.forward_s_measured, ck.use_reentrant) == (4, 0.25, ("False",))
    assert _same(ck, typed.recorded(watch.snapshot())) and list(
        typed.recorded(watch.snapshot())
    ) == [
        "calls_total",
        "calls_measured",
        "forward_s_measured",
        "use_reentrant",
    ]


def test_experiments_as_check_records_them() -> None:
    from torchdoctor.capture.experiments import Toggle

    skipped = Toggle.skip("anomaly-detection", "anomaly detection off", "the model is compiled")
    measured = Toggle("few-intra-op-threads", "2 threads", lambda: None, lambda: None)
    for ms in (10.0, 11.0, 12.0):
        measured.record("baseline", ms, 0.0)
        measured.record("changed", ms / 2, 0.0)
    rows = [typed.recorded(t.result()) for t in (skipped, measured)]
    assert list(rows[1]) == [  # the keys run.json has always had, in their order
        "id",
        "toggle",
        "baseline_ms",
        "changed_ms",
        "baseline_median_ms",
        "changed_median_ms",
        "ratio",
        "pair_ratios",
        "net_pair_ratios",
        "rejected_pairs",
        "error",
        "skipped",
    ]
    run = RunRecord.from_dict({"experiments": [*rows, "junk"]})
    assert [(e.id, e.skipped, e.error) for e in run.experiments] == [
        ("anomaly-detection", "the model is compiled", None),
        ("few-intra-op-threads", None, None),
    ]
    assert run.experiments[1].ratio == pytest.approx(0.5)
    assert run.experiments[1].pair_ratios == (0.5, 0.5, 0.5)
    assert all(_same(e, r) for e, r in zip(run.experiments, rows, strict=True))
    assert Experiment.from_dict(
        {"id": "x", "rejected_pairs": ["pair 1: slow", 3]}
    ).rejected_pairs == (
        "pair 1: slow",
        "3",
    )
