"""What ``torchdoctor check`` says when the script trains with Lightning or the HF Trainer:
the callback gives the same report from inside the framework, with fixes in its settings.
A framework counts as in use when its code is on the stack of the first ``optimizer.step``
(merely importing it, as a notebook or a test session may have done, does not count)."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

FRAMEWORK_PACKAGES = {
    "lightning": ("lightning", "pytorch_lightning"),
    "transformers": ("transformers", "accelerate"),
}
"""Top-level packages whose frames on the stack of ``optimizer.step`` mean that framework's
trainer runs the loop (the Hugging Face Trainer steps through accelerate's optimizer)."""

HINTS = {
    "lightning": (
        "this script trains with PyTorch Lightning: the fixes above are Trainer and "
        "LightningDataModule settings; to measure from inside the Trainer (its precision, "
        "strategy and loaders recorded), add the callback:\n"
        "    from torchdoctor.integrations.lightning import DoctorCallback\n"
        "    Trainer(..., callbacks=[DoctorCallback()])"
    ),
    "transformers": (
        "this script trains with the Hugging Face Trainer: the fixes above are "
        "TrainingArguments; to measure from inside the Trainer, add the callback:\n"
        "    from torchdoctor.integrations.transformers import DoctorCallback\n"
        "    Trainer(..., callbacks=[DoctorCallback()])"
    ),
}


def frameworks_on_stack(frame: FrameType | None) -> list[str]:
    """The frameworks with a frame on this stack, in ``FRAMEWORK_PACKAGES`` order."""
    packages: set[str] = set()
    while frame is not None:
        packages.add(str(frame.f_globals.get("__name__", "")).split(".")[0])
        frame = frame.f_back
    return [f for f, names in FRAMEWORK_PACKAGES.items() if packages & set(names)]


class FrameworkSpy:
    """Looks at the stack of the first optimizer step: which framework (if any) drove it.
    One look per run, so it costs nothing on later steps."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._handle: Any = None
        self._looked = False

    def install(self) -> None:
        """Register a one-shot optimizer step post-hook."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._on_step)

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # Never remove the hook from inside it: optimizer.step iterates its global post-hooks
        # live, and a deletion there crashes the user's step when a hook follows ours.
        if self._looked:
            return
        self._looked = True
        try:
            self.seen = frameworks_on_stack(sys._getframe(1))
        except Exception as exc:
            from torchdoctor.capture import guest

            guest.note("framework hint", exc)

    def uninstall(self) -> None:
        """Remove the hook (idempotent; deferred while an optimizer step runs)."""
        if self._handle is not None:
            from torchdoctor.capture import guest

            guest.remove_hook(self._handle)
            self._handle = None


def framework_hint(frameworks: list[str]) -> str:
    """The report lines that point at the callbacks ('' when no framework was seen)."""
    return "".join(f"hint: {HINTS[f]}\n" for f in frameworks if f in HINTS)
