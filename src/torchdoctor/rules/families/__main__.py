"""``python -m torchdoctor.rules.families``: the family findings as docs/rules.md lists them,
read from their registry entries (so the page follows the code)."""

from __future__ import annotations

from torchdoctor.rules.families import FAMILY_RULES


def _number(x: float) -> str:
    return f"{x:,.0f}" if x >= 1e4 and x.is_integer() else f"{x:g}"


def table() -> str:
    lines = ["id                         fires at    severity                              module"]
    for rule in FAMILY_RULES:
        s = rule.spec
        at = "any" if s.threshold is None else _number(float(s.threshold))
        at = f"< {at}" if rule.below else at
        p = s.severity
        sev = p.fixed or f"warning >= {p.warn:g}, critical >= {p.critical:g}"
        sev = f"{sev} (at least {p.floor})" if p.fixed is None and p.floor != "info" else sev
        module = rule.measure.__module__.rsplit(".", 1)[-1]
        lines.append(f"{s.id:<26} {at:<11} {sev:<37} {module}")
        if s.threshold is not None:
            lines.append(f"  why: {s.threshold.reason}")
        for g in s.gates:
            lines.append(f"  and {g.key} >= {_number(float(g.minimum))}: {g.minimum.reason}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
