"""``DoctorCallback`` for PyTorch Lightning (``lightning.pytorch`` and ``pytorch_lightning``).

    from torchdoctor.integrations.lightning import DoctorCallback
    trainer = Trainer(..., callbacks=[DoctorCallback(warmup_steps=5, profile_steps=5)])

A ``Callback``, not a ``Profiler``: a Lightning profiler only receives action names
(``start("run_training_batch")``), never the trainer, so it could not read the precision plugin,
the strategy, the DataModule or the loggers; and a trainer takes one profiler but any number of
callbacks, so a callback composes with the user's own profiler. The class derives from the
``Callback`` of every installed namespace, so both ``lightning.pytorch.Trainer`` and
``pytorch_lightning.Trainer`` accept it.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from torchdoctor.integrations.watch import WatchingCallback, WatchResult, announce

NAMESPACES = ("lightning.pytorch", "pytorch_lightning")


def _callback_bases() -> tuple[type, ...]:
    bases = []
    for name in NAMESPACES:
        try:
            bases.append(importlib.import_module(name).Callback)
        except ImportError:
            continue
    if not bases:
        raise ImportError(
            "torchdoctor.integrations.lightning needs PyTorch Lightning: "
            "pip install 'torchdoctor[lightning]'"
        )
    return tuple(bases)


def lightning_info(trainer: Any) -> dict[str, Any]:
    """The run's settings as Lightning holds them (precision plugin, strategy, accumulation)."""
    strategy = trainer.strategy
    ddp_kwargs = getattr(strategy, "_ddp_kwargs", None) or {}
    datamodule = getattr(trainer, "datamodule", None)
    return {
        "namespace": type(trainer).__module__.split(".trainer")[0],
        "precision": str(trainer.precision),
        "precision_plugin": type(trainer.precision_plugin).__name__,
        "strategy": type(strategy).__name__,
        "ddp_bucket_cap_mb": ddp_kwargs.get("bucket_cap_mb"),
        "accelerator": type(trainer.accelerator).__name__,
        "num_devices": int(trainer.num_devices),
        "world_size": int(trainer.world_size),
        "accumulate_grad_batches": int(trainer.accumulate_grad_batches),
        "datamodule": None if datamodule is None else type(datamodule).__name__,
    }


def _train_loaders(trainer: Any) -> list[Any]:
    loaders = getattr(trainer, "train_dataloader", None)
    flat = getattr(loaders, "flattened", None)  # a CombinedLoader
    if flat is not None:
        return list(flat)
    return [loaders] if loaders is not None else []


class _DoctorCallback(WatchingCallback):
    """Profiles a window of training steps and writes ``check``'s run folder and report.

    ``warmup_steps`` steps run first (compilation, allocator warm-up), then ``profile_steps``
    are profiled; training always runs to its end. Other keyword arguments are ``CheckOptions``
    fields (``record_shapes``, ``with_stack``, ``profile_memory``). The headline goes to the
    trainer's loggers (as ``torchdoctor/*`` metrics) and to the ``lightning.pytorch`` log.
    """

    framework = "lightning"

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._begin(
            "DoctorCallback.on_train_start",
            type(pl_module).__name__,
            lambda: _train_loaders(trainer),
        )

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(trainer, "completed")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(
            trainer, "interrupted" if isinstance(exception, KeyboardInterrupt) else "error"
        )

    def _finish(self, trainer: Any, status: str) -> None:
        self._end(
            "DoctorCallback at the end of training",
            lambda: lightning_info(trainer),
            lambda result: self._log(trainer, result),
            status,
        )

    def _log(self, trainer: Any, result: WatchResult) -> None:
        if not trainer.is_global_zero:
            return
        announce(result, logging.getLogger("lightning.pytorch").info)
        steps = result.run.steps
        metrics = {
            "torchdoctor/median_step_ms": steps.median_step_ms,
            "torchdoctor/mean_data_wait_ms": steps.measured_mean_data_wait_ms,
            "torchdoctor/findings": len((result.report or {}).get("findings") or []),
        }
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        for logger in trainer.loggers:
            logger.log_metrics(clean, step=trainer.global_step)
            logger.save()


DoctorCallback: type[_DoctorCallback] = type(
    "DoctorCallback",
    (_DoctorCallback, *_callback_bases()),
    {"__module__": __name__, "__doc__": _DoctorCallback.__doc__},
)
"""The callback, a subclass of each installed Lightning namespace's ``Callback``."""

__all__ = ["DoctorCallback", "lightning_info"]
