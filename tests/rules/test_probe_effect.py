"""The probe effect: the clean step, each window's ratio to it, and findings brought back to the
step the script runs without instruments (the H200 GPT-2 and char-model cases in miniature)."""

from __future__ import annotations

from typing import Any

import pytest

from torchdoctor.rules import probe_effect as pe
from torchdoctor.rules.finding import Finding


def _record(
    clean: list[float],
    profiled: list[float],
    after: list[float] | None = None,
    lead: list[float] | None = None,
    gpu: bool = False,
    waits: list[float] | None = None,
) -> dict[str, Any]:
    warmup = [50.0, 30.0, 30.0]
    # warm-up, clean, the profiler's own step, profiled, after
    prof_start = len(warmup) + len(clean) + 1
    steps = [*warmup, *clean, 90.0, *profiled, *(after or [])]
    clean_d: dict[str, Any] = {
        "first_step": len(warmup) + 1,
        "steps": len(clean),
        "clock": "cuda-events" if lead is not None else "host",
        "step_ms": clean,
    }
    if lead is not None:
        clean_d["host_lead_ms"] = lead
    return {
        "options": {},
        "gpu": {"device": {"name": "NVIDIA H200"}} if gpu else None,
        "lines": {"samples": 120},
        "steps": {
            "step_ms": steps,
            "data_wait_ms": waits if waits is not None else [0.0] * len(steps),
            "window": [prof_start + 1, prof_start + len(profiled)],
            "own_steps": [prof_start],
            "clean": clean_d,
            "after": {"steps": len(after), "step_ms": after} if after else None,
        },
    }


def _finding(fid: str, saving: float, step: float, severity: str = "critical") -> Finding:
    return Finding(
        id=fid,  # type: ignore[arg-type]
        title=f"{fid} title",
        severity=severity,  # type: ignore[arg-type]
        saving_ms_per_step=saving,
        share_of_step=min(1.0, saving / step),
        evidence={"k": 1},
        fix="# fix",
    )


GPT2_CLEAN = [23.1, 22.9, 23.4, 23.0, 23.2, 22.8, 23.3, 23.1]


def test_a_gpu_bound_step_is_not_called_host_bound() -> None:
    # The GPT-2 shape: 23 ms clean, the GPU 22 ms busy and trailing the host by ~10 ms;
    # the instruments made it 45-59 ms and the trace called it host-bound (31 ms, 52%).
    rec = _record(
        GPT2_CLEAN, [45.0, 47.0, 58.9, 46.0, 45.5], lead=[9.0, 10.0, 11.0] * 2 + [10, 9], gpu=True
    )
    effect = pe.measure(rec, gpu_busy_ms=22.0)
    assert effect is not None and effect.gpu_bound is True
    assert effect.clean_ms == pytest.approx(23.1, abs=0.05)
    assert effect.low_ms <= effect.clean_ms <= effect.high_ms
    assert effect.profiled is not None and effect.profiled.ratio > 1.9 and effect.profiled.slower
    host = _finding("host-bound", 31.2, 58.9)
    gemm = _finding("fp32-gemm-no-tensor-cores", 4.0, 58.9, "warning")
    found, effect = pe.apply([host, gemm], effect, rec)
    assert [f.id for f in found] == ["fp32-gemm-no-tensor-cores"]
    # kernel time stands as the trace measured it; its share is of the clean step
    assert found[0].saving_ms_per_step == 4.0
    assert found[0].share_of_step == pytest.approx(4.0 / effect.clean_ms)
    assert effect.verdict_differs and effect.instrumented_top == "host-bound"
    text = "\n".join(effect.lines())
    assert "GPU-bound" in text and "host-bound: not in the clean steps" in text


def test_a_host_bound_step_keeps_its_finding_at_most_the_gpu_idle() -> None:
    # The char model: 17 ms clean with 6.7 ms of kernels, the GPU waiting at each step's end;
    # under the instruments 44 ms and "saves up to 33.2 ms".
    clean = [17.0, 16.5, 17.5, 17.2, 16.8, 17.1, 16.9, 17.3]
    rec = _record(
        clean, [44.3, 44.0, 45.1, 43.9, 44.6], lead=[-0.05, 0.02, -0.1, 0.0] * 2, gpu=True
    )
    effect = pe.measure(rec, gpu_busy_ms=6.7)
    assert effect is not None and effect.gpu_bound is False
    found, effect = pe.apply([_finding("host-bound", 33.2, 44.3)], effect, rec)
    (host,) = found
    assert 0 < host.saving_ms_per_step <= effect.clean_ms - 6.7
    assert host.share_of_step == pytest.approx(host.saving_ms_per_step / effect.clean_ms)
    assert host.evidence["instrumented_saving_ms"] == pytest.approx(33.2)
    assert "in the clean step" in host.title


