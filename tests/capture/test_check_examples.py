"""Each planted-problem example: ``check`` names the planted problem first; the well-tuned
script gets no warning-level finding."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, FAST_STEPS, CheckRun, check_inprocess

Shared = Callable[..., CheckRun]
TINY_OPS_OPTS = ["--warmup", "3", "--steps", "4"]


def site(name: str, text: str) -> str:
    """``path:line`` of the first line of an example containing ``text``."""
    path = EXAMPLES / name
    lines = path.read_text().splitlines()
    return f"{path}:{next(i for i, ln in enumerate(lines, 1) if text in ln)}"


@pytest.mark.slow
def test_slow_dataloader(shared_check: Shared) -> None:
    r = shared_check(EXAMPLES / "slow_dataloader.py", html=True)  # the HTML tests read it too
    assert r.code == 0, r.stderr
    assert r.top["id"] == "dataloader-config" and r.top["severity"] in ("warning", "critical")
    assert r.top["evidence"]["dataloader"]["num_workers"] == 0
    assert r.run["steps"]["mean_data_wait_ms"] > 10  # 16 items x 1.5 ms per batch


@pytest.mark.slow
def test_item_per_step(shared_check: Shared) -> None:
    r = shared_check(EXAMPLES / "item_per_step.py")
    assert r.code == 0, r.stderr
    assert r.top["id"] == "host-syncs-in-step"
    assert r.top["where"] == [site("item_per_step.py", "loss.item()")]
    assert r.top["evidence"]["syncs_per_step"] == 1.0


@pytest.mark.slow
def test_tiny_ops(shared_check: Shared) -> None:
    # the run test_check_fused_compute reads too: 30 steps of the script, 4 profiled
    r = shared_check(EXAMPLES / "tiny_ops.py", "--steps", "30", opts=TINY_OPS_OPTS)
    assert r.code == 0, r.stderr
    assert r.top["id"] == "host-bound" and r.top["severity"] in ("warning", "critical")
    assert r.top["evidence"]["top_level_ops_per_step"] > 500
    assert "fused=True" in r.top["fix"]  # the per-parameter Adam loop is named


@pytest.mark.slow
def test_recompiling_shapes(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "recompiling_shapes.py", "--backend", "eager")
    assert r.code == 0, r.stderr
    assert r.top["id"] == "recompiles", r.stdout
    assert r.top["evidence"]["recompiles_after_warmup"] >= 1
    assert "size mismatch" in r.top["evidence"]["reasons"][0]
    forward = site("recompiling_shapes.py", "def forward")
    assert any(w.startswith(forward) for w in r.top["where"])


@pytest.mark.slow
def test_graph_breaks(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "graph_breaks.py", "--backend", "eager")
    assert r.code == 0, r.stderr
    # A sub-millisecond step: an input-pipeline gap of a few percent can tie with the break's
    # saving (both about 5% here); the break must come first among the rest.
    top = next(
        f
        for f in r.report["findings"]
        if not (f["id"] == "input-pipeline" and f["share_of_step"] < 0.1)
    )
    assert top["id"] == "graph-breaks", r.stdout
    assert top["where"] == [site("graph_breaks.py", "if h.mean() > 0.1")]


@pytest.mark.slow
def test_well_tuned(shared_check: Shared) -> None:
    r = shared_check(EXAMPLES / "well_tuned.py")
    assert r.code == 0, r.stderr
    loud = [f for f in r.report["findings"] if f["severity"] != "info"]
    assert loud == [], r.stdout
    assert r.run["steps"]["source"] == "optimizer" and r.run["steps"]["count"] == FAST_STEPS


@pytest.mark.slow
def test_no_global_module_hook_outlives_the_run(shared_check: Shared) -> None:
    """The window ends inside an optimizer step's hook, where our module hooks can only be
    neutralised; they must still be gone when check returns (a later torch.compile in the same
    process would see global hooks). The script adds none of its own. test_item_per_step's run:
    the hooks are counted when check returns, before the helper removes any for the next test."""
    r = shared_check(EXAMPLES / "item_per_step.py")
    assert r.code == 0, r.stderr
    assert r.hooks_left == {}
