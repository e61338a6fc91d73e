"""The accounting sections of run.json read typed (record/account.py, record/lines.py): the
values the rules read, the raw dicts kept for evidence, and malformed input read as defaults."""

from __future__ import annotations

from torchdoctor.record.account import Experiment, Forwards, Modes, Repeat, Roofline
from torchdoctor.record.lines import LineTable
from torchdoctor.record.run import LoaderConfig, MonitorRecord, RunRecord


def test_sections_read_typed_and_keep_their_raw_dicts() -> None:
    roof = Roofline.from_dict(
        {
            "work": {"by_dtype": {"fp64": {"flops": 30, "bytes": 8}, "fp32": {"flops": 10}}},
            "attainable": {"source": "measured"},
            "efficiency": {"share": 0.4, "roofline_ms": 2.0, "flops_share": 0.3},
        }
    )
    assert roof.by_dtype["fp64"].flops == 30.0 and roof.by_dtype["fp32"].bytes == 0.0
    assert (roof.share, roof.roofline_ms, roof.bytes_share) == (0.4, 2.0, None)
    assert roof.attainable_source == "measured" and roof.by_dtype_raw["fp32"] == {"flops": 10}
    modes = Modes.from_dict(
        {
            "anomaly_detection": True,
            "intra_op_threads": 1,
            "cores_per_rank": 4,
            "mkldnn_enabled": False,
            "setter_calls": [{"call": "set_num_threads", "value": 1, "site": "t.py:3"}, {}],
        }
    )
    assert modes.anomaly_detection and not modes.deterministic_algorithms
    assert (modes.intra_op_threads, modes.cores_per_rank) == (1, 4)
    assert modes.enabled("mkldnn") is False and modes.enabled("cudnn") is None
    assert [c.site for c in modes.setter_calls] == ["t.py:3"]  # the row without a site is dropped
    raw = {"kind": "hook", "site": "t.py:9", "calls": 5, "hook_functions": [["t.py", "f"]]}
    rep = Repeat.from_dict(raw)
    assert (rep.kind, rep.calls, rep.hook_functions, rep.raw) == ("hook", 5, (("t.py", "f"),), raw)
    fw = Forwards.from_dict(
        {
            "unreached": [{"site": "t.py:4", "graphs": 3}, {"graphs": 1}],
            "loops": [{"site": "t.py:7", "module": "LSTMCell", "calls": 40, "cell": True}],
        }
    )
    assert [(u.site, u.graphs) for u in fw.unreached] == [("t.py:4", 3)]
    assert fw.loops[0].cell and not fw.loops[0].sliced and fw.loops[0].calls == 40
    e = Experiment.from_dict({"id": "x", "ratio": 0.5, "pair_ratios": [0.4, "bad", 0.6]})
    assert (e.ratio, e.pair_ratios, e.baseline_median_ms) == (0.5, (0.4, 0.6), None)


def test_malformed_sections_read_as_their_defaults() -> None:
    run = RunRecord.from_dict({"lines": {"rows": "nope", "gc_collections": [1]}, "steps": {}})
    assert run.lines == LineTable(rows=(), python_by_owner=None)
    assert Modes.from_dict({"intra_op_threads": True, "setter_calls": 3}) == Modes()
    assert Roofline.from_dict({"efficiency": {"share": "high"}}).share is None
    assert Forwards.from_dict({"unreached": {"site": "x"}}) == Forwards()
    lines = LineTable.from_dict(
        {"rows": [{"site": "t.py:1", "inclusive_ms": 2.0, "calls": [["", 1.0], [3, 4]]}]}
    )
    assert lines.inclusive_ms("t.py:1") == 2.0 and lines.inclusive_ms("t.py:2") == 0.0
    assert lines.rows[0].calls == (("", 1.0),)


