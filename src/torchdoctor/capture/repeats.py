"""Construction work repeated inside the measured steps: work that belongs before the loop.

While ``measuring`` is on, these are counted per user line (and timed where the wrapper spans
the whole call):

- ``optimizer``: an optimizer built (its state, Adam's moments, starts from zero again);
- ``module``: an ``nn.Module`` built (fresh random weights, never trained);
- ``module.to``: ``Module.to`` / ``cuda`` / ``cpu`` / ``float`` / ``half`` / ``double`` /
  ``bfloat16`` (every parameter visited, and converted when it changes);
- ``copy``: modules unpickled or deep-copied (``copy.deepcopy(model)``, ``torch.load``);
- ``dataloader``: a ``DataLoader`` built (with workers, new processes each time);
- ``dataloader iterator``: ``iter(loader)`` over a loader with worker processes that do not
  persist (``next(iter(loader))`` in the loop starts and stops the workers every step);
- ``hook``: a hook registered on a tensor or a module (never removed, they pile up).

Outside the measured steps each wrapper costs one flag test.
"""

from __future__ import annotations

import functools
from time import perf_counter
from typing import Any

from torchdoctor.capture import guest
from torchdoctor.capture.patches import Patcher
from torchdoctor.code_paths import CodePaths
from torchdoctor.record.account import Repeat

_MODULE_CASTS = ("to", "cuda", "cpu", "float", "half", "double", "bfloat16")
_HOOKS = (
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_backward_hook",
    "register_full_backward_pre_hook",
)
_MAX_SITES = 64
_INIT_KINDS = ("optimizer", "module", "dataloader")
_COPY_OWNERS = ("stdlib:copy", "stdlib:copyreg", "stdlib:pickle", "torch")
_COMPILER_DIRS = ("_dynamo", "/fx/", "_inductor", "_functorch", "/export/")


def _starts_workers(loader: Any) -> bool:
    """``iter(loader)`` starts worker processes (none kept from an earlier epoch)."""
    try:
        workers = int(loader.num_workers)
        kept = bool(loader.persistent_workers) and getattr(loader, "_iterator", None) is not None
        return workers > 0 and not kept
    except Exception:
        return False


def _param_ids(opt: Any) -> list[int]:
    return [id(p) for g in opt.param_groups for p in g["params"]]


