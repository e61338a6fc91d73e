"""Each finding's spec says how the probe effect brings its saving to the clean step
(``FindingSpec.probe``); ``rules/probe_effect.py`` keeps no table of ids of its own."""

from __future__ import annotations

import pytest

from tests.rules.test_probe_effect import _finding, _record
from torchdoctor.rules import probe_effect as pe
from torchdoctor.rules.registry import REGISTRY

# a GPU step: 60 ms under the instruments, 30 ms clean; the GPU busy 20 ms and idle at each end
CLEAN = [30.0, 29.5, 30.5, 30.2, 29.8, 30.1]
PROFILED = [60.0, 61.0, 59.0, 60.5, 59.5]


def _apply(*fids: str) -> dict[str, float]:
    rec = _record(CLEAN, PROFILED, lead=[-0.1, 0.0, -0.05] * 2, gpu=True)
    effect = pe.measure(rec, gpu_busy_ms=20.0)
    assert effect is not None and not effect.gpu_bound
    found, _ = pe.apply([_finding(f, 6.0, 60.0, "warning") for f in fids], effect, rec)
    return {f.id: f.saving_ms_per_step for f in found}


def test_kernel_time_stands_and_host_time_is_scaled_on_a_gpu() -> None:
    assert REGISTRY["float64-compute"].probe == "kernel"
    assert REGISTRY["gc-in-step"].probe == "host"
    saved = _apply("float64-compute", "gc-in-step")
    assert saved["float64-compute"] == 6.0  # GPU kernels: the profiler does not slow them
    assert saved["gc-in-step"] < 6.0  # host time: smaller in the clean step


@pytest.mark.parametrize("role", ["kernel", "unscaled", "data"])
def test_the_probe_sets_are_the_specs_roles(role: str) -> None:
    wanted = {s.id for s in REGISTRY.values() if s.probe == role}
    held = {"kernel": pe.KERNEL_TIME_IDS, "unscaled": pe.UNSCALED_IDS, "data": pe.DATA_IDS}[role]
    assert held == wanted and wanted  # every role has findings, and only the spec names them
