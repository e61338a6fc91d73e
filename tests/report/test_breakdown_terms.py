"""One vocabulary for the step breakdown: analyze and compare (text, JSON, HTML) name each part by
``analysis.breakdown_terms``, and no rendered report prints a count as a float, a plural after 1,
a share in e-notation or a Python ``None``.

Before: analyze printed 'idle: waiting on host (launch late)' and 'idle: kernel-to-kernel
latency' where compare printed 'idle: host overhead' and 'idle: short gaps' for the same parts,
and the HTML legends read the raw keys ('idle: host overhead', 'busy: memcpy h2d').
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from typing import Any

import pytest

from tests.conftest import TRACES, corpus_report
from torchdoctor.analysis.breakdown import BUSY_PARTS, CPU_PARTS, IDLE_PARTS, NOT_RECORDED
from torchdoctor.analysis.breakdown_terms import TERMS, label

ALL_KEYS = (
    *(f"busy:{p}" for p in BUSY_PARTS),
    *(f"idle:{p}" for p in (*IDLE_PARTS, NOT_RECORDED)),
    *(f"cpu:{p}" for p in CPU_PARTS),
)
"""Every part's key, in the breakdown's order."""
LABEL_TO_KEY = {t.label: k for k, t in TERMS.items()}
PAIR = ("v100_resnet50_train_workers0", "v100_resnet50_train_workers4")
WIDE = 200  # no label wraps


def _path(stem: str) -> Any:
    path = TRACES / f"{stem}.json.gz"
    if not path.is_file():
        pytest.skip(f"corpus trace {path} not found (set TORCHDOCTOR_TRACES)")
    return path


def _report(stem: str) -> Any:
    from torchdoctor import api

    return api.Report(corpus_report(stem))  # what api.analyze returns, made once per test run


@cache
def _comparison() -> Any:
    from torchdoctor.compare.diff import compare
    from torchdoctor.compare.runs import load_runs

    base, new = (str(_path(s)) for s in PAIR)
    return compare(load_runs([base]), load_runs([new]))


def _table_labels(text: str, title: str, last: str | None) -> list[str]:
    """The first column of the table under the line starting ``title`` (up to a blank line or
    the row labelled ``last``), each label as printed (the numbers cut off)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(title))
    out = []
    for ln in lines[start + 1 :]:
        if not ln.strip():
            break
        m = re.match(r"^\s*(\S.*?)\s{2,}[-+\d]", ln)
        if m is None:  # the header, the rule
            continue
        if m.group(1) == last:
            break
        out.append(m.group(1))
    return out


def _legend(page: str) -> list[str]:
    """The step breakdown chart's legend (the timeline's own legend names kernel categories)."""
    section = page[page.index("<h2>Step breakdown</h2>") :]
    section = section[: section.find("<h2>", 4)]
    keys = re.findall(r'<span class="key"><i [^>]*></i>([^<]*)</span>', section)
    return [html.unescape(x) for x in keys]


def _assert_from_the_vocabulary(labels: list[str], where: str) -> None:
    assert labels, f"{where}: no breakdown labels found"
    spelled = [x for x in labels if x not in LABEL_TO_KEY]
    assert spelled == [], f"{where} spells parts its own way: {spelled}"


def test_every_part_has_one_label_and_labels_are_distinct() -> None:
    assert set(TERMS) == set(ALL_KEYS)
    gpu = [TERMS[k].label for k in ALL_KEYS if not k.startswith("cpu:")]
    cpu = [TERMS[k].label for k in ALL_KEYS if k.startswith("cpu:")]
    assert len(set(gpu)) == len(gpu) and len(set(cpu)) == len(cpu)
    assert label("idle:a_new_part") == "idle: a new part"  # an unknown key still reads as words


def test_analyze_and_compare_name_the_same_parts_the_same_way() -> None:
    from torchdoctor.compare import render

    base = _report(PAIR[0])
    analyze_text = _table_labels(base.text(width=WIDE), "Step breakdown", "step")
    _assert_from_the_vocabulary(analyze_text, "analyze text")
    analyze_json = base.to_dict()["breakdown"]["labels"]
    assert all(label(k) == v for k, v in analyze_json.items())
    _assert_from_the_vocabulary(list(analyze_json.values()), "analyze JSON")
    # the text shows the parts that hold time; the JSON labels every part the total holds
    assert set(analyze_text) <= set(analyze_json.values())

    c = _comparison()
    compare_text = _table_labels(
        render.render_text(c, None, 10, width=WIDE), "breakdown of the mean step", None
    )
    _assert_from_the_vocabulary(compare_text, "compare text")
    compare_json = render.to_dict(c, None, 10)["breakdown"]
    assert [r["label"] for r in compare_json] == compare_text
    assert all(r["label"] == label(r["name"]) for r in compare_json)
    # BASE's parts with time are analyze's rows, read the same way
    with_time = [r["label"] for r in compare_json if r["base_ms"] > 0]
    assert with_time == analyze_text
    # the verdict names the cause by the row the reader sees below it
    assert "the breakdown's 'idle: data loading' fell" in c.verdict


