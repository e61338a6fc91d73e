"""tune's table at 60, 80, 100 and 160 columns: every number of its JSON rows printed whole."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console
from tune_fakes import FakeWorld

from torchdoctor.tune import report
from torchdoctor.tune.search import Search, Settings


@pytest.fixture(scope="module")
def summary() -> object:
    world = FakeWorld(
        {
            ("optimizer_impl", "fused"): 0.8,
            ("optimizer_impl", "foreach"): 0.9,
            ("precision", "bf16-mixed"): 1.2,
        }
    )
    return Search(world, Settings(knobs=("optimizer_impl", "precision"))).run()


def _tokens(row: dict[str, object]) -> list[str]:
    """What the table shows of a JSON row, formatted as a reader expects it."""
    out = [f"{row['median_step_s'] * 1e3:.1f}", f"{row['iqr_step_s'] * 1e3:.1f}"]  # type: ignore[operator]
    out += [str(row["rounds"]), f"{row['samples_per_s']:.0f}"]
    iv = row["speedup_interval"]
    if iv is not None:
        assert isinstance(iv, dict)
        out.append(f"{iv['ratio']:.2f}x")
        if iv["low"] != iv["high"]:
            out.append(f"[{iv['low']:.2f}-{iv['high']:.2f}]")
    return out


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_every_number_prints_whole(summary: object, width: int) -> None:
    console = Console(record=True, width=width, color_system=None)
    report.render_table(summary, console)  # type: ignore[arg-type]
    text = console.export_text()
    rows = json.loads(report.to_json(summary))["ranked"]  # type: ignore[arg-type]
    assert len(rows) == 4
    for row in rows:
        for token in _tokens(row):
            assert re.search(r"(?<![\w.\[-])" + re.escape(token) + r"(?![\w.\]-])", text), (
                f"{token} of {row['config']} not whole at {width} columns:\n{text}"
            )
    if width >= 100:  # ten columns cannot fit 80 without wrapping the terminal's lines
        assert max(len(line) for line in text.splitlines()) <= width, text
