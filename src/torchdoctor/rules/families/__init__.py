"""Finding families: each module holds its findings' registry entries next to the functions
that measure them, as ``RULES: tuple[TraceRule, ...]``.

Every module of this package is found here, so adding a finding touches its family module (and
its test) only: the registry (``rules/registry.py``) lists its spec, ``analyze`` runs its rule.
A family module imports the stages below the rules and ``rules/spec.py`` / ``rules/thresholds.py``,
never the registry (which imports the families).
"""

from __future__ import annotations

import importlib
import pkgutil

from torchdoctor.rules.spec import TraceRule


def _discover() -> tuple[TraceRule, ...]:
    found: list[TraceRule] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        rules = getattr(module, "RULES", None)
        if not isinstance(rules, tuple) or not all(isinstance(r, TraceRule) for r in rules):
            raise TypeError(f"{module.__name__}: RULES must be a tuple of TraceRule")
        found.extend(rules)
    return tuple(found)


FAMILY_RULES: tuple[TraceRule, ...] = _discover()
"""Every family rule, by module name, then in each module's order."""
