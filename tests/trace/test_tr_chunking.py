"""Cutting the events array into chunks never changes what is read, wherever the cuts land."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trace.tr_reference import assert_matches
from torchdoctor.trace import load, parallel, prefetch, reader
from torchdoctor.trace.columns import chunk_columns
from torchdoctor.trace.events import BadChunk
from torchdoctor.trace.load import load_trace


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
        os._exit(9)  # the helper dies on this chunk
    return int(bytes(chunk).strip(b"[]")) * 2


PARENT = os.getpid()


def _helper(chunks: list[bytearray]) -> parallel.Helper:
    helper = parallel.start_helper(_double, lambda: chunks, 1 << 20)
    assert helper is not None and helper.alive
    return helper


def test_helper_death_falls_back_to_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    chunks = [bytearray(b"[%d]" % i) for i in range(10)]
    helper = _helper(chunks)
    _wait_for_exit(helper)  # it has sent chunks 0-2 and died on chunk 3
    out = list(parallel.ordered_map(_double, chunks, helper))
    assert [bytes(c) for c, _ in out] == [bytes(c) for c in chunks]
    assert [r for _, r in out] == [2 * i for i in range(10)]


def _slow_in_main(chunk: bytearray) -> int:
    if os.getpid() == PARENT:
        time.sleep(0.05)  # the main process is busy: the helper claims the chunks ahead
    return int(bytes(chunk).strip(b"[]")) * 2


def test_helper_shares_the_work_and_results_come_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    chunks = [bytearray(b"[%d]" % i) for i in range(40)]
    helper = parallel.start_helper(_slow_in_main, lambda: chunks, 1 << 20)
    assert helper is not None
    claimed = []
    claim = helper.claim

    def record(index: int) -> bool:
        mine = claim(index)
        claimed.append(mine)
        return mine

    monkeypatch.setattr(helper, "claim", record)
    out = list(parallel.ordered_map(_slow_in_main, chunks, helper))
    assert [r for _, r in out] == [2 * i for i in range(40)]
    assert claimed.count(False) >= 20  # the helper did most chunks while the main one slept


def test_a_helper_reading_another_file_is_not_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    chunks = [bytearray(b"[%d]" % i) for i in range(10)]
    other = [bytearray(b"[%d ]" % (i + 100)) for i in range(10)]  # the file changed under it
    helper = parallel.start_helper(_double, lambda: other, 1 << 20)
    assert helper is not None
    _wait_for_exit(helper)  # it has decoded every chunk of the other file
    out = list(parallel.ordered_map(_double, chunks, helper))
    assert [r for _, r in out] == [2 * i for i in range(10)]


def test_stopping_early_reaps_the_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    chunks = [bytearray(b"[%d]" % i) for i in range(100)]
    helper = _helper(chunks)
    pid = helper.pid
    gen = parallel.ordered_map(_double, chunks, helper)
    assert next(gen)[1] == 0
    gen.close()  # a TraceError in the consumer closes the generator the same way
    assert not helper.alive
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: not even a zombie is left


def test_prefetch_starts_the_helper_that_load_trace_then_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", 200)
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    path = _write(tmp_path / "t.json.gz", json.dumps({"traceEvents": EVENTS}), gz=True)
    prefetch.prefetch(path)
    started = prefetch._STARTED[str(path)]
    assert started.alive
    assert_matches(load_trace(path), EVENTS)
    assert str(path) not in prefetch._STARTED and not started.alive  # used, then stopped
    prefetch.prefetch(tmp_path)  # a folder: nothing to start
    prefetch.prefetch(tmp_path / "missing.json")
    assert not prefetch._STARTED


def test_chunks_the_helper_decoded_are_not_copied_and_are_read_again_if_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main process skips copying the chunks the helper has claimed; when one of them turns
    out to be cut inside an event (a name that looks like a boundary), its bytes are needed to
    join it with the next one, so the file is read again in one process: same table."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 64)
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    path = _write(tmp_path / "t.json.gz", json.dumps({"traceEvents": EVENTS}), gz=True)
    calls: list[bool] = []
    real = load.load_trace

    def spy(p: Any, parallel: bool = True) -> Any:
        calls.append(parallel)
        return real(p, parallel)

    skipped: list[int] = []
    real_split = reader._split_array

    def count(*args: Any) -> Any:
        for chunk in real_split(*args):
            skipped.append(isinstance(chunk, reader.Skipped))
            yield chunk

    monkeypatch.setattr(load, "load_trace", spy)
    monkeypatch.setattr(reader, "_split_array", count)
    prefetch.prefetch(path)
    _wait_for_exit(prefetch._STARTED[str(path)])  # it claims every chunk before we start
    assert_matches(load.load_trace(path), EVENTS)
    assert any(skipped)  # chunks were skipped, not copied
    assert calls == [True, False]  # and one of them was needed: read again, in one process


@pytest.mark.parametrize("odd", [False, True])
def test_memory_instants_read_the_same_on_the_lenient_path(tmp_path: Path, odd: bool) -> None:
    """An odd field anywhere sends the chunk down the untyped path; memory events (their own
    args struct) must come out the same as on the typed path."""
    mem = {"Total Allocated": 100, "Total Reserved": 256, "Device Id": 0, "Device Type": 1}
    events = [
        event(0),
        {"ph": "i", "name": "[memory]", "ts": 150, "pid": 1, "args": mem | {"Bytes": 64}},
        {"ph": "i", "name": "[memory]", "ts": 151, "args": mem | {"Bytes": "-32"}},
        event(2, pid=[1] if odd else 1),
    ]
    table = load_trace(_write(tmp_path / "t.json", json.dumps({"traceEvents": events})))
    assert table.memory.nbytes.tolist() == [64, -32]
    assert table.memory.total_reserved.tolist() == [256, 256]
    assert table.memory.device_type.tolist() == [1, 1]
    assert len(table) == 2


def _stuck_in_helper(chunk: bytearray) -> int:
    if os.getpid() != PARENT:
        time.sleep(3600)  # the helper hangs
    return int(bytes(chunk).strip(b"[]")) * 2


@pytest.mark.slow
def test_a_stuck_helper_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    monkeypatch.setattr(parallel, "_STALL_S", 0.5)
    chunks = [bytearray(b"[%d]" % i) for i in range(6)]
    helper = parallel.start_helper(_stuck_in_helper, lambda: chunks, 1 << 20)
    assert helper is not None
    pid = helper.pid
    time.sleep(0.2)  # the helper claims the first chunk and hangs on it
    out = list(parallel.ordered_map(_stuck_in_helper, chunks, helper))
    assert [r for _, r in out] == [2 * i for i in range(6)]
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped


def _raises_in_helper(chunk: bytearray) -> int:
    if os.getpid() != PARENT and chunk.startswith(b"[2"):
        raise ValueError("only in the helper")
    return int(bytes(chunk).strip(b"[]")) * 2


def test_a_chunk_the_helper_fails_on_is_done_by_the_main_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")
    chunks = [bytearray(b"[%d]" % i) for i in range(30)]
    helper = parallel.start_helper(_raises_in_helper, lambda: chunks, 1 << 20)
    assert helper is not None
    _wait_for_exit(helper)  # it has claimed (and failed on) chunks 2 and 20-29 before we start
    out = list(parallel.ordered_map(_raises_in_helper, chunks, helper))
    assert [r for _, r in out] == [2 * i for i in range(30)]


def _wait_for_exit(helper: parallel.Helper) -> None:
    """Wait until the helper has gone through every chunk and exited (it is reaped here)."""
    deadline = time.monotonic() + 30
    while os.waitpid(helper.pid, os.WNOHANG)[0] == 0:
        assert time.monotonic() < deadline, "the helper never finished"
        time.sleep(0.01)


def test_recorded_inputs_are_kept_unless_neither_end_has_them() -> None:
    """The loader skips its pass over the operators' inputs when neither the chunk's first nor
    its last such operator has them recorded; one without them at either end alone (an edited
    or merged trace) must not make it skip the others."""
    ops = [event(0, "aten::mm", args={"External id": 1}), event(1, "aten::add")]
    ops += [
        event(2, "aten::mm", args={"External id": 7, "Input type": ["float", "float"]}),
        event(3, "aten::add", args={"External id": 8, "Input Dims": [[4, 4], [4, 4]]}),
    ]
    for order in (ops, ops[2:] + ops[:2]):  # the recorded ones last, then first
        columns = chunk_columns(json.dumps(order, separators=(",", ":")).encode())
        assert not isinstance(columns, BadChunk)
        assert columns.input_types == {7: b'["float","float"]'}
        assert columns.shapes == {8: ("aten::add", b"[[4,4],[4,4]]", b"")}  # mm: no Input Dims
    unrecorded = chunk_columns(json.dumps(ops[:2]).encode())
    assert not isinstance(unrecorded, BadChunk)
    assert (unrecorded.input_types, unrecorded.shapes) == ({}, {})
