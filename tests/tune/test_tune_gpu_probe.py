"""What the tuner's probe says a GPU supports, on torch.cuda faked from torch's own functions."""

from __future__ import annotations

import pytest
import torch
from tests.gpu_fakes import FakeDevice, install_fake_cuda

from torchdoctor.tune.worker import _probe
from torchdoctor.tune.workload import Workload


def _workload() -> Workload:
    model = torch.nn.Linear(4, 2)
    data = [(torch.ones(4), torch.tensor(0)) for _ in range(4)]
    return Workload(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        dataset=data,
        loss=lambda m, b: m(b[0]).sum(),
        batch_size=2,
    )


@pytest.mark.parametrize(
    ("name", "capability", "bf16"),
    [
        ("Tesla V100-SXM2-16GB", (7, 0), False),
        ("Tesla T4", (7, 5), False),
        ("NVIDIA A100", (8, 0), True),
    ],
)
def test_bf16_only_with_bf16_tensor_cores(
    monkeypatch: pytest.MonkeyPatch, name: str, capability: tuple[int, int], bf16: bool
) -> None:
    # torch.cuda.is_bf16_supported() counts emulation: True on a V100, where bf16 is slow.
    _state, _mocks = install_fake_cuda(monkeypatch, [FakeDevice(name=name, capability=capability)])
    assert torch.cuda.is_bf16_supported() is True
    probe = _probe(_workload(), torch.device("cuda"))
    assert probe["bf16"] is bf16 and probe["cuda_capability"] == list(capability)
