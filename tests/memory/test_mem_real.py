"""The real snapshot of a compiled GPT training step (figures from ../shared/snapshots/MANIFEST.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from torchdoctor.cli import cli
from torchdoctor.memory.analysis import BEFORE_HISTORY, analyze_snapshot, memory_series
from torchdoctor.report.memory_text import render_json

MIB = 1 << 20


def test_segment_sums_match_manifest_and_raw_data(
    gpt_snapshot: Path, gpt_raw: dict[str, Any]
) -> None:
    seg = analyze_snapshot(gpt_snapshot).devices[0].segments
    raw = gpt_raw["segments"]
    assert seg.segments == 96
    assert {c.size_class: c.segments for c in seg.by_class} == {"large": 67, "small": 29}
    assert seg.reserved_bytes == sum(s["total_size"] for s in raw) == 4042 * MIB
    assert seg.allocated_bytes == sum(
        b["size"] for s in raw for b in s["blocks"] if b["state"] == "active_allocated"
    )
    assert round(seg.allocated_bytes / MIB) == 2931
    assert seg.free_bytes == seg.reserved_bytes - seg.allocated_bytes
    assert seg.largest_free_block_bytes == max(
        b["size"] for s in raw for b in s["blocks"] if b["state"] == "inactive"
    )


def test_peak_replay_agrees_with_an_independent_replay(
    gpt_snapshot: Path, gpt_raw: dict[str, Any]
) -> None:
    h = analyze_snapshot(gpt_snapshot).devices[0].history
    assert h is not None and h.entries == 6486
    assert h.actions == {"alloc": 2162, "free_requested": 2162, "free_completed": 2162}
    level = top = 0
    top_at = -1
    for i, e in enumerate(gpt_raw["device_traces"][0]):
        level += {"alloc": e["size"], "free_requested": -e["size"]}.get(e["action"], 0)
        if level > top:
            top, top_at = level, i
    assert h.peak_allocated_bytes - h.baseline_allocated_bytes == top
    assert h.peak_entry == top_at
    # every allocation live at the end is an allocated block of the snapshot
    assert h.consistent and h.unmatched_live_blocks == 0
    assert 0 <= h.baseline_allocated_bytes <= 2931 * MIB


def test_top_holders_are_the_optimizer_step_and_the_compiled_forward(gpt_snapshot: Path) -> None:
    h = analyze_snapshot(gpt_snapshot).devices[0].history
    assert h is not None
    named = [r for r in h.holders_at_peak if r.label != BEFORE_HISTORY]
    assert named[0].label.startswith("optimizer.py:") and named[0].category == "optimizer state"
    assert any(
        r.label == "compiled graph of model.py:41 (forward)" and r.category == "activations"
        for r in named
    )
    assert all("torch/" not in r.label and "torchinductor" not in r.label for r in named)
    assert sum(r.live_bytes for r in h.holders_at_peak) == h.peak_allocated_bytes
    assert sum(h.categories_at_peak.values()) == h.peak_allocated_bytes


def test_fragmentation_is_low_here_so_no_fix(gpt_snapshot: Path) -> None:
    d = analyze_snapshot(gpt_snapshot).devices[0]
    # 1.1 GiB cached, but 32 whole empty segments hold most of it: the split part is ~4%
    assert d.segments.empty_segments == 32
    assert d.segments.split_free_bytes < 0.05 * d.segments.reserved_bytes
    assert not d.fragmentation_matters and d.fixes == ()


def test_streaming_reader_gives_the_same_report(gpt_snapshot: Path) -> None:
    whole = json.loads(render_json(analyze_snapshot(gpt_snapshot, stream=False)))
    streamed = json.loads(render_json(analyze_snapshot(gpt_snapshot, stream=True)))
    assert streamed.pop("streamed") is True and whole.pop("streamed") is False
    assert streamed == whole


def test_series_for_drawing_keeps_the_peak(gpt_snapshot: Path) -> None:
    h = analyze_snapshot(gpt_snapshot).devices[0].history
    series = memory_series(gpt_snapshot)[0]
    assert h is not None and 100 < len(series) <= 2048
    assert max(p.allocated_bytes for p in series) == h.peak_allocated_bytes
    assert all(p.reserved_bytes == 4042 * MIB for p in series)  # no segment_alloc/free recorded
    assert [p.time_us for p in series] == sorted(p.time_us for p in series)


def test_cli_text_and_json(gpt_snapshot: Path) -> None:
    runner = CliRunner()
    text = runner.invoke(cli, ["memory", str(gpt_snapshot)])
    assert text.exit_code == 0, text.output
    assert "reserved 3.95 GiB, allocated 2.86 GiB" in text.output
    assert "compiled graph of model.py:41 (forward)" in text.output
    out = runner.invoke(cli, ["memory", str(gpt_snapshot), "--json"])
    data = json.loads(out.output)
    assert data["devices"][0]["segments"]["reserved_bytes"] == 4042 * MIB
    assert (
        data["devices"][0]["history"]["peak_allocated_bytes"]
        > data["devices"][0]["segments"]["allocated_bytes"]
    )


def test_the_command_never_imports_torch(gpt_snapshot: Path) -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from torchdoctor.cli import cli\n"
        f"r = CliRunner().invoke(cli, ['memory', {str(gpt_snapshot)!r}, '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
