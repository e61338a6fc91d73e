"""``memory`` on hostile snapshots, by both readers: the same verdict from each, one line on bad
input, and work and memory bounded by what the file really holds."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import snapshots as S
from tests.hostile.limits import one_line_error, run, strings
from tests.memory import synth

READERS = ("--no-stream", "--stream")

# name -> (bytes, what the refusal says; None: a report)
CASES: dict[str, tuple[Callable[[], bytes], str | None]] = {
    "deep-tuple-key": (S.deep_tuple_key, "tuples nested more than"),
    "deep-list-size": (S.deep_list_size, "size is a list"),
    "memo-bomb": (S.memo_bomb, "memo slot 4294967295"),
    "shared-segment": (S.shared_segment, "already listed"),
    "shared-entry": (S.shared_entry, "already listed"),
    "shared-trace-list": (S.shared_trace_list, "trace is the list of device 0"),
    "entry-is-a-list": (S.entry_is_list, "trace entry 0 of device 0 is a list"),
    "ints-as-segments": (lambda: S.ints_as_segments(400_000), "segment 0 is an int"),
    "long-string-claim": (S.long_string_claim, "truncated"),
    "size-inf": (S.field("entry.size", float("inf")), "size is a float"),
    "size-negative": (S.field("entry.size", -1), "negative"),
    "segment-size-huge": (S.field("segment.total_size", 2**70), "out of range"),
    "allocated-over-total": (S.field("segment.allocated_size", 1 << 40), "more bytes allocated"),
    "block-size-str": (S.field("block.size", "4096"), "size is a str"),
    "blocks-not-a-list": (S.field("segment.blocks", "x"), "blocks are a str"),
    "action-not-a-str": (S.field("entry.action", ["alloc"]), "has no action"),
    "device-str": (S.field("segment.device", "0"), "device is a str"),
    "frame-filename-int": (S.field("frame.filename", 5, name="call"), None),
    "frame-name-deep": (S.field("frame.name", [[[[["x"]]]]]), None),
    "frame-line-str": (S.field("frame.line", "12"), None),
    "frames-of-strings": (S.field("entry.frames", ["a frame", 5, None]), None),
    "frames-a-dict": (S.field("entry.frames", {"name": "x"}), None),
    "shared-frames": (S.shared_frames, None),
    "many-ooms": (lambda: S.many_ooms(50_000, 3_000), None),
    "rising-peaks": (lambda: S.rising_peaks(5_000, 100_000), None),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("snapshots")
    out = {}
    for name, (build, _) in CASES.items():
        out[name] = folder / f"{name}.pickle"
        out[name].write_bytes(build())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_reader_under_limits(files: dict[str, Path], name: str, reader: str) -> None:
    """Before: a segfault (deep tuple key), 4-12 GB (memo bomb), hangs (shared references,
    OOM logs), exit 1 (inf, wrong types), an empty report (a list of ints as segments)."""
    ran = run(["memory", str(files[name]), reader, "--json"], timeout_s=30, memory_mib=1536)
    needle = CASES[name][1]
    if needle is None:
        assert ran.code == 0, ran.stderr[-1000:]
        json.loads(ran.stdout)
    else:
        line = one_line_error(ran, 2, needle)
        if "(at byte" in line:  # the byte is the file's, not an offset into a read buffer
            at = int(line.rsplit("(at byte ", 1)[1].rstrip(")"))
            assert 0 <= at <= files[name].stat().st_size


def _verdict(path: Path, stream: bool) -> Any:
    """What one reader concludes: the JSON report (without the reader's name), or the refusal."""
    from torchdoctor.memory.analysis import analyze_ingested
    from torchdoctor.memory.errors import SnapshotError
    from torchdoctor.memory.ingest import ingest
    from torchdoctor.report.memory_text import render_json

    try:
        doc = json.loads(render_json(analyze_ingested(path, ingest(path, stream=stream))))
    except SnapshotError as exc:
        text = str(exc)
        return ("refused", text.split(" (at byte")[0])
    doc.pop("streamed", None)
    doc.pop("reader", None)
    return ("report", doc)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "deep-tuple-key"))
