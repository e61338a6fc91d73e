"""The device family (``rules/families/device.py``): fp32 GEMMs without tensor cores, and a
device nearly out of memory, on recorded corpus traces."""

from __future__ import annotations

from tests.rules.trace_cases import fire, threshold_decides


def test_fp32_gemms_on_a_v100_fire_and_the_threshold_decides() -> None:
    f = threshold_decides("fp32-gemm-no-tensor-cores", "v100_resnet50_train_workers0")
    assert f.saving_ms_per_step > 0


def test_memory_pressure_fires_near_the_device_limit_and_is_quiet_elsewhere() -> None:
    # here the allocator is also judged fragmented, which fires it whatever the threshold
    f = fire("memory-pressure", "v100_ddp_compiled_rank1")
    assert f is not None and f.id == "memory-pressure"
    assert fire("memory-pressure", "v100_resnet50_train_workers0") is None
    assert fire("fp32-gemm-no-tensor-cores", "h100_bert_small_infer") is None
