"""``DoctorCallback`` for the Hugging Face ``Trainer``.

    from torchdoctor.integrations.transformers import DoctorCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[DoctorCallback()])

It skips ``warmup_steps`` optimizer steps, profiles ``profile_steps``, lets training run to its
end, and writes ``check``'s run folder and report with the fixes phrased as ``TrainingArguments``
(``bf16=True``, ``dataloader_num_workers``, ``torch_compile=True``, ...). The headline goes to
``state.log_history`` (what ``trainer.state.log_history`` shows) and the transformers log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "torchdoctor.integrations.transformers needs transformers and accelerate: "
        "pip install 'torchdoctor[transformers]'"
    ) from exc

from torchdoctor.integrations.watch import (
    RunWatch,
    WatchResult,
    guest_failed,
    make_options,
    run_name,
    say,
)
from torchdoctor.record import layout

_ARGS = (
    "bf16",
    "fp16",
    "tf32",
    "torch_compile",
    "gradient_accumulation_steps",
    "per_device_train_batch_size",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "ddp_bucket_cap_mb",
    "use_cpu",
)


def trainer_info(args: Any) -> dict[str, Any]:
    """The run's settings as ``TrainingArguments`` hold them."""
    info = {k: getattr(args, k, None) for k in _ARGS}
    info["parallel_mode"] = str(getattr(args, "parallel_mode", None))
    info["world_size"] = int(getattr(args, "world_size", 1))
    info["fsdp"] = bool(getattr(args, "fsdp", None))
    return info


class DoctorCallback(TrainerCallback):  # type: ignore[misc]
    """Profiles a window of training steps and writes ``check``'s run folder and report.

    Keyword arguments beyond the three named are ``CheckOptions`` fields (``record_shapes``,
    ``with_stack``, ``profile_memory``). ``result`` holds what the last run left.
    """

    def __init__(
        self,
        warmup_steps: int = 5,
        profile_steps: int = 5,
        out_dir: str | Path = "torchdoctor-runs",
        **options: Any,
    ) -> None:
        self.options = make_options(warmup_steps, profile_steps, out_dir, **options)
        self.result: WatchResult | None = None
        self._watch: RunWatch | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            self._begin(kwargs)
        except Exception as exc:  # a guest never breaks the training it watches
            guest_failed("DoctorCallback.on_train_begin", exc)

    def _begin(self, kwargs: dict[str, Any]) -> None:
        from torchdoctor.capture.hooks import loader_settings

        model = kwargs.get("model")
        name = type(model).__name__ if model is not None else "Trainer"
        self._watch = RunWatch("transformers", self.options, run_name(name))
        self._watch.start()
        loader = kwargs.get("train_dataloader")
        if loader is not None and hasattr(loader, "num_workers"):
            # The Trainer built its loader before this hook: read its settings now.
            self._watch.session.hooks.loaders.setdefault(id(loader), loader_settings(loader))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._watch is None or not self._watch.active:
            return
        try:
            self.result = self._watch.finish(trainer_info(args))
            if state.is_world_process_zero:
                self._log(state, self.result)
        except Exception as exc:
            guest_failed("DoctorCallback.on_train_end", exc)

    def _log(self, state: Any, result: WatchResult) -> None:
        from transformers.utils import logging

        logging.get_logger("transformers.trainer").warning(result.headline)
        say(f"torchdoctor: report in {layout.report_text(result.folder)}")
        state.log_history.append(
            {
                "torchdoctor/headline": result.headline,
                "torchdoctor/median_step_ms": result.run.steps.median_step_ms,
                "torchdoctor/report": str(layout.report_text(result.folder)),
                "step": state.global_step,
            }
        )


__all__ = ["DoctorCallback", "trainer_info"]
