"""Every HTML page in a browser at a 1280-px viewport: nothing wider than the window, no table
cell that is a raw Python value (``True``, ``None``, ``[...]``), no blank line inside a diff. Each
page leaves a screenshot in test-artifacts/html/ (``readable-<page>.png``) for a review by eye."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file
from tests.report.browser import Loaded, browser_context, load, screenshot
from torchdoctor.report.html import write_html

__all__ = ["browser_context"]

WIDTH = 1280

# Cells whose whole text is a Python literal: a bool, None, a list or a dict as repr or JSON
# print them (quoted strings inside brackets; the text report's short summaries have no quotes).
RAW_CELLS = r"""els => els.map(e => e.textContent.trim()).filter(t =>
    /^(True|False|None|null|true|false)$/.test(t) || /^[\[{].*['"].*[\]}]$/.test(t))"""


def _readable(browser_context: Any, html: Path, name: str) -> Loaded:
    """Load the page at 1280 px, screenshot it, and check it fits and prints no raw values."""
    loaded = load(browser_context, html)
    page = loaded.page
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    screenshot(loaded, f"readable-{name}")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= page.evaluate(
        "() => window.innerWidth"
    ), "the page scrolls sideways"
    wide = page.eval_on_selector_all(
        "table",
        """ts => ts.filter(t => {
            const p = t.parentElement;
            const inner = p.getBoundingClientRect().right - parseFloat(getComputedStyle(p).paddingRight);
            return t.getBoundingClientRect().right > inner + 1;
        }).map(t => t.id)""",
    )
    assert wide == [], f"tables wider than their container: {wide}"
    assert page.eval_on_selector_all("td, th, dd", RAW_CELLS) == []
    numbers = page.eval_on_selector_all("td.num", "els => els.map(e => e.textContent)")
    assert [n for n in numbers if re.search(r"\de[-+]?\d", n)] == []  # no 9.1e-05
    body = page.text_content("body")
    for raw in ("True", "False", "None"):
        # a value printed after a label ("confirmed: True") is as raw as a cell holding it
        assert f": {raw}" not in body and f"= {raw}" not in body, raw
    return loaded


@pytest.mark.slow
def test_analyze_page(browser_context: Any, tmp_path: Path) -> None:
    from torchdoctor.commands.analyze.trace import analyze_path
    from torchdoctor.report.html_model import page_from_report

    trace = corpus_file("h100_qwen_0p5b_infer")
    html = write_html(page_from_report(analyze_path(trace)), tmp_path / "analyze.html")
    _readable(browser_context, html, "analyze")


@pytest.mark.slow
def test_check_page(browser_context: Any, shared_check: Callable[..., Any]) -> None:
    import json

    from tests.capture.check_helpers import EXAMPLES

    run = shared_check(EXAMPLES / "slow_dataloader.py", html=True)  # --warmup 3 --steps 3
    assert run.code == 0, run.stderr
    html = run.folder.parent / "check.html"
    loaded = _readable(browser_context, html, "check")
    assert json.loads(json.dumps(run.run))["torch_version"] in loaded.page.text_content("body")
    sites = loaded.page.eval_on_selector_all(
        "#table-lines tbody tr", "rows => rows.map(r => r.cells[0].textContent)"
    )
    # lines of the script read as in the script's folder; others keep their whole path
    assert "slow_dataloader.py:19" in sites
    assert all(s.startswith("slow_dataloader.py:") or s.startswith("/") for s in sites), sites


@pytest.mark.slow
def test_compare_page(browser_context: Any, tmp_path: Path) -> None:
    from torchdoctor.compare.diff import compare
    from torchdoctor.compare.render import page
    from torchdoctor.compare.sides import load_side

    c = compare(
        load_side(str(corpus_file("v100_resnet50_train_workers0"))),
        load_side(str(corpus_file("v100_resnet50_train_workers4"))),
    )
    html = write_html(page(c, 5.0), tmp_path / "compare.html")
    loaded = _readable(browser_context, html, "compare")
    speed = loaded.page.eval_on_selector_all(
        "#table-costs tbody tr", "rows => rows.map(r => r.cells[4].textContent)"
    )
    step = c.estimates["mean_step"]
    assert speed[0] == step.speedup.format()  # as the text report prints it
    assert all(re.fullmatch(r"\d+\.\d\dx( \[[\d.?-]+\])?", s) for s in speed), speed


def _tune_data() -> dict[str, Any]:
    import json

    from tests.tune.tune_fakes import FakeWorld
    from torchdoctor.tune import report
    from torchdoctor.tune.search import Search, Settings

    world = FakeWorld(
        {("optimizer_impl", "fused"): 0.8, ("optimizer_impl", "foreach"): 0.99},
        failures=[({"optimizer_impl": "foreach"}, "RuntimeError: " + "out of memory " * 12)],
    )
    summary = Search(world, Settings(knobs=("optimizer_impl", "compile"))).run()
    return json.loads(report.to_json(summary))  # type: ignore[no-any-return]


def test_tune_page(browser_context: Any, tmp_path: Path) -> None:
    from torchdoctor.report.html_sources import page_from_tune

    data = _tune_data()
    html = write_html(page_from_tune(data, "workloads/tiny.py"), tmp_path / "tune.html")
    loaded = _readable(browser_context, html, "tune")
    page = loaded.page
    headers = page.eval_on_selector_all("#table-trials th", "els => els.map(e => e.textContent)")
    speed = page.eval_on_selector_all(
        "#table-trials tbody tr",
        f"rows => rows.map(r => r.cells[{headers.index('vs baseline [95% interval]')}].textContent)",
    )
    pick, claim = data["best"], data["claim"]
    # ratios print as the text report prints them: two decimals, an x, the interval's ends
    want = f"{pick['speedup']:.2f}x [{claim['low']:.2f}-{claim['high']:.2f}]"
    assert page.text_content("tr.pick td:nth-child(6)") == want
    assert all(re.fullmatch(r"(\d+\.\d\dx( \[[\d.?-]+\])?)?", s) for s in speed), speed
    assert "confirmed on re-measurement: yes" in page.text_content("header")
    assert page.text_content("#trials-title + p").count("95% interval") == 1


def test_fix_page(browser_context: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tests.fix.test_fix_cli import ANOMALY, LOADER, run_folder
    from torchdoctor.cli import cli

    monkeypatch.chdir(tmp_path)
    folder = run_folder(tmp_path, [LOADER, ANOMALY])
    html = tmp_path / "fix.html"
    r = CliRunner().invoke(cli, ["fix", "--from", str(folder), "--html", str(html)])
    assert r.exit_code == 0, r.output
    loaded = _readable(browser_context, html, "fix")
    lines = loaded.page.evaluate(
        "() => Array.from(document.querySelectorAll('.hunk pre')).map(p => p.textContent)"
    )
    assert lines
    for text in lines:
        rows = text.rstrip("\n").split("\n")
        assert "" not in rows, rows  # a unified diff has no empty line: context lines start " "
        assert any(r.startswith("+") for r in rows) and any(r.startswith("@@") for r in rows)
    # each line is one line high on screen too (the text can be right on a page that draws a
    # blank line under every coloured one)
    heights = loaded.page.eval_on_selector_all(
        ".hunk pre",
        """ps => ps.map(p => {
            const n = p.textContent.replace(/\\n$/, '').split('\\n').length;
            const lh = parseFloat(getComputedStyle(p).lineHeight);
            const pad = parseFloat(getComputedStyle(p).paddingTop)
                + parseFloat(getComputedStyle(p).paddingBottom);
            return [(p.clientHeight - pad) / lh, n];
        })""",
    )
    for drawn, n in heights:
        assert drawn == pytest.approx(n, abs=0.6), (drawn, n)


@pytest.mark.slow
def test_memory_page(browser_context: Any, tmp_path: Path) -> None:
    from tests.memory.conftest import GPT, SNAPSHOTS
    from torchdoctor.memory.analysis import analyze_snapshot, memory_series
    from torchdoctor.report.memory_page import page_from_memory

    gpt_snapshot = SNAPSHOTS / GPT
    if not gpt_snapshot.is_file():
        pytest.skip(f"real snapshot {gpt_snapshot} not found (set TORCHDOCTOR_SNAPSHOTS)")
    page = page_from_memory(analyze_snapshot(gpt_snapshot), memory_series(gpt_snapshot))
    _readable(browser_context, write_html(page, tmp_path / "memory.html"), "memory")