def test_a_cpu_run_scales_every_saving_by_the_clean_step() -> None:
    clean = [3.7, 3.5, 3.6, 3.9, 3.5, 3.7, 3.8, 3.6]
    rec = _record(clean, [7.6, 7.4, 7.9, 7.5, 7.7], after=[3.8, 3.6, 3.7, 3.9, 3.7])
    effect = pe.measure(rec)
    assert effect is not None and effect.gpu_bound is None and effect.clock == "host"
    f = _finding("host-bound", 6.0, 7.6)
    (scaled,), effect = pe.apply([f], effect, rec)
    ratio = effect.clean_ms / effect.profiled.median_ms  # type: ignore[union-attr]
    assert scaled.saving_ms_per_step == pytest.approx(6.0 * ratio)
    assert scaled.share_of_step == pytest.approx(6.0 / 7.6, rel=0.05)  # the share holds
    after = effect.windows[-1]
    assert after.name == "after" and not after.slower


def test_measured_and_one_off_costs_are_not_scaled() -> None:
    rec = _record([4.0] * 8, [8.0] * 5)
    effect = pe.measure(rec)
    assert effect is not None
    toggled = _finding("anomaly-detection", 3.0, 8.0)
    toggled = Finding(**{**toggled.to_dict(), "evidence": {"measured": {"ratio": 1.8}}})
    rare = _finding("rare-long-steps", 1.0, 8.0, "warning")
    found, _ = pe.apply([toggled, rare], effect, rec)
    assert {f.id: f.saving_ms_per_step for f in found} == {
        "anomaly-detection": 3.0,
        "rare-long-steps": 1.0,
    }


def test_data_waits_come_from_the_clean_steps() -> None:
    clean = [30.0] * 8
    profiled = [20.0] * 5
    n = 3 + 8 + 1 + 5
    # the loop waited 20 ms a step in the clean window, 10 under the profiler (it ran slower)
    waits = [0.0] * 3 + [20.0] * 8 + [0.0] + [10.0] * 5
    assert len(waits) == n
    rec = _record(clean, profiled, waits=waits)
    effect = pe.measure(rec)
    assert effect is not None
    (f,), _ = pe.apply([_finding("data-loading-bound", 10.0, 20.0)], effect, rec)
    assert f.saving_ms_per_step == pytest.approx(20.0)


def test_a_data_wait_scaled_under_its_gate_is_dropped() -> None:
    """two_loaders.py after its loader fix: the profiled window waited 0.6 ms a step for its
    batch (over the 0.5 ms gate that held it), the clean window 0.32 ms of a 0.32 ms step.
    Scaled, the finding claimed a 0.32 ms saving: workers cannot remove a wait that small."""
    clean = [0.32] * 8
    profiled = [0.6] * 5
    waits = [0.0] * 3 + [0.32] * 8 + [0.0] + [0.6] * 5
    rec = _record(clean, profiled, waits=waits)
    effect = pe.measure(rec)
    assert effect is not None
    found, effect = pe.apply([_finding("input-pipeline", 0.6, 0.6)], effect, rec)
    assert found == []
    assert effect.changed == (
        "input-pipeline: not in the clean steps (0.6 ms per step under the instruments; "
        "too small there)",
    )
    # a clean wait at the gate stands, scaled: 0.5 ms of a 1 ms step
    waits[3:11] = [0.5] * 8
    rec = _record([1.0] * 8, profiled, waits=waits)
    effect = pe.measure(rec)
    assert effect is not None
    (f,), _ = pe.apply([_finding("input-pipeline", 0.6, 0.6)], effect, rec)
    assert f.saving_ms_per_step == pytest.approx(0.5)


def test_no_clean_window_no_effect() -> None:
    rec = _record([5.0, 5.0], [8.0] * 5)  # two clean steps: no median worth reporting
    assert pe.measure(rec) is None
    rec["steps"]["clean"] = None
    assert pe.measure(rec) is None


def test_the_profilers_first_step_is_not_the_users() -> None:
    rec = _record([10.0] * 8, [10.0] * 5)
    first = rec["steps"]["window"][0]
    rec["steps"]["step_ms"][first - 2] = 900.0  # the profiler's own step (its start-up)
    rec["steps"]["step_ms"][first - 1] = 400.0  # the first recorded one (CUPTI's first flush)
    effect = pe.measure(rec)
    assert effect is not None and effect.profiled is not None
    assert effect.profiled.ratio == pytest.approx(1.0) and not effect.profiled.slower


