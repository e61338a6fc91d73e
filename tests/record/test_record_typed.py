"""The generic typed read of a record section (``record/typed.py``) and its write back: malformed
values read as defaults, unknown keys are kept, a recorded section comes back byte for byte."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from torchdoctor.commands.check.report_doc import CheckReport
from torchdoctor.record.account import Modes, SetterCall
from torchdoctor.record.lines import LineTable
from torchdoctor.record.rows import AutocastUse, GraphBreak, HostSync, RecompileEvent
from torchdoctor.record.run import CompileStats, GpuInfo, RunConfig, RunRecord, SyncStats
from torchdoctor.record.typed import Row, key, omitted_at_default, read, reads, recorded, write


def test_malformed_values_read_as_defaults() -> None:
    row = HostSync.from_dict(
        {"kind": 3, "device": None, "site": "", "calls": "7", "seconds": True, "x": 1}
    )
    assert (row.kind, row.device, row.site, row.calls, row.seconds) == ("3", "", "", 0, 0.0)
    assert HostSync.from_dict(["not", "a", "dict"]) == HostSync()
    # an int field takes a finite number, truncated; a float field never a bool
    assert HostSync.from_dict({"calls": 2.9}).calls == 2
    assert HostSync.from_dict({"calls": float("inf")}).calls == 0
    assert HostSync.from_dict({"seconds": 2}).seconds == 2.0


def test_rows_of_a_section_skip_what_is_not_a_dict() -> None:
    syncs = SyncStats.from_dict(
        {"host_syncs": [{"site": "a.py:3", "calls": 4}, "junk", None], "sync_debug": "junk"}
    )
    assert syncs.host_syncs == (
        HostSync(site="a.py:3", calls=4, raw={"site": "a.py:3", "calls": 4}),
    )
    assert syncs.sync_debug == ()
    assert CompileStats.from_dict({"graph_breaks": {"site": "a.py:1"}}).graph_breaks == ()


def test_unknown_keys_are_kept_in_their_place() -> None:
    d = {"compile_id": "0/1", "function": "f", "site": "m.py:9", "reason": "size", "extra": [1]}
    event = RecompileEvent.from_dict(d)
    assert event.raw["compile_id"] == "0/1"
    assert list(event.to_dict()) == list(d)
    assert event.to_dict()["extra"] == [1]


def test_write_back_keeps_the_recorded_numbers_and_order() -> None:
    d = {"site": "t.py:2", "reason": "x", "count": 3}
    text = json.dumps(d)
    assert json.dumps(GraphBreak.from_dict(json.loads(text)).to_dict()) == text
    # a float field read from an int writes the int back (1, not 1.0)
    row = {"kind": "item", "device": "cuda", "site": "t.py:5", "calls": 1, "seconds": 0}
    assert json.dumps(HostSync.from_dict(row).to_dict()) == json.dumps(row)
    # a typed value that differs from what was recorded replaces it
    assert HostSync.from_dict({"site": "t.py:5", "calls": "bad"}).to_dict() == {
        "site": "t.py:5",
        "calls": 0,
    }


def test_a_row_built_in_code_writes_what_is_not_its_default() -> None:
    assert HostSync(site="a.py:1", calls=3).to_dict() == {"site": "a.py:1", "calls": 3}
    use = AutocastUse(device="cuda", dtype="bfloat16", enabled=True, entries=2)
    assert AutocastUse.from_dict(use.to_dict()) == AutocastUse(
        "cuda", "bfloat16", True, 2, raw=use.to_dict()
    )


@dataclass(frozen=True)
class _Built(Row):
    name: str = field(default="", metadata=key("who.name"))
    rows: tuple[HostSync, ...] = ()
    call: HostSync | None = field(default=None, metadata=omitted_at_default())
    raw: dict[str, Any] = field(default_factory=dict)


def test_a_row_a_watcher_built_is_recorded_with_every_field_in_order() -> None:
    row = HostSync("item", "cpu", "a.py:1", 3, 0.0)
    assert "seconds" not in row.to_dict()  # the write back leaves a default out...
    assert list(recorded(row).items()) == [  # ...the record writes what the watcher recorded
        ("kind", "item"),
        ("device", "cpu"),
        ("site", "a.py:1"),
        ("calls", 3),
        ("seconds", 0.0),
    ]
    # a key down a path, rows inside, a field left out at its default, raw's other keys last
    built = _Built(rows=(HostSync(site="b.py:2"),), raw={"extra": 1})
    assert json.dumps(recorded(built)) == json.dumps(
        {
            "who": {"name": ""},
            "rows": [{"kind": "", "device": "", "site": "b.py:2", "calls": 0, "seconds": 0.0}],
            "extra": 1,
        }
    )
    assert recorded(_Built(call=HostSync(calls=1)))["call"]["calls"] == 1
    # plain data inside (a section still built as a dict) is copied, never shared
    section = {"syncs": SyncStats(host_syncs=(row,)), "list": [1, (2, 3)]}
    out = recorded(section)
    assert out["list"] == [1, [2, 3]] and out["list"] is not section["list"]
    assert out["syncs"]["host_syncs"][0]["seconds"] == 0.0


def test_optional_sections_and_flags() -> None:
    rec = RunRecord.from_dict(
        {
            "gpu": {},
            "cuda_available": "yes",
            "exit": {"status": "completed", "code": 0, "phase": 5},
            "profiler": {"stopped_early": "budget"},
            "framework": "lightning",
            "config": {"data_parallel": None, "autocast": [{"dtype": "float16", "enabled": 1}]},
        }
    )
    assert rec.gpu is None  # an empty section reads as absent
    assert rec.cuda_available is None  # a flag takes a bool only
    assert (rec.exit_status, rec.exit_code, rec.exit_phase) == ("completed", 0, "5")
    assert rec.profiler_stopped_early == "budget"
    assert rec.framework is None  # "framework" is a dict with a name
    assert rec.config.data_parallel is None
    assert rec.config.autocast_dtypes == {"float16"}
    assert GpuInfo.from_dict({"device": {"name": "H200"}, "gpm": []}).gpm is None
    assert RunConfig.from_dict({"data_parallel": []}).data_parallel == []


@dataclass(frozen=True)
class _Odd(Row):
    name: str = field(default="?", metadata=key("who.name"))
    size: int = field(default=1, metadata=reads(lambda v, dflt: len(v) if v else dflt))
    raw: dict[str, Any] = field(default_factory=dict)


def test_field_metadata_names_the_key_and_the_coercion() -> None:
    odd = _Odd.from_dict({"who": {"name": "x", "age": 3}, "size": "abcd"})
    assert (odd.name, odd.size) == ("x", 4)
    assert _Odd.from_dict({"who": "x"}) == _Odd(raw={"who": "x"})
    assert write(_Odd(name="y")) == {"who": {"name": "y"}}


def test_an_annotation_without_a_coercion_is_refused() -> None:
    @dataclass(frozen=True)
    class Bad:
        when: complex = 0j

    with pytest.raises(TypeError, match="no recorded-value coercion"):
        read(Bad, {"when": 1})


def test_recorded_runs_round_trip(traces_dir: Path) -> None:
    """The H200 runs' rows and sections come back as recorded, byte for byte."""
    runs = sorted((traces_dir / "h200" / "runs").glob("*/run.json"))
    if not runs:
        pytest.skip("no recorded H200 run folders")
    rows = 0
    for path in runs:
        doc = json.loads(path.read_text())
        rec = RunRecord.from_dict(doc)
        for name, section in (
            ("compile", rec.compile),
            ("syncs", rec.syncs),
            ("config", rec.config),
        ):
            assert json.dumps(section.to_dict()) == json.dumps(doc[name]), (path, name)
        host = doc["syncs"]["host_syncs"]
        assert [r.site for r in rec.syncs.host_syncs] == [r["site"] for r in host]
        assert [r.calls for r in rec.syncs.host_syncs] == [r["calls"] for r in host]
        rows += len(rec.syncs.host_syncs) + len(rec.compile.recompile_events)
    assert rows > 0


