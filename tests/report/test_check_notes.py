"""check's own notes (a measurement of ours that failed; the script went on): built into the
report, where the user reads them (``report.txt``'s ``torchdoctor note:`` lines and
``report.json``'s ``notes``), and never written into the run's record."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.rules.run_records import record
from torchdoctor.commands.check.publish import report_text
from torchdoctor.commands.check.summary import build_report
from torchdoctor.record.run import RunRecord
from torchdoctor.rules import probe_effect


def test_a_probe_effect_that_fails_is_a_note_of_the_report_not_of_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(probe_effect, "measure", boom)
    rec = {**record(), "notes": ["the sync watcher stopped: OSError"]}
    before = copy.deepcopy(rec)
    doc, analysis, merged = build_report({0: rec}, None, 1)
    said = "the probe effect could not be measured: RuntimeError: boom"
    assert doc["notes"] == ["the sync watcher stopped: OSError", said]
    assert rec == before  # the record as the run wrote it
    text = report_text(tmp_path, doc, RunRecord.from_dict(rec), analysis, merged)
    assert f"torchdoctor note: {said}\n" in text
    assert "torchdoctor note: the sync watcher stopped: OSError\n" in text
    # measured (or no clean window to measure): no note
    monkeypatch.undo()
    assert build_report({0: record()}, None, 1)[0]["notes"] == []
