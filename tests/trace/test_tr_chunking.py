"""Cutting the events array into chunks never changes what is read, wherever the cuts land."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.trace.tr_reference import assert_matches
from torchdoctor.trace import parallel, reader
from torchdoctor.trace.events import Event, Instant
from torchdoctor.trace.load import iter_event_chunks, load_trace


def event(i: int, name: str = "aten::add", **extra: Any) -> dict[str, Any]:
    base = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": 100 + i, "dur": 1}
    return base | extra


# Names that look like event boundaries to a byte search.
TRICKY = ['a},{"ph": "X"', "},{", '}, {"ts": 1}', 'x}\\"},{y', "]}", "[memory]"]
EVENTS = [event(i, TRICKY[i % len(TRICKY)]) for i in range(60)] + [
    event(60, args={"nested": [{"a": 1}, {"b": {"c": [{}]}}], "correlation": 5}),
    event(61, args={"Input type": ["float", "c10::BFloat16"], "External id": 3}),
]


def _write(path: Path, text: str, gz: bool = False) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("chunk", [16, 37, 64, 200, 1 << 20])
@pytest.mark.parametrize("workers", [False, True])
@pytest.mark.parametrize("indent", [None, 2])
def test_cuts_inside_strings_and_nested_objects(
    chunk: int, workers: bool, indent: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")  # a worker even on a busy machine
    doc = {"schemaVersion": 1, "traceEvents": EVENTS, "traceName": "a]b", "x": [{"y": "]"}]}
    path = _write(tmp_path / "t.json.gz", json.dumps(doc, indent=indent), gz=True)
    table = load_trace(path, parallel=workers)
    assert_matches(table, EVENTS)
    assert table.meta.top_level["traceName"] == "a]b"
    assert table.meta.top_level["x"] == [{"y": "]"}]


@pytest.mark.parametrize("closing", ["]", "", ",", ",\n", "]\n\n"])
@pytest.mark.parametrize("chunk", [32, 1 << 20])
def test_bare_array_with_and_without_closing_bracket(
    closing: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    text = "[" + ",\n".join(json.dumps(e) for e in EVENTS) + closing
    table = load_trace(_write(tmp_path / "t.json", text), parallel=False)
    assert_matches(table, EVENTS)


def test_byte_order_mark_and_keys_after_the_array(tmp_path: Path) -> None:
    text = "\ufeff" + json.dumps({"traceEvents": EVENTS[:3], "distributedInfo": {"rank": 5}})
    table = load_trace(_write(tmp_path / "t.json", text))
    assert table.meta.rank == 5 and len(table) == 3


def test_empty_events_array_gives_an_empty_table(tmp_path: Path) -> None:
    table = load_trace(_write(tmp_path / "t.json", '{"traceEvents": [ ]}'))
    assert len(table) == 0 and len(table.memory) == 0


@pytest.mark.parametrize(
    ("file_name", "dist", "rank"),
    [
        ("rank-3.json", None, 3),
        ("trainer_rank_12.pt.trace.json", None, 12),
        ("worker0.1623143089861.pt.trace.json", None, None),
        ("rank-3.json", {"rank": 7, "world_size": 8, "backend": "nccl"}, 7),
    ],
)
def test_rank_from_distributed_info_or_file_name(
    file_name: str, dist: dict[str, Any] | None, rank: int | None, tmp_path: Path
) -> None:
    doc: dict[str, Any] = {"traceEvents": EVENTS[:2]}
    if dist:
        doc["distributedInfo"] = dist
    table = load_trace(_write(tmp_path / file_name, json.dumps(doc)))
    assert table.meta.rank == rank
    assert table.meta.world_size == (dist or {}).get("world_size")


def _double(chunk: bytearray) -> int:
    if os.getpid() != PARENT and chunk.startswith(b"[3"):
        os._exit(9)  # the worker dies on this chunk
    return int(bytes(chunk).strip(b"[]")) * 2


PARENT = os.getpid()


def test_worker_death_falls_back_to_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    chunks = [bytearray(b"[%d]" % i) for i in range(10)]
    out = list(parallel.ordered_map(_double, chunks))
    assert [bytes(c) for c, _ in out] == [bytes(c) for c in chunks]
    assert [r for _, r in out] == [2 * i for i in range(10)]


def test_stopping_early_reaps_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    workers: list[Any] = []
    enter = parallel._Worker.__enter__

    def record(self: Any) -> Any:
        workers.append(enter(self))
        return workers[-1]

    monkeypatch.setattr(parallel._Worker, "__enter__", record)
    gen = parallel.ordered_map(_double, (bytearray(b"[%d]" % i) for i in range(100)))
    assert next(gen)[1] == 0
    gen.close()  # a TraceError in the consumer closes the generator the same way
    assert len(workers) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(workers[0].pid, os.WNOHANG)  # already reaped: not even a zombie is left


def test_event_chunks_api_yields_every_event_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", 50)
    doc = {"traceEvents": [*EVENTS, {"ph": "i", "name": "[memory]", "ts": 3}, 5], "traceName": "t"}
    path = _write(tmp_path / "t.json", json.dumps(doc))
    stats = reader.ReadStats()
    events = [e for chunk in iter_event_chunks(path, stats) for e in chunk]
    assert [e.name for e in events if type(e) is Event] == [e["name"] for e in EVENTS]
    assert [e.ts for e in events if type(e) is Instant] == [3]
    assert stats.malformed_events == 1 and stats.top_level["traceName"] == "t"
