"""``compare`` names the cause that explains a step-time change, and a side measured under CPU
contention never fails the gate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import corpus_file
from tests.core.synth import write_trace
from tests.report.hostile import hostile_events
from torchdoctor.compare.diff import compare
from torchdoctor.compare.explain import contention_of, explaining_cause
from torchdoctor.compare.sides import Side, load_side

# the V100 ResNet-50 pair's breakdown, rounded (ms per step): data loading fell by 58 of 36.5
_BASE = {"busy:compute": 98.6, "idle:data_loading": 59.3, "idle:host_overhead": 13.0}
_NEW = {"busy:compute": 99.1, "idle:data_loading": 1.2, "idle:host_overhead": 25.5}


def test_the_part_that_moved_by_about_the_difference_is_named() -> None:
    cause = explaining_cause(_BASE, _NEW)
    assert cause is not None and cause.key == "idle:data_loading"
    assert cause.name == "data loading" and cause.label == "idle: data loading"
    assert cause.text() == (
        "explained by data loading: the breakdown's 'idle: data loading' fell from 59.3 to 1.2 "
        "ms per step"
    )
    back = explaining_cause(_NEW, _BASE)  # the other way: it rose, and is still the cause
    assert back is not None and "rose from 1.2 to 59.3" in back.text()


def test_no_cause_when_no_part_accounts_for_the_difference() -> None:
    # the step fell by 20 ms, spread over four parts of 5 ms: none is half of it
    spread = {f"idle:p{i}": 10.0 for i in range(4)}
    assert explaining_cause(spread, {k: 5.0 for k in spread}) is None
    # one part fell by 60 while another rose by 50: the step fell by 10, a reshuffle
    assert explaining_cause({"a:x": 60.0, "a:y": 0.0}, {"a:x": 0.0, "a:y": 50.0}) is None
    # a part that moved against the step is never its cause
    mixed = explaining_cause({"a:x": 10.0, "a:y": 50.0}, {"a:x": 30.0, "a:y": 10.0})
    assert mixed is not None and mixed.key == "a:y"
    # under 2% of the step: nothing to explain
    assert explaining_cause({"a:x": 100.0}, {"a:x": 99.0}) is None


def _side(ms: float, breakdown: dict[str, float]) -> Side:
    steps = np.full(6, ms) * np.linspace(0.98, 1.02, 6)
    return Side("x", "trace", steps, breakdown_ms=breakdown)


def test_verdict_names_the_cause_and_keeps_the_interval() -> None:
    c = compare(_side(171.0, _BASE), _side(126.0, _NEW))
    v = c.verdict
    assert v.startswith("NEW is faster: mean step")
    assert "explained by data loading: the breakdown's 'idle: data loading' fell from 59.3" in v
    assert "[" in v and "not a test" in v and "beyond the noise" not in v
    assert not c.decision.decided and not c.gate(5.0)
    # the same step time on both sides: nothing to explain, whatever the parts did
    flat = compare(_side(150.0, _BASE), _side(150.0, _NEW))
    assert "explained by" not in flat.verdict


@pytest.mark.slow
def test_v100_workers_pair_names_the_data_loading_change() -> None:
    w0 = load_side(str(corpus_file("v100_resnet50_train_workers0")))
    w4 = load_side(str(corpus_file("v100_resnet50_train_workers4")))
    c = compare(w0, w4)
    data = next(d for d in c.breakdown if d.name == "idle:data_loading")
    v = c.verdict
    assert v.startswith("NEW is faster")
    assert (
        f"explained by data loading: the breakdown's 'idle: data loading' fell from "
        f"{data.base_ms:.1f} to {data.new_ms:.1f} ms per step" in v
    )
    assert data.base_ms > 50 and data.new_ms < 2
    assert c.decision.cause is not None and c.decision.cause.key == "idle:data_loading"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", "compare", *args], capture_output=True, text=True
    )


_STARVED = {
    "wall_s": 10.0,
    "intra_op_threads": 2,
    "cores": 2,
    "other_busy_cores": 1.8,
    "main_thread_runqueue_wait_s": 6.0,
}
_QUIET = {**_STARVED, "other_busy_cores": 0.1, "main_thread_runqueue_wait_s": 0.1}
_INFLATED = "the main thread waited for a CPU core 60% ... (step times here are inflated)"


def _run(
    folder: Path, step_ms: float, cpu: dict[str, object], findings: list[dict[str, str]]
) -> str:
    folder.mkdir(parents=True)
    write_trace(folder / "trace.json.gz", hostile_events(steps=3))
    steps = [90.0, 80.0, *(step_ms * (1 + 0.01 * (i % 3)) for i in range(10))]
    run = {"steps": {"step_ms": steps, "warmup_steps": 2}, "cpu": cpu}
    (folder / "run.json").write_text(json.dumps(run))
    (folder / "report.json").write_text(json.dumps({"findings": findings}))
    return str(folder)


def test_contention_from_a_finding_or_the_cpu_record() -> None:
    found = contention_of({"cpu-oversubscribed": {"title": _INFLATED}}, None)
    assert found is not None and "cpu-oversubscribed" in found and "inflated" in found
    starved = contention_of({}, _STARVED)
    assert starved is not None and "waited for a core 60%" in starved
    assert "1.8 of 2 cores" in starved
    assert contention_of({}, _QUIET) is None
    assert contention_of({}, {"wall_s": "x"}) is None  # a malformed record is no contention


@pytest.mark.slow
def test_gate_does_not_cry_wolf_on_a_side_under_load(tmp_path: Path) -> None:
    base = _run(tmp_path / "base", 10.0, _QUIET, [])
    # identical code, NEW under load: 5.5x slower steps, beyond the 100% one-run allowance
    clean = _cli(base, _run(tmp_path / "clean", 55.0, _QUIET, []), "--fail-if-slower", "5")
    assert clean.returncode == 1, clean.stderr  # the control: without contention it fails
    assert "gate --fail-if-slower 5%: FAILED" in clean.stdout
    finding = [{"id": "cpu-oversubscribed", "title": _INFLATED}]
    for name, cpu, found in (("f", _QUIET, finding), ("r", _STARVED, [])):
        r = _cli(base, _run(tmp_path / name, 55.0, cpu, found), "--fail-if-slower", "5")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "gate --fail-if-slower 5%: NOT JUDGED, passed" in r.stdout
        assert "ran under CPU contention" in r.stdout
        assert "cannot support a regression verdict" in r.stdout
    j = _cli(base, str(tmp_path / "r"), "--fail-if-slower", "5", "--json")
    doc = json.loads(j.stdout)
    assert j.returncode == 0 and doc["gate"]["failed"] is False and doc["gate"]["judged"] is False
    assert [c["side"] for c in doc["contention"]] == ["NEW"]
    # BASE under load and NEW slower still: an inflated BASE hides a slowdown, never makes one
    busy_base = _run(tmp_path / "bb", 10.0, _STARVED, [])
    r = _cli(busy_base, str(tmp_path / "clean"), "--fail-if-slower", "5")
    assert r.returncode == 1 and f"BASE ({busy_base}) ran under CPU contention" in r.stdout
