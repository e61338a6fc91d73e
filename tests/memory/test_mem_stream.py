"""The streaming reader: same objects as pickle.loads on plain data, and bounded state."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.memory.snapshot_writer import repeated, write_snapshot
from torchdoctor.memory.ingest import HolderTable
from torchdoctor.memory.shape import HANDED
from torchdoctor.memory.stream import StreamingReader

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=300),
)
plain = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=1200),
        st.tuples(kids, kids),
        st.tuples(kids),
        st.dictionaries(st.text(max_size=8), kids, max_size=6),
    ),
    max_leaves=2500,
)


def _stream(data: bytes) -> Any:
    reader = StreamingReader(lambda k, e: None, lambda memo, start: None, lambda ops, memo: -1)
    return reader.run(io.BytesIO(data), Path("x.pickle"))


@settings(max_examples=60, deadline=None)
@given(value=plain, protocol=st.integers(min_value=2, max_value=5))
def test_same_objects_as_pickle_loads(value: Any, protocol: int) -> None:
    data = pickle.dumps(value, protocol=protocol)
    assert _stream(data) == pickle.loads(data)


def test_shared_objects_stay_shared() -> None:
    shared = ["a", 1]
    out = _stream(pickle.dumps({"x": shared, "y": shared, "z": (shared,)}, protocol=4))
    assert out["x"] is out["y"] is out["z"][0]


def _live_memo_slots(path: Path) -> int:
    holders = HolderTable()
    reader = StreamingReader(
        lambda k, e: holders.of_frames(e.get("frames")), holders.sweep, holders.of_ops
    )
    with path.open("rb") as f:
        reader.run(f, path)
    # handed-over entries and classified frames lists leave a marker or a holder id behind
    return sum(
        1 for v in reader.memo if v is not None and v is not HANDED and not isinstance(v, int)
    )


@pytest.mark.slow
def test_state_does_not_grow_with_the_history(tmp_path: Path, gpt_raw: dict[str, Any]) -> None:
    """Objects kept after reading 2 or 6 copies of the history: the same (entries are dropped)."""
    sizes = []
    for copies in (2, 6):
        path = tmp_path / f"r{copies}.pickle"
        with path.open("wb") as f:
            write_snapshot(f, gpt_raw, [repeated(gpt_raw["device_traces"][0], copies)])
        sizes.append(_live_memo_slots(path))
    assert sizes[0] == sizes[1]
