"""Where CUDA's sync-debug warnings are blamed, and the user's sync-debug mode kept.

CUDA raises the warning from C++ with stack level 1: it blames the innermost Python frame. The
fake ``item`` below stands for that C++ code: compiled under torch's folder, it warns with stack
level 2 (its caller), so the warning blames exactly what a GPU run blames: our wrapper's line, or
torch's own when torch syncs (GradScaler's ``.item()``). The recorded site must be the user's.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tests.gpu_fakes import install_fake_cuda
from torchdoctor.capture import syncs
from torchdoctor.capture.syncs import SyncRecorder, first_user_site
from torchdoctor.record.typed import recorded

MESSAGE = "called a synchronizing CUDA operation"


def _here() -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _cuda_item() -> Any:
    source = (
        "def item(t):\n"
        f"    warnings.warn({MESSAGE!r}, UserWarning, stacklevel=2)\n"
        "    return TensorBase.item(t)\n"
    )
    scope: dict[str, Any] = {"warnings": warnings, "TensorBase": torch._C.TensorBase}
    code = compile(source, os.path.join(os.path.dirname(torch.__file__), "_cuda_item.py"), "exec")
    exec(code, scope)
    return scope["item"]


@pytest.fixture
def warn_on_item(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SyncRecorder, Any]]:
    state, _ = install_fake_cuda(monkeypatch)
    rec = SyncRecorder()
    rec.install()
    # item() as on a GPU in "warn" mode: the C++ call warns, blaming the innermost Python frame.
    # (over the installed wrapper: uninstall() puts torch's own method back)
    torch.Tensor.item = rec._wrap_timed("item", _cuda_item())  # type: ignore[method-assign]
    rec.measuring = True
    rec.start_sync_debug()
    try:
        yield rec, state
    finally:
        rec.uninstall()


def test_sync_in_user_code_is_blamed_on_the_user_line(warn_on_item: Any) -> None:
    rec, _ = warn_on_item
    torch.ones(1).item()
    line = _here() - 1
    sites = recorded(rec.snapshot())["sync_debug"]
    assert sites == [{"site": f"{__file__}:{line}", "count": 1}]
    assert not any(syncs.__file__ in s["site"] for s in sites)


def test_sync_inside_torch_gradscaler_is_blamed_on_the_users_call(warn_on_item: Any) -> None:
    rec, _ = warn_on_item
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(3, 2)).sum()).backward()
    scaler.step(opt)  # torch/amp/grad_scaler.py reads found_inf with .item()
    line = _here() - 1
    sites = recorded(rec.snapshot())["sync_debug"]
    assert sites and sites[0]["site"] == f"{__file__}:{line}"
    # torch's own .item() is not counted as a user host sync by the wrapper either
    assert not recorded(rec.snapshot())["host_syncs"]


def test_first_user_site_walks_out_of_library_folders() -> None:
    def user_call() -> Any:
        return inspect.currentframe()

    # the same function compiled as a file of torch's (as _cuda_item above): its frame is skipped
    source = "def library_call(site):\n    return site(inspect.currentframe())\n"
    scope: dict[str, Any] = {"inspect": inspect}
    exec(compile(source, os.path.join(os.path.dirname(torch.__file__), "_lib.py"), "exec"), scope)

    def through_library() -> Any:
        return scope["library_call"](first_user_site)  # walks out of torch's frame to here

    assert first_user_site(user_call()) == f"{__file__}:{user_call.__code__.co_firstlineno + 1}"
    assert through_library() == f"{__file__}:{through_library.__code__.co_firstlineno + 1}"


@pytest.mark.parametrize("mode", [1, 2])
def test_users_own_sync_debug_mode_is_kept(mode: int, monkeypatch: pytest.MonkeyPatch) -> None:
    state, _mocks = install_fake_cuda(monkeypatch)
    torch.cuda.set_sync_debug_mode(mode)
    rec = SyncRecorder()
    rec.start_sync_debug()
    assert state.sync_mode == mode  # "warn" already warns; "error" is the user's to keep
    rec.stop_sync_debug()
    assert state.sync_mode == mode
