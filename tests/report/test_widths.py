"""The terminal report at 60, 80, 100 and 160 columns: every number a table shows is printed whole.

The numbers come from the report's JSON (what ``--json`` prints), formatted as the tables format
them (ms to 2 decimals, µs to 1, shares as percentages); each table row's values must stand on one
line, in order, whole (no digit cut, no ellipsis), and each row keeps a readable name.
"""

from __future__ import annotations

import io
import re
from functools import cache
from typing import Any

import pytest

from tests.conftest import TRACES, corpus_report

# Imported here, at collection: a test that patches the memory reader while this module is first
# imported would leave the patch bound in it.
from torchdoctor.memory.analysis import analyze_snapshot
from torchdoctor.record.run import RunRecord

WIDTHS = (60, 80, 100, 160)
TOP = 10
# A few traces that broke the old layout (long kernel names, many number columns, a serving
# table); the whole corpus runs as a slow test.
QUICK = (
    "h200/nanogpt_gpt2_eager_check",
    "h100_qwen_0p5b_infer",
    "mi300x_sglang_qwen3_8b_prefill_decode",
    "v100_resnet50_train_workers0",
)
_SEP = r"[\s│┃]+"  # what may stand between two cells of one row


def _corpus() -> list[str]:
    found = sorted(TRACES.glob("*.json.gz")) + sorted((TRACES / "h200").glob("*.json.gz"))
    return [str(p.relative_to(TRACES)).removesuffix(".json.gz") for p in found]


def _report(stem: str) -> Any:
    from torchdoctor import api

    return api.Report(corpus_report(stem))  # what api.analyze returns, made once per test run


def _token(value: str) -> str:
    """``value`` as a whole cell: no digit, point or ellipsis glued to either side."""
    return r"(?<![\w.…])" + re.escape(value) + r"(?![\w.…%])"


def _cell(value: str) -> str:
    """A cell's pattern; an empty cell (a kernel's unknown tensor-core use) may show a mark."""
    return _token(value) if value else r"\S{0,3}"


