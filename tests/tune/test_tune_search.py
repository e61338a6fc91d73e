"""The search, driven by a fake trial runner: which trials it asks for, in which order."""

from __future__ import annotations

import pytest
from tune_fakes import FakeWorld, describe_calls

from torchdoctor.tune.search import BaselineFailed, Search, Settings

# A machine where data workers, the fused optimizer and compile pay, and bf16 is slower.
FACTORS = {
    ("num_workers", 2): 0.7,
    ("num_workers", 4): 0.6,
    ("optimizer_impl", "foreach"): 0.9,
    ("optimizer_impl", "fused"): 0.8,
    ("compile", "default"): 0.9,
    ("precision", "bf16-mixed"): 1.3,
    ("persistent_workers", True): 0.95,
}


def run(world: FakeWorld, **kw: object) -> tuple[Search, object]:
    search = Search(world, Settings(**kw))  # type: ignore[arg-type]
    return search, search.run()


def test_sequence_default_order() -> None:
    world = FakeWorld(FACTORS)
    _, summary = run(world)
    assert describe_calls(world.calls) == [
        "baseline: baseline",
        "single: num_workers=2",
        "single: num_workers=4",
        "single: optimizer_impl=foreach",
        "single: optimizer_impl=fused",
        "single: compile=default",
        "single: precision=bf16-mixed",
        "combine: optimizer_impl=fused, num_workers=4",
        "combine: compile=default, optimizer_impl=fused, num_workers=4",
        "refine: compile=default, optimizer_impl=fused, num_workers=4, persistent_workers=True",
        "refine: compile=default, optimizer_impl=fused, num_workers=4, persistent_workers=True, prefetch_factor=4",
        "refine: compile=default, optimizer_impl=fused, num_workers=2, persistent_workers=True",
        "refine: compile=default, optimizer_impl=foreach, num_workers=4, persistent_workers=True",
        "refine: compile=default, optimizer_impl=fused, num_workers=2, persistent_workers=True, prefetch_factor=4",
        "final: compile=default, optimizer_impl=fused, num_workers=4, persistent_workers=True",
    ]
    best = summary.best.trial.assignment  # type: ignore[attr-defined]
    assert (best["num_workers"], best["optimizer_impl"], best["compile"]) == (4, "fused", "default")
    assert best["precision"] == "fp32"  # bf16 is slower here: never picked
    assert summary.confirmed and summary.grid_size == 3 * 2 * 2 * (1 + 2 * 2 * 2)  # type: ignore[attr-defined]
    # Singles run beside the baseline; each combine/refine trial beside the current best.
    assert world.calls[1].reference is None
    assert world.calls[8].reference == world.calls[7].assignment
    assert world.calls[-1].repeat == 1 and world.calls[-1].reference is None
    # The claim: the pick's interval over the baseline arm of its own trial.
    claim = summary.claim  # type: ignore[attr-defined]
    true = 1 / (0.6 * 0.8 * 0.9 * 0.95)
    assert claim.low < true < claim.high and claim.high / claim.low < 1.05


def test_diagnosis_reorders_the_knobs() -> None:
    world = FakeWorld(FACTORS)
    Search(world, Settings(), diagnose=lambda result: ["host-bound"]).run()
    assert describe_calls(world.calls)[1:5] == [
        "single: compile=default",
        "single: optimizer_impl=foreach",
        "single: optimizer_impl=fused",
        "single: num_workers=2",
    ]


def test_noise_sized_gain_is_not_a_win() -> None:
    # 1% faster is inside the 2% noise floor: the baseline stays the best.
    world = FakeWorld({("optimizer_impl", "fused"): 0.99})
    _, summary = run(world, knobs=("optimizer_impl",))
    assert summary.best.trial.phase == "baseline"  # type: ignore[attr-defined]
    assert describe_calls(world.calls) == [
        "baseline: baseline",
        "single: optimizer_impl=foreach",
        "single: optimizer_impl=fused",
    ]
    assert summary.confirmation is None and summary.claim is None  # type: ignore[attr-defined]


def test_failures_are_recorded_and_survived() -> None:
    world = FakeWorld(
        FACTORS,
        failures=[
            ({"optimizer_impl": "fused", "grad_accumulation": 1}, "oom"),
            ({"compile": "default"}, "crash"),
            ({"num_workers": 2}, "timeout"),
        ],
        loss_scale={("optimizer_impl", "foreach"): float("nan")},
    )
    search, summary = run(world, knobs=("num_workers", "optimizer_impl", "compile"))
    by_phase = [(r.trial.phase, r.result.status) for r in search.records]
    assert by_phase[:7] == [
        ("baseline", "ok"),
        ("single", "timeout"),
        ("single", "ok"),
        ("single", "ok"),  # foreach ran, but its loss is NaN: the gate rejects it
        ("single", "oom"),
        ("retry", "ok"),  # fused again with half the micro-batch, twice the accumulation
        ("single", "crash"),
    ]
    foreach = search.records[3]
    assert (
        foreach.verdict is not None and not foreach.verdict.ok and "nan" in foreach.verdict.reason
    )
    retry = search.records[5].trial.assignment
    assert (retry["optimizer_impl"], retry["grad_accumulation"]) == ("fused", 2)
    best = summary.best.trial.assignment  # type: ignore[attr-defined]
    assert (best["num_workers"], best["optimizer_impl"], best["grad_accumulation"]) == (
        4,
        "fused",
        2,
    )


def test_oom_gives_up_when_the_batch_cannot_shrink() -> None:
    world = FakeWorld({}, failures=[({"optimizer_impl": "fused"}, "oom")])
    search, _ = run(world, knobs=("optimizer_impl",))
    accums = [
        r.trial.assignment["grad_accumulation"] for r in search.records if r.result.status == "oom"
    ]
    assert accums == [1, 2, 4, 8]  # 64 samples: micro-batches 64, 32, 16, 8, then it stops


