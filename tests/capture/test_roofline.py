"""The roofline: counted work (FLOPs and bytes, operator by operator) against attainable rates
from the GPU table or this CPU; exact numbers worked out by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchdoctor import hardware, roofline
from torchdoctor.capture.workcount import StepCounter


def count(fn) -> dict:  # type: ignore[no-untyped-def,type-arg]
    c = StepCounter()
    c.begin()
    try:
        fn()
    finally:
        w = c.end()
    assert w is not None
    return w.summary()


def test_an_mlp_training_step_counts_its_matmul_flops_exactly() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def step() -> None:
        loss = nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    s = count(step)
    # forward 2*32*(64*128 + 128*10); backward: both weight grads, the input grad of layer 2 only
    fwd = 2 * 32 * (64 * 128 + 128 * 10)
    assert s["flops"] == fwd + 2 * 32 * (64 * 128 + 128 * 10) + 2 * 32 * 128 * 10
    assert s["by_dtype"]["fp32"]["flops"] == s["flops"] and not s["truncated"]


def test_bytes_read_and_written_views_move_nothing() -> None:
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    s = count(lambda: a @ b)
    assert s["bytes"] == 4 * (16 * 32 + 32 * 8 + 16 * 8)
    assert s["flops"] == 2 * 16 * 32 * 8
    v = count(lambda: a.view(32, 16).t())
    assert v["bytes"] == 0
    c = torch.zeros(1000)
    inplace = count(lambda: c.add_(1.0))
    assert inplace["bytes"] == 4 * 1000 * 2  # read once, written back


def test_composite_operators_under_inference_mode() -> None:
    conv, lin = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 4 * 4, 5)
    x = torch.randn(2, 3, 4, 4)
    with torch.inference_mode():
        s = count(lambda: lin(conv(x).flatten(1)))
    assert s["flops"] == 2 * 2 * 4 * 4 * 8 * 27 + 2 * 2 * 128 * 5


def test_float64_work_is_seen_as_float64() -> None:
    a = torch.randn(8, 8, dtype=torch.float64)
    s = count(lambda: a @ a)
    assert s["by_dtype"]["fp64"]["flops"] == 2 * 8**3


def test_a_users_error_inside_the_count_is_the_users_and_the_mode_comes_off() -> None:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    c = StepCounter()
    c.begin()
    with pytest.raises(RuntimeError):
        torch.randn(2, 3) @ torch.randn(4, 5)  # a shape error: raised as without us
    c.end()
    assert _get_current_dispatch_mode() is None


def test_roofline_seconds_per_operator() -> None:
    att = roofline.Attainable("cpu", {"fp32": 1e11, "fp32/conv": 5e10}, 1e10, "test")
    # a matmul bound by arithmetic (1 s), an elementwise op bound by memory (2 s), a conv
    t = roofline.roofline_seconds(
        [1e11, 0.0, 5e10], [1e9, 2e10, 0.0], ["fp32", "fp32", "fp32/conv"], att
    )
    assert t == pytest.approx(1.0 + 2.0 + 1.0)
    e = roofline.efficiency(
        8000.0, [1e11, 0.0, 5e10], [1e9, 2e10, 0.0], ["fp32", "fp32", "fp32/conv"], att
    )
    assert e.roofline_ms == pytest.approx(4000.0) and e.share == pytest.approx(0.5)
    assert e.compute_ms == pytest.approx(2000.0)
    assert e.flops_share == pytest.approx(1.5e11 / 8.0 / 1e11)


def test_gpu_rates_come_from_the_datasheet_table_with_bandwidth() -> None:
    att = roofline.attainable_gpu("NVIDIA H100 80GB HBM3")
    assert att is not None
    assert att.bytes_per_s == pytest.approx(3.35e12 * roofline.ATTAINABLE_SHARE)
    assert att.flops_for("bf16") == pytest.approx(989.4e12 * roofline.ATTAINABLE_SHARE)
    assert att.flops_for("fp64") is None  # never guessed from fp32 on a GPU
    tf32 = roofline.attainable_gpu("NVIDIA A100-SXM4-80GB", tf32=True)
    assert tf32 is not None and tf32.flops_for("fp32") == pytest.approx(156e12 * 0.8)
    assert tf32.bytes_per_s == pytest.approx(2039e9 * 0.8)
    assert hardware.peak_bandwidth("NVIDIA A100-SXM4-40GB") == pytest.approx(1555e9)
    assert hardware.peak_bandwidth(
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb", sm_count=42
    ) == pytest.approx(1555e9 * 42 / 108)
    assert roofline.attainable_gpu("Some Future GPU") is None
    assert all(s.name in hardware.HBM_BANDWIDTH for s in hardware.GPU_SPECS)


def test_cpu_rates_are_measured_quickly() -> None:
    import time

    from torchdoctor.capture.machine_rates import best_of, measure_cpu

    t0 = time.perf_counter()
    att = measure_cpu(("fp32", "fp64"), budget_s=0.01)
    assert time.perf_counter() - t0 < 10  # a fraction of a second on a quiet machine
    assert att.flops_per_s["fp32"] > 1e8 and att.flops_per_s["fp64"] > 1e8
    assert att.flops_per_s["fp32/conv"] > 1e8 and att.bytes_per_s > 1e8
    both = best_of(att, roofline.Attainable("cpu", {"fp32": 1e15}, 1.0, att.source))
    assert both.flops_per_s["fp32"] == 1e15 and both.bytes_per_s == att.bytes_per_s
