"""``check`` on memory that grows every step: a finding with its cost and the line that keeps
the graph, and no such finding on healthy scripts. retain_graph_leak.py is the case the rule
was written against; outputs_kept_for_logging.py (logits kept with their graph) was held out;
each one's --fixed run, well_tuned.py and the unlisted controls stay quiet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import REPO, check_subprocess

UNLISTED = REPO / "examples" / "unlisted"
OPTS = ["--warmup", "3", "--steps", "4"]


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a 2-core machine shared with other tests


def _run(tmp_path: Path, script: Path, *args: str) -> Any:
    # A fresh process, as a user runs it: in this one, the heap that earlier tests freed would
    # take a leak's first hundred MiB without the resident memory moving.
    return check_subprocess(tmp_path, script, *args, opts=OPTS)


def _growth(r: Any) -> list[dict[str, Any]]:
    assert r.code == 0, r.stderr
    return [f for f in r.report["findings"] if f["id"] == "memory-growth"]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["retain_graph_leak.py", "outputs_kept_for_logging.py"])
def test_memory_growing_every_step_is_a_finding(tmp_path: Path, script: str) -> None:
    r = _run(tmp_path, UNLISTED / script, "--steps", "40")
    (f,) = _growth(r)
    assert f["severity"] in ("warning", "critical")
    growth = f["evidence"]["growth"]
    assert growth["kind"] in ("host", "resident") and growth["mib_per_step"] >= 1.0, growth
    assert "MiB per step" in f["title"] and "runs out in about" in f["title"], f["title"]
    assert ".detach()" in f["fix"]
    # never a clean bill: the leak is named after the verdict, or another finding leads
    assert "But fix: memory growing every step" in r.stdout or "Fix first: " in r.stdout
    assert "No bottleneck worth fixing" not in r.stdout
    if script == "retain_graph_leak.py":
        lines = (UNLISTED / script).read_text().splitlines()
        planted = next(i for i, ln in enumerate(lines, 1) if "retain_graph=True)" in ln)
        assert any(w.endswith(f"{script}:{planted}") for w in f["where"]), f["where"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args"),
    [
        (UNLISTED / "retain_graph_leak.py", ("--steps", "40", "--fixed")),
        (UNLISTED / "outputs_kept_for_logging.py", ("--steps", "40", "--fixed")),
        (REPO / "examples" / "check" / "well_tuned.py", ("--steps", "40")),
        (UNLISTED / "control_cnn.py", ("--steps", "40")),
        (UNLISTED / "control_transformer.py", ("--steps", "40")),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else " ".join(v),
)
def test_healthy_memory_stays_quiet(tmp_path: Path, script: Path, args: tuple[str, ...]) -> None:
    r = _run(tmp_path, script, *args)
    assert _growth(r) == [], r.run.get("memory_steps")
    assert r.run["memory_steps"]["rss_bytes"], "the column was recorded"
