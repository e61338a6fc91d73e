"""Bad and hostile snapshot files: one line on stderr, exit status 2, and no code ever runs."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.memory import synth

READERS = ["--no-stream", "--stream"]


def _run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", "memory", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TORCHDOCTOR_DEBUG": ""},
    )


def _one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchdoctor: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


class _Payload:
    """Pickles as a call of os.system that would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("reader", READERS)
def test_hostile_payload_never_runs(tmp_path: Path, reader: str) -> None:
    marker = tmp_path / "PWNED"
    # the payload control itself works: plain pickle.load would run it
    probe = tmp_path / "probe.pickle"
    probe.write_bytes(pickle.dumps(_Payload(tmp_path / "probe-ran")))
    pickle.loads(probe.read_bytes())
    assert (tmp_path / "probe-ran").exists()

    hostile = tmp_path / "hostile.pickle"
    entries = [synth.entry("alloc", 4096, 512, 1), _Payload(marker)]
    synth.write(hostile, [], [entries])  # the payload sits inside device_traces, after a real entry
    proc = _run(hostile, reader)
    _one_line_error(proc, "refusing to load", "hostile")
    assert not marker.exists()


@pytest.mark.parametrize("reader", READERS)
def test_empty_file(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "empty.pickle"
    path.write_bytes(b"")
    _one_line_error(_run(path, reader), "empty")


@pytest.mark.parametrize("reader", READERS)
def test_not_a_pickle(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": []}')
    _one_line_error(_run(path, reader), "not a pickle")


@pytest.mark.parametrize("reader", READERS)
def test_truncated(tmp_path: Path, reader: str, gpt_snapshot: Path) -> None:
    path = tmp_path / "cut.pickle"
    path.write_bytes(gpt_snapshot.read_bytes()[:700_000])
    _one_line_error(_run(path, reader), "truncated")


@pytest.mark.parametrize("reader", READERS)
def test_pickle_of_a_list(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "segments.pickle"
    path.write_bytes(pickle.dumps([synth.segment(0, [synth.block(0, 2 << 20, "inactive")])]))
    _one_line_error(_run(path, reader), "holds a list", "_dump_snapshot")


@pytest.mark.parametrize("reader", READERS)
def test_dict_without_segments(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "other.pickle"
    path.write_bytes(pickle.dumps({"weights": [1.0, 2.0]}))
    _one_line_error(_run(path, reader), "no 'segments'")


def test_missing_file(tmp_path: Path) -> None:
    _one_line_error(_run(tmp_path / "nope.pickle"), "no such file")


@pytest.mark.parametrize("reader", READERS)
def test_no_history_says_how_to_record_it(tmp_path: Path, reader: str) -> None:
    path = synth.write(
        tmp_path / "nohist.pickle",
        [
            synth.segment(
                1 << 30,
                [
                    synth.block(1 << 30, 4 << 20, "active_allocated"),
                    synth.block((1 << 30) + (4 << 20), 16 << 20, "inactive"),
                ],
            )
        ],
        [[]],
    )
    proc = _run(path, reader)
    assert proc.returncode == 0, proc.stderr
    assert "no allocation history in this snapshot (recording was off)" in proc.stdout
    assert "_record_memory_history(stacks='python')" in proc.stdout
    assert "reserved 20 MiB, allocated 4 MiB" in proc.stdout
