"""``torchdoctor compare``: the rank test on runs checked against brute force, every kind of side,
the corpus before/after pair, the gate on single runs, and bad input."""

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
from torchdoctor import stats
from torchdoctor.compare.diff import compare
from torchdoctor.compare.sides import Side, load_side


def _brute_force(base: np.ndarray, new: np.ndarray) -> float:
    """Two-sided permutation p-value by enumerating every split of the pool."""
    pool = np.concatenate([base, new])
    n2 = len(new)

    def u(idx: tuple[int, ...]) -> float:
        y = pool[list(idx)]
        x = np.delete(pool, list(idx))
        return float(sum((yy > xx) + 0.5 * (yy == xx) for yy in y for xx in x))

    observed = u(tuple(range(len(base), len(pool))))
    us = np.array([u(c) for c in itertools.combinations(range(len(pool)), n2)])
    mean = len(base) * n2 / 2
    return float(np.mean(np.abs(us - mean) >= abs(observed - mean) - 1e-9))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rank_test_on_runs_matches_brute_force(seed: int) -> None:
    """The test several runs a side use: exact Mann-Whitney, as a permutation test says."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0, 0.2, 6)
    new = rng.lognormal(0.15 * seed, 0.2, 5)
    assert stats.mann_whitney(new, base).p_value == pytest.approx(_brute_force(base, new))


@pytest.mark.slow
def test_normal_approximation_with_ties_is_close_to_brute_force() -> None:
    base = np.array([10, 11, 11, 12, 12, 12, 13, 14.0])
    new = np.array([11, 12, 13, 13, 14, 14, 15, 15, 16.0])
    assert stats.mann_whitney(new, base).p_value == pytest.approx(_brute_force(base, new), abs=0.01)


def _side(ms: np.ndarray, **kw: object) -> Side:
    return Side(path="x", kind="trace", step_ms=ms, **kw)  # type: ignore[arg-type]


def test_single_run_mann_whitney_on_steps_is_refused() -> None:
    """The old behaviour: five steps a side, completely separated, gave "NEW is slower ...
    beyond the noise (p = 0.008)". Steps of one run share that run's load, so now no test is
    made on them: the verdict says "looks", the gate cannot fire on a 10% change, and the JSON
    names no p-value."""
    from torchdoctor.compare.render import to_dict

    c = compare(
        _side(np.array([10.0, 10.1, 10.2, 10.3, 10.4])),
        _side(np.array([11, 11.1, 11.2, 11.3, 11.4])),
    )
    assert stats.mann_whitney(
        [11, 11.1, 11.2, 11.3, 11.4], [10.0, 10.1, 10.2, 10.3, 10.4]
    ).p_value == pytest.approx(2 / 252)
    assert c.evidence == "one run a side"
    assert c.verdict.startswith("NEW looks slower") and "beyond the noise" not in c.verdict
    assert not c.decision.decided and not c.gate(5.0)
    mean = to_dict(c, 5.0)["costs"]["mean_step"]
    assert mean["p_value"] is None and mean["test"].startswith("none: one run a side")
    assert mean["decided"] is False
    # the interval holds the run-to-run allowance: a 2x drift between runs stays inside it
    lo, hi = mean["interval"]
    assert lo < 0.91 / 1.9 and hi > 0.91 * 1.9


def test_single_run_gate_fails_only_beyond_the_run_to_run_allowance() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(100, 3, 20)
    assert not compare(_side(base), _side(base * 1.5)).gate(5.0)  # within +/-100%
    far = compare(_side(base), _side(base * 3.0))
    assert far.gate(5.0) and not far.gate(250.0)
    assert "ONE RUN A SIDE" in far.decision.gate_line(5.0)
    assert not compare(_side(base * 3.0), _side(base)).gate(0.0)  # faster never fails
    # a quieter machine, declared: the same 1.5x slowdown now fails
    assert compare(_side(base), _side(base * 1.5), run_noise_pct=10.0).gate(5.0)


def test_gate_false_alarm_rate_on_runs_is_at_most_alpha() -> None:
    """Four runs a side of the same code: the gate on runs fires in about 5% of cases at most."""
    rng = np.random.default_rng(11)

    def runs() -> list[Side]:
        return [_side(rng.lognormal(rng.normal(0, 0.3), 0.05, 8)) for _ in range(4)]

    fired = sum(compare(runs(), runs()).gate(0.0) for _ in range(300))
    assert fired / 300 <= 0.075


def test_warnings_for_different_gpus_torch_and_batch() -> None:
    a = _side(np.ones(5), gpu="A100", torch_version="2.5.0", batch_size=32)
    b = _side(np.ones(5) * 1.01, gpu="H100", torch_version="2.6.0", batch_size=64)
    w = " ".join(compare(a, b).warnings)
    assert "A100 vs H100" in w and "2.5.0 vs 2.6.0" in w and "32 vs 64" in w
    assert compare(a, a).warnings == []


@pytest.mark.slow
def test_corpus_before_after_pair() -> None:
    w0, w4 = (
        str(corpus_file("v100_resnet50_train_workers0")),
        str(corpus_file("v100_resnet50_train_workers4")),
    )
    c = compare(load_side(w0), load_side(w4))
    mean = c.estimates["mean_step"]
    assert mean.speedup.ratio > 1.2 and mean.base > mean.new
    # two traces, one run a side: no test, but the breakdown names the cause (data loading)
    assert c.verdict.startswith("NEW is faster") and "explained by data loading" in c.verdict
    assert not c.decision.decided
    assert "data-loading-bound" in [f["id"] for f in c.findings_gone]
    data = next(d for d in c.breakdown if d.name == "idle:data_loading")
    assert data.base_ms > 50 and data.new_ms < 2
    assert c.throughput_change == pytest.approx(mean.speedup.ratio - 1.0)
    assert not c.gate(5.0)
    # the other way a 1.3x slowdown of one trace a side is within run-to-run variation
    assert not compare(load_side(w4), load_side(w0)).gate(5.0)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", "compare", *args], capture_output=True, text=True
    )


@pytest.mark.slow
def test_cli_exit_codes_json_and_html(tmp_path: Path) -> None:
    w0, w4 = (
        str(corpus_file("v100_resnet50_train_workers0")),
        str(corpus_file("v100_resnet50_train_workers4")),
    )
    ok = _cli(w0, w4, "--fail-if-slower", "5", "--json", "--html", str(tmp_path / "c.html"))
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["gate"]["failed"] is False and doc["gate"]["on"] == "one run a side"
    assert doc["evidence"] == "one run a side" and doc["headline"] == "mean_step"
    assert doc["costs"]["mean_step"]["p_value"] is None
    assert "data loading" in (tmp_path / "c.html").read_text()
    # several runs a side, split at --: four fast runs against four runs 30% slower
    fast = [
        str(_check_run(tmp_path / f"f{i}", [90, 80, *[10.0 + i * 0.1] * 6], 32, "2.5"))
        for i in range(4)
    ]
    slow = [
        str(_check_run(tmp_path / f"s{i}", [90, 80, *[13.0 + i * 0.1] * 6], 32, "2.5"))
        for i in range(4)
    ]
    bad = _cli("--fail-if-slower", "5", *fast, "--", *slow)
    assert bad.returncode == 1, bad.stderr
    assert "gate --fail-if-slower 5%: FAILED" in bad.stdout and "gated on runs" in bad.stdout
    assert "NEW is slower" in bad.stdout and "beyond the noise" in bad.stdout
    assert _cli("--fail-if-slower", "5", *slow, "--", *fast).returncode == 0
    three = _cli("--fail-if-slower", "5", *fast[:3], "--", *slow[:3])
    assert three.returncode == 0 and "cannot fail with fewer than 4 runs a side" in three.stdout
    wrong = _cli(fast[0], fast[1], slow[0])
    assert wrong.returncode == 2 and "separate the sides with --" in wrong.stderr


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
    assert compare(b, n).estimates["median_step"].speedup.ratio == pytest.approx(10 / 14, rel=0.05)


def _check_run(folder: Path, step_ms: list[float], batch: int, torch: str) -> Path:
    folder.mkdir(parents=True)
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
    assert list(a.warmup_ms) == [500, 400]  # kept for the one-time cost
    assert a.findings.keys() == {"recompiles"} and a.gpu == "FakeGPU"
    c = compare(a, b)
    assert any("batch sizes: 32 vs 64" in w for w in c.warnings)
    # twice the batch in 13/11 the time: more samples per second, and the verdict says so
    assert c.estimates["mean_step"].unit == "ms/sample"
    assert c.throughput_change == pytest.approx((64 / 13) / (32 / 11) - 1, rel=0.02)
    assert c.verdict.startswith("NEW looks faster")
    one = c.estimates["one_time"]  # 900 ms of warm-up minus two steady steps
    assert one.base == pytest.approx(0.9 - 2 * 0.011, abs=1e-3)


def _tune_json(path: Path, times_s: list[float] | None) -> Path:
    best = {"seq": 3, "config": "compile=default", "median_step_s": 0.01, "samples_per_s": 3200}
    if times_s is not None:
        best["step_times_s"] = times_s
        best["samples_per_s"] = 32 / float(np.median(times_s))  # a batch of 32, as tune writes
    path.write_text(json.dumps({"best": best, "ranked": [best], "finding_ids": ["host-bound"]}))
    return path


def test_tune_results(tmp_path: Path) -> None:
    a = load_side(str(_tune_json(tmp_path / "a.json", [0.010, 0.011, 0.0105, 0.0102, 0.0108])))
    b = load_side(str(_tune_json(tmp_path / "b.json", [0.013, 0.0135, 0.0132, 0.0138, 0.0131])))
    assert a.kind == "tune" and a.step_ms[0] == pytest.approx(10.0)
    c = compare(a, b)
    assert c.estimates["median_step"].speedup.ratio == pytest.approx(10.5 / 13.2, rel=0.01)
    assert not c.decision.decided  # one tune result a side
    only_median = load_side(str(_tune_json(tmp_path / "c.json", None)))
    assert "no noise estimate" in " ".join(only_median.notes)
    assert not compare(only_median, b).decision.decided
