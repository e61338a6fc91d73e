"""``torchdoctor compare``: statistics checked against brute force, the gate, every kind of side,
the corpus before/after pair, and bad input."""

from __future__ import annotations

import itertools
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
from torchdoctor.compare.sides import Side, load_side
from torchdoctor.compare.stats import compare_steps, mann_whitney


def _brute_force(base: np.ndarray, new: np.ndarray) -> tuple[float, float]:
    """Permutation p-values (two-sided, NEW slower) by enumerating every split of the pool."""
    pool = np.concatenate([base, new])
    n2 = len(new)

    def u(idx: tuple[int, ...]) -> float:
        y = pool[list(idx)]
        x = np.delete(pool, list(idx))
        return float(sum((yy > xx) + 0.5 * (yy == xx) for yy in y for xx in x))

    observed = u(tuple(range(len(base), len(pool))))
    us = np.array([u(c) for c in itertools.combinations(range(len(pool)), n2)])
    mean = len(base) * n2 / 2
    two = float(np.mean(np.abs(us - mean) >= abs(observed - mean) - 1e-9))
    return two, float(np.mean(us >= observed - 1e-9))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_mann_whitney_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0, 0.2, 6)
    new = rng.lognormal(0.15 * seed, 0.2, 5)
    t = mann_whitney(base, new)
    two, slower = _brute_force(base, new)
    assert t.method == "exact"
    assert t.p_two_sided == pytest.approx(two)
    if np.median(new) > np.median(base) and slower < 0.5:  # observed direction: exact half
        assert t.p_new_slower == pytest.approx(slower)
    else:
        assert t.p_new_slower >= 0.5 and slower >= 0.4


def test_normal_approximation_with_ties_is_close_to_brute_force() -> None:
    base = np.array([10, 11, 11, 12, 12, 12, 13, 14.0])
    new = np.array([11, 12, 13, 13, 14, 14, 15, 15, 16.0])
    t = mann_whitney(base, new)
    two, slower = _brute_force(base, new)
    assert t.method == "normal approximation"
    assert t.p_two_sided == pytest.approx(two, abs=0.01)
    assert t.p_new_slower == pytest.approx(slower, abs=0.01)


def test_complete_separation_of_five_steps_is_significant() -> None:
    c = compare_steps(
        np.array([10.0, 10.1, 10.2, 10.3, 10.4]), np.array([11, 11.1, 11.2, 11.3, 11.4])
    )
    assert c.p_value == pytest.approx(2 / 252)
    assert c.ratio == pytest.approx(11.2 / 10.2)
    assert c.ratio_low <= c.ratio <= c.ratio_high


def _side(ms: np.ndarray, **kw: object) -> Side:
    return Side(path="x", kind="trace", step_ms=ms, **kw)  # type: ignore[arg-type]


def test_gate_fails_only_beyond_the_noise_and_the_threshold() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(100, 3, 20)
    slow = rng.normal(110, 3, 20)
    c = compare(_side(base), _side(slow))
    assert c.steps.slower_beyond_noise
    assert c.gate(5.0) and not c.gate(15.0)
    assert not compare(_side(slow), _side(base)).gate(0.0)  # faster never fails
    # the same distribution: whatever the medians say, the gate holds at 0%
    same = compare(_side(rng.normal(100, 10, 20)), _side(rng.normal(100, 10, 20)))
    assert not same.gate(0.0) or same.steps.test.p_new_slower < 0.05


def test_gate_false_alarm_rate_is_at_most_alpha() -> None:
    """Under no change the one-sided test fires in about 5% of cases, not more."""
    rng = np.random.default_rng(11)
    fired = sum(
        compare(_side(rng.lognormal(0, 0.1, 8)), _side(rng.lognormal(0, 0.1, 8))).gate(0.0)
        for _ in range(400)
    )
    assert fired / 400 <= 0.075


def test_warnings_for_different_gpus_torch_and_batch() -> None:
    a = _side(np.ones(5), gpu="A100", torch_version="2.5.0", batch_size=32)
    b = _side(np.ones(5) * 1.01, gpu="H100", torch_version="2.6.0", batch_size=64)
    w = " ".join(compare(a, b).warnings)
    assert "A100 vs H100" in w and "2.5.0 vs 2.6.0" in w and "32 vs 64" in w
    assert compare(a, a).warnings == []


def test_corpus_before_after_pair() -> None:
    w0, w4 = (
        str(corpus_file("v100_resnet50_train_workers0")),
        str(corpus_file("v100_resnet50_train_workers4")),
    )
    c = compare(load_side(w0), load_side(w4))
    assert c.steps.ratio < 0.8
    assert c.verdict.startswith(("NEW is faster", "NEW looks faster"))
    assert "data-loading-bound" in [f["id"] for f in c.findings_gone]
    data = next(d for d in c.breakdown if d.name == "idle:data_loading")
    assert data.base_ms > 50 and data.new_ms < 2
    assert c.throughput_change is not None and c.throughput_change > 0.2
    assert not c.gate(5.0)
    assert compare(load_side(w4), load_side(w0)).gate(5.0)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", "compare", *args], capture_output=True, text=True
    )