def _rows(d: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(table, cells in order) for every row the text tables show, formatted from the JSON."""
    out: list[tuple[str, list[str]]] = []
    n = max(d["steps"]["count"], 1)
    total = d["breakdown"]["total"]
    hidden = total["idle_ms"].get("not_recorded", 0.0)
    base = total["step_ms"] - hidden if hidden > 0 else total["step_ms"]
    parts = [*total["busy_ms"].items(), *total["idle_ms"].items()]
    for key, ms in [] if _capture(d) else parts:  # a capture trace has no idle breakdown
        if ms > 0 and key != "not_recorded":
            share = ms / base if base > 0 else 0.0
            out.append(("breakdown", [f"{ms / n:.2f}", f"{share:.1%}"]))
    k = d["kernels"]
    for r in (k or {}).get("top_kernels", [])[:TOP]:
        tc = "" if r["tensor_core"] is None else ("yes" if r["tensor_core"] else "no")
        cells = [r["category"], str(r["count"]), f"{r['total_ms']:.2f}", f"{r['mean_us']:.1f}"]
        cells += [f"{r['share_of_gpu_time']:.1%}", tc, r["dtype"]]
        out.append(("kernels", cells))
    ops = d["operators"]
    device = bool(k and k["top_kernels"])
    for key in ("top_by_self_device", "top_by_self_cpu"):
        if key == "top_by_self_device" and not device:
            continue
        for r in ops[key][:TOP]:
            cells = [str(r["calls"]), f"{r['self_cpu_ms']:.2f}", f"{r['total_cpu_ms']:.2f}"]
            if device:
                cells += [f"{r['self_device_ms']:.2f}", f"{r['total_device_ms']:.2f}"]
            out.append((key, cells))
    s = d["serving"]
    for r in (s or {}).get("by_kind", {}).values():
        out.append(("serving", [str(r["steps"]), f"{r['mean_step_ms']:.2f}"]))
    return out


def _capture(d: dict[str, Any]) -> bool:
    return bool(d["graphs"] and d["graphs"].get("is_capture_trace"))


def _check(stem: str, width: int) -> None:
    report = _report(stem)
    text = report.text(top=TOP, width=width)
    lines = text.splitlines()
    rows = _rows(report.to_dict())
    assert rows, "no table rows to check"
    for table, cells in rows:
        pattern = re.compile(_SEP.join(_cell(c) for c in cells))
        hits = [i for i, line in enumerate(lines) if pattern.search(line)]
        assert hits, f"{stem} at {width} columns: {table} row {cells} not printed whole"
        i = hits[0]
        assert len(lines[i]) <= width, f"{table} row wider than the terminal: {lines[i]}"
        if table in ("kernels", "top_by_self_device", "top_by_self_cpu"):
            # the name is on the row's line (wide) or on the line above it (stacked)
            before = lines[i][: pattern.search(lines[i]).start()]  # type: ignore[union-attr]
            name = before if before.strip() else lines[i - 1]
            assert len(re.findall(r"\w", name)) >= 3, f"{table} row {cells} lost its name"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("stem", QUICK)
def test_table_numbers_print_whole(stem: str, width: int) -> None:
    _check(stem, width)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("stem", [s for s in _corpus() if s not in QUICK])
def test_table_numbers_print_whole_on_the_corpus(stem: str, width: int) -> None:
    _check(stem, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_kernel_in_an_anonymous_namespace_keeps_its_name(width: int) -> None:
    # void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>(...) was cut to nothing
    text = _report("h100_qwen_0p5b_infer").text(top=TOP, width=width)
    assert "CatArrayBatchedCopy<…>" in text


def test_piped_output_is_100_columns_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchdoctor.report.console import report_width

    monkeypatch.setenv("COLUMNS", "80")
    assert report_width(io.StringIO()) == 100


def _rows_on_lines(text: str, rows: list[list[str]], width: int, what: str) -> None:
    """Each row's cells stand whole, in order, on one line no wider than ``width``."""
    lines = text.splitlines()
    for cells in rows:
        pattern = re.compile(_SEP.join(_token(c) for c in cells))
        hits = [line for line in lines if pattern.search(line)]
        assert hits, f"{what} at {width} columns: row {cells} not printed whole"
        assert len(hits[0]) <= width, f"{what} row wider than the terminal: {hits[0]}"


@cache
def _comparison() -> Any:
    from torchdoctor.compare.diff import compare
    from torchdoctor.compare.runs import load_runs

    sides = [TRACES / f"v100_resnet50_train_workers{n}.json.gz" for n in (0, 4)]
    if not all(p.is_file() for p in sides):
        pytest.skip("the V100 ResNet-50 pair is not in the corpus")
    return compare(load_runs([str(sides[0])]), load_runs([str(sides[1])]))


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_tables_print_whole(width: int) -> None:
    from torchdoctor.compare import render

    c = _comparison()
    d = render.to_dict(c, None, TOP)
    keys = ("breakdown", "kernels_moved", "kernels_added", "kernels_removed", "operators_moved")
    rows = [
        [f"{r['base_ms']:.3f}", f"{r['new_ms']:.3f}", f"{r['delta_ms']:+.3f}"]
        for key in keys
        for r in d[key]
    ]
    assert len(rows) > 20
    _rows_on_lines(render.render_text(c, None, TOP, width=width), rows, width, "compare")


@pytest.mark.parametrize("width", WIDTHS)
def test_memory_tables_print_whole(width: int) -> None:
    import json

    from tests.memory.conftest import GPT, SNAPSHOTS
    from torchdoctor.report.memory_text import render_json, render_text
    from torchdoctor.units import fmt_bytes

    if not (SNAPSHOTS / GPT).is_file():
        pytest.skip(f"real snapshot {SNAPSHOTS / GPT} not found (set TORCHDOCTOR_SNAPSHOTS)")
    report = analyze_snapshot(SNAPSHOTS / GPT)
    rows = []
    for dev in json.loads(render_json(report))["devices"]:
        for c in dev["segments"]["by_class"]:
            rows.append(
                [str(c["segments"])]
                + [fmt_bytes(c[k]) for k in ("reserved_bytes", "free_bytes")]
                + [fmt_bytes(c["largest_free_block_bytes"])]
            )
        for h in dev["history"]["holders_at_peak"]:
            rows.append([fmt_bytes(h["live_bytes"]), f"{h['share']:.1%}"])
    assert len(rows) >= 5
    _rows_on_lines(render_text(report, width=width), rows, width, "memory")


# -- check: the report of a run folder (the H200 nanoGPT runs: run.json beside their traces) --

H200_RUNS = (
    "nanogpt_gpt2_eager",
    "nanogpt_char_eager",
    "nanogpt_gpt2_compiled",
    "nanogpt_char_compiled",
)


@cache
def _check_run(name: str) -> tuple[Any, ...]:
    import json

    from torchdoctor.commands.check.summary import build_report

    folder, trace = TRACES / "h200" / "runs" / name, TRACES / "h200" / f"{name}_check.json.gz"
    if not (folder / "run.json").is_file() or not trace.is_file():
        pytest.skip(f"the H200 run {folder} or its trace {trace} is not in the corpus")
    record = json.loads((folder / "run.json").read_text())
    doc, analysis, merged = build_report({0: record}, trace, 1)
    return folder, doc, record, analysis, merged


def _long_word(line: str, width: int) -> bool:
    return any(len(w) > width for w in line.split())


def _check_report(name: str, width: int) -> None:
    from torchdoctor.commands.check.publish import report_text
    from torchdoctor.report.serialize import report_dict

    folder, doc, record, analysis, merged = _check_run(name)
    text = report_text(folder, doc, RunRecord.from_dict(record), analysis, merged, TOP, width)
    rows = _rows(report_dict(analysis))  # the trace's tables, as check prints them
    by_self = sorted(record["lines"]["rows"], key=lambda r: -float(r.get("self_ms") or 0))
    for r in by_self[:TOP]:
        cells = [f"{r['self_ms']:.2f}", f"{r['inclusive_ms']:.2f}", f"{r['self_share']:.0%}"]
        rows.append(("lines", cells))
    for f in merged[:3]:
        rows.append(("findings", [f"{f.saving_ms_per_step:.2f}"]))
    assert any(t == "lines" for t, _ in rows) and any(t == "breakdown" for t, _ in rows)
    lines = text.splitlines()
    for table, cells in rows:
        pattern = re.compile(_SEP.join(_cell(c) for c in cells))
        hits = [ln for ln in lines if pattern.search(ln)]
        assert hits, f"check {name} at {width} columns: {table} row {cells} not printed whole"
        assert len(hits[0]) <= width, f"{table} row wider than the terminal: {hits[0]}"
    # check's own lines (the run's summary above the trace's report, the account below it)
    # wrap at their spaces; the trace's report is analyze's, tested above
    start = next(i for i, ln in enumerate(lines) if ln.startswith("torchdoctor ·"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("roofline:"))
    for line in lines[:start] + lines[end:]:
        assert len(line) <= width or _long_word(line, width), f"check line too wide: {line}"


@pytest.mark.parametrize("width", WIDTHS)
def test_check_report_prints_numbers_whole(width: int) -> None:
    _check_report(H200_RUNS[0], width)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", H200_RUNS[1:])
def test_check_report_prints_numbers_whole_on_every_run(name: str, width: int) -> None:
    _check_report(name, width)


def test_check_report_in_a_log_keeps_its_lines_whole() -> None:
    """report.txt and a pipe get the log form: one line per table row, nothing wrapped."""
    from torchdoctor.commands.check.publish import report_text

    folder, doc, record, analysis, merged = _check_run(H200_RUNS[0])
    text = report_text(folder, doc, RunRecord.from_dict(record), analysis, merged, TOP, None)
    assert "   self ms  incl ms  share  line                         function" in text
    assert any(ln.startswith("efficiency: ") and len(ln) > 160 for ln in text.splitlines())


# -- fix: the summary of the changes (the patch itself is code, printed as it is) ------------


def test_fix_summary_prints_numbers_whole(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from tests.fix.test_fix_cli import ANOMALY, LOADER, run_folder
    from torchdoctor.fix.cli import run_fix
    from torchdoctor.fix.options import FixOptions
    from torchdoctor.fix.render import summary_lines, to_json

    monkeypatch.chdir(tmp_path)
    folder = run_folder(tmp_path, [LOADER, ANOMALY])
    result = run_fix(None, [], str(folder), FixOptions())
    changes = json.loads(to_json(result))["changes"]
    rows = []
    for c in changes:
        p = c["predicted"]
        if p and p["speedup"] is not None:
            rows.append([f"{p['speedup']:.2f}x", f"{p['saving_ms_per_step']:.1f}"])
            rows.append([f"{p['step_ms']:.1f}"])
        rows.append([f"{c['file']}:{c['line']}"])
    assert len(rows) >= 3
    for width in WIDTHS:
        lines = summary_lines(result, width)
        for cells in rows:
            pattern = re.compile(r".*".join(_token(c) for c in cells))
            assert any(pattern.search(ln) for ln in lines), (width, cells, lines)
        for line in lines:
            assert len(line) <= width or _long_word(line, width), (width, line)
    assert summary_lines(result, None) == summary_lines(result, 1000)  # a log: nothing wrapped


def test_a_terminal_gets_its_width_and_a_pipe_the_log_form(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchdoctor.report.console import terminal_columns

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_columns(Tty()) == 72
    assert terminal_columns(io.StringIO()) is None  # check and fix then print their log form