def test_budget_stops_and_still_remeasures() -> None:
    world = FakeWorld(FACTORS)  # every fake trial takes 2 s
    _, summary = run(world, budget_s=10.0)
    assert summary.stopped_by == "budget"  # type: ignore[attr-defined]
    assert describe_calls(world.calls) == [
        "baseline: baseline",
        "single: num_workers=2",
        "single: num_workers=4",
        "single: optimizer_impl=foreach",
        "single: optimizer_impl=fused",
        "final: num_workers=4",
    ]


def test_max_trials_counts_the_confirmation() -> None:
    world = FakeWorld(FACTORS)
    _, summary = run(world, max_trials=4)
    assert len(world.calls) == 4 and summary.stopped_by == "max-trials"  # type: ignore[attr-defined]


def test_load_on_one_trial_is_not_a_speedup() -> None:
    # The baseline trial ran while something else loaded the machine (+30%): 2 workers (really
    # 10% slower) measured minutes later would look faster; measured side by side, they lose.
    world = FakeWorld({("num_workers", 2): 1.1, ("num_workers", 4): 1.2}, disturb={0: 1.3})
    search, summary = run(world, knobs=("num_workers",))
    assert summary.best.trial.phase == "baseline" and summary.confirmation is None  # type: ignore[attr-defined]
    assert [r.comparison.decision for r in search.records[1:]] == ["drop", "drop"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("factor", "wins"), [(1.0, False), (0.985, False), (0.8, True)])
def test_load_moving_3x_between_rounds(factor: float, wins: bool) -> None:
    """Each round's load (1x to 3x) hits both arms: only the real 20% gain wins, at its size."""
    load = [1.0, 3.0, 1.5, 2.5, 1.2, 2.0, 2.8, 1.1]
    world = FakeWorld({("optimizer_impl", "fused"): factor}, round_load=load)
    search, summary = run(world, knobs=("optimizer_impl",))
    fused = search.records[2]
    assert fused.wins is wins
    assert (
        fused.vs_baseline is not None
        and fused.vs_baseline.low < 1 / factor < fused.vs_baseline.high
    )
    assert (summary.best is fused) is wins  # type: ignore[attr-defined]


def test_pick_that_does_not_reproduce_is_dropped() -> None:
    # 2 workers win during the search (30%), but the confirmation in a fresh process shows
    # nothing: the report keeps the safer choice, the baseline.
    world = FakeWorld({}, search_only={("num_workers", 2): 0.7})
    _, summary = run(world, knobs=("num_workers",))
    assert not summary.confirmed  # type: ignore[attr-defined]
    assert summary.best.trial.phase == "baseline" and summary.claim is None  # type: ignore[attr-defined]
    assert summary.candidate.trial.assignment["num_workers"] == 2  # type: ignore[attr-defined]
    conf = summary.confirmation.comparison.interval  # type: ignore[attr-defined]
    assert conf.low < 1.0 < conf.high
    from torchdoctor.tune.report import headline

    assert "confirmation disagrees" in headline(summary) and "keeping the baseline" in headline(
        summary
    )  # type: ignore[arg-type]


def test_diverging_candidate_is_rejected_even_when_fastest() -> None:
    world = FakeWorld(
        {("precision", "bf16-mixed"): 0.5}, loss_scale={("precision", "bf16-mixed"): 1.01}
    )
    search, summary = run(world, knobs=("precision",))
    bf16 = search.records[1]
    assert bf16.verdict is not None and not bf16.verdict.ok
    assert bf16.verdict.worst_step == 19 and bf16.verdict.max_rel_dev == pytest.approx(1.01**19 - 1)
    assert summary.best.trial.phase == "baseline"  # type: ignore[attr-defined]


def test_failed_baseline_raises() -> None:
    world = FakeWorld({}, failures=[({"compile": "off"}, "crash")])
    with pytest.raises(BaselineFailed, match="crash"):
        run(world)


def test_gain_inside_the_noise_is_tried_in_combination() -> None:
    # compile alone is 1% faster (noise), but with the fused optimizer it saves 15% more.
    world = FakeWorld(
        {("optimizer_impl", "fused"): 0.8, ("compile", "default"): 0.99},
        together=[({"compile": "default", "optimizer_impl": "fused"}, 0.85)],
    )
    _, summary = run(world, knobs=("optimizer_impl", "compile"))
    assert "combine: compile=default, optimizer_impl=fused" in describe_calls(world.calls)
    assert summary.best.trial.assignment["compile"] == "default"  # type: ignore[attr-defined]


def test_more_workers_with_persistence_are_tried() -> None:
    # 4 workers lose to 2 on their own (start-up every epoch) but win once persistent.
    world = FakeWorld(
        {("num_workers", 2): 0.7, ("num_workers", 4): 0.9},
        together=[({"num_workers": 4, "persistent_workers": True}, 0.5)],
    )
    _, summary = run(world, knobs=("num_workers", "persistent_workers", "prefetch_factor"))
    # num_workers=4 alone is not measured again: its interval over the baseline lies wholly
    # below that of 2 workers (both are per-round ratios, comparable across trials).
    assert describe_calls(world.calls)[3:6] == [
        "refine: num_workers=2, persistent_workers=True",
        "refine: num_workers=2, prefetch_factor=4",
        "refine: num_workers=4, persistent_workers=True",
    ]
    best = summary.best.trial.assignment  # type: ignore[attr-defined]
    assert (best["num_workers"], best["persistent_workers"]) == (4, True)
