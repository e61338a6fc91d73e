"""SQLite store: round trip, replay without re-running, resume settings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from torchdoctor.errors import UserError
from torchdoctor.tune.space import BASELINE, assignment_key
from torchdoctor.tune.store import Store, StoredRunner
from torchdoctor.tune.trial import Trial, TrialResult


def test_round_trip(tmp_path: Path) -> None:
    db = Store(tmp_path / "r.sqlite")
    run = db.new_run("w.py", {"steps": 5})
    trial = Trial(assignment_key(BASELINE), "baseline", dict(BASELINE))
    result = TrialResult(
        status="ok",
        step_times_s=[0.1, 0.2],
        losses=[1.0, math.nan],
        peak_bytes=123,
        probe={"device": "cpu"},
        wall_s=3.5,
    )
    db.save_trial(run, 0, trial, result)
    db.save_finding_ids(run, ["host-bound"])
    db.close()
    again = Store(tmp_path / "r.sqlite")
    assert again.latest_run("w.py") == (run, {"steps": 5})
    got = again.trials(run)[trial.key]
    assert got.resumed and got.step_times_s == [0.1, 0.2] and math.isnan(got.losses[1])
    assert (got.peak_bytes, got.probe, got.wall_s) == (123, {"device": "cpu"}, 3.5)
    assert again.finding_ids(run) == ["host-bound"]


def test_stored_runner_never_reruns_a_finished_trial(tmp_path: Path) -> None:
    db = Store(tmp_path / "r.sqlite")
    run = db.new_run("w.py", {})
    ran: list[str] = []

    def real(trial: Trial) -> TrialResult:
        ran.append(trial.key)
        return TrialResult(status="timeout", reason="no result after 5 s")

    trials = [
        Trial(
            assignment_key({**BASELINE, "num_workers": n}), "single", {**BASELINE, "num_workers": n}
        )
        for n in (0, 2)
    ]
    StoredRunner(db, run, real)(trials[0])
    resumed = StoredRunner(Store(tmp_path / "r.sqlite"), run, real)
    assert resumed(trials[0]).status == "timeout"  # from the store
    resumed(trials[1])
    assert ran == [trials[0].key, trials[1].key] and resumed.ran == 1
    assert db.trial_count(run) == 2


def test_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_text("hello, this is not sqlite at all" * 10)
    with pytest.raises(UserError, match="not a torchdoctor results file"):
        Store(bad)
