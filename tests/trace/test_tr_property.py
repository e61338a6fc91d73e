"""Property: on any generated event list, in any layout and chunking, the loader either returns
exactly the brute-force reference table or (for broken files only) raises TraceError."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trace.tr_reference import assert_matches, memory_count
from torchdoctor.errors import TraceError
from torchdoctor.trace import reader
from torchdoctor.trace.load import load_trace
from torchdoctor.trace.parallel import ENV_PARALLEL

# Text that looks like JSON structure to a byte search, plus ordinary text.
TRICKY = st.sampled_from(['},{"ph": "X"}', "}, {", "]", "[", '\\"', "traceEvents", "[memory]", ""])
TEXT = st.one_of(TRICKY, st.text(st.characters(exclude_categories=("Cs",)), max_size=12))
INT = st.integers(-(2**63), 2**64 - 1)
# Past 2**53 a double rounds; past 1.8e308 it overflows (msgspec keeps such an int exact).
HUGE = st.one_of(st.integers(2**53, 2**70), st.sampled_from([10**400, -(10**309), 2**1024]))
NUMBER = st.one_of(st.integers(-(2**40), 2**53), st.floats(-1e15, 1e15, allow_nan=False), HUGE)
# JSON has no NaN: it comes as a string (the lenient path reads numeric strings).
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(["abc", "7", "-2", "1e3", "", "nan", "NaN", "inf", "-inf", "1e400"]),
    st.just([]),
)
CATS = st.sampled_from(["cpu_op", "kernel", "gpu_memcpy", "cuda_runtime", "Kernel", "new_cat"])
ARG_KEYS = ("correlation", "External id", "device", "stream", "bytes", "Total Allocated")


@st.composite
def args(draw: st.DrawFn) -> dict[str, Any]:
    out = {k: draw(st.one_of(INT, NUMBER, ODD)) for k in draw(st.sets(st.sampled_from(ARG_KEYS)))}
    if draw(st.booleans()):
        out["nested"] = [{"a": draw(TEXT)}, {"b": [draw(TEXT)]}]
    return out


@st.composite
def event(draw: st.DrawFn) -> Any:
    """A plausible Kineto event, sometimes with fields missing or of the wrong type."""
    ph = draw(st.sampled_from(["X", "X", "X", "i", "f", "s", "M", "zz", 5]))
    ev: dict[str, Any] = {"ph": ph, "cat": draw(st.one_of(CATS, st.integers(0, 3)))}
    ev["name"] = "[memory]" if ph == "i" else draw(st.one_of(TEXT, st.integers(0, 5), st.none()))
    for key, value in (
        ("pid", st.one_of(st.integers(0, 2**40), TEXT, ODD)),
        ("tid", st.one_of(st.integers(-5, 2**40), st.sampled_from(["stream 7", "x"]), ODD)),
        ("ts", st.one_of(NUMBER, NUMBER, ODD)),
        ("dur", st.one_of(NUMBER, ODD)),
        ("args", st.one_of(args(), ODD)),
    ):
        if draw(st.integers(0, 9)):  # sometimes the field is missing
            ev[key] = draw(value)
    return ev


ITEMS = st.lists(st.one_of(event(), event(), event(), st.one_of(INT, TEXT, st.none())), max_size=25)


@st.composite
def trace_text(draw: st.DrawFn, events: list[Any]) -> str:
    """The events serialised as Kineto does or in another valid layout."""
    indent = draw(st.sampled_from([None, 0, 1, 2, "\t"]))
    seps = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n ", " : ")]))
    if draw(st.booleans()):
        body = json.dumps(events, indent=indent, separators=seps, allow_nan=False)
        return body if draw(st.booleans()) else body.rstrip().removesuffix("]")
    doc = {"schemaVersion": 1, "note": "traceEvents", "traceEvents": events}
    doc |= {"traceName": draw(TEXT), "x": [{"y": draw(TEXT)}]} if draw(st.booleans()) else {}
    return json.dumps(doc, indent=indent, separators=seps, allow_nan=False)


def _load(data: bytes, gz: bool, chunk: int, parallel: bool) -> Any:
    old = reader.CHUNK_BYTES
    reader.CHUNK_BYTES = chunk
    # parallel=True must really fork a worker, even on a busy machine
    os.environ[ENV_PARALLEL] = "1" if parallel else "0"
    fd, name = tempfile.mkstemp(suffix=".json.gz" if gz else ".json")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(gzip.compress(data, compresslevel=1) if gz else data)
        return load_trace(Path(name), parallel=parallel)
    finally:
        reader.CHUNK_BYTES = old
        os.environ.pop(ENV_PARALLEL, None)
        os.unlink(name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=ITEMS,
    data=st.data(),
    gz=st.booleans(),
    chunk=st.integers(8, 400),
)
@pytest.mark.slow
def test_valid_files_match_the_reference(
    events: list[Any], data: st.DataObject, gz: bool, chunk: int
) -> None:
    text = data.draw(trace_text(events))
    table = _load(text.encode(), gz, chunk, parallel=False)
    assert_matches(table, events)
    assert len(table.memory) == memory_count(events)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=ITEMS,
    data=st.data(),
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=3)), max_size=3),
    gz=st.booleans(),
    chunk=st.integers(8, 400),
)
@pytest.mark.slow
def test_damaged_files_raise_only_trace_error(
    events: list[Any],
    data: st.DataObject,
    cut: float,
    flips: list[tuple[float, bytes]],
    gz: bool,
    chunk: int,
) -> None:
    raw = bytearray(data.draw(trace_text(events)).encode())
    for where, junk in flips:
        pos = int(where * len(raw))
        raw[pos : pos + len(junk)] = junk
    raw = raw[: max(0, int(cut * len(raw) * 1.2))]  # a cut past the end keeps it whole
    if gz and data.draw(st.booleans()):  # a damaged gzip stream as well
        packed = gzip.compress(bytes(raw))
        packed = packed[: data.draw(st.integers(0, len(packed)))]
        raw, gz = bytearray(packed), False
    try:
        _load(bytes(raw), gz, chunk, parallel=False)
    except TraceError as exc:
        assert "\n" not in str(exc)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(event(), min_size=5, max_size=25), data=st.data())
def test_worker_process_gives_the_same_table(seed: int, events: list[Any], data: Any) -> None:
    text = data.draw(trace_text(events)).encode()
    table = _load(text, False, 64, parallel=True)
    assert_matches(table, events)
