"""``torchdoctor analyze`` on bad and odd traces: one line and exit 2, or a report that parses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import TRACES
from tests.trace.test_tr_bad_inputs import BAD_FILES, event
from torchdoctor.cli import cli

# The CLI reads a folder as one trace per rank, so an empty folder has its own message.
CLI_WORDS = {"directory": "no .json or .json.gz trace files"}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    make, words = BAD_FILES[case]
    words = CLI_WORDS.get(case, words)
    path = make(tmp_path)
    result = CliRunner().invoke(cli, ["analyze", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert lines[0].startswith("torchdoctor: error: ")
    assert "Traceback" not in result.output


def test_odd_events_still_give_a_json_report_with_notes(tmp_path: Path) -> None:
    events = [
        event(ts=0, dur=-3),
        event(ts=5, cat="brand_new_cat"),
        {"ph": "X", "name": "no time"},
        event(ts=9, name="y" * (1 << 20)),
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = CliRunner().invoke(cli, ["analyze", "--json", str(path)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    notes = " ".join(map(str, report["notes"]))
    for words in ("negative durations", "brand_new_cat", "malformed"):
        assert words in notes


def test_real_process_bad_input_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "t.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    proc = subprocess.run(
        [sys.executable, "-m", "torchdoctor", "analyze", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "gzip" in proc.stderr
    assert proc.stdout == ""


def test_real_process_json_report_parses() -> None:
    trace = TRACES / "a100_event_sync_micro.json.gz"
    if not trace.is_file():
        pytest.skip(f"corpus trace {trace} not found (set TORCHDOCTOR_TRACES)")
    proc = subprocess.run(
        [sys.executable, "-m", "torchdoctor", "analyze", "--json", str(trace)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["source"]["events"] > 0
    assert report["hta_compatible"]["idle_pct"] == pytest.approx(78.71, abs=1.0)


def test_analyze_pauses_the_collector_only_while_it_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector is off while the analyses are imported (not in the forked helper, not in
    the analysis, not after an error); a collector the caller had turned off stays off."""
    import gc
    import types

    from torchdoctor.commands.analyze import command

    seen: list[tuple[str, bool]] = []

    def analyze_path(*_: object) -> None:
        seen.append(("analysis", gc.isenabled()))
        raise RuntimeError("stop")

    def imported(name: str) -> object:  # `from ... import analyze_path` asks the module
        if name != "analyze_path":
            raise AttributeError(name)
        seen.append(("import", gc.isenabled()))
        return analyze_path

    fake = types.ModuleType("torchdoctor.commands.analyze.trace")
    fake.__getattr__ = imported  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setattr(
        "torchdoctor.trace.prefetch.prefetch", lambda _p: seen.append(("helper", gc.isenabled()))
    )
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": []}))
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="stop"):
        command.run(command.AnalyzeOptions(path=str(trace)))
    assert seen == [("helper", True), ("import", False), ("analysis", True)]
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="stop"):
            command.run(command.AnalyzeOptions(path=str(trace)))
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("console_script", [True, False])
def test_the_console_script_freezes_what_analyze_imported(
    console_script: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the console script the objects alive when the analyses are imported are frozen
    before the analysis runs (its first collections would walk them all); in a caller's
    process (the console script flag off) nothing is frozen."""
    import gc
    import types

    from torchdoctor import exits
    from torchdoctor.commands.analyze import command

    frozen: list[int] = []

    def analyze_path(*_: object) -> None:
        frozen.append(gc.get_freeze_count())
        raise RuntimeError("stop")

    fake = types.ModuleType("torchdoctor.commands.analyze.trace")
    fake.analyze_path = analyze_path  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setattr("torchdoctor.trace.prefetch.prefetch", lambda _p: None)
    monkeypatch.setattr(exits, "console_script", console_script)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": []}))
    before = gc.get_freeze_count()
    try:
        with pytest.raises(RuntimeError, match="stop"):
            command.run(command.AnalyzeOptions(path=str(trace)))
    finally:
        gc.unfreeze()
    # an in-process `check` earlier in the same pytest process may have frozen objects already
    assert (frozen[0] > before) is console_script, (before, frozen)


NUMPY_IMPORTER = """
import sys
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            frame = sys._getframe(1)
            while "torchdoctor" not in frame.f_code.co_filename:
                frame = frame.f_back
            sys.stderr.write(f"numpy from {frame.f_code.co_filename}:{frame.f_code.co_name}\\n")
        return None
sys.meta_path.insert(0, Probe())
sys.argv = ["torchdoctor"] + sys.argv[1:]
from torchdoctor.cli import main
main()
"""


def test_analyze_imports_numpy_from_its_command_not_from_deep_in_the_analyses() -> None:
    """The first import of numpy is the command's own, a few frames deep, so its deep call
    chains stay inside CPython's first frame-stack block (see ``commands.analyze.command.run``)."""
    trace = TRACES / "a100_event_sync_micro.json.gz"
    if not trace.is_file():
        pytest.skip(f"corpus trace {trace} not found (set TORCHDOCTOR_TRACES)")
    proc = subprocess.run(
        [sys.executable, "-c", NUMPY_IMPORTER, "analyze", "--json", str(trace)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    importers = [line for line in proc.stderr.splitlines() if line.startswith("numpy from ")]
    assert len(importers) == 1, proc.stderr
    assert importers[0].endswith("commands/analyze/command.py:run"), importers