def test_html_pages_label_parts_from_the_vocabulary() -> None:
    from torchdoctor.compare import render
    from torchdoctor.report.html import render_html
    from torchdoctor.report.html_model import page_from_report

    base = _report(PAIR[0])
    analyze_page = _legend(render_html(page_from_report(base._report)))
    _assert_from_the_vocabulary(analyze_page, "analyze HTML")
    # the chart's legend names the parts with time: the text table's rows, in the same words
    assert analyze_page == _table_labels(base.text(width=WIDE), "Step breakdown", "step")
    compare_page = _legend(render_html(render.page(_comparison(), None, 10)))
    _assert_from_the_vocabulary(compare_page, "compare HTML")
    assert "idle: host overhead (launched late)" in compare_page


def test_a_cpu_only_trace_uses_the_cpu_parts_labels() -> None:
    r = _report("cpu_only_rank34")
    text = _table_labels(r.text(width=WIDE), "Step breakdown", "step")
    _assert_from_the_vocabulary(text, "analyze text (CPU only)")
    assert all(LABEL_TO_KEY[x].startswith("cpu:") for x in text), text


# -- units: what no rendered report may print ----------------------------------------------------

BAD = {
    "a plural after 1": re.compile(r"(?<![\d.,])1 (?:steps|runs|rounds|calls|ranks|kernels)\b"),
    "a count as a float": re.compile(r"(?<![\d.])\d+\.0 (?:per step|calls|steps)\b"),
    "e-notation": re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[-+]?\d+\b"),
    "a Python None": re.compile(r"\bNone\b"),
    "a Python flag": re.compile(r"=(?:True|False)\b"),
}
QUICK = ("h100_qwen_0p5b_infer", "v100_resnet50_train_workers0", "cpu_only_rank34")


def _prose(text: str) -> list[str]:
    """The report's lines less the code of its fixes (``fused=True`` is Python there)."""
    out, code_indent = [], None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if code_indent is not None and indent > code_indent:
            continue
        code_indent = indent if line.strip() == "fix:" else None
        out.append(line)
    return out


def _bad(text: str) -> list[str]:
    return [
        f"{what}: {line.strip()[:160]}"
        for line in _prose(text)
        for what, pattern in BAD.items()
        if pattern.search(line)
    ]


def test_the_scan_catches_what_it_looks_for() -> None:
    sample = "1 steps\nsync: 1.0 per step\nshare_of_step=3.073e-05\nrank=None\nfused=True\n"
    assert len(_bad(sample)) == 5
    assert _bad("6 steps, 1 step, 1.5 per step, 0.0031%, 12.0 ms per step, 1e3x? no") == []
    assert _bad("  fix:\n    DataLoader(pin_memory=True)\n  docs: x") == []  # code, not prose


def _corpus() -> list[str]:
    found = sorted(TRACES.glob("*.json.gz")) + sorted((TRACES / "h200").glob("*.json.gz"))
    return [str(p.relative_to(TRACES)).removesuffix(".json.gz") for p in found]


def _scan_analyze(stem: str) -> None:
    r = _report(stem)
    assert _bad(r.text(width=100)) == [], stem
    verdict_and_titles = [r.to_dict()["verdict"], *(f.title for f in r.findings)]
    assert _bad("\n".join(verdict_and_titles)) == [], stem


@pytest.mark.parametrize("stem", QUICK)
def test_analyze_prints_counts_and_shares_as_they_read(stem: str) -> None:
    _scan_analyze(stem)


@pytest.mark.slow
@pytest.mark.parametrize("stem", [s for s in _corpus() if s not in QUICK])
def test_analyze_prints_counts_and_shares_as_they_read_on_the_corpus(stem: str) -> None:
    _scan_analyze(stem)


def test_compare_prints_counts_and_shares_as_they_read() -> None:
    from torchdoctor.compare import render

    c = _comparison()
    assert _bad(render.render_text(c, None, 10, width=100)) == []
    assert _bad(json.dumps(render.to_dict(c, None, 10)["verdict"])) == []
