"""``torchdoctor memory --html``: the page model on the real snapshot and on synthetic ones, the
escaping of hostile frame names and settings, and the command's files and errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.memory import synth
from torchdoctor.cli import cli
from torchdoctor.memory.analysis import analyze_snapshot, memory_series
from torchdoctor.report.html import render_html
from torchdoctor.report.html_model import Page, Section, Table
from torchdoctor.report.memory_page import page_from_memory

MIB = 1 << 20
HOSTILE_FILE = "/w/<img src=x onerror=window.__pwned=1>.py"
HOSTILE_FUNC = "<script>window.__pwned=2</script>"
HOSTILE_CONF = '"><script>window.__pwned=3</script>'


def _page(path: Path) -> Page:
    return page_from_memory(analyze_snapshot(path), memory_series(path))


def _section(page: Page, sid: str) -> Section:
    return next(s for s in page.sections if s.id == sid)


def _row(table: Table, name: str) -> list[Any]:
    return next(row[1:] for row in table.rows if row[0] == name)


def _column(table: Table, name: str) -> list[Any]:
    j = table.columns.index(name)
    return [row[j] for row in table.rows]


def test_real_snapshot_summary_and_classes_match_the_raw_file(
    gpt_snapshot: Path, gpt_raw: dict[str, Any]
) -> None:
    page = _page(gpt_snapshot)
    summary = _section(page, "summary").tables[0]
    assert summary.columns == ["quantity", "GPU 0"]
    raw = gpt_raw["segments"]
    reserved = sum(s["total_size"] for s in raw)
    assert _row(summary, "reserved MiB") == [round(reserved / MIB, 2)] == [4042.0]
    allocated = sum(b["size"] for s in raw for b in s["blocks"] if b["state"] == "active_allocated")
    assert _row(summary, "allocated MiB") == [round(allocated / MIB, 2)]
    assert _row(summary, "history entries") == [len(gpt_raw["device_traces"][0])]
    classes = _section(page, "fragmentation-gpu0").tables[0]
    assert dict(zip(_column(classes, "size class"), _column(classes, "segments"), strict=True)) == {
        "large": 67,
        "small": 29,
    }
    assert not any(s.id.startswith("oom-") for s in page.sections)  # this run did not run out


@pytest.mark.slow
def test_real_snapshot_chart_spans_the_history_and_keeps_the_peak(
    gpt_snapshot: Path, gpt_raw: dict[str, Any]
) -> None:
    page = _page(gpt_snapshot)
    chart = _section(page, "time-gpu0").chart
    assert chart is not None and set(chart.lines) == {"allocated", "reserved"}
    times = [e["time_us"] for e in gpt_raw["device_traces"][0]]
    assert chart.x_ms[0] == 0.0
    assert chart.x_ms == sorted(chart.x_ms)
    assert chart.x_ms[-1] <= (max(times) - min(times)) / 1000
    assert chart.x_ms[-1] > 0.9 * (max(times) - min(times)) / 1000
    # the highest point drawn is the replay's peak, and the summary shows the same peak
    h = analyze_snapshot(gpt_snapshot).devices[0].history
    assert h is not None and max(chart.lines["allocated"]) == h.peak_allocated_bytes
    peak_mib = _row(_section(page, "summary").tables[0], "peak allocated MiB")[0]
    assert peak_mib == round(h.peak_allocated_bytes / MIB, 2)
    assert all(
        r >= a for a, r in zip(chart.lines["allocated"], chart.lines["reserved"], strict=True)
    )
    html = render_html(page)
    assert html.count('<svg class="memory"') == 1
    assert "<h2>Findings</h2>" not in html


def test_real_snapshot_holders_table_is_sortable_and_ranked(gpt_snapshot: Path) -> None:
    page = _page(gpt_snapshot)
    table = _section(page, "holders-gpu0").tables[0]
    live = _column(table, "live MiB")
    assert live == sorted(live, reverse=True) and len(live) > 3
    shares = _column(table, "share of the peak")
    assert 0 < sum(n.value for n in shares) <= 1.005
    assert all(n.text == f"{n.value * 100:.1f}%" for n in shares if n.value >= 0.001)
    assert any(
        "compiled graph of" in str(label) for label in _column(table, "holder (first user frame)")
    )
    html = render_html(page)
    assert '<table class="sortable" id="table-holders-0">' in html
    # numbers carry their value for the page's numeric sort
    assert re.search(r'<td class="num" data-v="[0-9.]+">', html)


def _hostile(path: Path) -> Path:
    stack = synth.user_stack(HOSTILE_FILE, 7, HOSTILE_FUNC)
    blocks = [
        synth.block(1 << 40, 64 * MIB, "active_allocated", stack),
        synth.block((1 << 40) + 64 * MIB, 64 * MIB, "inactive"),
    ]
    entries = [
        synth.entry("alloc", 1 << 40, 64 * MIB, 1, stack),
        synth.entry("oom", 0, 512 * MIB, 2, device_free=MIB),
    ]
    alloc = synth.settings(PYTORCH_CUDA_ALLOC_CONF=HOSTILE_CONF)
    return synth.write(path, [synth.segment(1 << 40, blocks)], [entries], alloc)


def test_hostile_frame_names_and_settings_stay_text(tmp_path: Path) -> None:
    page = _page(_hostile(tmp_path / "hostile.pickle"))
    labels = _column(_section(page, "holders-gpu0").tables[0], "holder (first user frame)")
    assert any(HOSTILE_FUNC in str(label) for label in labels)  # the model keeps the real name
    html = render_html(page)
    for raw in (HOSTILE_FUNC, "<img src=x", HOSTILE_CONF):
        assert raw not in html
    assert "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=window.__pwned=1&gt;.py:7" in html
    assert "&quot;&gt;&lt;script&gt;window.__pwned=3" in html
    assert html.count("<script") == 2  # the colour table and the page script, nothing else
    assert len(re.findall(r"<img\b", html)) == 0


def test_oom_section_and_fixes_on_a_fragmented_snapshot(tmp_path: Path) -> None:
    path = synth.fragmented_oom(tmp_path / "frag.pickle")
    page = _page(path)
    oom = _section(page, "oom-gpu0-1")
    assert "Requested 256 MiB; the device had 2 MiB free" in oom.paragraphs[0]
    assert "of which 1 GiB cached but unallocated" in oom.paragraphs[0]
    assert _column(oom.tables[0], "live MiB") == [1024.0]
    frag = _section(page, "fragmentation-gpu0")
    expected = [f.env for f in analyze_snapshot(path).devices[0].fixes]
    assert expected and [code for code, _ in frag.fixes] == expected
    assert frag.fixes[0][0].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    html = render_html(page)
    assert f'<button class="copy" type="button">copy</button><pre><code>{expected[0]}' in html


def test_no_history_gives_a_note_instead_of_a_chart(tmp_path: Path) -> None:
    blocks = [synth.block(1 << 40, 2 * MIB, "active_allocated")]
    path = synth.write(tmp_path / "nohist.pickle", [synth.segment(1 << 40, blocks)], [])
    page = _page(path)
    over = _section(page, "time-gpu0")
    assert over.chart is None and "No allocation history" in over.paragraphs[0]
    assert not any(s.id.startswith("holders-") for s in page.sections)
    assert '<svg class="memory"' not in render_html(page)


def test_cli_writes_the_page_beside_the_text_and_the_json(tmp_path: Path) -> None:
    snap = synth.fragmented_oom(tmp_path / "frag.pickle")
    out = tmp_path / "mem.html"
    text = CliRunner().invoke(cli, ["memory", str(snap), "--html", str(out)])
    assert text.exit_code == 0, text.output
    assert "OUT OF MEMORY" in text.stdout and f"wrote {out}" in text.stderr
    assert '<svg class="memory"' in out.read_text(encoding="utf-8")
    out.unlink()
    as_json = CliRunner().invoke(cli, ["memory", str(snap), "--json", "--html", str(out)])
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout)["devices"][0]["device"] == 0  # stdout stays pure JSON
    assert out.is_file()


def test_cli_unwritable_html_path_is_one_line_exit_2(tmp_path: Path) -> None:
    snap = synth.fragmented_oom(tmp_path / "frag.pickle")
    bad = tmp_path / "missing-folder" / "mem.html"
    res = CliRunner().invoke(cli, ["memory", str(snap), "--html", str(bad)])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchdoctor: error: cannot write the HTML")
    assert "Traceback" not in res.output


def test_two_devices_get_a_column_and_a_chart_each(tmp_path: Path) -> None:
    stack = synth.user_stack("/w/model.py", 12)
    segs, traces = [], []
    for dev, size_mib in ((0, 8), (1, 32)):
        addr = (1 << 40) + dev * (1 << 36)
        blocks = [synth.block(addr, size_mib * MIB, "active_allocated", stack)]
        segs.append(synth.segment(addr, blocks, device=dev))
        traces.append([synth.entry("alloc", addr, size_mib * MIB, 5 + dev, stack)])
    page = _page(synth.write(tmp_path / "two.pickle", segs, traces))
    summary = _section(page, "summary").tables[0]
    assert summary.columns == ["quantity", "GPU 0", "GPU 1"]
    assert _row(summary, "allocated MiB") == [8.0, 32.0]
    assert _row(summary, "peak allocated MiB") == [8.0, 32.0]
    assert render_html(page).count('<svg class="memory"') == 2
