"""What changed between two sides: step time (with statistics), breakdown, kernels, operators,
findings, and whether the two runs are comparable at all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torchdoctor.compare.estimates import (
    RUN_TO_RUN_PCT,
    Estimate,
    EvidenceKind,
    Quantity,
    estimates,
)
from torchdoctor.compare.explain import contended, explaining_cause
from torchdoctor.compare.runs import run_cost
from torchdoctor.compare.sides import Side
from torchdoctor.compare.verdict import Verdict, decide

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
    """Everything ``compare`` reports. ``base`` and ``new`` are each side's first run: the
    details (breakdown, kernels, operators, findings) come from them; the costs and the verdict
    from every run."""

    base: Side
    new: Side
    estimates: dict[Quantity, Estimate]
    """Each cost's estimate (mean and median step, one-time cost, time to N steps)."""
    decision: Verdict
    breakdown: list[Delta]
    kernels_moved: list[Delta]
    kernels_added: list[Delta]
    kernels_removed: list[Delta]
    operators_moved: list[Delta]
    findings_appeared: list[dict[str, Any]]
    findings_gone: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    base_runs: list[Side] = field(default_factory=list)
    new_runs: list[Side] = field(default_factory=list)

    @property
    def evidence(self) -> EvidenceKind:
        """One run a side, several runs, or interleaved rounds."""
        return self.decision.evidence

    @property
    def verdict(self) -> str:
        """One line: faster, slower or unchanged, on which cost, by how much, how firmly."""
        return self.decision.text

    @property
    def throughput_change(self) -> float:
        """Samples (or steps) per second over the window, NEW over BASE, minus one."""
        return self.estimates["mean_step"].speedup.ratio - 1.0

    def gate(self, max_slower_pct: float) -> bool:
        """True (fail) when the verdict's cost is slower by more than ``max_slower_pct`` and
        the evidence puts its whole interval on the slower side (see ``Verdict.gate``)."""
        return self.decision.gate(max_slower_pct)


def _job_steps(runs: Sequence[Side], given: int | None) -> int | None:
    """The job length: ``given``, else the runs' own when every run ran to its end."""
    if given:
        return given
    lengths = [r.job_steps for r in runs]
    return min(lengths) if lengths and all(lengths) else None  # type: ignore[type-var]


def compare(
    base: Side | Sequence[Side],
    new: Side | Sequence[Side],
    *,
    job_steps: int | None = None,
    run_noise_pct: float = RUN_TO_RUN_PCT,
) -> Comparison:
    """Compare two sides, each one run or several (a list of runs).

    ``job_steps``: the length of the user's job, for the time-to-N cost (default: the runs' own
    length when they ran to their end). ``run_noise_pct``: the run-to-run allowance that widens
    the interval of one run a side.
    """
    base_runs = [base] if isinstance(base, Side) else list(base)
    new_runs = [new] if isinstance(new, Side) else list(new)
    if not base_runs or not new_runs:
        raise ValueError("each side needs at least one run")
    b, n = base_runs[0], new_runs[0]
    job = _job_steps([*base_runs, *new_runs], job_steps)
    est = estimates(
        [run_cost(r) for r in base_runs],
        [run_cost(r) for r in new_runs],
        job_steps=job,
        run_noise_pct=run_noise_pct,
    )
    kernels_moved, added, removed = _kernel_deltas(b, n)
    busy = tuple(
        c for c in (contended("BASE", base_runs), contended("NEW", new_runs)) if c is not None
    )
    cause = explaining_cause(b.breakdown_ms, n.breakdown_ms)
    return Comparison(
        base=b,
        new=n,
        estimates=est,
        decision=decide(est, job, run_noise_pct, cause, busy),
        breakdown=_breakdown(b, n),
        kernels_moved=kernels_moved,
        kernels_added=added,
        kernels_removed=removed,
        operators_moved=_moved(
            [
                Delta(k, b.operators.get(k, 0.0), n.operators.get(k, 0.0))
                for k in set(b.operators) | set(n.operators)
            ]
        ),
        findings_appeared=[f for i, f in n.findings.items() if i not in b.findings],
        findings_gone=[f for i, f in b.findings.items() if i not in n.findings],
        warnings=warnings(b, n, base_runs, new_runs),
        base_runs=base_runs,
        new_runs=new_runs,
    )


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


def warnings(
    base: Side,
    new: Side,
    base_runs: Sequence[Side] = (),
    new_runs: Sequence[Side] = (),
) -> list[str]:
    """Differences that make the comparison apples to oranges."""
    out = []
    for name, runs in (("BASE", base_runs), ("NEW", new_runs)):
        kinds = sorted({r.kind for r in runs})
        if len(kinds) > 1:
            out.append(f"{name}'s runs are of different kinds ({', '.join(kinds)})")
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
