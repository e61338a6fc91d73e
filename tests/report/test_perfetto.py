"""``--export-trace``: valid Chrome trace JSON, the original events unchanged, the torchdoctor
process's tracks agreeing with the analysis, and the analyser reading it back identically."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file, corpus_report
from tests.report.hostile import write_hostile_trace
from torchdoctor.analysis.breakdown_terms import TERMS
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.report.perfetto import export_trace
from torchdoctor.report.serialize import report_dict

CORPUS = [
    "v100_resnet50_train_workers0",
    "v100_ddp_compiled_rank1",
    "a100_alexnet_syncs_pageable",
    "cpu_only_rank34",
    "h100_bert_small_infer",
]


def _doc(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _without_source(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    d["source"] = {k: v for k, v in d["source"].items() if k not in ("path", "json_bytes")}
    return d


def _export(src: Path | str, tmp: Path) -> tuple[Any, Path]:
    """``src``: a trace file, or a corpus trace's stem (its report made once per test run)."""
    if isinstance(src, str):
        report, src = corpus_report(src), corpus_file(src)
    else:
        report = analyze_path(src)
    # keep the source's name: a rank number in the file name is part of what the analyser reads
    out = tmp / src.name.replace(".json", ".td.json")
    return report, export_trace(report.analysis, report.findings, out)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Any, Path]]:
    """A corpus trace's report and its export, made once per module run for every test that
    reads them (none writes the file)."""
    folder = tmp_path_factory.mktemp("exported")
    made: dict[str, tuple[Any, Path]] = {}

    def get(name: str) -> tuple[Any, Path]:
        if name not in made:
            made[name] = _export(name, folder)
        return made[name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS)
def test_reads_back_with_identical_results(
    exported: Callable[[str], tuple[Any, Path]], name: str
) -> None:
    report, out = exported(name)
    again = analyze_path(out)
    assert _without_source(report_dict(again)) == _without_source(report_dict(report))


@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS)
def test_original_events_unchanged(exported: Callable[[str], tuple[Any, Path]], name: str) -> None:
    src = corpus_file(name)
    _, out = exported(name)
    before, after = _doc(src), _doc(out)
    n = len(before["traceEvents"])
    assert after["traceEvents"][:n] == before["traceEvents"]
    assert {k: v for k, v in after.items() if k != "traceEvents"} == {
        k: v for k, v in before.items() if k != "traceEvents"
    }


