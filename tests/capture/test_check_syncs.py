"""Host syncs and unpinned non_blocking copies: recorded at the user's line, only while
measuring, never from torch's own code, and invisible to torch.compile."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

from tests.gpu_fakes import install_fake_cuda
from torchdoctor.capture.config_probe import ConfigProbe
from torchdoctor.capture.syncs import SyncRecorder, target_device_type
from torchdoctor.record.typed import recorded


@pytest.fixture
def rec() -> Iterator[SyncRecorder]:
    r = SyncRecorder()
    r.install()
    r.measuring = True
    try:
        yield r
    finally:
        r.uninstall()


def _line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def test_item_recorded_at_the_call_site(rec: SyncRecorder) -> None:
    t = torch.tensor(3.0)
    for _ in range(3):
        value, line = t.item(), _line()
    assert value == 3.0
    (row,) = recorded(rec.snapshot())["host_syncs"]
    assert row["kind"] == "item" and row["device"] == "cpu" and row["calls"] == 3
    assert row["site"] == f"{__file__}:{line}"


def test_nothing_recorded_outside_the_measured_steps(rec: SyncRecorder) -> None:
    rec.measuring = False
    torch.tensor(1.0).item()
    torch.tensor([1, 2]).tolist()
    assert recorded(rec.snapshot())["host_syncs"] == []


def test_calls_from_torch_itself_are_not_the_users(rec: SyncRecorder) -> None:
    # clip_grad_norm_ with error_if_nonfinite reads a value inside torch
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    torch.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    sites = [r["site"] for r in recorded(rec.snapshot())["host_syncs"]]
    assert all("torch/" not in s for s in sites)


def test_cpu_of_a_cpu_tensor_is_not_a_sync(rec: SyncRecorder) -> None:
    torch.ones(2).cpu()
    torch.ones(2).to("cpu")
    assert recorded(rec.snapshot())["host_syncs"] == []


def test_uninstall_restores_the_methods() -> None:
    r = SyncRecorder()
    before = torch.Tensor.item
    r.install()
    assert torch.Tensor.item is not before
    r.uninstall()
    assert torch.Tensor.item is before and "item" not in torch.Tensor.__dict__


def test_unpinned_non_blocking_copy_is_caught_before_the_copy(rec: SyncRecorder) -> None:
    x = torch.ones(256)
    # No CUDA here: the copy itself fails, but the call site was recorded before it ran.
    with pytest.raises((RuntimeError, AssertionError)):
        x.to("cuda", non_blocking=True)
    line = _line() - 1
    with pytest.raises((RuntimeError, AssertionError)):
        x.cuda(non_blocking=True)
    rows = recorded(rec.snapshot())["unpinned_non_blocking"]
    assert sum(r["copies"] for r in rows) == 2 and rows[0]["bytes"] == 1024
    assert f"{__file__}:{line}" in {r["site"] for r in rows}
    x.to(torch.float64, non_blocking=True)  # a dtype change is no copy to a device
    assert sum(r["copies"] for r in recorded(rec.snapshot())["unpinned_non_blocking"]) == 2


@pytest.mark.parametrize(
    ("args", "kwargs", "want"),
    [
        (("cuda:1",), {}, "cuda"),
        ((torch.device("cpu"),), {}, "cpu"),
        ((0,), {}, "cuda"),
        ((torch.float16,), {}, None),
        ((), {"device": "cuda", "non_blocking": True}, "cuda"),
        ((torch.ones(1),), {}, "cpu"),
    ],
)
def test_target_device_type(args: tuple, kwargs: dict, want: str | None) -> None:
    assert target_device_type(args, kwargs) == want


def test_sync_debug_mode_sites(rec: SyncRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    state, _mocks = install_fake_cuda(monkeypatch)
    rec.start_sync_debug()
    assert state.sync_mode == 1  # "warn" for the window
    for _ in range(2):
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
    line = _line() - 1
    with pytest.warns(UserWarning, match="unrelated"):
        warnings.warn("unrelated", UserWarning, stacklevel=1)
    rec.stop_sync_debug()
    assert state.sync_mode == 0
    assert recorded(rec.snapshot())["sync_debug"] == [{"site": f"{__file__}:{line}", "count": 2}]


@pytest.mark.slow
def test_wrappers_add_no_graph_breaks(rec: SyncRecorder) -> None:
    from torch._dynamo.utils import counters

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.float64) * 2).sum().to(torch.float32)

    counters.clear()
    out = torch.compile(f, backend="eager")(torch.ones(4))
    assert out.item() == 8.0 and not counters["graph_break"]


def test_config_probe_records_construction_and_autocast() -> None:
    probe = ConfigProbe()
    probe.install()
    try:
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.AdamW(model.parameters(), fused=True)
        torch.nn.DataParallel(model)
        torch.amp.GradScaler("cpu")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pass
        snap = recorded(probe.snapshot())
    finally:
        probe.uninstall()
    (o,) = snap["optimizers"]
    assert o["class"] == "AdamW" and o["impl"] == "fused" and o["param_count"] == 20
    # the optimizer's keys as run.json has always had them; the call's source was read
    assert list(o) == [
        "class",
        "impl",
        "impl_options",
        "fused",
        "foreach",
        "param_tensors",
        "param_count",
        "param_bytes",
        "param_devices",
        "param_dtypes",
        "call",
    ]
    assert o["call"]["func"] == "torch.optim.AdamW" and o["call"]["args"] == ["model.parameters()"]
    assert o["call"]["kwargs"] == {"fused": "True"}
    assert snap["data_parallel"] == [{"device_ids": []}]
    assert snap["grad_scalers"] == [{"device": "cpu", "enabled": True}]
    assert snap["autocast"] == [
        {"device": "cpu", "dtype": "bfloat16", "enabled": True, "entries": 1}
    ]
    assert isinstance(snap["backend_flags"]["tf32_matmul"], bool)
    assert opt.defaults["fused"] is True
