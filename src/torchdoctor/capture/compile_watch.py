"""torch.compile activity: compiles, recompiles with their failing guard, graph breaks with the
user's source line, and whether the recompile limit was hit.

Nothing here runs per step: dynamo's own compilation metrics are read at the end, and two of its
loggers (graph breaks, the recompile-limit warning) feed a handler that fires only while
compiling. Works whether or not the script ever imports ``torch._dynamo``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from torchdoctor.capture.patches import Patcher
from torchdoctor.record.rows import CompileCall, GraphBreak, RecompileEvent, RecompileLimitHit
from torchdoctor.record.run import CompileStats

# Dynamo's logger names (stable since torch 2.1). Graph breaks are a debug-level "artifact"
# logger that torch leaves silent unless TORCH_LOGS asks for it.
_GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
_LIMIT_LOGGER = "torch._dynamo.convert_frame"
_GB_RE = re.compile(
    r"in user code at (?P<site>\S+:\d+)\s*\nGraph Break Reason: (?P<reason>.*)", re.S
)
_LIMIT_RE = re.compile(r"hit config\.(?:recompile|cache_size)_limit \((?P<limit>\d+)\)")
_FUNC_RE = re.compile(r"function: '(?P<name>[^']*)' \((?P<site>[^)]*)\)")
_REASON_RE = re.compile(r"last reason: (?P<reason>.*)")
# "tensor 'x' size mismatch at index 1. expected 256, actual 128" (dynamo's guard failure).
_GUARD_DIM_RE = re.compile(
    r"tensor '(?P<name>.+?)' (?P<kind>size|stride) mismatch at index (?P<dim>\d+)\. "
    r"expected (?P<expected>\d+), actual (?P<actual>\d+)"
)
_LOCAL_RE = re.compile(r"""^L\[['"](?P<name>[^'"]+)['"]\]$""")


def guard_dims(reason: str) -> list[dict[str, Any]]:
    """The tensor dimensions a recompile reason says changed: ``tensor`` (the compiled
    function's argument, ``L['x']`` shortened to ``x``), ``kind``, ``dim``, ``expected``,
    ``actual``; empty when the guard was not on a size or stride."""
    out = []
    for m in _GUARD_DIM_RE.finditer(reason):
        name = m.group("name")
        local = _LOCAL_RE.match(name)
        out.append(
            {
                "tensor": local.group("name") if local else name,
                "kind": m.group("kind"),
                "dim": int(m.group("dim")),
                "expected": int(m.group("expected")),
                "actual": int(m.group("actual")),
            }
        )
    return out


# "0/0: scale == 0.5     # return lin(x) * scale  # train.py:6 in f" (a guard on a value).
_GUARD_VALUE_RE = re.compile(
    r"^(?:\d+/\d+: )?(?P<name>[A-Za-z_][\w\[\]'\".]*) == (?P<value>True|False|None|-?[\d.eE+-]+)\s*(?:#|$)"
)


def guard_values(reason: str) -> list[dict[str, Any]]:
    """The Python values a recompile reason says were guarded: ``name`` (``L['lr']`` as
    ``lr``), ``value`` (the value compiled for, as text) and ``kind`` (float, int, bool)."""
    out = []
    for line in reason.splitlines():
        m = _GUARD_VALUE_RE.match(line.strip())
        if m is None:
            continue
        value = m.group("value")
        kind = (
            "bool"
            if value in ("True", "False")
            else "none"
            if value == "None"
            else "int"
            if re.fullmatch(r"-?\d+", value)
            else "float"
        )
        local = _LOCAL_RE.match(m.group("name"))
        out.append(
            {
                "name": local.group("name") if local else m.group("name"),
                "value": value,
                "kind": kind,
            }
        )
    return out


def compile_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> CompileCall:
    """One ``torch.compile`` call's settings (what was compiled, mode, backend, dynamic,
    fullgraph, option names)."""
    backend = kwargs.get("backend", "inductor")
    target = args[0] if args else kwargs.get("model")
    return CompileCall(
        target=type(target).__name__ if target is not None else None,
        mode=kwargs.get("mode"),
        backend=backend if isinstance(backend, str) else getattr(backend, "__name__", "?"),
        dynamic=kwargs.get("dynamic"),
        fullgraph=bool(kwargs.get("fullgraph", False)),
        options=tuple(sorted((kwargs.get("options") or {}).keys())),
        disable=bool(kwargs.get("disable", False)),
    )


def short_reason(text: str) -> str:
    """First meaningful line of a dynamo message (what broke, without the hints)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for line in lines:
        if line.startswith("Explanation:"):
            return line.removeprefix("Explanation:").strip()
    for i, line in enumerate(lines):
        if i > 0 and not line.startswith(("Encountered graph break", "Hint:")):
            return line
    return lines[0] if lines else ""