def _added(doc: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"]
    pid = next(e["pid"] for e in meta if e["args"]["name"] == "torchdoctor")
    return pid, [e for e in doc["traceEvents"] if e.get("cat") == "torchdoctor"]


def _slices(events: list[dict[str, Any]], tid: int) -> list[tuple[str, float, float]]:
    """B/E pairs of one thread as (name, begin, end); they must nest properly."""
    stack, out = [], []
    for e in events:
        if e.get("tid") != tid or e["ph"] not in "BE":
            continue
        if e["ph"] == "B":
            stack.append(e)
        else:
            b = stack.pop()
            assert e["ts"] >= b["ts"]
            out.append((b["name"], b["ts"], e["ts"]))
    assert not stack
    return out


@pytest.mark.slow
def test_idle_track_and_counters_match_the_breakdown(
    exported: Callable[[str], tuple[Any, Path]],
) -> None:
    report, out = exported("v100_resnet50_train_workers0")
    pid, added = _added(_doc(out))
    assert all(e["pid"] == pid for e in added if e["ph"] != "f")
    idle: dict[str, float] = defaultdict(float)
    for name, b, e in _slices(added, 1):  # slices are named as every report names the part
        idle[next(k for k, t in TERMS.items() if t.label == name).removeprefix("idle:")] += (
            e - b
        ) / 1000.0
    total = report.analysis.total
    for cause, ms in total.idle_ms.items():
        assert idle[cause] == pytest.approx(ms, rel=1e-6, abs=1e-6), cause
    counters = [e for e in added if e["ph"] == "C"]
    steps = report.analysis.per_step
    assert len(counters) == len(steps) * (len(total.busy_ms) + len(total.idle_ms))
    first = steps[0]
    compute = next(c for c in counters if c["name"] == "GPU compute (ms/step)")
    assert compute["args"]["ms"] == pytest.approx(first.busy_ms["compute"], abs=1e-5)


def _event_starts(doc: dict[str, Any]) -> set[tuple[Any, Any, float]]:
    return {
        (e.get("pid"), e.get("tid"), e.get("ts")) for e in doc["traceEvents"] if e.get("ph") == "X"
    }


@pytest.mark.slow
def test_findings_have_slices_and_arrows_to_their_causes(
    exported: Callable[[str], tuple[Any, Path]],
) -> None:
    report, out = exported("v100_resnet50_train_workers0")
    doc = _doc(out)
    _, added = _added(doc)
    ids = [f.id for f in report.findings]
    assert "data-loading-bound" in ids
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    for i, fid in enumerate(ids):
        assert f"finding {i + 1}: {fid}" in names
        assert len(_slices(added, 10 + i)) == 1
    starts = {e["id"]: e for e in added if e["ph"] == "s"}
    ends = {e["id"]: e for e in added if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    real = _event_starts(doc)
    by_name = {
        (e.get("pid"), e.get("tid"), e.get("ts")): e["name"]
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
    }
    for end in ends.values():
        key = (end["pid"], end["tid"], end["ts"])
        assert key in real, "an arrow must land on a real event"
        if end["name"] == "data-loading-bound":
            assert by_name[key].startswith("enumerate(DataLoader)#")
    pageable = [e for e in ends.values() if e["name"] == "pageable-h2d-copies"]
    assert pageable and all("HtoD" in by_name[(e["pid"], e["tid"], e["ts"])] for e in pageable)


def test_sync_stall_arrows_point_at_blocking_calls(tmp_path: Path) -> None:
    _, out = _export(write_hostile_trace(tmp_path / "h.json"), tmp_path)
    doc = _doc(out)
    _, added = _added(doc)
    by_name = {
        (e.get("pid"), e.get("tid"), e.get("ts")): e["name"]
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
    }
    targets = [by_name[(e["pid"], e["tid"], e["ts"])] for e in added if e["ph"] == "f"]
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in targets
    host = [e for e in added if e["ph"] == "f" and e["name"] == "host-bound"]
    assert host and all(by_name[(e["pid"], e["tid"], e["ts"])] == "cudaLaunchKernel" for e in host)


def test_cli_export_and_bad_path(tmp_path: Path) -> None:
    src = corpus_file("a100_event_sync_micro")
    out = tmp_path / "x.json"
    cmd = [sys.executable, "-m", "torchdoctor", "analyze", str(src), "--json"]
    ok = subprocess.run([*cmd, "--export-trace", str(out)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    json.loads(ok.stdout)  # stdout stays pure JSON; the "wrote" line goes to stderr
    assert "wrote" in ok.stderr and _doc(out)["traceEvents"]
    bad = subprocess.run(
        [*cmd, "--export-trace", str(tmp_path / "missing" / "x.json")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "cannot write" in bad.stderr


def test_run_findings_point_at_the_events_of_the_trace_finding_they_stand_for(
    tmp_path: Path,
) -> None:
    """dataloader-config and host-syncs-in-step have no events of their own: their registry
    entries name data-loading-bound and sync-stalls as aliases, whose events they point at."""
    from torchdoctor.report.perfetto import _evidence_rows

    a = analyze_path(write_hostile_trace(tmp_path / "h.json")).analysis
    loader = _evidence_rows(a, "dataloader-config")
    assert len(loader) and list(loader) == list(_evidence_rows(a, "data-loading-bound"))
    names = {a.table.names[c] for c in a.table.name[loader]}
    assert all(n.startswith("enumerate(DataLoader)#") for n in names), names
    syncs = _evidence_rows(a, "host-syncs-in-step")
    assert list(syncs) == list(_evidence_rows(a, "sync-stalls"))
    assert len(_evidence_rows(a, "memory-pressure")) == 0  # no events, no alias with any
