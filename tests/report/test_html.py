"""The HTML page without a browser: self-contained, small, escaped, downsampled, and its
timeline agreeing with the breakdown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import corpus_file
from tests.core.synth import annotation, launched, write_trace
from tests.report.hostile import HOSTILE_KERNEL, HOSTILE_OP, write_hostile_trace
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.record.run import RunRecord
from torchdoctor.report.html import render_html
from torchdoctor.report.html_model import page_from_report
from torchdoctor.report.html_sources import page_from_check, page_from_tune
from torchdoctor.report.html_timeline import BINS, build_timeline

MAX_BYTES = 5 * 2**20


def _html(path: Path) -> str:
    return render_html(page_from_report(analyze_path(path)))


@pytest.mark.parametrize(
    "name", ["v100_ddp_compiled_rank1", "a100_recsys_train_rank3", "h100_qwen_0p5b_infer"]
)
def test_largest_corpus_traces_make_small_self_contained_pages(name: str) -> None:
    html = _html(corpus_file(name))
    assert len(html.encode()) < MAX_BYTES
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    # nothing that loads: no external scripts, styles, images, fonts or imports
    for pattern in (
        r"<script[^>]+src=",
        r"<link\b",
        r"<img\b",
        r"@import",
        r"url\(",
        r"@font-face",
    ):
        assert not re.search(pattern, html), pattern


def test_hostile_names_are_escaped_in_markup_and_data(tmp_path: Path) -> None:
    html = _html(write_hostile_trace(tmp_path / "h.json"))
    assert "<script>window.__pwned" not in html
    assert 'onerror="window.__pwned' not in html
    assert "<b>Fake GPU</b>" not in html and "&lt;b&gt;Fake GPU&lt;/b&gt;" in html
    assert html.count("<script") == html.count("</script>") == 3  # data, colours, the script
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;gemm_kernel" in html
    assert "\\u003cscript\\u003ewindow.__pwned=1" in html  # the timeline's JSON names
    assert HOSTILE_OP.replace('"', "&quot;") in html


def _many_tiny_kernels(path: Path, n: int) -> Path:
    """One 100 ms step: n 1-us kernels 0.5 us apart, then three long kernels."""
    ev: list[dict[str, Any]] = [annotation("ProfilerStep#1", 0.0, 100_000.0)]
    for i in range(n):
        ev += launched(f"tiny_{i % 7}", i * 1.5, i * 1.5 + 1.0, 1.0, i + 1)
    for j, start in enumerate((80_000.0, 85_000.0, 90_000.0)):
        ev += launched("long_gemm", start - 100, start, 2_000.0, n + 10 + j)
    return write_trace(path, ev)


@pytest.mark.slow
def test_timeline_merges_sub_pixel_events_and_keeps_long_ones(tmp_path: Path) -> None:
    a = analyze_path(_many_tiny_kernels(tmp_path / "big.json", 20_000)).analysis
    tl = build_timeline(a)
    assert tl is not None
    stream = next(ln for ln in tl.lanes if ln.label.startswith("GPU"))
    assert len(stream.start_us) <= 2 * BINS
    assert tl.merged_events > 19_000
    names = [tl.names[i] for i in stream.name]
    longs = [
        (s, d)
        for s, d, nm in zip(stream.start_us, stream.dur_us, names, strict=True)
        if nm == "long_gemm"
    ]
    assert [round(s) for s, _ in longs] == [80_000, 85_000, 90_000]
    assert all(d == pytest.approx(2_000.0) for _, d in longs)
    merged = [
        (s, d)
        for s, d, nm in zip(stream.start_us, stream.dur_us, names, strict=True)
        if nm.endswith(" events")
    ]
    assert merged[0][0] == pytest.approx(1.0)  # the first tiny kernel's start
    end = max(s + d for s, d in merged)
    assert end == pytest.approx((20_000 - 1) * 1.5 + 2.0)  # the last tiny kernel's end


@pytest.mark.slow
def test_page_size_does_not_grow_with_events(tmp_path: Path) -> None:
    small = render_html(
        page_from_report(analyze_path(_many_tiny_kernels(tmp_path / "s.json", 5_000)))
    )
    big = render_html(
        page_from_report(analyze_path(_many_tiny_kernels(tmp_path / "b.json", 40_000)))
    )
    assert len(big) < 1.5 * len(small) + 50_000


def test_representative_step_is_the_median(tmp_path: Path) -> None:
    ev: list[dict[str, Any]] = []
    t = 0.0
    for n, ms in enumerate((5.0, 20.0, 7.0, 6.0, 9.0)):
        ev.append(annotation(f"ProfilerStep#{n}", t, ms * 1000))
        ev += launched("k", t + 10, t + 20, ms * 1000 - 30, n + 1)  # fills the step
        t += ms * 1000
    tl = build_timeline(analyze_path(write_trace(tmp_path / "m.json", ev)).analysis)
    assert tl is not None and tl.step == 2 and tl.step_ms == pytest.approx(7.0)


def test_idle_lane_adds_up_to_the_steps_idle_time(tmp_path: Path) -> None:
    a = analyze_path(write_hostile_trace(tmp_path / "h.json")).analysis
    tl = build_timeline(a)
    assert tl is not None
    lane = next(ln for ln in tl.lanes if ln.label.startswith("GPU idle"))
    step = next(s for s in a.per_step if s.step == tl.step)
    by_cause: dict[str, float] = {}
    for c, d in zip(lane.color, lane.dur_us, strict=True):
        by_cause[c.removeprefix("idle:")] = by_cause.get(c.removeprefix("idle:"), 0.0) + d / 1000
    for cause, ms in step.idle_ms.items():
        assert by_cause.get(cause, 0.0) == pytest.approx(ms, abs=1e-6), cause
    data = next(ln for ln in tl.lanes if ln.label == "CPU data loading")
    assert sum(data.dur_us) == pytest.approx(3000.0)


def test_memory_series_keeps_the_peak(tmp_path: Path) -> None:
    page = page_from_report(analyze_path(write_hostile_trace(tmp_path / "h.json")))
    assert page.memory is not None
    alloc = np.array(page.memory.lines["allocated"])
    assert alloc.max() == float((100 + 20 * 4 + 3) << 20)  # step 3's last event
    assert set(page.memory.lines["reserved"]) == {float(512 << 20)}


def test_tune_page_lists_every_trial_and_marks_the_pick() -> None:
    trials = [
        {
            "seq": 0,
            "config": "baseline",
            "phase": "baseline",
            "status": "ok",
            "median_step_s": 0.02,
            "iqr_step_s": 0.001,
            "fidelity": {"ok": True, "max_rel_dev": 0.0, "tolerance": 1e-3},
        },
        {
            "seq": 4,
            "config": "<i>amp</i>",
            "phase": "knob",
            "status": "ok",
            "median_step_s": 0.01,
            "iqr_step_s": 0.0005,
            "speedup": 2.0,
            "speedup_interval": {"ratio": 2.0, "low": 1.8, "high": 2.3, "confidence": 0.95},
            "fidelity": {"ok": True, "max_rel_dev": 1e-4, "tolerance": 1e-3},
        },
        {
            "seq": 2,
            "config": "compile=max-autotune",
            "phase": "knob",
            "status": "failed",
            "reason": "out of memory",
        },
    ]
    data = {"best": trials[1], "ranked": [trials[1], trials[0], trials[2]], "trials": 3}
    page = page_from_tune(data, "w.py")
    table = page.tables[0]
    assert table.highlight == 0 and table.rows[0][1] == "<i>amp</i>"
    assert [r[0] for r in table.rows] == [5, 1, 3]
    assert table.rows[0][3].value == pytest.approx(10.0) and table.rows[0][3].text == "10.0"
    assert table.rows[0][4].value == pytest.approx(0.5)
    # the speed-up as the text report prints it, sorting by the ratio
    assert table.rows[0][5].text == "2.00x [1.80-2.30]" and table.rows[0][5].value == 2.0
    assert table.rows[2][5] is None
    assert table.rows[2][8] == "failed" and table.rows[2][10] == "out of memory"
    html = render_html(page)
    assert '<tr class="pick"><td class="num" data-v="5">5</td><td>&lt;i&gt;amp&lt;/i&gt;' in html


def test_check_page_without_a_trace_shows_the_run() -> None:
    doc = {
        "script": "train.py",
        "findings": [
            {
                "id": "recompiles",
                "title": "9 recompiles",
                "severity": "warning",
                "saving_ms_per_step": 1.0,
                "share_of_step": 0.1,
                "fix": "torch._dynamo.config.recompile_limit = 8",
            }
        ],
        "world_size": 1,
        "analysis_unavailable": "no trace was recorded",
    }
    record = {
        "torch_version": "2.13.0+cpu",
        "steps": {"count": 12, "median_step_ms": 31.5},
        "argv": ["--lr", "3e-4"],
    }
    page = page_from_check(doc, None, RunRecord.from_dict(record))
    meta = dict(page.metadata)
    assert meta["torch version"] == "2.13.0+cpu" and meta["script"] == "train.py --lr 3e-4"
    assert page.findings[0]["id"] == "recompiles" and "31.5 ms" in page.headline[0]
    assert "no trace was recorded" in " ".join(page.notes)


def test_cli_html_to_an_unwritable_path_is_one_line_exit_2(tmp_path: Path) -> None:
    src = str(corpus_file("a100_event_sync_micro"))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchdoctor",
            "analyze",
            src,
            "--html",
            str(tmp_path / "no" / "x.html"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot write" in r.stderr
    assert HOSTILE_KERNEL not in r.stdout


def test_folder_of_ranks_gets_a_rank_table(tmp_path: Path) -> None:
    from tests.report.hostile import hostile_events

    for rank, step_us in ((0, 10_000.0), (1, 12_000.0)):
        write_trace(
            tmp_path / f"rank{rank}.json",
            hostile_events(steps=4, step_us=step_us),
            distributedInfo={"rank": rank, "world_size": 2, "backend": "nccl"},
        )
    page = page_from_report(analyze_path(tmp_path))
    table = next(t for t in page.tables if t.id == "ranks")
    assert [r[0] for r in table.rows] == [0, 1]
    assert table.rows[1][3] > table.rows[0][3]  # rank 1's mean step is the longer one
    assert 'id="table-ranks"' in render_html(page)


def test_even_step_count_draws_the_upper_median(tmp_path: Path) -> None:
    ev: list[dict[str, Any]] = []
    for n, ms in enumerate((8.0, 9.0)):
        t = n * 8000.0
        ev.append(annotation(f"ProfilerStep#{n}", t, ms * 1000))
        ev += launched("k", t + 10, t + 20, 50.0, n + 1)  # the last step ends with its work
    a = analyze_path(write_trace(tmp_path / "two.json", ev)).analysis
    assert a.steps.durations_ms[1] < 1.0  # the trace's last step is a stub
    tl = build_timeline(a)
    assert tl is not None and tl.step == 0


def test_an_operator_name_in_a_table_cell_may_wrap() -> None:
    """The line table's operators cell held one 24-character name and pushed a 13-column table
    past a 1280 px page (tests/report/test_html_readable.py::test_check_page): a text cell of
    an operator's name may wrap; a short one stays on one line."""
    from torchdoctor.report.html import _cell

    assert _cell("aten::threshold_backward") == '<td class="wrap">aten::threshold_backward</td>'
    assert _cell("aten::addmm") == "<td>aten::addmm</td>"