class _Handler(logging.Handler):
    def __init__(self, watch: CompileWatch) -> None:
        super().__init__(logging.DEBUG)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        # Never let our parsing break a compile.
        with contextlib.suppress(Exception):
            self.watch.on_log(record.name, record.getMessage())


class CompileWatch:
    """Collects torch.compile events during the run and summarises them at the end."""

    def __init__(self, on_compile_call: Callable[[], None] = lambda: None) -> None:
        self.on_compile_call = on_compile_call
        """Called after each ``torch.compile`` call (dynamo is loaded by then)."""
        self.graph_breaks: dict[tuple[str, str], int] = {}
        """(user "file:line", reason) -> times dynamo reported it (first compile and repeats)."""
        self.limit_hits: list[RecompileLimitHit] = []
        self.started_at_unix_s = time.time()
        self._earlier: set[int] = set()
        self.compile_calls: list[CompileCall] = []
        """Settings of each ``torch.compile`` call the script made (at most 16)."""
        self.ours_from_unix_s: float | None = None
        """From this moment on compiles are check's own (its extra steps switch modes dynamo
        guards on): counted apart, never as the script's (``ours_from``)."""
        self._handler = _Handler(self)
        self._saved: list[tuple[logging.Logger, int, bool]] = []
        self._patcher = Patcher()

    def install(self) -> None:
        """Attach the handler to dynamo's loggers (created now if torch has not yet)."""
        import sys

        self.started_at_unix_s = time.time()
        if "torch._dynamo" in sys.modules:  # compiles from before this run are not ours
            from torch._dynamo.utils import get_compilation_metrics

            self._earlier = {id(m) for m in get_compilation_metrics()}
        gb = logging.getLogger(_GRAPH_BREAK_LOGGER)
        self._saved.append((gb, gb.level, gb.propagate))
        if not gb.isEnabledFor(logging.DEBUG):
            # Enable the records for our handler only; the user's terminal stays as it was.
            gb.setLevel(logging.DEBUG)
            gb.propagate = False
        gb.addHandler(self._handler)
        limit = logging.getLogger(_LIMIT_LOGGER)
        self._saved.append((limit, limit.level, limit.propagate))
        limit.addHandler(self._handler)
        self._wrap_compile()

    def _wrap_compile(self) -> None:
        import torch

        orig = torch.compile
        calls, watch = self.compile_calls, self

        @functools.wraps(orig)
        def compile(*args: Any, **kwargs: Any) -> Any:
            if len(calls) < 16:
                with contextlib.suppress(Exception):
                    calls.append(compile_call(args, kwargs))
            compiled = orig(*args, **kwargs)
            with contextlib.suppress(Exception):
                watch.on_compile_call()
            return compiled

        self._patcher.patch(torch, "compile", compile)

    def uninstall(self) -> None:
        """Detach the handler, restore the loggers' levels and ``torch.compile`` (idempotent)."""
        self._patcher.restore()
        while self._saved:
            logger, level, propagate = self._saved.pop()
            logger.removeHandler(self._handler)
            logger.setLevel(level)
            logger.propagate = propagate

    def on_log(self, name: str, message: str) -> None:
        """Parse one dynamo log message."""
        if name == _GRAPH_BREAK_LOGGER:
            m = _GB_RE.search(message)
            if m:
                key = (m.group("site"), short_reason(m.group("reason")))
                self.graph_breaks[key] = self.graph_breaks.get(key, 0) + 1
            return
        m = _LIMIT_RE.search(message)
        if m:
            func, reason = _FUNC_RE.search(message), _REASON_RE.search(message)
            self.limit_hits.append(
                RecompileLimitHit(
                    limit=int(m.group("limit")),
                    function=func.group("name") if func else "",
                    site=func.group("site") if func else "",
                    last_reason=reason.group("reason").strip() if reason else "",
                )
            )

    def ours_from(self, unix_s: float) -> None:
        """Compiles that start at ``unix_s`` or later are caused by check, not the script."""
        self.ours_from_unix_s = unix_s

    def start_times(self) -> list[float]:
        """When (unix s) each compile of this run started; [] when dynamo never loaded."""
        import sys

        if "torch._dynamo" not in sys.modules:
            return []
        from torch._dynamo.utils import get_compilation_metrics

        out = []
        for m in get_compilation_metrics():
            if id(m) in self._earlier:
                continue
            start = _metric_record(m).get("start_unix_s")
            if isinstance(start, int | float) and start >= self.started_at_unix_s:
                out.append(float(start))
        return out

    def compiled(self) -> bool:
        """True once this run has compiled something (a torch.compile call of the script, or
        dynamo compiled a frame since ``install``; compiles from before the run do not count)."""
        import sys

        if self.compile_calls:
            return True
        if "torch._dynamo" not in sys.modules:
            return False
        from torch._dynamo.utils import get_compilation_metrics

        return any(id(m) not in self._earlier for m in get_compilation_metrics())

    def snapshot(self, window_start_unix_s: float | None, traced_aside: int = 0) -> CompileStats:
        """Compiles, recompiles and graph breaks (the ``compile`` section); ``in_window`` counts
        those after the warm-up; ``traced_aside``: frames traced with our wrappers taken off."""
        import sys

        if "torch._dynamo" not in sys.modules:  # the script never compiled anything
            return _summary([], self, window_start_unix_s, traced_with_wrappers_off=traced_aside)
        from torch._dynamo.utils import get_compilation_metrics

        ours = [m for m in get_compilation_metrics() if id(m) not in self._earlier]
        metrics = [_metric_record(m) for m in ours]
        metrics = [m for m in metrics if m["start_unix_s"] >= self.started_at_unix_s]
        cut = self.ours_from_unix_s
        mine = [m for m in metrics if cut is None or m["start_unix_s"] < cut]
        return _summary(
            mine,
            self,
            window_start_unix_s,
            ours={} if cut is None else _ours([m for m in metrics if m["start_unix_s"] >= cut]),
            traced_with_wrappers_off=traced_aside,
        )


