"""The GPU peak table: device names as CUDA and traces spell them map to the right dense rates."""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchdoctor.hardware import GPU_SPECS, lookup_gpu, peak_flops


@pytest.mark.parametrize(
    ("device_name", "spec_name"),
    [
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("H100 SXM", "H100 SXM"),
    ],
)
def test_lookup_by_device_name(device_name: str, spec_name: str) -> None:
    spec = lookup_gpu(device_name)
    assert spec is not None and spec.name == spec_name


@pytest.mark.parametrize("name", ["NVIDIA GeForce GTX 1080", "AMD Instinct MI300X", "", "cpu"])
def test_unknown_gpu_is_none(name: str) -> None:
    assert lookup_gpu(name) is None
    assert peak_flops(name, "bf16") is None


def test_dense_rates_not_sparse() -> None:
    # Datasheet sparse figures are 2x these; MFU against them would be halved.
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4e12)
    assert peak_flops("NVIDIA A100-SXM4-80GB", "tf32") == pytest.approx(156e12)
    assert peak_flops("NVIDIA L4", "fp8") == pytest.approx(242.5e12)
    assert peak_flops("NVIDIA B200", "bf16") == pytest.approx(2.25e15)


def test_capabilities_and_missing_dtypes() -> None:
    v100, t4, a100 = lookup_gpu("V100 SXM2"), lookup_gpu("T4"), lookup_gpu("A100 SXM")
    assert v100 and t4 and a100
    assert not v100.supports_bf16 and v100.peak("bf16") is None and v100.has_tensor_cores
    assert t4.compute_capability == (7, 5) and t4.peak("fp8") is None
    assert a100.supports_bf16 and a100.peak("fp8") is None


def test_table_is_consistent() -> None:
    for spec in GPU_SPECS:
        rates = spec.peak_flops
        assert rates["fp32"] > 0
        # Tensor-core rates only grow with narrower types.
        if "bf16" in rates:
            assert rates["bf16"] >= rates.get("tf32", 0) >= rates["fp32"]
            assert spec.supports_bf16
        if "fp8" in rates:
            assert rates["fp8"] == pytest.approx(2 * rates["fp16"], rel=0.02)


def test_hardware_does_not_import_torch() -> None:
    code = "import sys, torchdoctor.hardware; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
