"""Knob pruning per device, the grid, the diagnosis-driven order and the config a trial runs."""

from __future__ import annotations

import pytest

from torchdoctor.errors import UserError
from torchdoctor.tune import diagnosis
from torchdoctor.tune.space import (
    BASELINE,
    DEFAULT_ORDER,
    Probe,
    build_space,
    knob_order,
    to_config,
)
from torchdoctor.tune.trial import TrialResult


def values(space, name):  # type: ignore[no-untyped-def]
    knob = space.knob(name)
    return None if knob is None else knob.values


def test_cpu_prunes_gpu_only_knobs() -> None:
    space = build_space(Probe(cpu_count=2, optimizer_impls=("default", "fused")))
    assert values(space, "precision") == ("fp32", "bf16-mixed")
    assert values(space, "compile") == ("off", "default")
    assert values(space, "num_workers") == (0, 2, 4)
    for name in ("pin_memory", "device_prefetch", "channels_last", "ddp_bucket_cap_mb"):
        assert space.knob(name) is None and name in space.pruned


def test_ampere_gpu_gets_every_precision_and_compile_mode() -> None:
    probe = Probe(
        device="cuda", cuda_capability=(8, 0), cpu_count=16, image_batches=True, world_size=2
    )
    space = build_space(probe)
    assert values(space, "precision") == ("fp32", "tf32", "bf16-mixed", "fp16-mixed")
    assert values(space, "compile") == ("off", "default", "reduce-overhead", "max-autotune")
    assert values(space, "channels_last") == (False, True)
    assert values(space, "ddp_bucket_cap_mb") == (25.0, 5.0, 100.0)
    assert values(space, "num_workers") == (0, 2, 4, 8)


def test_volta_has_no_tf32_or_bf16() -> None:
    space = build_space(Probe(device="cuda", cuda_capability=(7, 0), bf16=False))
    assert values(space, "precision") == ("fp32", "fp16-mixed")


def test_no_compiler_prunes_compile() -> None:
    assert build_space(Probe(compiler=False)).knob("compile") is None


def test_grid_counts_worker_settings_only_with_workers() -> None:
    space = build_space(
        Probe(cpu_count=1), only=("num_workers", "persistent_workers", "prefetch_factor")
    )
    # 0 workers: one configuration; 2 workers: 2 x 2 worker settings.
    assert len(space.grid()) == 1 + 4
    assert space.grid()[0] == BASELINE


def test_sub_knobs_need_their_parent() -> None:
    space = build_space(Probe(), only=("persistent_workers",))
    assert space.knobs == () and space.pruned["persistent_workers"] == "needs num_workers"


def test_unknown_knob() -> None:
    with pytest.raises(UserError, match="unknown knob 'workers'"):
        build_space(Probe(), only=("workers",))


def test_order_follows_findings_then_default() -> None:
    space = build_space(Probe(cpu_count=2, optimizer_impls=("default", "fused")))
    assert knob_order(space, []) == [n for n in DEFAULT_ORDER if space.knob(n)]
    assert knob_order(space, ["host-bound"]) == [
        "compile",
        "optimizer_impl",
        "num_workers",
        "precision",
    ]
    assert knob_order(space, ["tf32-off", "unknown-id"])[0] == "precision"


def test_diagnosis_falls_back_without_the_analyser() -> None:
    calm = TrialResult(status="ok", data_wait_share=0.05, trace_path="t.json")
    starved = TrialResult(status="ok", data_wait_share=0.6, trace_path="t.json")
    assert diagnosis.diagnose(calm, analyser=None) == []
    assert diagnosis.diagnose(starved, analyser=None) == ["data-loading-bound"]


def test_diagnosis_uses_the_analyser_findings() -> None:
    from types import SimpleNamespace

    from torchdoctor.rules.finding import Finding

    def finding(fid: str, saving: float) -> Finding:
        return Finding(fid, "t", "warning", saving, 0.1, {}, "fix")  # type: ignore[arg-type]

    report = SimpleNamespace(findings=[finding("tf32-off", 1.0), finding("host-bound", 5.0)])
    result = TrialResult(status="ok", data_wait_share=0.5, trace_path="t.json")
    ids = diagnosis.diagnose(result, analyser=lambda path: report)
    assert ids == ["data-loading-bound", "host-bound", "tf32-off"]

    def broken(path: str) -> object:
        raise ValueError("unreadable trace")

    assert diagnosis.diagnose(result, analyser=broken) == ["data-loading-bound"]


def test_to_config_keeps_the_global_batch() -> None:
    cfg = to_config(
        {**BASELINE, "grad_accumulation": 4, "precision": "tf32"}, batch_size=64, seed=3
    )
    assert (cfg.batch_size, cfg.grad_accumulation, cfg.allow_tf32, cfg.seed) == (16, 4, True, 3)
    assert to_config(BASELINE, batch_size=64, seed=0).allow_tf32 is False  # strict fp32 reference