def test_cli_exit_codes_json_and_html(tmp_path: Path) -> None:
    w0, w4 = (
        str(corpus_file("v100_resnet50_train_workers0")),
        str(corpus_file("v100_resnet50_train_workers4")),
    )
    ok = _cli(w0, w4, "--fail-if-slower", "5", "--json", "--html", str(tmp_path / "c.html"))
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["gate"] == {"fail_if_slower_pct": 5.0, "failed": False}
    assert doc["step_time"]["test"] == "mann-whitney-u"
    assert "data loading" in (tmp_path / "c.html").read_text()
    bad = _cli(w4, w0, "--fail-if-slower", "5")
    assert bad.returncode == 1
    assert "gate --fail-if-slower 5%: FAILED" in bad.stdout


@pytest.mark.parametrize(
    "content", [None, "{not json", '{"traceEvents": 3}', '{"best": {}, "ranked": []}']
)
def test_bad_inputs_exit_2_with_one_line(tmp_path: Path, content: str | None) -> None:
    good = str(corpus_file("a100_event_sync_micro"))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    r = _cli(good, str(bad))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("torchdoctor: error:")


def _rank_trace(path: Path, rank: int, step_us: float) -> Path:
    return write_trace(
        path,
        hostile_events(steps=5, step_us=step_us),
        distributedInfo={"rank": rank, "world_size": 2, "backend": "nccl"},
    )


def test_folders_of_ranks_use_the_slowest_rank(tmp_path: Path) -> None:
    base, new = tmp_path / "base", tmp_path / "new"
    for d, slow in ((base, 10_000.0), (new, 14_000.0)):
        d.mkdir()
        _rank_trace(d / "rank0.json", 0, 10_000.0)
        _rank_trace(d / "rank1.json", 1, slow)
    b, n = load_side(str(base)), load_side(str(new))
    assert b.kind == "ranks" and "slowest of 2 ranks" in b.notes[0]
    # rank 0 is the same on both sides; only the slow rank 1 differs, and it sets the pace
    assert np.median(n.step_ms) > np.median(b.step_ms)
    assert compare(b, n).gate(1.0)


def _check_run(folder: Path, step_ms: list[float], batch: int, torch: str) -> Path:
    folder.mkdir()
    write_trace(folder / "trace.json.gz", hostile_events(steps=3))
    run = {
        "torch_version": torch,
        "steps": {"step_ms": step_ms, "warmup_steps": 2},
        "config": {"dataloaders": [{"batch_size": batch}]},
        "gpu": {"device": {"name": "FakeGPU"}},
    }
    (folder / "run.json").write_text(json.dumps(run))
    (folder / "report.json").write_text(
        json.dumps({"findings": [{"id": "recompiles", "title": "3 recompiles"}]})
    )
    return folder


def test_check_run_folders_use_the_run_clock_and_record(tmp_path: Path) -> None:
    a = load_side(
        str(_check_run(tmp_path / "a", [500, 400, *[10.0 + i % 3 for i in range(12)]], 32, "2.5"))
    )
    b = load_side(
        str(_check_run(tmp_path / "b", [500, 400, *[12.0 + i % 3 for i in range(12)]], 64, "2.6"))
    )
    assert a.kind == "check-run" and len(a.step_ms) == 12  # warm-up steps left out
    assert a.findings.keys() == {"recompiles"} and a.gpu == "FakeGPU"
    c = compare(a, b)
    assert c.steps.beyond_noise and c.steps.ratio == pytest.approx(13 / 11)
    assert any("batch sizes: 32 vs 64" in w for w in c.warnings)
    # twice the batch in 13/11 the time: more samples per second
    assert c.throughput_change == pytest.approx((64 / 13) / (32 / 11) - 1, rel=0.02)


def _tune_json(path: Path, times_s: list[float] | None) -> Path:
    best = {"seq": 3, "config": "compile=default", "median_step_s": 0.01, "samples_per_s": 3200}
    if times_s is not None:
        best["step_times_s"] = times_s
    path.write_text(json.dumps({"best": best, "ranked": [best], "finding_ids": ["host-bound"]}))
    return path


def test_tune_results(tmp_path: Path) -> None:
    a = load_side(str(_tune_json(tmp_path / "a.json", [0.010, 0.011, 0.0105, 0.0102, 0.0108])))
    b = load_side(str(_tune_json(tmp_path / "b.json", [0.013, 0.0135, 0.0132, 0.0138, 0.0131])))
    assert a.kind == "tune" and a.step_ms[0] == pytest.approx(10.0)
    c = compare(a, b)
    assert c.gate(10.0) and not c.gate(40.0)
    only_median = load_side(str(_tune_json(tmp_path / "c.json", None)))
    assert "no noise estimate" in " ".join(only_median.notes)
    assert not compare(only_median, b).steps.beyond_noise
