"""Precision: auto decisions per GPU (mocked CUDA queries), bf16 autocast on CPU, scaler rules."""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import fake_cuda, tiny_mlp

import torchdoctor as td
from torchdoctor.errors import UserError
from torchdoctor.runtime.precision import choose_precision

CUDA = torch.device("cuda", 0)


@pytest.mark.parametrize(
    ("name", "capability", "precision", "scaler", "tf32"),
    [
        ("Tesla V100-SXM2-16GB", (7, 0), "fp16-mixed", True, False),
        ("Tesla T4", (7, 5), "fp16-mixed", True, False),
        ("NVIDIA A100-SXM4-80GB", (8, 0), "bf16-mixed", False, True),
        ("NVIDIA L4", (8, 9), "bf16-mixed", False, True),
        ("NVIDIA H100 80GB HBM3", (9, 0), "bf16-mixed", False, True),
    ],
)
def test_auto_per_gpu(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    capability: tuple[int, int],
    precision: str,
    scaler: bool,
    tf32: bool,
) -> None:
    with fake_cuda(monkeypatch, name, capability):
        plan = choose_precision("auto", CUDA)
    assert (plan.precision, plan.use_scaler, plan.tf32) == (precision, scaler, tf32)
    assert f"{capability[0]}.{capability[1]}" in plan.reason
    assert (
        plan.autocast_dtype
        == {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}[precision]
    )


def test_auto_on_cpu_is_fp32_and_says_why() -> None:
    plan = choose_precision("auto", torch.device("cpu"))
    assert plan.precision == "fp32" and plan.autocast_dtype is None and not plan.use_scaler
    assert "cpu" in plan.reason and "bf16-mixed" in plan.reason


def test_tf32_follows_opt_out_and_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_cuda(monkeypatch, "NVIDIA A100-SXM4-80GB", (8, 0)):
        assert choose_precision("fp32", CUDA).tf32
        assert not choose_precision("fp32", CUDA, allow_tf32=False).tf32
        assert choose_precision("fp32", CUDA).peak_dtype == "tf32"
        with pytest.raises(UserError, match="allow_tf32"):
            choose_precision("tf32", CUDA, allow_tf32=False)
    with fake_cuda(monkeypatch, "Tesla V100-SXM2-16GB", (7, 0)):
        plan = choose_precision("tf32", CUDA)
        assert plan.precision == "fp32" and not plan.tf32 and "8.0" in plan.reason


def test_runtime_auto_under_mocked_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    # The whole constructor under a fake H100: device, precision, TF32 switch, MFU dtype.
    with fake_cuda(monkeypatch, "NVIDIA H100 80GB HBM3", (9, 0)):
        rt = td.Runtime(precision="auto")
        cfg = rt.config_dict()
        assert rt.device == CUDA
        assert cfg["precision"] == "bf16-mixed" and cfg["precision_requested"] == "auto"
        assert cfg["grad_scaler"] is False and cfg["tf32"] is True
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert rt.meter.peak_dtype == "bf16"


def test_runtime_auto_v100_gets_scaler(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_cuda(monkeypatch, "Tesla V100-SXM2-16GB", (7, 0)):
        rt = td.Runtime(precision="auto")
        assert rt.precision.precision == "fp16-mixed"
        assert rt.scaler is not None and rt.config_dict()["grad_scaler"] is True


def test_bf16_autocast_is_active_on_cpu() -> None:
    rt = td.Runtime(precision="bf16-mixed", device="cpu")
    model = rt.setup(tiny_mlp())
    x = torch.randn(4, 8)
    with rt.autocast():
        assert torch.is_autocast_enabled("cpu")
        out = model(x)
    assert out.dtype == torch.bfloat16
    assert rt.scaler is None
    assert model(x).dtype == torch.float32  # outside the context: fp32 again


def test_fp32_autocast_is_a_no_op() -> None:
    rt = td.Runtime(precision="fp32", device="cpu")
    with rt.autocast():
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp32"])
def test_scaler_without_fp16_is_an_error(precision: str) -> None:
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(UserError, match="only fp16 needs one"):
        td.Runtime(precision=precision, device="cpu", scaler=scaler)


def test_scaler_with_auto_bf16_names_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    with (
        fake_cuda(monkeypatch, "NVIDIA A100-SXM4-80GB", (8, 0)),
        pytest.raises(UserError, match="auto chose bf16-mixed"),
    ):
        td.Runtime(precision="auto", scaler=torch.amp.GradScaler("cpu"))


def test_fp16_uses_the_users_scaler() -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    rt = td.Runtime(precision="fp16-mixed", device="cpu", scaler=scaler)
    assert rt.scaler is scaler
