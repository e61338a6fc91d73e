"""A fake trial runner: step times from multipliers per knob value, failures on request."""

from __future__ import annotations

from typing import Any

import numpy as np

from torchdoctor.tune.trial import Trial, TrialResult

CPU_PROBE: dict[str, Any] = {
    "device": "cpu",
    "cpu_count": 2,
    "bf16": True,
    "compiler": True,
    "image_batches": False,
    "optimizer_impls": ["default", "foreach", "fused"],
    "world_size": 1,
    "batch_size": 64,
}

REFERENCE = [2.0 / (i + 1) + 0.5 for i in range(23)]


class FakeWorld:
    """Answers trials like a machine where each knob value multiplies the step time.

    Each trial returns interleaved rounds for every arm it names (``Trial.arms``): a round's
    load factor hits all arms of that round alike, on top of 1% noise per arm and round.
    """

    def __init__(
        self,
        factors: dict[tuple[str, Any], float],
        *,
        base_ms: float = 100.0,
        failures: list[tuple[dict[str, Any], str]] | None = None,
        loss_scale: dict[tuple[str, Any], float] | None = None,
        probe: dict[str, Any] | None = None,
        disturb: dict[int, float] | None = None,
        together: list[tuple[dict[str, Any], float]] | None = None,
        round_load: list[float] | None = None,
        search_only: dict[tuple[str, Any], float] | None = None,
        rounds: int = 12,
    ) -> None:
        self.factors, self.base_ms = factors, base_ms
        self.failures = failures or []
        self.loss_scale = loss_scale or {}
        self.probe = CPU_PROBE if probe is None else probe
        self.disturb = disturb or {}
        self.together = together or []
        self.round_load = round_load or [1.0]
        self.search_only = search_only or {}
        self.rounds = rounds
        self.calls: list[Trial] = []

    def _ms(self, a: dict[str, Any], trial: Trial) -> float:
        ms = self.base_ms
        for (k, v), f in self.factors.items():
            if a.get(k) == v:
                ms *= f
        for when, f in self.together:  # interactions: a factor only when every value matches
            if all(a.get(k) == v for k, v in when.items()):
                ms *= f
        for (k, v), f in self.search_only.items():  # a gain that does not reproduce
            if a.get(k) == v and trial.repeat == 0:
                ms *= f
        return ms * self.disturb.get(len(self.calls) - 1, 1.0)  # load during this whole call

    def __call__(self, trial: Trial) -> TrialResult:
        self.calls.append(trial)
        a = trial.assignment
        probe = self.probe if trial.phase == "baseline" else None
        for when, status in self.failures:
            if all(a.get(k) == v for k, v in when.items()):
                return TrialResult(status=status, reason=f"fake {status}", wall_s=2.0, probe=probe)  # type: ignore[arg-type]
        rng = np.random.default_rng(len(self.calls))
        rounds: dict[str, list[float]] = {}
        for label, arm in trial.arms():
            ms = self._ms(arm, trial)
            rounds[label] = [
                ms / 1e3 * self.round_load[r % len(self.round_load)] * rng.lognormal(0, 0.01)
                for r in range(self.rounds)
            ]
        scale = 1.0
        for (k, v), f in self.loss_scale.items():
            if a.get(k) == v:
                scale *= f
        losses = [x * (scale**i) for i, x in enumerate(REFERENCE)]
        return TrialResult(
            status="ok",
            step_times_s=rounds["candidate"],
            rounds_s=rounds,
            window_steps=10,
            warmup_times_s=[self._ms(a, trial) / 1e3] * 3,
            losses=losses,
            samples_per_step=64,
            probe=probe,
            wall_s=2.0,
        )


def describe_calls(calls: list[Trial]) -> list[str]:
    """``phase: knob=value, ...`` for each trial, in the order run."""
    from torchdoctor.tune.report import describe

    return [f"{t.phase}: {describe(t.assignment)}" for t in calls]
