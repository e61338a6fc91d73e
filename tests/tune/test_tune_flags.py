"""A trial's arms save and restore the process-wide backend flags through the one reader
(``capture.config_probe.backend_flags``): a workload that sets TF32 through torch's new
``fp32_precision`` API (after which reading the legacy flags raises) still runs, on the CPU too,
and each arm gets back the settings its own setup left."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from torchdoctor.capture.config_probe import backend_flags, set_backend_flags

NEW_API = hasattr(torch.backends.cuda.matmul, "fp32_precision") or hasattr(
    torch.backends, "fp32_precision"
)


@pytest.fixture(autouse=True)
def _restore_flags() -> Iterator[None]:
    before = backend_flags()
    yield
    set_backend_flags(before)
    assert backend_flags() == before  # the writer puts back exactly what the reader read


@pytest.mark.skipif(not NEW_API, reason="torch < 2.9 has no fp32_precision API")
def test_flags_of_a_workload_on_the_new_tf32_api() -> None:
    torch.set_float32_matmul_precision("highest")  # strict fp32 through the legacy switch...
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # ...then the workload's setup
    with pytest.raises(RuntimeError):
        torch.backends.cuda.matmul.allow_tf32  # noqa: B018 - the legacy read torch refuses
    tf32_arm = backend_flags()  # the arm's flags, read after its setup: must not raise
    assert tf32_arm["tf32_matmul"] is True

    torch.backends.cuda.matmul.fp32_precision = "ieee"  # the next arm's setup: strict fp32
    ieee_arm = backend_flags()
    assert ieee_arm["tf32_matmul"] is False

    set_backend_flags(tf32_arm)  # the rounds switch arms back and forth
    assert backend_flags()["tf32_matmul"] is True
    set_backend_flags(ieee_arm)
    assert backend_flags()["tf32_matmul"] is False


def test_legacy_flags_round_trip() -> None:
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.benchmark = True
    saved = backend_flags()
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = False
    set_backend_flags(saved)
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cudnn.benchmark is True
    assert backend_flags()["tf32_matmul"] is True
