"""The meter: steady-state step time, throughput, FLOPs and MFU; unknown GPUs and uncounted
attention are reported, never turned into a wrong number."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from runtime_helpers import batches, tiny_mlp
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

import torchdoctor as td
from torchdoctor.runtime import meter as meter_mod
from torchdoctor.runtime.flops import FlopProbe
from torchdoctor.runtime.meter import Meter


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """A host clock the test advances by hand (seconds)."""
    now = [100.0]
    monkeypatch.setattr(meter_mod.time, "perf_counter", lambda: now[0])
    yield now


def _run(
    meter: Meter, clock: list[float], durations: list[float], flags: dict[int, str] | None = None
) -> None:
    meter.start()
    for i, d in enumerate(durations):
        meter.count_batch(32, 32 * 128)
        if flags and i in flags:
            meter.flag_step(flags[i])
        clock[0] += d
        meter.step_end()


def test_steady_state_excludes_first_compile_and_flop_steps(clock: list[float]) -> None:
    m = Meter(torch.device("cpu"), flops_per_step=2e9)
    _run(m, clock, [5.0, 0.1, 3.0, 0.1, 0.1, 0.3, 0.1], flags={2: "compile", 5: "flops"})
    s = m.summary()
    assert s.steps == 4 and s.first_step_s == pytest.approx(5.0)
    assert s.step_time_ms == pytest.approx(100.0)
    assert s.samples_per_s == pytest.approx(320.0) and s.tokens_per_s == pytest.approx(320.0 * 128)
    assert s.achieved_flops == pytest.approx(2e10)
    assert s.compile_steps == 1 and s.mfu is None and s.peak_flops is None  # CPU: no MFU
    assert s.timing == "host clock"


def test_mfu_on_a_known_gpu(monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    m = Meter(torch.device("cuda", 0), peak_dtype="bf16", flops_per_step=98.94e12, use_events=False)
    _run(m, clock, [1.0, 0.2, 0.2, 0.2])
    s = m.summary()
    # 98.94 TFLOP per 0.2 s step = 494.7 TFLOP/s = half the H100 SXM dense bf16 peak.
    assert s.mfu == pytest.approx(0.5) and s.peak_flops == pytest.approx(989.4e12)
    assert "50.0% of 989.4 TFLOP/s bf16" in str(s)


def test_a_stall_counts_against_throughput_flops_and_mfu_alike(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    """Seven 0.1 s steps and one 1.6 s stall: 8 steps in 2.3 s, whatever the median says."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    m = Meter(torch.device("cuda", 0), peak_dtype="bf16", flops_per_step=1e12, use_events=False)
    _run(m, clock, [1.0, 0.1, 0.1, 0.1, 1.6, 0.1, 0.1, 0.1, 0.1])
    s = m.summary()
    assert s.step_time_ms == pytest.approx(100.0)  # the median hides the stall
    assert s.step_time_mean_ms == pytest.approx(2300.0 / 8)
    assert s.samples_per_s == pytest.approx(8 * 32 / 2.3)
    assert s.achieved_flops == pytest.approx(8e12 / 2.3)
    assert s.mfu == pytest.approx(8e12 / 2.3 / 989.4e12)
    # The two rates imply the same step time: FLOP/s / FLOPs per step == samples/s / samples.
    assert s.achieved_flops / 1e12 == pytest.approx(s.samples_per_s / 32)
    assert "mean 287.50 ms" in str(s)


def test_unknown_gpu_no_mfu_and_one_warning(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Imaginary X1")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    m = Meter(torch.device("cuda", 0), peak_dtype="bf16", flops_per_step=1e12, use_events=False)
    _run(m, clock, [1.0, 0.5, 0.5])
    with pytest.warns(RuntimeWarning, match="Imaginary X1"):
        s = m.summary()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.summary()  # the second time: no warning
    assert s.mfu is None and s.achieved_flops == pytest.approx(2e12)
    assert any("no MFU" in n for n in s.notes)


def test_noisy_steps_are_flagged(clock: list[float]) -> None:
    m = Meter(torch.device("cpu"))
    _run(m, clock, [1.0, 0.1, 0.2, 0.1, 0.3, 0.1])
    assert any("IQR" in n for n in m.summary().notes)


def test_runtime_measures_flops_once() -> None:
    rt = td.Runtime(device="cpu")
    model = tiny_mlp()
    model, opt = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for b in batches(4, batch=4):
        rt.backward(F.cross_entropy(model(b["x"]), b["y"]))
        rt.step(opt)
    # Linear(8,16) and Linear(16,3) on 4 samples: forward 2*4*(8*16+16*3) = 1408; backward
    # computes weight grads for both layers and the input grad of the second only.
    assert rt.meter.flops_per_step == 1408 + 2 * 4 * (8 * 16 + 2 * 16 * 3)


def test_user_flops_are_not_measured() -> None:
    rt = td.Runtime(device="cpu", flops_per_step=123.0)
    model = tiny_mlp()
    model, opt = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for b in batches(4):
        rt.backward(F.cross_entropy(model(b["x"]), b["y"]))
        rt.step(opt)
    assert rt.meter.flops_per_step == 123.0 and rt.meter.summary().steps == 3


def test_fused_attention_detected_and_estimated() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    x = torch.randn(2, 32, 64)
    probe = FlopProbe()
    probe.start()
    layer(x).sum().backward()
    fused = probe.stop()
    with sdpa_kernel(SDPBackend.MATH):
        probe = FlopProbe()
        probe.start()
        layer(x).sum().backward()
        math = probe.stop()
    assert fused.uncounted_ops and "attention" in (fused.note or "")
    assert fused.counted < math.counted  # FlopCounterMode alone undercounts the fused kernel
    assert fused.total == pytest.approx(math.total, rel=0.03)  # the estimate closes the gap
    assert not math.uncounted_ops and math.note is None


def test_flop_window_never_stays_open() -> None:
    # After the first step the count is armed; an evaluation forward must not open it, and
    # nothing may stay on the dispatch-mode stack between steps.
    rt = td.Runtime(device="cpu")
    model = tiny_mlp()
    model, opt = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    data = batches(3)
    rt.backward(F.cross_entropy(model(data[1]["x"]), data[1]["y"]))
    rt.step(opt)
    with torch.no_grad():
        model(data[0]["x"])
    assert torch._C._len_torch_dispatch_stack() == 0 and rt.meter.flops_per_step is None
    loss = F.cross_entropy(model(data[2]["x"]), data[2]["y"])
    assert torch._C._len_torch_dispatch_stack() == 2  # FlopCounterMode + the attention watcher
    rt.backward(loss)
    assert torch._C._len_torch_dispatch_stack() == 0 and rt.meter.flops_per_step
    rt.step(opt)
    assert rt.meter.summary().steps == 0  # warm-up and the counted step are not steady state
