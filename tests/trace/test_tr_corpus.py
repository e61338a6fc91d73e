"""The loader on every recorded trace of the corpus, checked against the json module."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TRACES
from tests.trace.tr_reference import assert_matches, kind_counts, memory_count, read_events
from torchdoctor.trace import parallel, reader
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.load import load_trace

CORPUS = sorted(TRACES.glob("*.json.gz")) if TRACES.is_dir() else []
# The corpus's biggest files, where the chunking (and the worker) actually engage.
LARGE = ("v100_ddp_compiled_rank1",)


def _corpus_or_skip() -> list[Path]:
    if not CORPUS:
        pytest.skip(f"real-trace corpus not found at {TRACES} (set TORCHDOCTOR_TRACES)")
    return CORPUS


# Pinned numbers for the main benchmark trace, so a reference bug that agrees with a loader bug
# still fails: complete events per kind, [memory] events, (rank, world size, backend).
PINNED = {
    "v100_ddp_compiled_rank1.json.gz": (
        {"CPU_OP": 56680, "USER_ANNOTATION": 2035, "RUNTIME": 42373, "KERNEL": 19370}
        | {"MEMCPY": 2040, "MEMSET": 880, "TRACE": 1},
        28010,
        (1, 2, "nccl"),
    )
}


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in CORPUS] or ["(no corpus)"])
def test_every_corpus_file_loads_with_exact_columns(name: str) -> None:
    _corpus_or_skip()
    top, events = read_events(TRACES / name)
    table = load_trace(TRACES / name)
    want = assert_matches(table, events)
    counts = {Kind(k).name: int((table.kind == k).sum()) for k in np.unique(table.kind)}
    assert counts == {Kind(k).name: n for k, n in kind_counts(want).items()}
    assert len(table.memory) == memory_count(events)
    assert table.meta.json_bytes == len(gzip.decompress((TRACES / name).read_bytes()))
    dist = top.get("distributedInfo") or {}
    if "rank" in dist:
        assert table.meta.rank == dist["rank"]
        assert table.meta.world_size == dist.get("world_size")
    assert len(table.meta.devices) == len(top.get("deviceProperties") or [])
    if name in PINNED:
        kinds, memory, dist_info = PINNED[name]
        assert (counts, len(table.memory)) == (kinds, memory)
        assert (table.meta.rank, table.meta.world_size, table.meta.backend) == dist_info


@pytest.mark.slow
@pytest.mark.parametrize("stem", LARGE)
def test_plain_json_and_gzip_and_worker_give_the_same_table(
    stem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = TRACES / f"{stem}.json.gz"
    if not src.is_file():
        pytest.skip(f"corpus trace {src} not found (set TORCHDOCTOR_TRACES)")
    plain = tmp_path / f"{stem}.json"
    with gzip.open(src) as fin, plain.open("wb") as fout:
        shutil.copyfileobj(fin, fout)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 1 << 20)  # many chunks: both processes get work
    monkeypatch.setenv(parallel.ENV_PARALLEL, "1")  # a worker even on a busy machine
    serial = load_trace(src, parallel=False)
    for other in (load_trace(src, parallel=True), load_trace(plain, parallel=True)):
        for field in ("ts", "dur", "kind", "name", "pid", "tid", "corr", "ext_id", "stream"):
            assert np.array_equal(getattr(serial, field), getattr(other, field)), field
        assert (serial.names, serial.pids, serial.tids) == (other.names, other.pids, other.tids)
        assert serial.input_types == other.input_types
        assert np.array_equal(serial.memory.total_allocated, other.memory.total_allocated)
        assert serial.notes == other.notes
