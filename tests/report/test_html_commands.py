"""``--html`` on the real ``check`` and ``tune`` commands, and ``compare`` on what they wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, CheckRun
from torchdoctor.compare.diff import compare
from torchdoctor.compare.sides import load_side

TINY = str(Path(__file__).resolve().parents[1] / "tune" / "workloads" / "tiny.py")


@pytest.mark.slow
def test_check_html_and_compare_two_runs(shared_check: Callable[..., CheckRun]) -> None:
    slow = shared_check(EXAMPLES / "slow_dataloader.py", html=True)  # --warmup 3 --steps 3
    assert slow.code == 0 and slow.folder is not None, slow.stderr
    html = slow.folder.parent / "check.html"
    page = html.read_text()
    assert "dataloader-config" in page and slow.run["torch_version"] in page
    assert f"wrote {html}" in slow.stdout
    tuned = shared_check(EXAMPLES / "well_tuned.py")
    assert tuned.code == 0, tuned.stderr
    assert slow.folder is not None and tuned.folder is not None
    a, b = load_side(str(slow.folder)), load_side(str(tuned.folder))
    assert a.kind == b.kind == "check-run"
    assert len(a.step_ms) == len(slow.run["steps"]["step_ms"]) - slow.run["steps"]["warmup_steps"]
    c = compare(a, b)
    assert "dataloader-config" in [f["id"] for f in c.findings_gone]


@pytest.mark.slow
def test_tune_html_lists_the_trials_and_compare_reads_the_json(tmp_path: Path) -> None:
    html, out = tmp_path / "tune.html", tmp_path / "r.json"
    cmd = [
        sys.executable, "-m", "torchdoctor.tune.cli", TINY, "--knobs", "optimizer_impl",
        "--steps", "6", "--warmup", "2", "--fidelity-steps", "6", "--max-trials", "3",
        "--db", str(tmp_path / "t.sqlite"), "--out", str(tmp_path / "best.toml"),
        "--json", str(out), "--html", str(html),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    page = html.read_text()
    assert page.count("<tr") - 1 == len(data["ranked"])  # a row per trial, plus the header
    assert page.count('class="pick"') == 1
    times = data["best"]["step_times_s"]
    assert times and all(t > 0 for t in times)
    side = load_side(str(out))
    assert side.kind == "tune" and list(side.step_ms) == pytest.approx([t * 1e3 for t in times])
    assert not compare(side, side).gate(0.0)
