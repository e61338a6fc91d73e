"""Inputs that are not traces fail with one TraceError line; odd events are kept, fixed or noted."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.trace.tr_reference import assert_matches
from torchdoctor.errors import TraceError
from torchdoctor.trace import reader
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.load import load_trace


def event(name: str = "aten::mm", ts: Any = 10, dur: Any = 5, **extra: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": 2,
        "ts": ts,
        "dur": dur,
    } | extra


EVENTS = [event(ts=10 + 20 * i) for i in range(50)]
GOOD = json.dumps({"schemaVersion": 1, "traceEvents": EVENTS, "traceName": "x"}).encode()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# name -> (file builder, words the message must contain)
BAD_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "missing file": (lambda d: d / "nope.json", "no such file"),
    "directory": (lambda d: d, "is a directory"),
    "empty file": (lambda d: _write(d / "t.json", b""), "empty file"),
    "only blanks": (lambda d: _write(d / "t.json", b" \n\t "), "empty file"),
    "empty gzip": (lambda d: _write(d / "t.json.gz", gzip.compress(b"")), "empty file"),
    "truncated gzip": (
        lambda d: _write(d / "t.json.gz", gzip.compress(GOOD)[:-40]),
        "corrupt or truncated gzip",
    ),
    "corrupt gzip": (
        lambda d: _write(d / "t.json.gz", gzip.compress(GOOD)[:20] + b"\x00" * 200),
        "gzip",
    ),
    "truncated JSON": (lambda d: _write(d / "t.json", GOOD[: len(GOOD) // 2]), "truncated"),
    "truncated inside a number": (  # cut as a copy interrupted mid-write would be
        lambda d: _write(d / "t.json", GOOD[: GOOD.rindex(b'"ts": ') + 8]),
        "truncated",
    ),
    "truncated after key": (
        lambda d: _write(d / "t.json", b'{"traceEvents":   '),
        "truncated JSON after traceEvents",
    ),
    "invalid JSON in events": (
        lambda d: _write(d / "t.json", GOOD.replace(b'"ts": 30,', b'"ts": 30 x,')),
        "invalid JSON",
    ),
    "invalid JSON header": (lambda d: _write(d / "t.json", b'{"a": tru'), "invalid JSON"),
    "not JSON": (lambda d: _write(d / "t.json", b"PK\x03\x04 a zip file"), "not a JSON trace"),
    "no traceEvents": (
        lambda d: _write(d / "t.json", b'{"schemaVersion": 1, "x": [1, 2]}'),
        "no traceEvents",
    ),
    "traceEvents not an array": (
        lambda d: _write(d / "t.json", b'{"traceEvents": {"ph": "X"}}'),
        "traceEvents is not an array",
    ),
    "binary garbage": (lambda d: _write(d / "t.json", bytes(range(256)) * 10), "not a JSON"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
@pytest.mark.parametrize("chunk", [1 << 20, 64])
def test_bad_file_raises_one_line_trace_error(
    case: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    make, words = BAD_FILES[case]
    path = make(tmp_path)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert words in message
    assert "\n" not in message and message.startswith(str(path))


def test_negative_durations_are_clamped_and_noted(tmp_path: Path) -> None:
    events = [event(ts=0, dur=-3), event(ts=5, dur=2), event(ts=9, dur=-1.5)]
    table = load_trace(_write(tmp_path / "t.json", json.dumps(events).encode()))
    assert table.dur.tolist() == [0.0, 2.0, 0.0]
    assert "clamped 2 negative durations to 0" in table.notes


def test_unknown_categories_are_kept_as_other_and_noted(tmp_path: Path) -> None:
    events = [event(cat="my_cat"), event(ts=20, cat="kernel"), event(ts=30, cat="zz_new")]
    table = load_trace(_write(tmp_path / "t.json", json.dumps(events).encode()))
    assert table.kind.tolist() == [Kind.OTHER, Kind.KERNEL, Kind.OTHER]
    assert any("my_cat, zz_new" in n and "'other'" in n for n in table.notes)


def test_events_missing_fields_or_with_wrong_types_are_skipped_or_defaulted(
    tmp_path: Path,
) -> None:
    events: list[Any] = [
        event(ts=1),
        {"ph": "X", "name": "no ts", "dur": 3},  # skipped: cannot be placed in time
        event(ts="soon"),  # skipped
        event(ts=True),  # skipped: a bool is not a time
        7,  # not an event object: skipped
        "text",  # skipped
        {"ph": "X", "ts": 4},  # name, cat, dur, pid, tid default
        event(ts=5, dur="long", pid=[1], tid={"a": 1}, cat=3),  # odd fields default
        event(ts=6, args={"correlation": "12", "External id": 2.9, "stream": "s", "device": True}),
        event(ts=7, args=[1, 2]),  # args not an object: defaults
    ]
    table = load_trace(_write(tmp_path / "t.json", json.dumps(events).encode()))
    assert_matches(table, events)
    assert len(table) == 5
    assert "skipped 5 malformed events" in table.notes
    assert table.corr.tolist() == [-1, -1, -1, 12, -1]
    assert table.ext_id.tolist() == [-1, -1, -1, 2, -1]


def test_huge_name_survives_small_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)  # the event is 250 reads long
    huge = "x" * (1 << 20)
    events = [event(ts=1), event(name=huge, ts=2), event(ts=3)]
    table = load_trace(_write(tmp_path / "t.json", json.dumps({"traceEvents": events}).encode()))
    assert [table.names[c] for c in table.name] == ["aten::mm", huge, "aten::mm"]
