"""The optimizer line of a fix: the faster implementation that this optimizer really has.

``check`` records, for every optimizer the script builds, the implementations its class accepts
and that run for its parameters' device and dtype in the torch version in use
(``impl_options``, see ``capture/config_probe.py``), and the user's construction call. A fix
names ``fused=True`` only where the class takes it (Adam, AdamW, SGD, Adagrad in torch 2.13),
``foreach=True`` where only that exists (Adadelta, RMSprop, ...), and nothing for LBFGS.
Plain data only (no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdoctor.record.rows import Optimizer

# What torch 2.5-2.13 accept, for records written before ``impl_options`` was recorded.
_FUSED = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
_FOREACH = frozenset(
    {"ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam", "RAdam"}
    | {"RMSprop", "Rprop", "SGD"}
)


def faster_impl(record: Optimizer) -> str | None:
    """``"fused"`` or ``"foreach"``: the fastest implementation this optimizer accepts and does
    not use yet; None when it has none (LBFGS) or already uses the best one."""
    options = record.impl_options
    if options is None:
        name = record.class_name
        options = tuple(
            i for i, ok in (("fused", name in _FUSED), ("foreach", name in _FOREACH)) if ok
        )
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
        where = f"at {_short(call.site)}: " if call.site else ""
        return f"{text}  # {where}{why}, not a loop per tensor"
    return f"{record.class_name}(params, ..., {impl}=True)  # {why}, not a loop per tensor"


def _short(site: str) -> str:
    from torchdoctor.rules.sites import relative_site

    return relative_site(site)
