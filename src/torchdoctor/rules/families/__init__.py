"""Finding families: each module holds its findings' registry entries next to the functions
that measure them, as ``RULES``: a tuple of ``TraceRule`` (measured on a trace),
``RunRule`` (measured on a check run's record), ``RanksRule`` (across a folder of ranks) and
``AccountRule`` (on the step's account, after every other finding).

Every module of this package is found here, so adding a finding touches its family module (and
its test) only: the registry (``rules/registry.py``) lists its spec, ``analyze`` runs its trace
rules and ``check`` its run rules. A module that declares trace or ranks rules is also named in
``LISTED``: ``analyze`` imports only those (the run families are two thirds of the package and
it never reads a run record). Whenever the whole package loads (``check``, the registry, the
docs) the listing is checked against every module's ``RULES``, so a module left out of it fails
loudly instead of going unmeasured.
A family module imports the stages below the rules and ``rules/spec.py`` / ``rules/thresholds.py``,
never the registry (which imports the families).
"""

from __future__ import annotations

import importlib
import os
from typing import TypeVar

from torchdoctor.rules.spec import AccountRule, FamilyRule, RanksRule, RunRule, TraceRule

R = TypeVar("R", bound=FamilyRule)

LISTED: dict[type[FamilyRule], tuple[str, ...]] = {
    TraceRule: (
        "communication",
        "device",
        "device_copies",
        "fusion",
        "graphs",
        "host",
        "loading",
        "parallel",
        "serving",
        "syncs",
        "waits",
    ),
    RanksRule: ("ranks",),
}
"""The modules that declare rules of a kind, for the kinds measured outside a check run (a
trace, a folder of ranks): loading those rules imports these modules only."""

_KINDS: dict[str, type[FamilyRule]] = {
    "FAMILY_RULES": TraceRule,
    "RUN_FAMILY_RULES": RunRule,
    "RANKS_FAMILY_RULES": RanksRule,
    "ACCOUNT_FAMILY_RULES": AccountRule,
}

FAMILY_RULES: tuple[TraceRule, ...]
"""Every trace family rule, by module name, then in each module's order."""
RUN_FAMILY_RULES: tuple[RunRule, ...]
"""Every run family rule, by module name, then in each module's order."""
RANKS_FAMILY_RULES: tuple[RanksRule, ...]
"""Every rule measured across a folder of ranks."""
ACCOUNT_FAMILY_RULES: tuple[AccountRule, ...]
"""Every rule measured on the step's account."""
# The four are built on first use (``__getattr__``), each importing only the modules it needs.


def _module_names() -> list[str]:
    """The family modules, by name: every ``.py`` file here but the ``_`` ones (a listing, not
    ``pkgutil.iter_modules``: analyze would import pkgutil for this alone)."""
    found = {n.removesuffix(".py") for d in __path__ for n in os.listdir(d) if n.endswith(".py")}
    return sorted(n for n in found if not n.startswith("_"))


_RULES: dict[str, tuple[FamilyRule, ...]] = {}


def rules_of_module(name: str) -> tuple[FamilyRule, ...]:
    """The ``RULES`` of family module ``name``, imported on first use."""
    if name not in _RULES:
        module = importlib.import_module(f"{__name__}.{name}")
        rules = getattr(module, "RULES", None)
        if not isinstance(rules, tuple) or not all(
            isinstance(r, TraceRule | RunRule | RanksRule | AccountRule) for r in rules
        ):
            raise TypeError(
                f"{module.__name__}: RULES must be a tuple of family rules (rules/spec.py)"
            )
        _RULES[name] = rules
    return _RULES[name]


def check_listing() -> None:
    """Import every family module and check ``LISTED`` against their ``RULES`` (TypeError
    naming the modules to list or to drop)."""
    names = _module_names()
    for kind, listed in LISTED.items():
        found = {n for n in names if any(isinstance(r, kind) for r in rules_of_module(n))}
        if found != set(listed):
            raise TypeError(
                f"{__name__}.LISTED[{kind.__name__}] must name exactly the modules that declare "
                f"{kind.__name__}s: add {sorted(found - set(listed))}, "
                f"drop {sorted(set(listed) - found)}"
            )


def rules(kind: type[R]) -> tuple[R, ...]:
    """Every family rule of ``kind``, by module name, then in each module's order; for a kind
    in ``LISTED`` only its modules are imported, for the others every module."""
    listed = LISTED.get(kind)
    if listed is None:
        check_listing()
    names = sorted(listed) if listed is not None else _module_names()
    return tuple(r for n in names for r in rules_of_module(n) if isinstance(r, kind))


def __getattr__(name: str) -> tuple[FamilyRule, ...]:
    kind = _KINDS.get(name)
    if kind is None:  # a submodule not imported yet (``from ... import compiler``) lands here too
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = globals()[name] = rules(kind)
    return found