def test_the_operator_summary_reads_typed_and_a_partial_one_fires_nothing() -> None:
    from torchdoctor.rules.run_rules import tiny_ops

    ops = {
        "gemm_share_basis": "cpu",
        "top_level_ops_per_step": 400,
        "median_op_us": 3.0,
        "op_time_ms_per_step": 4.0,
        "tiny_op_time_ms_per_step": 2.0,
        "gemm_share": 0.1,
    }
    steps = {"measured_steps": 3, "mean_step_ms": 10.0}
    run = RunRecord.from_dict({"ops": ops, "steps": steps})
    assert run.op_summary.median_op_us == 3.0 and run.op_summary.compute_share is None
    assert tiny_ops(run) == []  # no tiny-op threshold recorded: nothing to judge (it raised)
    (f,) = tiny_ops(
        RunRecord.from_dict({"ops": {**ops, "tiny_op_threshold_us": 20.0}, "steps": steps})
    )
    assert f.title.startswith("400 operators per step, median 3.0 us: 8.0 ms per step")
    assert f.evidence["tiny_op_threshold_us"] == 20.0  # the recorded summary, as evidence


def test_the_run_record_reads_the_sections_the_rules_use() -> None:
    loader = {
        "num_workers": 2,
        "batch_size": 8,
        "dataset_len": 100,
        "persistent_workers": True,
        "multiprocessing_context": "spawn",
        "usage": {"measured_wait_s": 0.5},
        "torch_warnings": ["too many workers"],
    }
    run = RunRecord.from_dict(
        {
            "roofline": {"work": {"uncounted_compute_ops": {"aten::foo": 1}}},
            "experiments": [{"id": "anomaly-detection", "ratio": 0.8}, "bad"],
            "modes": {"anomaly_detection": True},
            "repeats": [{"kind": "optimizer", "site": "t.py:5"}],
            "forwards": {"loops": [{"site": "t.py:7", "calls": 9}]},
            "job": {"name": "EPOCHS", "value": 3, "unit": "epochs"},
            "monitor": {"source": "optimizer"},
            "memory_steps": {"rss_bytes": [1, 2]},
            "options": {"profile_memory": True, "full": True},
            "config": {"dataloaders": [loader], "housekeeping": [{"what": "gc.collect"}, 7]},
        }
    )
    assert run.roof.work == {"uncounted_compute_ops": {"aten::foo": 1}}
    assert [(e.id, e.ratio) for e in run.experiments] == [("anomaly-detection", 0.8)]
    assert run.modes.anomaly_detection and [r.site for r in run.repeats] == ["t.py:5"]
    assert run.forwards.loops[0].calls == 9 and run.job["value"] == 3
    assert run.monitor.source == "optimizer" and run.memory_steps["rss_bytes"] == [1, 2]
    assert run.options.profile_memory and run.options.full
    # the row that is no dict dropped; the one kept typed, with its defaults
    assert [(h.what, h.site, h.calls) for h in run.config.housekeeping] == [("gc.collect", "", 0)]
    (dl,) = run.config.dataloaders
    assert (dl.dataset_len, dl.persistent_workers, dl.multiprocessing_context) == (
        100,
        True,
        "spawn",
    )
    assert dl.usage == {"measured_wait_s": 0.5} and dl.torch_warnings == ("too many workers",)
    empty = RunRecord.from_dict({"job": [1], "monitor": "x", "memory_steps": [1], "options": {}})
    assert (empty.job, empty.memory_steps, empty.repeats) == ({}, {}, ())
    assert empty.monitor == MonitorRecord() and empty.monitor.step_core_wait_ms is None
    assert not empty.options.full and empty.roof.work == {} and empty.experiments == ()
    assert RunRecord.from_dict({"config": {"dataloaders": [{}]}}).config.dataloaders[0] == (
        LoaderConfig(raw={})
    )


def test_a_record_whose_steps_are_no_section_gets_no_run_finding_and_no_probe_effect() -> None:
    from torchdoctor.rules import probe_effect
    from torchdoctor.rules.run_rules import run_findings

    record = {"steps": [1.0, 2.0], "memory_steps": [1], "options": {"full": True}}
    assert run_findings(record) == []  # long-steps, memory-growth read steps.get(): raised
    assert probe_effect.measure(record) is None