class RepeatWatch:
    """Counts constructions per (kind, user line) during the measured steps."""

    def __init__(self, paths: CodePaths) -> None:
        self.paths = paths
        self.measuring = False
        self.sites: dict[tuple[str, str], list[float]] = {}
        """(kind, "file:line") -> [calls, seconds inside the call (0 when not timed)]."""
        self.labels: dict[tuple[str, str], str] = {}
        """(kind, site) -> the class built or the method called."""
        self.hook_functions: dict[tuple[str, str], set[tuple[str, str]]] = {}
        """(kind, site) -> (file, function) of the hooks registered there: their own time in
        the line table is what piled-up hooks cost."""
        self._patcher = Patcher()
        self.keep_state = False
        """While on, an optimizer built at one of ``keep_sites`` takes over the state of the
        last one built there (check's 'built once' toggle, ``capture/toggles.py``)."""
        self.keep_sites: frozenset[str] = frozenset()
        self._last_at: dict[str, Any] = {}

    def install(self) -> None:
        """Wrap the constructors and methods listed in the module docstring."""
        import torch
        from torch import nn
        from torch.utils.data import DataLoader

        self._wrap_init(torch.optim.Optimizer, "optimizer", timed=True)
        self._wrap_init(nn.Module, "module", timed=False)
        self._wrap_init(DataLoader, "dataloader", timed=True)
        self._wrap_iter(DataLoader)
        for name in _MODULE_CASTS:
            self._wrap_method(nn.Module, name, "module.to")
        self._wrap_method(nn.Module, "__setstate__", "copy")
        for name in _HOOKS:
            self._wrap_method(nn.Module, name, "hook")
        self._wrap_method(torch.Tensor, "register_hook", "hook")

    def _count(self, kind: str, label: str, seconds: float, hook: Any = None) -> None:
        try:
            site = self._direct_site(kind)
            if site is None:
                return
            if hook is not None:
                code = getattr(getattr(hook, "__func__", hook), "__code__", None)
                if code is not None:
                    name = str(getattr(code, "co_qualname", code.co_name))
                    functions = self.hook_functions.setdefault((kind, site), set())
                    if len(functions) < 8:
                        functions.add((code.co_filename, name))
            key = (kind, site)
            entry = self.sites.get(key)
            if entry is None:
                if len(self.sites) >= _MAX_SITES:
                    return
                entry = self.sites[key] = [0, 0.0]
                self.labels[key] = label
            entry[0] += 1
            entry[1] += seconds
        except Exception as exc:
            guest.note(f"counting {kind} constructions", exc)

    def _direct_site(self, kind: str) -> str | None:
        """The user's line that asked for this construction itself: between it and our
        wrapper only constructors (``__init__`` of the classes being built) or, for copies,
        the copy and pickle machinery. Work torch does on its own while it runs (dynamo
        building graph modules as it compiles, full backward hooks adding tensor hooks at
        every forward) is not the user's to move."""
        import sys

        frame: Any = sys._getframe(3)  # _direct_site <- _count <- the wrapper <- its caller
        while frame is not None:
            code = frame.f_code
            owner = self.paths.label(code.co_filename)
            if owner == "user" and not (kind in _INIT_KINDS and code.co_name == "__init__"):
                return f"{code.co_filename}:{frame.f_lineno}"
            if owner == "torch" and any(p in code.co_filename for p in _COMPILER_DIRS):
                return None  # the compiler building or copying its own graph modules
            if kind in _INIT_KINDS and code.co_name == "__init__":
                pass  # a constructor of the object being built (torch's or the user's class)
            elif kind == "copy" and owner in _COPY_OWNERS:
                pass
            else:
                return None
            frame = frame.f_back
        return None

    def _wrap_init(self, cls: type, kind: str, timed: bool) -> None:
        orig = cls.__init__  # type: ignore[misc]
        watch = self

        @functools.wraps(orig)  # libraries read constructors' signatures (Lightning does)
        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            if not watch.measuring:
                orig(obj, *args, **kwargs)
                if kind == "optimizer" and watch.keep_sites:
                    watch._built_at_kept_site(obj)
                return
            t0 = perf_counter()
            orig(obj, *args, **kwargs)
            seconds = perf_counter() - t0 if timed else 0.0
            watch._count(kind, type(obj).__name__, seconds)

        self._patcher.patch(cls, "__init__", __init__)

    def _built_at_kept_site(self, opt: Any) -> None:
        """An optimizer was built at one of ``keep_sites``: remembered as the last one built
        there (in both arms, so the first changed step after a baseline one already keeps its
        state) and, while ``keep_state`` is on, given that last one's state when it optimizes
        the same parameters: what building it once before the loop would have kept."""
        try:
            site = self._direct_site("optimizer")
            if site is None or site not in self.keep_sites:
                return
            prev, self._last_at[site] = self._last_at.get(site), opt
            if prev is None or not self.keep_state or type(prev) is not type(opt):
                return
            if _param_ids(prev) == _param_ids(opt):
                opt.state = prev.state
        except Exception as exc:
            guest.note("keeping an optimizer's state", exc)

    def stop_keeping(self) -> None:
        """The 'built once' toggle is over: forget the optimizers kept."""
        self.keep_state, self.keep_sites = False, frozenset()
        self._last_at.clear()

    def _wrap_iter(self, cls: type) -> None:
        orig = cls.__iter__  # type: ignore[attr-defined]
        watch = self

        @functools.wraps(orig)
        def __iter__(loader: Any) -> Any:
            if not watch.measuring or not _starts_workers(loader):
                return orig(loader)
            t0 = perf_counter()
            it = orig(loader)
            watch._count(
                "dataloader iterator", f"{type(loader).__name__}.__iter__", perf_counter() - t0
            )
            return it

        self._patcher.patch(cls, "__iter__", __iter__)

    def _wrap_method(self, cls: type, name: str, kind: str) -> None:
        orig = getattr(cls, name, None)
        if orig is None:
            return
        watch = self

        @functools.wraps(orig)
        def method(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not watch.measuring:
                return orig(obj, *args, **kwargs)
            t0 = perf_counter()
            out = orig(obj, *args, **kwargs)
            hook = (args[0] if args else kwargs.get("hook")) if kind == "hook" else None
            watch._count(kind, f"{type(obj).__name__}.{name}", perf_counter() - t0, hook)
            return out

        self._patcher.patch(cls, name, method)

    def uninstall(self) -> None:
        """Restore everything (idempotent)."""
        self._patcher.restore()

    def snapshot(self) -> tuple[Repeat, ...]:
        """One row per (kind, site): calls and seconds in the measured steps, the most
        called first (the record's ``repeats``)."""
        rows = [
            Repeat(
                kind=k,
                site=s,
                what=self.labels.get((k, s), ""),
                calls=int(n),
                seconds=sec,
                hook_functions=tuple(sorted(self.hook_functions.get((k, s), ()))),
            )
            for (k, s), (n, sec) in self.sites.items()
        ]
        return tuple(sorted(rows, key=lambda r: (-r.calls, r.site)))
