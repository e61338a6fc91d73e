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
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI300X VF", "MI300X"),
        ("H100 SXM", "H100 SXM"),
    ],
)
def test_lookup_by_device_name(device_name: str, spec_name: str) -> None:
    spec = lookup_gpu(device_name)
    assert spec is not None and spec.name == spec_name


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce GTX 1080",
        "AMD Instinct MI250X",
        "",
        "cpu",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    ],
)
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
    assert v100.peak("bf16") is None and v100.has_tensor_cores
    assert t4.compute_capability == (7, 5) and t4.peak("fp8") is None
    assert a100.peak("bf16") and a100.peak("fp8") is None


def test_table_is_consistent() -> None:
    for spec in GPU_SPECS:
        rates = spec.peak_flops
        assert rates["fp32"] > 0
        # Tensor-core rates only grow with narrower types.
        if "bf16" in rates:
            assert rates["bf16"] >= rates.get("tf32", 0) >= rates["fp32"]
            assert spec.compute_capability >= (8, 0)  # bf16 tensor cores: Ampere on
        if "fp8" in rates:
            assert rates["fp8"] == pytest.approx(2 * rates["fp16"], rel=0.02)


def test_hardware_does_not_import_torch() -> None:
    code = "import sys, torchdoctor.hardware; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_corrected_rows() -> None:
    # A10G: about half the A10's tensor rate, not the A10's figures (1.8x too high).
    assert peak_flops("NVIDIA A10G", "bf16") == pytest.approx(70e12)
    assert peak_flops("NVIDIA A10G", "tf32") == pytest.approx(35e12)
    assert peak_flops("NVIDIA A10", "bf16") == pytest.approx(125e12)
    assert peak_flops("NVIDIA B200", "fp32") == pytest.approx(75e12)  # 80 is GB200's
    mi300x = {d: peak_flops("AMD Instinct MI300X", d) for d in ("fp32", "tf32", "bf16", "fp8")}
    assert mi300x == pytest.approx(
        {"fp32": 163.4e12, "tf32": 653.7e12, "bf16": 1307.4e12, "fp8": 2614.9e12}
    )


@pytest.mark.parametrize(
    ("name", "sms", "share"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14, 14 / 108),
        ("NVIDIA A100-SXM4-80GB MIG 7g.80gb", 98, 98 / 108),
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60, 60 / 132),
    ],
)
def test_mig_slice_gets_its_share_of_the_peak(name: str, sms: int, share: float) -> None:
    whole = lookup_gpu(name.split(" MIG")[0])
    spec = lookup_gpu(name, sm_count=sms)
    assert whole is not None and spec is not None
    assert spec.peak("bf16") == pytest.approx(whole.peak_flops["bf16"] * share)
    assert lookup_gpu(name) is None  # no SM count: no MFU rather than the whole GPU's peak
    assert lookup_gpu(name, sm_count=10_000) is None  # more SMs than the GPU has: not trusted


def test_every_row_cites_its_source() -> None:
    for spec in GPU_SPECS:
        assert "datasheet" in spec.source, spec.name


def test_each_name_pattern_starts_with_its_literal_model_word() -> None:
    """The lookup skips a pattern whose model word is not in the name: safe only while every
    pattern requires that exact word (a new pattern with an alternation there would be missed)."""
    import re

    from torchdoctor import hardware

    for model, (pattern, _) in zip(hardware._MODELS, hardware._PATTERNS, strict=True):
        assert re.fullmatch(r"[A-Z0-9]+", model), pattern
        assert pattern.startswith(rf"\b{model}\b"), pattern