def _as_built(value: Any) -> Any:
    """``value`` as a watcher builds it: the same fields, nothing kept from a recorded dict."""
    if isinstance(value, tuple | list):
        return type(value)(_as_built(v) for v in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    names = {f.name for f in dataclasses.fields(value)}
    inner = {n: _as_built(getattr(value, n)) for n in names - {"raw"}}
    return dataclasses.replace(value, **inner, **({"raw": {}} if "raw" in names else {}))


def test_the_watchers_rows_rebuilt_from_their_fields_are_recorded_as_they_were(
    traces_dir: Path,
) -> None:
    """Every row of the H200 runs' watcher sections, built again from its typed fields alone
    (as the watcher builds it), is written byte for byte as recorded: no key without a field,
    none out of order, none written that the watcher left out."""
    runs = sorted((traces_dir / "h200" / "runs").glob("*/run.json"))
    if not runs:
        pytest.skip("no recorded H200 run folders")
    rows = 0
    for path in runs:
        doc = json.loads(path.read_text())
        rec = RunRecord.from_dict(doc)
        lists = [
            *(
                ("compile", n, getattr(rec.compile, n))
                for n in ("recompile_events", "graph_breaks")
            ),
            ("compile", "recompile_limit_hits", rec.compile.recompile_limit_hits),
            ("compile", "compile_calls", rec.compile.compile_calls),
            *(("syncs", n, getattr(rec.syncs, n)) for n in ("host_syncs", "sync_debug")),
            ("syncs", "unpinned_non_blocking", rec.syncs.unpinned_non_blocking),
            *(("config", n, getattr(rec.config, n)) for n in ("autocast", "grad_scalers")),
            *(("config", n, getattr(rec.config, n)) for n in ("optimizers", "housekeeping")),
        ]
        for section, name, typed_rows in lists:
            assert len(typed_rows) == len(doc[section][name])
            for row, was in zip(typed_rows, doc[section][name], strict=True):
                assert json.dumps(recorded(_as_built(row))) == json.dumps(was), (path, name)
                rows += 1
        for name in ("checkpointing", "forward_steps"):
            built = recorded(_as_built(getattr(rec.config, name)))
            assert json.dumps(built) == json.dumps(doc["config"][name]), (path, name)
        # the whole section, as the session builds it from the watchers' parts
        assert json.dumps(recorded(_as_built(rec.config))) == json.dumps(doc["config"]), path
        assert json.dumps(recorded(_as_built(rec.monitor))) == json.dumps(doc["monitor"])
    assert rows > 20  # optimizers with their calls, autocast, scalers, compile calls, syncs


def test_sections_that_keep_a_rule_of_their_own() -> None:
    lines = LineTable.from_dict(
        {"samples": 9.7, "rows": [{"site": "a.py:1", "self_ms": 2}, {"self_ms": 5}], "error": "x"}
    )
    assert (lines.samples, [r.site for r in lines.rows], lines.unavailable) == (9, ["a.py:1"], "x")
    assert lines.rows[0].self_ms == 2.0 and lines.rows[0].ops == ()
    modes = Modes.from_dict({"setter_calls": [{"call": "c", "site": "s.py:2"}, {"call": "d"}]})
    assert modes.setter_calls == (SetterCall("c", site="s.py:2"),)
    report = CheckReport.from_dict(
        {"world_size": 0, "findings": ["junk"], "account": {"step_ms": 4.0, "error": "no"}}
    )
    assert (report.world_size, report.findings, report.account) == (1, (), None)
    account = CheckReport.from_dict({"account": {"step_ms": 4, "top_lines": [{"site": "a:1"}]}})
    assert account.account is not None and account.account.step_ms == 4.0
    assert account.account.top_lines[0].site == "a:1" and account.account.attainable == ""
