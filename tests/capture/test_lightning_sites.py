"""A Lightning frame is never the user's line: sync-debug sites, OOM sites and memory holders walk
out of Lightning's code to the user's line that led there.

On CPU the sync-debug mode cannot run, so the site functions are given real stacks taken inside a
tiny ``Trainer.fit``: from a callback (Lightning's loop calls it; the user's line is the ``fit``
call) and from a batch transfer that ``training_step`` asks Lightning for (Lightning calls the
batch's ``.to``, as it would a tensor's; the user's line is in ``training_step``).
"""

from __future__ import annotations

import inspect
import sys
import traceback
from typing import Any

import pytest
import torch
from torch import nn

from torchdoctor.capture.gpu_probe import user_frame
from torchdoctor.capture.syncs import first_user_site
from torchdoctor.code_paths import code_paths
from torchdoctor.memory.frames import holder_label

L: Any = pytest.importorskip("lightning.pytorch")
fabric_apply: Any = pytest.importorskip("lightning.fabric.utilities.apply_func")

TRANSFER_LINE = 0  # set below, where training_step asks Lightning to move the batch


def _line() -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _sites(frame: Any) -> dict[str, str]:
    """What each site function makes of the live stack from ``frame`` (a Lightning frame) out."""
    stack = traceback.extract_stack(frame)[::-1]  # innermost first, as a memory snapshot
    frames = [{"filename": f.filename, "line": f.lineno, "name": f.name} for f in stack]
    return {
        "innermost": f"{frame.f_code.co_filename}:{frame.f_lineno}",
        "sync_debug": first_user_site(frame) or "",
        "oom": user_frame(frames),
        "memory": holder_label([(f.name, f.filename, f.lineno or 0) for f in stack]),
    }


class Batch:
    """A batch Lightning moves with its ``.to`` (what a tensor's copy, a sync, does)."""

    def __init__(self, got: dict[str, dict[str, str]]) -> None:
        self.got = got

    def to(self, *args: Any, **kwargs: Any) -> Batch:
        self.got.setdefault("transfer", _sites(sys._getframe(1)))
        return self


class Tiny(L.LightningModule):  # type: ignore[misc]
    def __init__(self, got: dict[str, dict[str, str]]) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.got = got

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        global TRANSFER_LINE
        TRANSFER_LINE = _line() + 1
        fabric_apply.move_data_to_device(Batch(self.got), torch.device("cpu"))
        return self.net(batch[0]).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Grab(L.Callback):  # type: ignore[misc]
    def __init__(self, got: dict[str, dict[str, str]]) -> None:
        self.got = got

    def on_train_batch_end(self, *args: Any) -> None:
        self.got.setdefault("callback", _sites(sys._getframe(1)))  # Lightning's hook caller


def test_lightning_frames_are_never_the_users_site() -> None:
    got: dict[str, dict[str, str]] = {}
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 4)))
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        callbacks=[Grab(got)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Tiny(got), data)
    fit = f"{__file__}:{_line() - 1}"
    transfer = f"{__file__}:{TRANSFER_LINE}"
    assert set(got) == {"callback", "transfer"}
    cases = (
        ("callback", fit, "test_lightning_frames_are_never_the_users_site"),
        ("transfer", transfer, "training_step"),
    )
    for case, user, function in cases:
        sites = got[case]
        # the stacks really start in Lightning's code (else the test proves nothing)
        assert code_paths().label(sites["innermost"].rsplit(":", 1)[0]) == "pkg:lightning"
        assert sites["sync_debug"] == f"{user} (inside lightning)", case
        assert sites["oom"] == user, case
        line = user.rsplit(":", 1)[1]
        assert sites["memory"] == f"test_lightning_sites.py:{line} ({function})", case
