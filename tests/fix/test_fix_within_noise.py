"""``fix`` proposes nothing for a finding whose predicted gain is inside noise (an info finding, or
a saving under ``NOISE_FLOOR`` of the step) unless asked (``--all``, or ``--only`` naming it); it
lists each one as not proposed, with its predicted speed-up."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from torchdoctor.cli import cli
from torchdoctor.fix.model import FindingRef
from torchdoctor.fix.planner import within_noise

SCRIPT = """
import torch
from torch.utils.data import DataLoader

torch.autograd.set_detect_anomaly(True)
loader = DataLoader(
    ds,
    batch_size=8,
)
"""


def _loader(severity: str, saving_ms: float) -> dict[str, Any]:
    return {
        "id": "dataloader-config",
        "title": "the step waits",
        "severity": severity,
        "saving_ms_per_step": saving_ms,
        "share_of_step": saving_ms / 25.0,
        "evidence": {
            "mean_step_ms": 25.0,
            "suggested_num_workers": 2,
            "dataloader": {"num_workers": 0, "cpus_per_rank": 2, "call": {"site": "train.py:6"}},
        },
        "where": [],
    }


def _anomaly(severity: str, saving_ms: float) -> dict[str, Any]:
    return {
        "id": "anomaly-detection",
        "severity": severity,
        "saving_ms_per_step": saving_ms,
        "evidence": {"mean_step_ms": 25.0},
        "where": [],
    }


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recorded run whose findings are an info one (1.01x) and a warning under 1% (1.00x)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT).lstrip())
    run = tmp_path / "torchdoctor-runs" / "train-1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"script": "train.py", "argv": [], "gpu": None}))
    findings = [_loader("info", 0.3), _anomaly("warning", 0.1)]
    (run / "report.json").write_text(json.dumps({"findings": findings}))
    return run


def _fix(*args: str) -> Any:
    return CliRunner().invoke(cli, ["fix", *args], catch_exceptions=False)


def test_nothing_is_proposed_within_noise(folder: Path) -> None:
    r = _fix("--from", str(folder))
    assert r.exit_code == 0, r.output
    assert r.stdout == ""  # no patch
    lines = r.stderr.splitlines()
    assert (
        "not proposed: dataloader-config info, within noise (predicted 1.01x); --all to include"
        in lines
    )
    assert (
        "not proposed: anomaly-detection within noise (predicted 1.00x); --all to include" in lines
    )


def test_all_proposes_them(folder: Path) -> None:
    r = _fix("--all", "--from", str(folder))
    assert r.exit_code == 0, r.output
    assert "+    num_workers=2," in r.stdout
    assert "-torch.autograd.set_detect_anomaly(True)" in r.stdout
    assert "not proposed" not in r.stderr
    doc = json.loads(_fix("--all", "--json", "--from", str(folder)).stdout)
    assert doc["options"]["all"] is True


def test_only_naming_one_is_asking_for_it(folder: Path) -> None:
    r = _fix("--only", "anomaly-detection", "--from", str(folder))
    assert r.exit_code == 0, r.output
    assert "-torch.autograd.set_detect_anomaly(True)" in r.stdout
    assert "num_workers" not in r.stdout


def test_a_gain_above_noise_is_proposed(folder: Path) -> None:
    report = folder / "report.json"
    report.write_text(json.dumps({"findings": [_loader("warning", 5.0), _anomaly("info", 0.1)]}))
    r = _fix("--from", str(folder))
    assert "+    num_workers=2," in r.stdout
    assert "not proposed: anomaly-detection" in r.stderr
    assert "not proposed: dataloader-config" not in r.stderr


@pytest.mark.parametrize(
    ("severity", "saving", "step", "expected"),
    [
        ("critical", 20.0, 25.0, None),
        ("warning", 0.24, 25.0, "within noise (predicted 1.01x)"),  # 0.96% of the step
        ("warning", 0.26, 25.0, None),  # 1.04%
        ("info", 5.0, 25.0, "info (predicted 1.25x)"),
        ("info", 1.0, 25.0, "info, within noise (predicted 1.04x)"),
        ("info", 0.0, None, "info, within noise (no saving estimated)"),
        ("warning", 0.0, None, None),  # no estimate: kept
    ],
)
def test_within_noise(
    severity: str, saving: float, step: float | None, expected: str | None
) -> None:
    ev = {"mean_step_ms": step} if step else {}
    f = FindingRef("x", severity=severity, saving_ms_per_step=saving, evidence=ev)
    assert within_noise(f) == expected


def test_a_finding_without_a_codemod_is_named_as_a_change_by_hand(folder: Path) -> None:
    # gc.collect() every step: critical, no codemod; fix used to say "nothing to change"
    gc = {
        "id": "housekeeping-in-step",
        "title": "gc.collect() every step at train.py:3: 267.3 ms per step (94%)",
        "severity": "critical",
        "saving_ms_per_step": 267.3,
        "share_of_step": 0.94,
        "evidence": {"mean_step_ms": 284.0},
        "where": [str(folder.parent.parent / "train.py") + ":3"],
        "fix": "# Python collects garbage by itself: drop the call from the loop:\n"
        "if step % 1000 == 0:\n    gc.collect()",
    }
    (folder / "report.json").write_text(json.dumps({"findings": [gc, _anomaly("info", 0.1)]}))
    r = _fix("--from", str(folder))
    assert r.exit_code == 0, r.output
    assert r.stdout == ""  # nothing printed as code to paste
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("by hand:")]
    assert "housekeeping-in-step" in line and "267.3 ms" in line
    assert "drop the call from the loop" in line and "gc.collect()\n" not in line
    doc = json.loads(_fix("--json", "--from", str(folder)).stdout)
    assert any(n.startswith("by hand: housekeeping-in-step") for n in doc["notes"])
    # an info finding without a codemod, or one --only leaves out, is not listed
    assert "anomaly" not in line
    r = _fix("--only", "dataloader-config", "--from", str(folder))
    assert "by hand" not in r.stderr
