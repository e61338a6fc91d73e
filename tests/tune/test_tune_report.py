"""One claim: the pick's table row, the headline and the TOML comment quote the same interval;
the confirmation has its own column; a disagreeing confirmation keeps the baseline."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console
from tune_fakes import FakeWorld

from torchdoctor.tune import report
from torchdoctor.tune.cli import _write_outputs
from torchdoctor.tune.options import TuneOptions
from torchdoctor.tune.search import Search, Settings, Summary


def _summary(world: FakeWorld, knobs: tuple[str, ...]) -> Summary:
    return Search(world, Settings(knobs=knobs)).run()


def _render(summary: Summary) -> str:
    console = Console(record=True, width=250)
    report.render_table(summary, console)
    return console.export_text()


def _toml(summary: Summary, tmp_path: Path) -> str:
    runner = SimpleNamespace(batch_size=64, workload="w.py")
    opts = TuneOptions(seed=0, out=str(tmp_path / "t.toml"), json_path=None, min_gain=0.02)
    _write_outputs(summary, runner, opts, Console(file=open(tmp_path / "log", "w")))  # noqa: SIM115
    return (tmp_path / "t.toml").read_text(encoding="utf-8")


def test_row_headline_and_toml_quote_the_same_claim(tmp_path: Path) -> None:
    world = FakeWorld({("optimizer_impl", "fused"): 0.8, ("optimizer_impl", "foreach"): 0.9})
    summary = _summary(world, ("optimizer_impl",))
    claim = summary.claim
    assert claim is not None and claim.low < 1.25 < claim.high
    text = claim.format()
    table = _render(summary)
    pick_row = next(line for line in table.splitlines() if "◀ best" in line)
    assert text in pick_row
    conf = summary.confirmation
    assert conf is not None and conf.comparison is not None
    assert conf.comparison.interval.format() in pick_row  # the confirmation column
    assert f"best: optimizer_impl=fused — {text}" in report.headline(summary)
    assert text in _toml(summary, tmp_path)
    exported = json.loads(report.to_json(summary))
    assert exported["claim"]["low"] == claim.low and exported["confirmed"] is True


def test_kept_baseline_says_so_everywhere(tmp_path: Path) -> None:
    world = FakeWorld({}, search_only={("optimizer_impl", "fused"): 0.7})
    summary = _summary(world, ("optimizer_impl",))
    assert summary.claim is None and not summary.confirmed
    table = _render(summary)
    cand_row = next(line for line in table.splitlines() if "optimizer_impl=fused" in line)
    assert "✗" in cand_row  # its confirmation is shown, marked as failed
    assert "baseline ◀ best" in table
    assert "keeping the baseline" in report.headline(summary)
    assert "no configuration was faster by more than 2%" in _toml(summary, tmp_path)


def test_a_non_finite_loss_deviation_is_null_in_json_and_rejected_in_the_table() -> None:
    from torchdoctor.tune import fidelity

    world = FakeWorld({("optimizer_impl", "fused"): 0.8})
    summary = _summary(world, ("optimizer_impl",))
    rec = next(r for r in summary.records if r.trial.assignment.get("optimizer_impl") == "fused")
    rec.verdict = fidelity.check([1.0, 1.0], [1.0, float("nan")], "fp32", steps=2)
    assert rec.verdict.max_rel_dev == float("inf")
    rows = json.loads(report.to_json(summary))["ranked"]
    got = next(r for r in rows if r["config"] == "optimizer_impl=fused")
    assert got["fidelity"]["max_rel_dev"] is None and got["fidelity"]["ok"] is False
    assert "rejected: loss is nan at step 1" in _render(summary)
