"""Step signals: a global optimizer step hook and DataLoader iteration hooks.

Both run on every step, so they only time and count; DataLoader settings are read once per
loader when it starts an epoch.
"""

from __future__ import annotations

import functools
import os
import types
import warnings
import weakref
from dataclasses import replace
from time import perf_counter
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.clock import StepClock
from torchdoctor.capture.patches import Patcher
from torchdoctor.code_paths import code_paths
from torchdoctor.record.run import LoaderConfig

_MAX_LOADERS = 16
_USAGE_KEYS = (
    "iters",
    "measured_iters",
    "measured_iter_s",
    "measured_batches",
    "measured_wait_s",
    "measured_first_batches",
    "measured_first_wait_s",
)


def _short(value: Any) -> str:
    """A value as a short label: a function's name, a class instance's class, a literal."""
    if callable(value) and hasattr(value, "__name__"):
        return str(value.__name__)
    if isinstance(value, (bool, int, float, str, type(None))):
        return repr(value)
    return type(value).__name__ + "(...)"


def construction(loader_init: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the user's ``DataLoader(...)`` call passed, as ``LoaderConfig`` fields: ``explicit``
    (name -> short label, from the call's values) and ``call`` (the call's source text and
    site, when readable).

    The site is the innermost frame outside every library (torch, torchdoctor, site-packages):
    a loader that Lightning or accelerate rebuilds in its own code is marked ``built_in``
    with the library's frame, and ``call`` is then the user's line that led there."""
    import inspect

    from torchdoctor.capture import callsource
    from torchdoctor.capture.config_probe import construction_call

    bound = inspect.signature(loader_init).bind_partial(None, *args, **kwargs)
    explicit = {k: _short(v) for k, v in list(bound.arguments.items())[1:] if k != "kwargs"}
    out: dict[str, Any] = {"explicit": explicit}
    inner = callsource.user_frame_site(frozenset({"torch", "torchdoctor"}))
    if inner is not None and not code_paths().is_user(inner[0]):
        out["built_in"] = f"{inner[0]}:{inner[1]}"
    call = construction_call("DataLoader")
    if call is not None:
        out["call"] = call
    return out


def loader_settings(loader: Any, built: dict[str, Any] | None = None) -> LoaderConfig:
    """The DataLoader settings that decide input throughput, with ``built``: how the script
    built it (``construction``'s fields, or ``error``), when that was seen."""
    from torchdoctor.capture.cpu_usage import usable_cores

    try:
        dataset_len: int | None = len(loader.dataset)
    except Exception:  # iterable datasets have no length
        dataset_len = None
    context = loader.multiprocessing_context
    return LoaderConfig(
        num_workers=int(loader.num_workers),
        pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor,
        batch_size=loader.batch_size,
        drop_last=bool(loader.drop_last),
        dataset=type(loader.dataset).__name__,
        dataset_len=dataset_len,
        multiprocessing_context=None if context is None else str(context.get_start_method()),
        cpu_count=usable_cores(),
        # torchrun's processes on one node share its CPUs between their workers (the CPUs
        # this process may use: a cpuset or taskset counts, not the machine's total).
        cpus_per_rank=max(1, usable_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", 1))),
        **(built or {}),
    )


class StepHooks:
    """Feeds optimizer steps and DataLoader batches to a ``StepClock``."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.loaders: dict[int, LoaderConfig] = {}
        self.constructions: weakref.WeakKeyDictionary[Any, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self.measuring = False
        """Steps after the warm-up are running: per-loader batches and waits are counted."""
        self.usage: dict[int, dict[str, Any]] = {}
        """Loader key -> epochs started, and batches, waits and epoch starts while measuring."""
        self.worker_iters: dict[int, weakref.ref[Any]] = {}
        self.loader_parts: dict[int, Any] = {}
        """Loader key -> its dataset, collate_fn and batch size (for ``loader_probe``)."""
        self._user_calls: dict[int, dict[str, Any]] = {}
        self._warn_registry: dict[Any, Any] = {}  # once per location, as the default filter
        """id(dataset) -> the user's own DataLoader construction over it."""
        self.batches = 0
        self.optimizer_steps = 0
        self.measured_optimizer_steps = 0
        self.backward_calls = 0
        self.measured_backward_calls = 0
        self._patcher = Patcher()
        self._handle: Any = None
        self._primary: weakref.ref[Any] | None = None
        self._is_compiling: Any = lambda: False
        self.optimizer_built: Any = lambda: False
        """Whether the script has built a torch.optim optimizer (set by the session)."""

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
                    hooks.constructions[loader] = hooks._linked(
                        construction(orig_init, args, kwargs), loader
                    )
                except Exception as exc:  # never let our bookkeeping break the user's loader
                    hooks.constructions[loader] = {"error": f"{type(exc).__name__}: {exc}"}

        def __next__(it: Any) -> Any:
            t0 = perf_counter()
            batch = orig_next(it)  # StopIteration ends the epoch without a tick
            try:
                waited = perf_counter() - t0
                hooks.batches += 1
                first = getattr(it, "_torchdoctor_first", False)
                if first:  # an epoch's first batch, measured or not: the next one is not
                    it._torchdoctor_first = False
                if hooks.measuring:
                    hooks._count_batch(it, waited, first)
                hooks.clock.add_wait(waited)
                hooks.clock.tick("dataloader")  # may raise StopScript, on purpose
            except Exception as exc:  # our bookkeeping never costs the user a batch
                guest.note("DataLoader step signal", exc)
            return batch

        def __iter__(loader: Any) -> Any:
            key = id(loader)
            if key not in hooks.loaders and len(hooks.loaders) < _MAX_LOADERS:
                try:
                    built = hooks.constructions.get(loader)
                    hooks.loaders[key] = loader_settings(loader, built)
                except Exception as exc:  # an unusual loader subclass: note it, keep going
                    hooks.loaders[key] = LoaderConfig(error=f"{type(exc).__name__}: {exc}")
            t0 = perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                it = orig_iter(loader)
            started = perf_counter() - t0
            hooks._started(key, loader, it, started, caught)
            return it

        orig_backward = torch.autograd.backward

        @functools.wraps(orig_backward)
        def backward(*args: Any, **kwargs: Any) -> Any:
            out = orig_backward(*args, **kwargs)
            try:
                if not hooks._is_compiling():
                    hooks.backward_calls += 1
                    if hooks.measuring:
                        hooks.measured_backward_calls += 1
                    if not hooks.optimizer_built():  # an optimizer's steps mark the steps then
                        hooks.clock.tick("backward")  # may raise StopScript, on purpose
            except Exception as exc:  # our bookkeeping never costs the user a backward pass
                guest.note("backward step signal", exc)
            return out

        # Tensor.backward calls torch.autograd.backward through the module: one patch sees both.
        self._patcher.patch(torch.autograd, "backward", backward)
        self._patcher.patch(_BaseDataLoaderIter, "__next__", __next__)
        self._patcher.patch(DataLoader, "__iter__", __iter__)
        self._patcher.patch(DataLoader, "__init__", __init__)

    def _started(self, key: int, loader: Any, it: Any, seconds: float, caught: list[Any]) -> None:
        """An epoch began: count it (and its start-up time while measuring), remember the
        iterator's worker processes, and pass torch's warnings on as the script would see them."""
        try:
            use = self.usage.setdefault(key, dict.fromkeys(_USAGE_KEYS, 0.0))
            use["iters"] += 1
            if self.measuring:
                use["measured_iters"] += 1
                use["measured_iter_s"] += seconds
            if key not in self.loader_parts:  # the dataset outlives a stopped script's frames
                self.loader_parts[key] = types.SimpleNamespace(
                    dataset=loader.dataset,
                    collate_fn=loader.collate_fn,
                    batch_size=loader.batch_size,
                    num_workers=loader.num_workers,
                )
            it._torchdoctor_loader = key
            it._torchdoctor_first = True
            if getattr(it, "_workers", None):
                self.worker_iters[key] = weakref.ref(it)
            settings = self.loaders.get(key)
            if caught and settings is not None:
                seen = list(settings.torch_warnings)
                for w in caught:
                    if len(seen) < 4 and str(w.message) not in seen:
                        seen.append(str(w.message))
                self.loaders[key] = replace(settings, torch_warnings=tuple(seen))
        except Exception:  # bookkeeping only
            pass
        for w in caught:  # as if we had not looked: the script's filters decide
            warnings.warn_explicit(
                w.message, w.category, w.filename, w.lineno, registry=self._warn_registry
            )

    def _count_batch(self, it: Any, waited: float, first: bool) -> None:
        use = self.usage.get(getattr(it, "_torchdoctor_loader", -1))
        if use is None:
            return
        use["measured_batches"] += 1
        use["measured_wait_s"] += waited
        if first:  # this epoch started inside the measured steps
            use["measured_first_batches"] += 1
            use["measured_first_wait_s"] += waited

    def worker_pids(self) -> dict[int, list[int]]:
        """Loader key -> pids of the worker processes of its live iterator."""
        out: dict[int, list[int]] = {}
        for key, ref in list(self.worker_iters.items()):
            it = ref()
            workers = getattr(it, "_workers", None) or []
            pids = [int(w.pid) for w in workers if getattr(w, "pid", None)]
            if pids:
                out[key] = pids
        return out

    def _linked(self, built: dict[str, Any], loader: Any) -> dict[str, Any]:
        """A loader a library rebuilt (Lightning adds its sampler, accelerate shards it) gets
        the user's own construction of a loader over the same dataset: that is the call to fix."""
        key = id(getattr(loader, "dataset", None))
        call = built.get("call")
        if "built_in" not in built and call is not None and call.kwargs is not None:
            self._user_calls[key] = built
            return built
        user = self._user_calls.get(key)
        if user is None:
            return built
        return {**built, "call": user["call"], "explicit": user["explicit"]}

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
        if self.measuring:
            self.measured_optimizer_steps += 1  # of the counted optimizer
        self.clock.tick("optimizer")

    def uninstall(self) -> None:
        """Remove the hooks (idempotent)."""
        if self._handle is not None:
            guest.remove_hook(self._handle)  # deferred while an optimizer step runs
            self._handle = None
        self._patcher.restore()

    def snapshot(self) -> dict[str, Any]:
        """DataLoader settings seen (one row per loader, with what it did) and the signals'
        counts: ``RunConfig`` fields."""
        loaders = [
            replace(settings, usage=dict(use)) if (use := self.usage.get(key)) else settings
            for key, settings in self.loaders.items()
        ]
        return {
            "dataloaders": loaders,
            "batches": self.batches,
            "optimizer_steps": self.optimizer_steps,
            "backward_calls": self.backward_calls,
            "measured_backward_calls": self.measured_backward_calls,
            "measured_optimizer_steps": self.measured_optimizer_steps,
        }
