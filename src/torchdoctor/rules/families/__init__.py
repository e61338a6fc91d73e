"""Finding families: each module holds its findings' registry entries next to the functions
that measure them, as ``RULES``: a tuple of ``TraceRule`` (measured on a trace),
``RunRule`` (measured on a check run's record), ``RanksRule`` (across a folder of ranks) and
``AccountRule`` (on the step's account, after every other finding).

Every module of this package is found here, so adding a finding touches its family module (and
its test) only: the registry (``rules/registry.py``) lists its spec, ``analyze`` runs its trace
rules and ``check`` its run rules.
A family module imports the stages below the rules and ``rules/spec.py`` / ``rules/thresholds.py``,
never the registry (which imports the families).
"""

from __future__ import annotations

import importlib
import os

from torchdoctor.rules.spec import AccountRule, FamilyRule, RanksRule, RunRule, TraceRule


def _module_names() -> list[str]:
    """The family modules, by name: every ``.py`` file here but the ``_`` ones (a listing, not
    ``pkgutil.iter_modules``: analyze would import pkgutil for this alone)."""
    found = {n.removesuffix(".py") for d in __path__ for n in os.listdir(d) if n.endswith(".py")}
    return sorted(n for n in found if not n.startswith("_"))


def _discover() -> tuple[FamilyRule, ...]:
    found: list[FamilyRule] = []
    for name in _module_names():
        module = importlib.import_module(f"{__name__}.{name}")
        rules = getattr(module, "RULES", None)
        if not isinstance(rules, tuple) or not all(
            isinstance(r, TraceRule | RunRule | RanksRule | AccountRule) for r in rules
        ):
            raise TypeError(
                f"{module.__name__}: RULES must be a tuple of family rules (rules/spec.py)"
            )
        found.extend(rules)
    return tuple(found)


_ALL = _discover()
FAMILY_RULES: tuple[TraceRule, ...] = tuple(r for r in _ALL if isinstance(r, TraceRule))
"""Every trace family rule, by module name, then in each module's order."""
RUN_FAMILY_RULES: tuple[RunRule, ...] = tuple(r for r in _ALL if isinstance(r, RunRule))
"""Every run family rule, by module name, then in each module's order."""
RANKS_FAMILY_RULES: tuple[RanksRule, ...] = tuple(r for r in _ALL if isinstance(r, RanksRule))
"""Every rule measured across a folder of ranks."""
ACCOUNT_FAMILY_RULES: tuple[AccountRule, ...] = tuple(r for r in _ALL if isinstance(r, AccountRule))
"""Every rule measured on the step's account."""
