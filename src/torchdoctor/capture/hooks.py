"""Step signals: a global optimizer step hook and DataLoader iteration hooks.

Both run on every step, so they only time and count; DataLoader settings are read once per
loader when it starts an epoch.
"""

from __future__ import annotations

import functools
import os
import weakref
from time import perf_counter
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.patches import Patcher

_MAX_LOADERS = 16


def _short(value: Any) -> str:
    """A value as a short label: a function's name, a class instance's class, a literal."""
    if callable(value) and hasattr(value, "__name__"):
        return str(value.__name__)
    if isinstance(value, (bool, int, float, str, type(None))):
        return repr(value)
    return type(value).__name__ + "(...)"


def construction(loader_init: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the user's ``DataLoader(...)`` call passed: ``explicit`` (name -> short label,
    from the call's values) and ``call`` (the call's source text and site, when readable)."""
    import inspect

    from torchdoctor.capture import callsource
    from torchdoctor.capture.own_frames import PACKAGE_DIR

    bound = inspect.signature(loader_init).bind_partial(None, *args, **kwargs)
    explicit = {k: _short(v) for k, v in list(bound.arguments.items())[1:] if k != "kwargs"}
    out: dict[str, Any] = {"explicit": explicit}
    import torch

    site = callsource.user_frame_site((os.path.dirname(torch.__file__) + os.sep, PACKAGE_DIR))
    if site is not None:
        call = callsource.call_arguments(site[0], site[1], ("DataLoader",))
        out["call"] = {"site": f"{site[0]}:{site[1]}", **(call or {})}
    return out


def loader_settings(loader: Any) -> dict[str, Any]:
    """The DataLoader settings that decide input throughput, as plain data."""
    try:
        dataset_len: int | None = len(loader.dataset)
    except Exception:  # iterable datasets have no length
        dataset_len = None
    context = loader.multiprocessing_context
    return {
        "num_workers": int(loader.num_workers),
        "pin_memory": bool(loader.pin_memory),
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor,
        "batch_size": loader.batch_size,
        "drop_last": bool(loader.drop_last),
        "dataset": type(loader.dataset).__name__,
        "dataset_len": dataset_len,
        "multiprocessing_context": None if context is None else str(context.get_start_method()),
        "cpu_count": os.cpu_count(),
        # torchrun's processes on one node share its CPUs between their workers.
        "cpus_per_rank": max(
            1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        ),
    }


class StepHooks:
    """Feeds optimizer steps and DataLoader batches to a ``StepClock``."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.loaders: dict[int, dict[str, Any]] = {}
        self.constructions: weakref.WeakKeyDictionary[Any, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self.batches = 0
        self.optimizer_steps = 0
        self._patcher = Patcher()
        self._handle: Any = None
        self._primary: weakref.ref[Any] | None = None
        self._is_compiling: Any = lambda: False

    def install(self) -> None:
        """Register the optimizer hook and wrap ``DataLoader.__iter__`` / ``__next__``."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._is_compiling = torch.compiler.is_compiling
        self._handle = register_optimizer_step_post_hook(self._on_optimizer_step)
        orig_next = _BaseDataLoaderIter.__next__
        orig_iter = DataLoader.__iter__
        orig_init = DataLoader.__init__
        hooks = self

        @functools.wraps(orig_init)  # libraries read the loader's signature (Lightning does)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            orig_init(loader, *args, **kwargs)
            if len(hooks.constructions) < _MAX_LOADERS:
                try:
                    hooks.constructions[loader] = construction(orig_init, args, kwargs)
                except Exception as exc:  # never let our bookkeeping break the user's loader
                    hooks.constructions[loader] = {"error": f"{type(exc).__name__}: {exc}"}

        def __next__(it: Any) -> Any:
            t0 = perf_counter()
            batch = orig_next(it)  # StopIteration ends the epoch without a tick
            try:
                hooks.batches += 1
                hooks.clock.add_wait(perf_counter() - t0)
                hooks.clock.tick("dataloader")  # may raise StopScript, on purpose
            except Exception as exc:  # our bookkeeping never costs the user a batch
                guest.note("DataLoader step signal", exc)
            return batch

        def __iter__(loader: Any) -> Any:
            key = id(loader)
            if key not in hooks.loaders and len(hooks.loaders) < _MAX_LOADERS:
                try:
                    hooks.loaders[key] = {
                        **loader_settings(loader),
                        **hooks.constructions.get(loader, {}),
                    }
                except Exception as exc:  # an unusual loader subclass: note it, keep going
                    hooks.loaders[key] = {"error": f"{type(exc).__name__}: {exc}"}
            return orig_iter(loader)

        self._patcher.patch(_BaseDataLoaderIter, "__next__", __next__)
        self._patcher.patch(DataLoader, "__iter__", __iter__)
        self._patcher.patch(DataLoader, "__init__", __init__)

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self._count_step(optimizer)  # may raise StopScript, on purpose
        except Exception as exc:  # an error of ours must not break the user's optimizer.step
            guest.note("optimizer step signal", exc)

    def _count_step(self, optimizer: Any) -> None:
        if self._is_compiling():  # inside a compiled optimizer step: tracing, not stepping
            return
        self.optimizer_steps += 1
        # With several optimizers (a GAN's generator and discriminator) one iteration steps
        # each; only the first one's steps are counted, until it is garbage-collected.
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            return
        self.clock.tick("optimizer")

    def uninstall(self) -> None:
        """Remove the hooks (idempotent)."""
        if self._handle is not None:
            guest.remove_hook(self._handle)  # deferred while an optimizer step runs
            self._handle = None
        self._patcher.restore()

    def snapshot(self) -> dict[str, Any]:
        """DataLoader settings seen (one entry per loader) and raw signal counts."""
        return {
            "dataloaders": list(self.loaders.values()),
            "batches": self.batches,
            "optimizer_steps": self.optimizer_steps,
        }
