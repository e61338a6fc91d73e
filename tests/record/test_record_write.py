"""``run.json`` has one writer (``record/write.py``): the record a watched process writes at its
end and the one its watching parent rebuilds from ``steps.log`` after a hard exit must carry the
same header and steps keys, with the same statistics over the same steps."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from statistics import median
from typing import Any

import pytest

import torchdoctor
from torchdoctor.capture.evidence import read_evidence, record_from_evidence
from torchdoctor.record import layout
from torchdoctor.record.folder import read_run
from torchdoctor.record.run import RunRecord, StepStats
from torchdoctor.record.write import (
    RankPlace,
    RunEnd,
    RunHeader,
    ended_document,
    rank_index,
    run_document,
    without_sites,
)


def _train() -> None:
    import torch

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(6):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()


def test_the_rebuilt_record_matches_the_written_one(tmp_path: Path) -> None:
    result = torchdoctor.check(
        _train, warmup_steps=1, clean_steps=2, profile_steps=2, out_dir=tmp_path / "runs"
    )
    written = result.record
    log = layout.steps_log(result.folder, 0, distributed=False)
    rebuilt = record_from_evidence(read_evidence(log), written["exit"])
    # Every header key of the written record, in the same order, with the same values where
    # the log knows them (versions and the script's identity; not the wall time).
    header = list(written)[: list(written).index("steps")]
    assert list(rebuilt)[: list(rebuilt).index("steps")] == header
    for key in ("schema", "schema_version", "script", "argv", "options", "rank", "exit"):
        assert rebuilt[key] == written[key], key
    ws, rs = written["steps"], rebuilt["steps"]
    assert list(rs) == list(ws)
    assert rs["step_ms"] == pytest.approx(ws["step_ms"][: len(rs["step_ms"])], rel=1e-6)
    assert rs["count"] == ws["count"] and rs["source"] == ws["source"]
    # The statistics a rule reads, over the same measured steps.
    measured = rs["step_ms"][rs["warmup_steps"] :]
    assert rs["median_step_ms"] == pytest.approx(median(measured))
    assert RunRecord.from_dict(rebuilt).steps.mean_step_ms == pytest.approx(
        sum(measured) / len(measured)
    )


def test_a_section_may_not_overwrite_the_header_or_the_steps() -> None:
    header = RunHeader("t.py", [], {}, RankPlace(), {"status": "completed"}, 100.0, "2.13")
    steps = StepStats.measure("optimizer", [10.0, 20.0, 30.0], [0.0, 1.0, 2.0], warmup_steps=1)
    doc = run_document(header, steps, {"ops": None})
    assert doc["steps"]["median_step_ms"] == 25.0 and doc["steps"]["mean_data_wait_ms"] == 1.5
    with pytest.raises(ValueError, match="exit, steps"):
        run_document(header, steps, {"exit": {}, "steps": {}})


def test_measured_end_leaves_checks_own_mode_steps_out() -> None:
    steps = StepStats.measure(
        "marker", [5.0, 10.0, 10.0, 99.0], [0.0] * 4, 1, measured_end=3
    ).to_dict()
    assert steps["measured_steps"] == 2 and steps["mean_step_ms"] == 10.0
    assert steps["count"] == 4  # every step is still recorded


def test_the_rank_index_is_read_back_as_rank_zeros_record(tmp_path: Path) -> None:
    for r in (0, 2):
        path = layout.rank_record(tmp_path, r)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = run_document(
            RunHeader("t.py", [], {}, RankPlace(r, r, 3), {"status": "completed"}, 1.0, None),
            StepStats.measure("optimizer", [1.0], [0.0], 0),
            {},
        )
        path.write_text(json.dumps(doc))
    index = rank_index(3, [2, 0])
    assert index["missing_ranks"] == [1] and list(index["ranks"]) == ["0", "2"]
    layout.run_file(tmp_path).write_text(json.dumps(index))
    assert read_run(tmp_path).rank == RankPlace(0, 0, 3)


def test_the_steps_are_one_type_both_ways() -> None:
    """What the capture side measures is what a reader gets back: ``run.json``'s steps section
    read by ``StepStats.from_dict`` writes the same section again, and reads the same numbers."""
    made = StepStats.measure(
        "optimizer",
        [40.0, 12.0, 10.0, 14.0, 11.0, 90.0],
        [0.0, 0.5, 0.25, 1.0, 0.5, 0.0],
        2,
        window=[3, 5],
        profiled_steps=3,
        measured_end=5,
        experiment_steps=1,
        own_steps=[6],
        clock_errors=["the script runs its own profiler"],
        schedule={"warmup": 2, "clean": 0},
        timed={"clean": {"steps": 2}, "after": {"steps": 1}},
    )
    doc = json.loads(json.dumps(made.to_dict()))
    back = StepStats.from_dict(doc)
    assert back.to_dict() == doc and back == made
    # the measured steps are the 3rd to the 5th: 10, 14 and 11 ms, waiting 0.25, 1 and 0.5 ms
    assert (back.measured_steps, back.median_step_ms) == (3, 11.0)
    assert back.mean_data_wait_ms == pytest.approx(1.75 / 3)
    assert (back.window_steps, back.scheduled_warmup, back.clean_steps, back.after_steps) == (
        3,
        2,
        2,
        1,
    )
    assert back.script_step_ms == (40.0, 12.0, 10.0, 14.0, 11.0)


# -- the end of a check run: built from parts, the session's record left as it is --------------
def _session_record() -> dict[str, Any]:
    return {
        "schema": "torchdoctor.run",
        "steps": {"count": 3},
        "gpu": {"device": {"name": "H200"}, "memory": {"total_bytes": 8}},
        "compile": {
            "graph_breaks": [{"site": "/td/hooks.py:4"}, {"site": "/u/train.py:9"}],
            "recompile_events": [{"site": "/td/a.py:1"}] * 30,
        },
        "syncs": {"host_syncs": [{"site": "/u/train.py:12"}]},
        "config": {
            "dataloaders": [
                {"call": {"site": "/td/probe.py:7"}, "num_workers": 0},
                {"call": {"site": "/u/train.py:3"}, "num_workers": 4},
            ]
        },
        "notes": [],
    }


def test_the_end_of_a_run_makes_a_new_document_in_the_writers_order() -> None:
    recorded = _session_record()
    before = copy.deepcopy(recorded)
    steps = {"rss_bytes": [1, 2]}
    end = RunEnd("trace.json", {"tried_bytes": 4}, {"observed_ooms": 1}, steps)
    doc = ended_document(recorded, end, [{"id": "a"}])
    assert recorded == before  # nothing added to, or changed in, the session's record
    assert list(doc) == [*before, "trace", "oom", "memory_steps", "findings"]
    assert doc["gpu"] == {**before["gpu"], "oom_observer": {"observed_ooms": 1}}
    assert doc["trace"] == "trace.json" and doc["oom"] == {"tried_bytes": 4}
    assert doc["memory_steps"] == steps and doc["findings"] == [{"id": "a"}]
    # what the end did not see is left out (the trace is always said, None when none)
    bare = ended_document({"gpu": None, "trace": "old"}, RunEnd(None, oom_observer={"n": 1}))
    assert bare == {"gpu": None, "trace": None}
    # a key the record had keeps its place
    assert list(ended_document({"findings": [], "x": 1}, RunEnd(None), [])) == [
        "findings",
        "x",
        "trace",
    ]


def test_sites_come_out_of_a_copy() -> None:
    recorded = _session_record()
    before = copy.deepcopy(recorded)
    doc, removed = without_sites(recorded, lambda site: str(site).startswith("/td/"), keep=5)
    assert recorded == before
    assert list(doc) == list(before)
    assert doc["compile"]["graph_breaks"] == [{"site": "/u/train.py:9"}]
    assert doc["compile"]["recompile_events"] == []
    assert doc["syncs"] == before["syncs"]
    assert doc["config"]["dataloaders"] == [
        {"num_workers": 0},
        {"call": {"site": "/u/train.py:3"}, "num_workers": 4},
    ]
    assert removed == {
        "compile.graph_breaks": ["/td/hooks.py:4"],
        "compile.recompile_events": ["/td/a.py:1"] * 5,
        "config.dataloaders": ["/td/probe.py:7"],
    }
    assert without_sites({"compile": None}, lambda site: True) == ({"compile": None}, {})
