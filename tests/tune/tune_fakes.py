"""A fake trial runner: step times from multipliers per knob value, failures on request."""

from __future__ import annotations

from typing import Any

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
    """Answers trials like a machine where each knob value multiplies the step time."""

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
    ) -> None:
        self.factors, self.base_ms = factors, base_ms
        self.failures = failures or []
        self.loss_scale = loss_scale or {}
        self.probe = CPU_PROBE if probe is None else probe
        self.disturb = disturb or {}
        self.together = together or []
        self.calls: list[Trial] = []

    def __call__(self, trial: Trial) -> TrialResult:
        self.calls.append(trial)
        a = trial.assignment
        probe = self.probe if trial.phase == "baseline" else None
        for when, status in self.failures:
            if all(a.get(k) == v for k, v in when.items()):
                return TrialResult(status=status, reason=f"fake {status}", wall_s=2.0, probe=probe)  # type: ignore[arg-type]
        ms = self.base_ms
        for (k, v), f in self.factors.items():
            if a.get(k) == v:
                ms *= f
        for when, f in self.together:  # interactions: a factor only when every value matches
            if all(a.get(k) == v for k, v in when.items()):
                ms *= f
        ms *= self.disturb.get(len(self.calls) - 1, 1.0)  # load from elsewhere during this call
        scale = 1.0
        for (k, v), f in self.loss_scale.items():
            if a.get(k) == v:
                scale *= f
        losses = [x * (scale**i) for i, x in enumerate(REFERENCE)]
        steps = [ms / 1e3 * (1 + 0.001 * (i % 3)) for i in range(20)]
        return TrialResult(
            status="ok",
            step_times_s=steps,
            warmup_times_s=[ms / 1e3] * 3,
            losses=losses,
            samples_per_step=64,
            probe=probe,
            wall_s=2.0,
        )


def describe_calls(calls: list[Trial]) -> list[str]:
    """``phase: knob=value, ...`` for each trial, in the order run."""
    from torchdoctor.tune.report import describe

    return [f"{t.phase}: {describe(t.assignment)}" for t in calls]
