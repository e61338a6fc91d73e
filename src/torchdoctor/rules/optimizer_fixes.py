"""The optimizer line of a fix: the faster implementation that this optimizer really has.

``check`` records, for every optimizer the script builds, the implementations its class accepts
and that run for its parameters' device and dtype in the torch version in use
(``impl_options``, see ``capture/config_probe.py``), and the user's construction call. A fix
names ``fused=True`` only where the class takes it (Adam, AdamW, SGD, Adagrad in torch 2.13),
``foreach=True`` where only that exists (Adadelta, RMSprop, ...), and nothing for LBFGS.
On a CPU run with more than one intra-op thread (or an unrecorded count) it names ``foreach``
instead of ``fused``: torch's CPU fused step splits every parameter across all intra-op threads,
and with two threads on a busy 2-core machine the fused Adam step on 48 ``Linear(8, 8)`` was
slower than the for-loop one and 3x slower than foreach, which beat the loop on every tiny
shape (benchmarks/RESULTS.md, 2026-12-05). Plain data only (no torch).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from torchdoctor.rules.sites import relative_site

if TYPE_CHECKING:
    from torchdoctor.record.rows import Optimizer
    from torchdoctor.record.run import RunRecord

# What torch 2.5-2.13 accept, for records written before ``impl_options`` was recorded.
_FUSED = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
_FOREACH = frozenset(
    {"ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam", "RAdam"}
    | {"RMSprop", "Rprop", "SGD"}
)


def _options(record: Optimizer) -> tuple[str, ...]:
    if record.impl_options is not None:
        return record.impl_options
    name = record.class_name
    return tuple(i for i, ok in (("fused", name in _FUSED), ("foreach", name in _FOREACH)) if ok)


def fused_slower(record: Optimizer, intra_op_threads: int | None, cpu_run: bool) -> bool:
    """True where ``fused=True`` is not the remedy: the optimizer's parameters are on the CPU
    (``cpu_run`` when their devices are not recorded) and the run does not use exactly one
    intra-op thread (with one, fused was the fastest; with more it was slower than the loop)."""
    devices = record.param_devices
    on_cpu = all(d.startswith("cpu") for d in devices) if devices else cpu_run
    return on_cpu and intra_op_threads != 1


def for_loop_optimizers(run: RunRecord) -> list[Optimizer]:
    """The run's for-loop optimizers, their ``impl_options`` without ``fused`` where
    :func:`fused_slower` says so, so that every remedy built from them (and the
    ``fused-optimizer`` codemod, which reads them from the finding) makes the same choice."""
    threads, cpu_run = run.modes.intra_op_threads, run.gpu is None
    return [
        dataclasses.replace(o, impl_options=tuple(i for i in _options(o) if i != "fused"))
        if fused_slower(o, threads, cpu_run)
        else o
        for o in run.config.optimizers
        if o.impl == "for-loop"
    ]


def faster_impl(record: Optimizer) -> str | None:
    """``"fused"`` or ``"foreach"``: the fastest implementation this optimizer accepts and does
    not use yet; None when it has none (LBFGS) or already uses the best one."""
    options = _options(record)
    impl = record.impl
    for candidate in ("fused", "foreach"):
        if candidate in options:
            if impl == candidate:
                return None
            if candidate == "foreach" and impl == "fused":
                return None
            return candidate
    return None


def optimizer_line(record: Optimizer) -> str:
    """The user's optimizer call with the faster implementation switched on ('' when there is
    none): rebuilt from the call's source text when it was read, else the class name."""
    impl = faster_impl(record)
    if impl is None:
        return ""
    why = "one kernel for all parameters" if impl == "fused" else "one call per group of tensors"
    call = record.call
    if call is not None and call.kwargs is not None:
        kwargs = {k: v for k, v in call.kwargs.items() if k not in ("fused", "foreach")}
        parts = [*call.args, *(f"{k}={v}" for k, v in kwargs.items()), f"{impl}=True"]
        text = f"{call.func or record.class_name}({', '.join(parts)})"
        where = f"at {relative_site(call.site)}: " if call.site else ""
        return f"{text}  # {where}{why}, not a loop per tensor"
    return f"{record.class_name}(params, ..., {impl}=True)  # {why}, not a loop per tensor"