def _ours(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Compiles check's own extra steps caused (after the script's last measured step)."""
    return {
        "compiles": len(metrics),
        "recompiles": sum(1 for m in metrics if m["recompile"]),
        "compile_s": sum(m["seconds"] for m in metrics),
        "reasons": sorted({m["reason"] for m in metrics if m["reason"]})[:5],
        "note": "compiled during check's own extra steps after the measured ones: not the "
        "script's, left out of its compiles and recompiles",
    }


def _metric_record(m: Any) -> dict[str, Any]:
    compile_id = str(getattr(m, "compile_id", "") or "")
    attempt = compile_id.split("/")[-1] if "/" in compile_id else "0"
    duration = getattr(m, "entire_frame_compile_time_s", None)
    if duration is None and getattr(m, "duration_us", None) is not None:
        duration = m.duration_us / 1e6
    return {
        "compile_id": compile_id,
        "recompile": attempt not in ("0", ""),
        "function": getattr(m, "co_name", "") or "",
        "site": f"{getattr(m, 'co_filename', None) or '?'}:{getattr(m, 'co_firstlineno', None) or 0}",
        "seconds": float(duration or 0.0),
        "start_unix_s": float(getattr(m, "start_time", 0.0) or 0.0),
        "reason": getattr(m, "recompile_reason", None) or "",
        "fail_reason": getattr(m, "fail_reason", None) or "",
    }


def _summary(
    metrics: list[dict[str, Any]], watch: CompileWatch, window_start: float | None, **more: Any
) -> CompileStats:
    recompiles = [m for m in metrics if m["recompile"]]
    late = [m for m in recompiles if window_start is not None and m["start_unix_s"] >= window_start]
    return CompileStats(
        compiles=len(metrics),
        compile_s=sum(m["seconds"] for m in metrics),
        recompiles=len(recompiles),
        recompile_s=sum(m["seconds"] for m in recompiles),
        recompiles_in_window=len(late),
        recompile_s_in_window=sum(m["seconds"] for m in late),
        recompile_events=tuple(
            RecompileEvent(
                **{k: m[k] for k in ("compile_id", "function", "site", "reason", "seconds")},
                changed_dims=tuple(guard_dims(m["reason"])),
                changed_values=tuple(guard_values(m["reason"])),
            )
            for m in recompiles[:50]
        ),
        compile_calls=tuple(watch.compile_calls),
        graph_breaks=tuple(
            GraphBreak(site, reason, n)
            for (site, reason), n in sorted(watch.graph_breaks.items(), key=lambda kv: -kv[1])
        ),
        recompile_limit_hits=tuple(watch.limit_hits),
        **more,
    )
