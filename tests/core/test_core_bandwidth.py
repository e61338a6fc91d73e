"""Bytes and FLOPs of GEMM/attention operators from recorded shapes, and the bandwidth table."""

from __future__ import annotations

import pytest

from torchdoctor.analysis.bandwidth import op_traffic
from torchdoctor.hardware import GPU_SPECS, HBM_BANDWIDTH, memory_bandwidth

BF16 = "c10::BFloat16"


def test_gemm_traffic_reads_inputs_once_and_writes_the_output() -> None:
    # mm [8, 64] x [64, 32] in bf16: (8*64 + 64*32 + 8*32) * 2 bytes, 2*8*64*32 FLOPs
    assert op_traffic([[8, 64], [64, 32]], [BF16, BF16], "aten::mm") == (
        (512 + 2048 + 256) * 2,
        2 * 8 * 64 * 32,
    )
    # addmm adds the bias read; the scalars (empty dims) are not tensors
    got = op_traffic([[32], [8, 64], [64, 32], [], []], [BF16] * 3 + ["Scalar"] * 2, "aten::addmm")
    assert got == ((32 + 512 + 2048 + 256) * 2, 2 * 8 * 64 * 32)
    # bmm in fp32: batch 4
    got = op_traffic([[4, 8, 16], [4, 16, 2]], ["float", "float"], "aten::bmm")
    assert got == ((512 + 128 + 64) * 4, 2 * 4 * 8 * 16 * 2)


def test_scaled_mm_uses_its_first_two_operands() -> None:
    e4m3 = "c10::Float8_e4m3fn"
    got = op_traffic(
        [[16, 32], [32, 8], [], []], [e4m3, e4m3, "float", "float"], "aten::_scaled_mm"
    )
    assert got == (16 * 32 + 32 * 8 + 16 * 8, 2 * 16 * 32 * 8)


def test_attention_traffic_by_layout() -> None:
    q, kv = [2, 8, 128, 64], [2, 2, 1024, 64]  # (B, H, L, E), grouped-query K/V
    name = "aten::_scaled_dot_product_flash_attention"
    nbytes, flops = op_traffic([q, kv, kv], [BF16] * 3, name)  # type: ignore[misc]
    numel_q, numel_kv = 2 * 8 * 128 * 64, 2 * 2 * 1024 * 64
    assert nbytes == (numel_q + 2 * numel_kv + numel_q) * 2  # q, k, v read; out as q
    assert flops == 4 * numel_q * 1024  # 4 B H L S E
    inner = op_traffic(
        [[2, 128, 8, 64], [2, 1024, 2, 64], [2, 1024, 2, 64]],
        [BF16] * 3,
        "aten::_flash_attention_forward",
    )  # (B, L, H, E)
    assert inner == (nbytes, flops)


def test_unknown_dtypes_or_shapes_are_not_guessed() -> None:
    assert op_traffic([[8, 64], [64, 32]], ["c10::ComplexFloat", BF16], "aten::mm") is None
    assert op_traffic([[8, 64], [63, 32]], [BF16, BF16], "aten::mm") is None
    assert op_traffic([], [], "aten::mm") is None


@pytest.mark.parametrize(
    ("name", "memory", "tb_per_s"),
    [
        ("NVIDIA A100-SXM4-80GB", 80 << 30, 2.039),
        ("NVIDIA A100-SXM4-40GB", 40 << 30, 1.555),
        ("NVIDIA A100 80GB PCIe", 80 << 30, 1.935),
        ("NVIDIA H100 80GB HBM3", None, 3.35),
        ("NVIDIA H200", None, 4.8),
        ("AMD Instinct MI300X", None, 5.3),
        ("Tesla V100-SXM2-16GB", None, 0.9),
    ],
)
def test_bandwidth_by_device(name: str, memory: int | None, tb_per_s: float) -> None:
    got = memory_bandwidth(name, memory)
    assert got is not None and got[0] == pytest.approx(tb_per_s * 1e12) and got[1]


def test_no_bandwidth_for_a_mig_slice_or_an_unknown_gpu() -> None:
    assert memory_bandwidth("NVIDIA A100-SXM4-40GB MIG 1g.5gb") is None
    assert memory_bandwidth("AMD Instinct MI250X") is None
    assert memory_bandwidth("") is None


def test_every_gpu_in_the_flops_table_has_a_bandwidth_with_its_source() -> None:
    assert {s.name for s in GPU_SPECS} == set(HBM_BANDWIDTH)
    assert all(source for _, source in HBM_BANDWIDTH.values())
