"""``DoctorCallback`` for the Hugging Face ``Trainer``.

    from torchdoctor.integrations.transformers import DoctorCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[DoctorCallback()])

It skips ``warmup_steps`` optimizer steps, profiles ``profile_steps``, lets training run to its
end, and writes ``check``'s run folder and report with the fixes phrased as ``TrainingArguments``
(``bf16=True``, ``dataloader_num_workers``, ``torch_compile=True``, ...). The headline goes to
``state.log_history`` (what ``trainer.state.log_history`` shows) and the transformers log.
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "torchdoctor.integrations.transformers needs transformers and accelerate: "
        "pip install 'torchdoctor[transformers]'"
    ) from exc

from torchdoctor.integrations.watch import WatchingCallback, WatchResult, announce
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


class DoctorCallback(WatchingCallback, TrainerCallback):
    """Profiles a window of training steps and writes ``check``'s run folder and report.

    Keyword arguments beyond the three named are ``CheckOptions`` fields (``record_shapes``,
    ``with_stack``, ``profile_memory``). ``result`` holds what the last run left.
    """

    framework = "transformers"

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        name = type(model).__name__ if model is not None else "Trainer"
        loader = kwargs.get("train_dataloader")  # built before this hook
        self._begin("DoctorCallback.on_train_begin", name, lambda: [loader])

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._end(
            "DoctorCallback.on_train_end",
            lambda: trainer_info(args),
            lambda result: self._log(state, result),
        )

    def _log(self, state: Any, result: WatchResult) -> None:
        from transformers.utils import logging

        if not state.is_world_process_zero:
            return
        announce(result, logging.get_logger("transformers.trainer").warning)
        state.log_history.append(
            {
                "torchdoctor/headline": result.headline,
                "torchdoctor/median_step_ms": result.run.steps.median_step_ms,
                "torchdoctor/report": str(layout.report_text(result.folder)),
                "step": state.global_step,
            }
        )


__all__ = ["DoctorCallback", "trainer_info"]
