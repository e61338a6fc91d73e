"""What changed between two sides: step time (with statistics), breakdown, kernels, operators,
findings, and whether the two runs are comparable at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchdoctor.compare.sides import Side
from torchdoctor.compare.stats import ALPHA, Change, compare_steps

NEGLIGIBLE_PCT = 1.0
"""Median changes smaller than this (percent) are called "no change" when within the noise."""
MIN_PART_MS = 0.005
"""Breakdown parts below this on both sides are left out (they are zero in practice)."""


@dataclass(frozen=True)
class Delta:
    """One thing measured on both sides (milliseconds per step)."""

    name: str
    base_ms: float
    new_ms: float
    category: str = ""

    @property
    def delta_ms(self) -> float:
        return self.new_ms - self.base_ms


@dataclass(frozen=True)
class Comparison:
    """Everything ``compare`` reports."""

    base: Side
    new: Side
    steps: Change
    throughput_change: float | None
    """NEW samples/s over BASE samples/s minus one (None without samples per step)."""
    breakdown: list[Delta]
    kernels_moved: list[Delta]
    kernels_added: list[Delta]
    kernels_removed: list[Delta]
    operators_moved: list[Delta]
    findings_appeared: list[dict[str, Any]]
    findings_gone: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """One line: faster, slower or unchanged, by how much, and whether beyond the noise."""
        c = self.steps
        word = "slower" if c.ratio > 1 else "faster"
        size = (
            f"median step {c.base_median_ms:.2f} -> {c.new_median_ms:.2f} ms ({c.change_pct:+.1f}%, "
            f"{c.confidence:.0%} interval {(c.ratio_low - 1) * 100:+.1f}% to "
            f"{(c.ratio_high - 1) * 100:+.1f}%)"
        )
        if c.beyond_noise:
            return f"NEW is {word}: {size}; beyond the noise (p = {c.p_value:.3g} < {ALPHA})."
        if abs(c.change_pct) >= NEGLIGIBLE_PCT:
            return (
                f"NEW looks {word}: {size}; not beyond the noise in a two-sided test (p = "
                f"{c.p_value:.3g} with {c.n_base} and {c.n_new} steps): profile more steps to be sure."
            )
        return f"No change: {size}; p = {c.p_value:.3g}."

    def gate(self, max_slower_pct: float) -> bool:
        """True (fail) when NEW is slower by more than ``max_slower_pct`` and the one-sided rank
        test says its steps are slower beyond the noise."""
        return self.steps.slower_beyond_noise and self.steps.change_pct > max_slower_pct


def compare(base: Side, new: Side) -> Comparison:
    """Compare two loaded sides."""
    kernels_moved, added, removed = _kernel_deltas(base, new)
    return Comparison(
        base=base,
        new=new,
        steps=compare_steps(base.step_ms, new.step_ms),
        throughput_change=_throughput(base, new),
        breakdown=_breakdown(base, new),
        kernels_moved=kernels_moved,
        kernels_added=added,
        kernels_removed=removed,
        operators_moved=_moved(
            [
                Delta(n, base.operators.get(n, 0.0), new.operators.get(n, 0.0))
                for n in set(base.operators) | set(new.operators)
            ]
        ),
        findings_appeared=[f for i, f in new.findings.items() if i not in base.findings],
        findings_gone=[f for i, f in base.findings.items() if i not in new.findings],
        warnings=warnings(base, new),
    )


def _throughput(base: Side, new: Side) -> float | None:
    """Samples per second ratio minus one; with equal batch sizes, the inverse step-time ratio."""
    b_spp = base.samples_per_step or base.batch_size
    n_spp = new.samples_per_step or new.batch_size
    b_med, n_med = base.step_ms.mean(), new.step_ms.mean()
    if b_spp and n_spp:
        return (n_spp / n_med) / (b_spp / b_med) - 1.0
    return b_med / n_med - 1.0  # same work per step assumed (no batch size recorded)


def _breakdown(base: Side, new: Side) -> list[Delta]:
    keys = list(dict.fromkeys([*base.breakdown_ms, *new.breakdown_ms]))
    out = [Delta(k, base.breakdown_ms.get(k, 0.0), new.breakdown_ms.get(k, 0.0)) for k in keys]
    return [d for d in out if max(d.base_ms, d.new_ms) >= MIN_PART_MS]


def _kernel_deltas(base: Side, new: Side) -> tuple[list[Delta], list[Delta], list[Delta]]:
    """Matched by name first; names on one side only are matched by category as a group, and
    listed as added or removed."""
    both = set(base.kernels) & set(new.kernels)
    moved = [Delta(n, base.kernels[n][1], new.kernels[n][1], base.kernels[n][0]) for n in both]
    only_base = {n: v for n, v in base.kernels.items() if n not in both}
    only_new = {n: v for n, v in new.kernels.items() if n not in both}
    for cat in sorted({c for c, _ in only_base.values()} & {c for c, _ in only_new.values()}):
        moved.append(
            Delta(
                f"(unmatched {cat} kernels, by category)",
                sum(ms for c, ms in only_base.values() if c == cat),
                sum(ms for c, ms in only_new.values() if c == cat),
                cat,
            )
        )
    added = sorted(
        (Delta(n, 0.0, ms, c) for n, (c, ms) in only_new.items()), key=lambda d: -d.new_ms
    )
    removed = sorted(
        (Delta(n, ms, 0.0, c) for n, (c, ms) in only_base.items()), key=lambda d: -d.base_ms
    )
    return _moved(moved), added, removed


def _moved(deltas: list[Delta]) -> list[Delta]:
    ranked = sorted(deltas, key=lambda d: (-abs(d.delta_ms), d.name))
    return [d for d in ranked if d.delta_ms != 0.0]


def warnings(base: Side, new: Side) -> list[str]:
    """Differences that make the comparison apples to oranges."""
    out = []
    for what, b, n in (
        ("GPUs", base.gpu, new.gpu),
        ("torch versions", base.torch_version, new.torch_version),
        ("batch sizes", base.batch_size, new.batch_size),
    ):
        if b is not None and n is not None and b != n:
            out.append(f"the two sides ran on different {what}: {b} vs {n}")
    if base.kind != new.kind:
        out.append(f"comparing a {base.kind} with a {new.kind}")
    if min(len(base.step_ms), len(new.step_ms)) < 3:
        out.append("fewer than 3 steps on a side: the test cannot tell a change from noise")
    return out
