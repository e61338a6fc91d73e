"""The HTML reports in a real browser: no errors, no requests, charts drawn, zoom works, hostile
names stay text, tables sort, the page fits a laptop and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file, corpus_report
from tests.report.browser import (
    Loaded,
    assert_clean,
    browser_context,
    click_header,
    column_values,
    load,
    screenshot,
)
from tests.report.hostile import write_hostile_trace
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.record.run import RunRecord
from torchdoctor.report.html import write_html
from torchdoctor.report.html_model import page_from_report

__all__ = ["browser_context"]

CORPUS = [
    "v100_resnet50_train_workers0",
    "v100_ddp_compiled_rank1",
    "h100_qwen_0p5b_infer",
    "cpu_only_rank34",
    "mi250_toy_train_rocm",
]


def _report_html(trace: Path | str, out: Path) -> Path:
    """The analyze page of a trace file, or of a corpus trace by its stem (its report made once
    per test run)."""
    report = corpus_report(trace) if isinstance(trace, str) else analyze_path(trace)
    return write_html(page_from_report(report), out)


def _svg_paths(loaded: Loaded, selector: str) -> int:
    return loaded.page.eval_on_selector_all(
        f"{selector} path", "els => els.filter(e => (e.getAttribute('d') || '').length > 4).length"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_report_loads_clean_and_draws(
    browser_context: Any, tmp_path: Path, name: str
) -> None:
    html = _report_html(name, tmp_path / f"{name}.html")
    loaded = load(browser_context, html)
    assert_clean(loaded, html)
    assert _svg_paths(loaded, "svg.bars") > 0
    rects = loaded.page.eval_on_selector_all("#timeline rect.ev", "els => els.length")
    assert rects > 0
    screenshot(loaded, name)


@pytest.mark.slow
def test_timeline_zooms_and_pans(browser_context: Any, tmp_path: Path) -> None:
    html = _report_html("v100_resnet50_train_workers0", tmp_path / "z.html")
    loaded = load(browser_context, html)
    page = loaded.page

    def view() -> list[float]:
        return [float(x) for x in page.get_attribute("#timeline", "viewBox").split()]

    _, _, w0, _ = view()
    page.click("#zoom-in")
    x1, _, w1, _ = view()
    assert w1 == pytest.approx(w0 / 2)
    assert x1 == pytest.approx(w0 / 4)  # zoomed about the centre
    box = page.locator("#timeline").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + 10)
    page.mouse.wheel(0, -300)
    x2, _, w2, _ = view()
    assert w2 == pytest.approx(w1 * 0.8)
    assert x2 > x1  # zoomed towards the pointer, right of the centre
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 10)
    page.mouse.up()
    x3, _, w3, _ = view()
    assert w3 == pytest.approx(w2) and x3 > x2  # dragging left moves the view right
    assert "showing" in page.text_content("#timeline-view")
    page.click("#zoom-reset")
    assert view()[2] == pytest.approx(w0)


@pytest.mark.slow
def test_hostile_names_stay_text(browser_context: Any, tmp_path: Path) -> None:
    from tests.report.hostile import HOSTILE_IMG, HOSTILE_KERNEL, HOSTILE_LINK, HOSTILE_OP

    html = _report_html(write_hostile_trace(tmp_path / "hostile.json"), tmp_path / "h.html")
    loaded = load(browser_context, html)
    assert_clean(loaded, html)
    page = loaded.page
    assert page.evaluate("() => window.__pwned") is None
    assert page.eval_on_selector_all("img", "els => els.length") == 0
    body = page.text_content("body")
    for name in (HOSTILE_KERNEL, HOSTILE_OP, "<b>Fake GPU</b>"):
        assert name in body, name
    titles = page.eval_on_selector_all("#timeline title", "els => els.map(e => e.textContent)")
    assert any(t.startswith(HOSTILE_IMG) for t in titles)
    assert any(t.startswith(HOSTILE_LINK) for t in titles)
    assert _svg_paths(loaded, "svg.memory") > 0  # memory was recorded in this trace
    screenshot(loaded, "hostile")


@pytest.mark.slow
def test_tables_sort_numerically(browser_context: Any, tmp_path: Path) -> None:
    html = _report_html("h100_qwen_0p5b_infer", tmp_path / "s.html")
    page = load(browser_context, html).page
    col = "#table-kernels"
    before = column_values(page, col, "calls")
    click_header(page, col, "calls")
    assert column_values(page, col, "calls") == sorted(before)
    click_header(page, col, "calls")
    after = column_values(page, col, "calls")
    assert after == sorted(before, reverse=True)
    assert after != before or before == sorted(before, reverse=True)


@pytest.mark.slow
def test_fits_a_laptop_and_prints(browser_context: Any, tmp_path: Path) -> None:
    html = _report_html("v100_ddp_compiled_rank1", tmp_path / "p.html")
    page = load(browser_context, html).page
    page.set_viewport_size({"width": 1280, "height": 800})
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    page.emulate_media(media="print")
    assert not page.is_visible("#zoom-in")  # controls are hidden on paper
    assert page.is_visible("svg.bars")
    pdf = page.pdf(format="A4")
    assert pdf[:4] == b"%PDF" and len(pdf) > 10_000
    page.emulate_media(media="screen")
    assert page.is_visible("#zoom-in")


def _render(page: Any, out: Path) -> Path:
    return write_html(page, out)


@pytest.mark.slow
def test_compare_page(browser_context: Any, tmp_path: Path) -> None:
    from torchdoctor.compare.diff import compare
    from torchdoctor.compare.render import page
    from torchdoctor.compare.sides import load_side

    c = compare(
        load_side(str(corpus_file("v100_resnet50_train_workers4"))),
        load_side(str(corpus_file("v100_resnet50_train_workers0"))),
    )
    html = _render(page(c, 5.0), tmp_path / "compare.html")
    loaded = load(browser_context, html)
    assert_clean(loaded, html)
    assert _svg_paths(loaded, "svg.bars") >= 4  # BASE and NEW bars, several parts each
    text = loaded.page.text_content("body")
    assert "gate --fail-if-slower 5%: passed" in text and "ONE RUN A SIDE" in text
    assert "what you pay" in text  # the costs' table
    assert "appeared: Data loading" in text
    screenshot(loaded, "compare")


def test_tune_page(browser_context: Any, tmp_path: Path) -> None:
    from torchdoctor.report.html_sources import page_from_tune

    best = {
        "seq": 1,
        "config": "<script>window.__pwned=5</script>",
        "status": "ok",
        "median_step_s": 0.01,
        "iqr_step_s": 0.001,
    }
    other = {"seq": 0, "config": "baseline", "status": "failed", "reason": "OOM"}
    html = _render(
        page_from_tune({"best": best, "ranked": [other, best]}, "w.py"), tmp_path / "t.html"
    )
    loaded = load(browser_context, html)
    assert_clean(loaded, html)
    assert loaded.page.evaluate("() => window.__pwned") is None
    assert loaded.page.text_content("tr.pick td:nth-child(2)") == best["config"]
    screenshot(loaded, "tune")


@pytest.mark.slow
def test_check_page(browser_context: Any, tmp_path: Path) -> None:
    from torchdoctor.report.html_sources import page_from_check

    report = analyze_path(write_hostile_trace(tmp_path / "h.json"))
    doc = {
        "script": "train.py",
        "world_size": 2,
        "findings": [f.to_dict() for f in report.findings],
        "ranks": [
            {"rank": 0, "steps": 4, "median_step_ms": 9.9, "exit": "ok"},
            {"rank": 1, "steps": 4, "median_step_ms": 12.0, "exit": "ok"},
        ],
    }
    record = {"torch_version": "2.13.0", "steps": {"count": 4, "median_step_ms": 9.9}}
    html = _render(page_from_check(doc, report, RunRecord.from_dict(record)), tmp_path / "c.html")
    loaded = load(browser_context, html)
    assert_clean(loaded, html)
    assert loaded.page.eval_on_selector_all("#table-run-ranks tbody tr", "r => r.length") == 2
    assert loaded.page.eval_on_selector_all("#timeline rect.ev", "r => r.length") > 0
    screenshot(loaded, "check")


@pytest.mark.slow
def test_copy_button_never_covers_a_fix_line(browser_context: Any, tmp_path: Path) -> None:
    """No text of a fix lies under its copy button, for a line that wraps to the box's edge
    (before, the button sat on the end of such lines)."""
    from torchdoctor.report.html_sources import page_from_check

    report = corpus_report("v100_resnet50_train_workers0")
    long_fix = "/" + "a" * 400  # one long token from the first column: breaks only at the edge
    finding = {**report.findings[0].to_dict(), "fix": long_fix + "\n# second line"}
    doc = {"script": "train.py", "world_size": 1, "findings": [finding], "ranks": []}
    html = _render(
        page_from_check(doc, report, RunRecord.from_dict({"steps": {"count": 4}})),
        tmp_path / "f.html",
    )
    loaded = load(browser_context, html)
    overlaps = loaded.page.eval_on_selector_all(
        ".fix",
        """fixes => fixes.map(f => {
            const b = f.querySelector('button.copy').getBoundingClientRect();
            const r = document.createRange();
            r.selectNodeContents(f.querySelector('pre'));
            return Array.from(r.getClientRects()).some(t =>
                t.right > b.left && t.left < b.right && t.bottom > b.top && t.top < b.bottom);
        })""",
    )
    assert overlaps and not any(overlaps)
