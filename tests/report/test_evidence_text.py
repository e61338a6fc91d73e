"""A finding's evidence in the terminal: short key=value, shares as percentages, lists cut."""

from __future__ import annotations

import re

import pytest

from tests.report.test_widths import _report
from torchdoctor.report.evidence_text import evidence_line


def test_values_read_as_a_person_writes_them() -> None:
    line = evidence_line(
        {
            "share_of_step": 3.073e-05,
            "gpu_busy_share": 0.5664,
            "waits": 1.0,
            "workers_busy_share": None,
            "pinned": True,
            "mean_step_ms": 177.59123,
            "loader": {"num_workers": 0, "prefetch_factor": None, "share": 0.25},
        }
    )
    assert line == (
        "share_of_step=0.0031%, gpu_busy_share=56.6%, waits=1, pinned=yes, mean_step_ms=177.6, "
        "loader={num_workers: 0, share: 25.0%}"
    )


def test_a_share_above_one_is_no_percentage() -> None:
    assert evidence_line({"share_ratio": 1.5}) == "share_ratio=1.5"


def test_long_lists_and_mappings_are_summarised() -> None:
    line = evidence_line(
        {"sites": [f"train.py:{i}" for i in range(40)], "by": dict.fromkeys("abcdef", 1)}
    )
    assert line == (
        "sites=[train.py:0, train.py:1, train.py:2, … 37 more], by={a: 1, b: 1, c: 1, d: 1, … 2 more}"
    )


def test_a_kernel_name_is_shortened_from_the_middle() -> None:
    name = "void at::native::unrolled_elementwise_kernel<" + "x" * 900 + ">(int)"
    got = evidence_line({"work": name})
    assert got.startswith("work=void at::native::") and got.endswith(">(int)")
    assert len(got) == len("work=") + 60


def test_real_evidence_lines_are_short_and_plain() -> None:
    # nanoGPT on an H200: the dependency-wait finding held a 1,000-character list of dicts
    text = _report("h200/nanogpt_gpt2_eager_check").text(width=100)
    lines = [line for line in text.splitlines() if line.strip().startswith("evidence:")]
    assert lines
    for line in lines:
        assert len(line) < 400, line
        assert "None" not in line and "'" not in line, line
        assert not re.search(r"\de-\d", line), line
    assert any("share_of_step=0.02%" in line for line in lines)


@pytest.mark.parametrize(
    ("stem", "title"),
    [
        ("mi250_toy_train_rocm", "Synchronous copies: 1 per step hold the CPU"),
        ("a100_recsys_train_rank3", "Synchronous copies: 10 per step hold the CPU"),
        ("mi300x_sglang_qwen3_8b_decode", "decode step: 1 per step hold the CPU"),
    ],
)
def test_a_count_per_step_reads_as_a_count(stem: str, title: str) -> None:
    titles = [f.title for f in _report(stem).findings]
    assert any(title in t for t in titles), titles
