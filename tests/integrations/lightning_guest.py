"""A Lightning run under ``torchdoctor check`` with ``DoctorCallback`` and a callback of the
user's own that, every batch, registers an optimizer hook and a global optimizer post-hook
(after torchdoctor's), calls gc.collect(), starts a thread, and removes the hooks when the
batch ends. Before, training crashed inside optimizer.step ("OrderedDict mutated during
iteration" from torchdoctor's hooks)."""

from __future__ import annotations

import gc
import os
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

sys.path.insert(0, str(Path(__file__).parent))
import lightning_app as app

from torchdoctor.integrations.lightning import DoctorCallback

L: Any = __import__(os.environ.get("TD_TEST_LIGHTNING", "lightning.pytorch"), fromlist=["Callback"])


class Churn(L.Callback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.threads: list[threading.Thread] = []

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        opt = trainer.optimizers[0]
        self.handles.append(opt.register_step_post_hook(lambda *a: None))
        self.handles.append(register_optimizer_step_post_hook(lambda *a: None))
        gc.collect()
        t = threading.Thread(target=lambda: torch.randn(64, 64) @ torch.randn(64, 64))
        t.start()
        self.threads.append(t)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        while self.handles:
            self.handles.pop().remove()
        while self.threads:
            self.threads.pop().join()


if __name__ == "__main__":
    torch.manual_seed(0)
    model_cls, data_cls, make = app.build(
        os.environ.get("TD_TEST_LIGHTNING", "lightning.pytorch"), 0.001
    )
    out = sys.argv[1] if len(sys.argv) > 1 else "runs_cb"
    make([DoctorCallback(warmup_steps=2, profile_steps=2, out_dir=out), Churn()], max_steps=40).fit(
        model_cls(), data_cls()
    )
    print("TRAINING DONE")
