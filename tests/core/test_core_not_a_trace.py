"""A JSON file with no valid trace event is bad input for ``analyze``: exit 2 and one line.

The loader itself still returns an empty table for such files (a folder of ranks skips them);
``analyze`` on one file refuses it instead of reporting a healthy, empty trace.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from torchdoctor.cli import cli
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.errors import TraceError

NOT_TRACES = {
    "a list of numbers": b"[1, 2, 3]",
    "empty traceEvents": b'{"traceEvents": []}',
    "only metadata events": b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}',
    "events without a time": b'{"traceEvents": [{"ph": "X", "name": "aten::mm", "dur": 3}]}',
}


@pytest.mark.parametrize("case", list(NOT_TRACES))
def test_not_a_trace_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(NOT_TRACES[case])
    result = CliRunner().invoke(cli, ["analyze", str(path)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("torchdoctor: error: ") and "no valid trace event" in line
    assert "Traceback" not in result.output
    with pytest.raises(TraceError, match=r"not a torch\.profiler trace"):
        analyze_path(path)


def test_one_valid_event_is_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'[{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": 3}]')
    assert analyze_path(path).analysis.n_steps == 1
