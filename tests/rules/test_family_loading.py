"""The loading family (``rules/families/loading.py``): the device idle while the CPU waits in
the DataLoader, and pageable host-to-device copies, on recorded corpus traces."""

from __future__ import annotations

from tests.rules.trace_cases import fire, threshold_decides


def test_data_loading_bound_fires_without_workers_and_is_quiet_with_four() -> None:
    f = threshold_decides("data-loading-bound", "v100_resnet50_train_workers0")
    assert f.severity == "critical"  # a third of the step
    assert fire("data-loading-bound", "v100_resnet50_train_workers4") is None


def test_pageable_copies_fire_on_bytes_per_step_and_are_quiet_without_copies() -> None:
    f = threshold_decides("pageable-h2d-copies", "v100_resnet50_train_workers4")
    assert "pin_memory" in f.fix
    assert fire("pageable-h2d-copies", "cpu_only_rank34") is None