def test_the_effect_round_trips_through_report_json() -> None:
    rec = _record(GPT2_CLEAN, [45.0] * 5, lead=[10.0] * 8, gpu=True)
    effect = pe.measure(rec, gpu_busy_ms=22.0)
    assert effect is not None
    _, effect = pe.apply([_finding("host-bound", 20.0, 45.0)], effect, rec)
    again = pe.effect_from_dict(effect.to_dict())
    assert again == effect and again.lines() == effect.lines()


def test_clean_steps_that_compiled_are_not_the_step() -> None:
    # a script that recompiles on every new shape until the limit: the clean steps compile
    clean = [120.0, 118.0, 5.0, 121.0, 119.0, 5.2, 117.0, 123.0]
    rec = _record(clean, [6.0] * 5, after=[4.9, 5.1, 5.0, 5.3, 4.8])
    first = rec["steps"]["clean"]["first_step"]
    rec["steps"]["clean"]["compiled_steps"] = [first + i for i in (0, 1, 3, 4, 6, 7)]
    effect = pe.measure(rec)
    assert effect is not None and effect.pooled
    assert effect.clean_ms == pytest.approx(5.05, abs=0.2)  # the steady steps, clean and after
    assert "compiled" in "\n".join(effect.lines())
    rec["steps"]["clean"]["compiled_steps"] = [first]  # one compiled step: left out
    effect = pe.measure(rec)
    assert effect is not None and not effect.pooled and effect.steps == 7


def test_compiles_are_placed_in_their_steps() -> None:
    from torchdoctor.capture.timed_window import compiled_steps

    ends = [10.0, 11.0, 12.0, 13.0]  # four steps from 9.0 on the wall clock
    assert compiled_steps(6, 9.0, ends, [9.5, 12.2, 20.0, 1.0]) == (6, 9)
    assert compiled_steps(6, 9.0, ends, []) == ()


def test_the_gpu_busy_time_comes_from_the_kernel_window() -> None:
    # The char-model shape: 17 ms clean, the GPU waiting for the host. The profiled trace
    # stretched the step and its kernels read 9 ms busy; the kernel window (CUDA activity
    # only) read 6.7 ms, the figure the idle time and the host-bound ceiling must use.
    clean = [17.0, 17.2, 16.9, 17.1, 17.0, 16.8, 17.3, 17.1]
    rec = _record(clean, [44.0, 43.5, 44.3, 45.0, 44.1], lead=[0.1] * 8, gpu=True)
    rec["steps"]["kernels"] = {
        "first_step": 30,
        "steps": 3,
        "clock": "cuda-events",
        "step_ms": [17.2, 16.95, 17.4],
        "gpu": {"gpu_busy_ms_per_step": 6.7, "kernel_ms_per_step": 7.0},
    }
    effect = pe.measure(rec, gpu_busy_ms=9.0)
    assert effect is not None
    assert effect.gpu_busy_ms == pytest.approx(6.7) and effect.gpu_busy_source == "kernel window"
    kernels = next(w for w in effect.windows if w.name == "kernels")
    assert kernels.instruments == "profiler, CUDA activity only"
    assert kernels.ratio == pytest.approx(17.2 / 17.05, rel=0.01) and not kernels.slower
    assert any("GPU busy 6.70 ms per step (kernel window)" in line for line in effect.lines())
    host = _finding("host-bound", 33.2, 44.0)
    (scaled,), effect = pe.apply([host], effect, rec)
    # at most the clean step less the kernel window's busy time: 17.05 - 6.7
    assert scaled.saving_ms_per_step is not None
    assert scaled.saving_ms_per_step <= 17.05 - 6.7 + 0.01


def test_the_profiled_windows_instruments_come_from_the_switchboard() -> None:
    rec = _record(GPT2_CLEAN, [30.0] * 5, gpu=True)
    rec["steps"]["schedule"] = {
        "instruments": [
            {"window": "clean", "armed": ["step events", "GPU counters"]},
            {"window": "profiled", "armed": ["profiler", "NVML sampler"]},
            {"window": "measured", "armed": ["line sampler", "sync and copy counters"]},
            {"window": "sync-debug", "armed": ["sync-debug mode"]},
        ]
    }
    effect = pe.measure(rec)
    assert effect is not None and effect.profiled is not None
    assert effect.profiled.instruments == (
        "profiler, NVML sampler, line sampler, sync and copy counters"
    )