def test_both_readers_agree_on_every_case(files: dict[str, Path], name: str) -> None:
    assert _verdict(files[name], False) == _verdict(files[name], True)


def test_both_readers_agree_on_the_real_snapshot(gpt_snapshot: Path) -> None:
    assert _verdict(gpt_snapshot, False) == _verdict(gpt_snapshot, True)


# Odd values for every field the analysis reads, NaN and integers past 2**53 and 2**64 included.
ODD = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(0, 3), max_size=3),
    st.tuples(st.integers(0, 3)),
    st.just({"a": 1}),
)
SEG_KEYS = (
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "segment_type",
    "is_expandable",
    "blocks",
)
BLOCK_KEYS = ("address", "size", "state", "frames")
ENTRY_KEYS = ("action", "addr", "size", "time_us", "frames", "device_free")
FRAME_KEYS = ("name", "filename", "line")


@st.composite
def snapshot_doc(draw: st.DrawFn) -> Any:
    """A snapshot in torch's shape with some fields replaced by odd values or removed."""
    stack = synth.user_stack("/w/model.py", 7)
    blocks = [
        synth.block(
            (1 << 30) + i * 4096,
            4096,
            draw(st.sampled_from(["active_allocated", "inactive"])),
            stack,
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    seg = synth.segment(1 << 30, blocks)
    entries = [
        synth.entry(
            draw(
                st.sampled_from(
                    ["alloc", "free_requested", "free_completed", "oom", "segment_alloc"]
                )
            ),
            (1 << 30) + i * 4096,
            4096,
            i,
            stack,
        )
        for i in range(draw(st.integers(0, 5)))
    ]
    doc = S.snapshot(segments=[seg], traces=[entries])
    targets: list[tuple[dict[str, Any], tuple[str, ...]]] = [(seg, SEG_KEYS)]
    targets += [(b, BLOCK_KEYS) for b in blocks] + [(e, ENTRY_KEYS) for e in entries]
    targets += [(f, FRAME_KEYS) for f in stack]
    for _ in range(draw(st.integers(0, 3))):
        target, keys = draw(st.sampled_from(targets))
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()):
            target[key] = draw(ODD)
        else:
            target.pop(key, None)
    return doc


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=snapshot_doc(), protocol=st.integers(2, 5))
def test_generated_snapshots_get_one_verdict(
    doc: Any, protocol: int, tmp_path_factory: Any
) -> None:
    path = tmp_path_factory.mktemp("gen") / "s.pickle"
    path.write_bytes(pickle.dumps(doc, protocol=protocol))
    whole, streamed = _verdict(path, False), _verdict(path, True)
    assert whole == streamed
    if whole[0] == "report":  # an accepted snapshot never reports a negative or absurd size
        text = json.dumps(whole[1])
        assert "NaN" not in text and "Infinity" not in text


def test_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "s.pickle"
    os.mkfifo(fifo)
    one_line_error(run(["memory", str(fifo)], timeout_s=20), 2, "FIFO")


def test_frame_names_reach_the_terminal_inert(tmp_path: Path) -> None:
    hostile = "\x1b]0;owned\x07\x1b[2J\x9b31m"
    path = tmp_path / "s.pickle"
    path.write_bytes(S.field("frame.filename", f"/w/{hostile}.py")())
    ran = run(["memory", str(path)], timeout_s=30)
    assert ran.code == 0, ran.stderr
    assert not any(c in ran.stdout for c in "\x1b\x07\x9b"), repr(ran.stdout[:400])
    assert "\\x1b]0;owned" in ran.stdout
    exact = run(["memory", str(path), "--json"], timeout_s=30)
    assert any(hostile in text for text in strings(json.loads(exact.stdout)))  # exact in JSON
