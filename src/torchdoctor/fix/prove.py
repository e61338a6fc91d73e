"""``fix --prove``: the original against each change, and against all of them, on ``ab``'s
engine (rounds of fresh processes running ``capture/script_arm.py``; a failed arm is not run
again). An arm's value in a round is the mean of its measured steps; a change is kept when the
interval of the per-round ratio original / arm lies above ``1 + min_gain`` (``ab.compare``),
and when it passes tune's fidelity gate (``tune.fidelity``): the losses of the first steps, same
seed, against the original's, within the tolerance of the change's arithmetic.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from torchdoctor import ab, stats
from torchdoctor.ab.child import Arm, run_child
from torchdoctor.ab.rounds import run_rounds
from torchdoctor.capture import script_arm
from torchdoctor.fix.model import Change, Measured
from torchdoctor.fix.planner import Plan, compose
from torchdoctor.tune import fidelity as tune_fidelity
from torchdoctor.tune.fidelity import Fidelity

PRECISION_ORDER = ("fp32", "tf32", "bf16-mixed")
"""Loosest last: a set of changes is held to the loosest tolerance among them."""


@dataclass(frozen=True)
class ProveOptions:
    """How the patch is measured."""

    rounds: int = 8
    """Interleaved rounds (6 is the fewest with a 95% interval)."""
    warmup: int = 5
    """Steps each process runs before its measured steps (compile and allocator warm-up)."""
    steps: int = 30
    """Measured steps per process."""
    fidelity_steps: int = 20
    """Losses compared from step 0 (tune's default: 20)."""
    min_gain: float = ab.MIN_GAIN
    """A change is kept when its interval's lower end clears 1 + min_gain."""
    keep_unproven: bool = False
    """Keep a change whose interval does not clear the gain (never one that breaks the losses)."""
    seed: int = 0
    """Seed of the script's random streams (every arm) and of the per-round shuffle."""
    timeout_s: float = 600.0
    """Per process."""

    def __post_init__(self) -> None:
        from torchdoctor.errors import UserError

        if self.rounds < 2:
            raise UserError(f"--rounds must be at least 2; got {self.rounds}")
        if self.steps < 1 or self.warmup < 0:
            raise UserError("--prove-steps must be >= 1 and --warmup >= 0")
        if self.min_gain < 0:
            raise UserError(f"--min-gain must be >= 0; got {self.min_gain}")


@dataclass
class ArmRun:
    """One process of one arm."""

    ok: bool
    step_ms: list[float] = field(default_factory=list)
    """Measured steps only (after the warm-up), ms."""
    losses: list[float] = field(default_factory=list)
    error: str = ""
    warmup_s: float = 0.0
    """The warm-up steps' total (s): compilation and first-call costs land here."""

    @property
    def mean_ms(self) -> float:
        return sum(self.step_ms) / len(self.step_ms)


# -- one arm, one process ----------------------------------------------------------------------
def version_arm(
    label: str,
    script: str,
    args: Sequence[str],
    sources: dict[str, str],
    own_args: tuple[str, ...] | None,
    opts: ProveOptions,
    folder: Path,
) -> Arm:
    """One version of the user's files as an arm (``capture/script_arm.py``): ``sources`` (absolute path ->
    text, for every file that differs from disk, the script included) written under ``folder``;
    ``own_args``: the script's arguments in this arm (a switch set), when not the run's own."""
    served = {}
    for path, text in sources.items():
        f = folder / f"src-{len(list(folder.iterdir()))}.py"
        f.write_text(text, encoding="utf-8")
        served[path] = str(f)
    spec = {
        "script": script,
        "args": list(args if own_args is None else own_args),
        "sources": served,
        "warmup": opts.warmup,
        "steps": opts.steps,
        "loss_steps": min(opts.fidelity_steps, opts.warmup + opts.steps),
        "seed": opts.seed,
        "hard_exit": True,
    }
    here = str(Path(__file__).resolve().parents[2])  # the folder holding torchdoctor
    path = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    # PYTHONHASHSEED: set and dict order the same in every arm
    return Arm(label, script_arm.ARGV, spec, {"PYTHONPATH": path, "PYTHONHASHSEED": "0"})


def run_arm(arm: Arm, opts: ProveOptions) -> ArmRun:
    """Run ``arm`` once in a fresh process (``ab.child``); never raises for the script's sake."""
    return _result(script_arm.read(run_child(arm, opts.timeout_s, stdout=True)), opts)


def _result(r: script_arm.ArmResult, opts: ProveOptions) -> ArmRun:
    split, why = r.split(opts.steps)
    if split is None:
        return ArmRun(False, losses=list(r.losses), error=why)
    warmup_s = sum(split.warmup_ms) / 1e3
    return ArmRun(True, list(split.measured_ms), list(r.losses), warmup_s=warmup_s)


# -- decisions --------------------------------------------------------------------------------
def measured(base: list[ArmRun], arm: list[ArmRun], min_gain: float) -> Measured | None:
    """The paired comparison over the rounds both arms ran."""
    both = [(b, a) for b, a in zip(base, arm, strict=False) if b.ok and a.ok]
    if len(both) < 2:
        return None
    ref, cand = [b.mean_ms for b, _ in both], [a.mean_ms for _, a in both]
    return Measured(
        ab.compare(ref, cand, min_gain),
        len(both),
        stats.median(ref),
        stats.median(cand),
        stats.median([a.warmup_s - b.warmup_s for b, a in both]),
    )


def loosest(precisions: Sequence[str]) -> str:
    return max(precisions, key=PRECISION_ORDER.index) if precisions else "fp32"


def fidelity(base: list[ArmRun], arm: list[ArmRun], precision: str) -> Fidelity:
    """The first losses of the arm's first run against the original's."""
    ref = next((r.losses for r in base if r.ok), [])
    cand = next((r.losses for r in arm if r.ok), [])
    tol = tune_fidelity.TOLERANCE.get(precision, tune_fidelity.TOLERANCE["fp32"])
    if not ref:
        return Fidelity(
            True, 0.0, -1, tol, 0, "no loss recorded (no Tensor.backward): not compared"
        )
    again = [r.losses for r in base if r.ok][1:2]
    if again:
        v = tune_fidelity.check(ref, again[0], "fp32", steps=len(ref))
        if not v.ok:
            return replace(
                v,
                tolerance=tol,
                reason="the original's own losses differ between runs ("
                f"{v.max_rel_dev:.2e}): the script is not reproducible with a fixed seed",
            )
    v = tune_fidelity.check(ref, cand, precision, steps=len(ref))
    return replace(v, reason=v.reason.replace("from the fp32 reference", "from the original"))


@dataclass(frozen=True)
class Proof:
    """What the rounds measured, per change and for the patch as a whole."""

    plan: Plan
    together: Measured | None = None
    together_fidelity: Fidelity | None = None
    together_ids: tuple[str, ...] = ()
    rounds: int = 0


def prove(
    plan: Plan,
    script: str,
    args: Sequence[str],
    opts: ProveOptions,
    progress: Callable[[str], None] | None = None,
) -> Proof:
    """Measure every patched change alone and all of them together; returns the plan with
    each change's measurement, fidelity and final status."""
    candidates = [c for c in plan.changes if c.status in ("patched", "switch")]
    if not candidates:
        return Proof(plan)
    base = {script: plan.originals.get(script) or Path(script).read_text(encoding="utf-8")}
    versions: list[tuple[str, dict[str, str], tuple[str, ...] | None]] = [("original", base, None)]
    for c in candidates:
        files, _ = compose(plan, [c])
        versions.append((c.id, {**base, **files}, c.switch.args if c.switch else None))
    together_files, skipped = compose(plan, candidates)
    if len(candidates) > 1:
        versions.append(("all", {**base, **together_files}, together_args(args, candidates)))

    def show(r: int, this: list[tuple[Arm, ArmRun]]) -> str:
        if progress is not None:
            parts = [
                f"{a.name} {v.mean_ms:.1f} ms" if v.ok else f"{a.name} failed" for a, v in this
            ]
            progress(f"round {r + 1}/{opts.rounds}: " + ", ".join(sorted(parts)))
        return ""

    with tempfile.TemporaryDirectory(prefix="torchdoctor-fix-") as tmp:
        arms = [
            version_arm(label, script, args, files, own, opts, Path(tmp))
            for label, files, own in versions
        ]
        played = run_rounds(
            arms,
            lambda a, _: run_arm(a, opts),
            opts.rounds,
            opts.seed,
            ok=lambda r: r.ok,
            on_fail="drop",
            after_round=show,
        )
    results = {a.name: played.of(a) for a in arms}
    orig = results["original"]
    if not any(r.ok for r in orig):
        err = orig[0].error if orig else "not run"
        failed = [
            replace(c, status="failed", reason=f"the original did not run: {err}")
            for c in candidates
        ]
        return Proof(_with(plan, failed), rounds=len(orig))
    decided = [_decide(c, orig, results[c.id], opts, skipped) for c in candidates]
    together = results.get("all")
    proof = Proof(_with(plan, decided), rounds=len(orig))
    if together is not None:
        prec = loosest([c.precision for c in candidates])
        proof = replace(
            proof,
            together=measured(orig, together, opts.min_gain),
            together_fidelity=fidelity(orig, together, prec),
            together_ids=tuple(c.id for c in candidates if c.id not in skipped),
        )
    return proof


def together_args(args: Sequence[str], changes: Sequence[Change]) -> tuple[str, ...] | None:
    """The run's arguments with every change's switch set (None when no change is a switch):
    the words any switch replaced are dropped, and each switch's own words appended."""
    switches = [c.switch for c in changes if c.switch is not None]
    if not switches:
        return None
    kept = [a for a in args if all(a in s.args for s in switches)]
    return (*kept, *(w for s in switches for w in s.add))


def _decide(
    c: Change, orig: list[ArmRun], runs: list[ArmRun], opts: ProveOptions, skipped: dict[str, str]
) -> Change:
    failed = next((r for r in runs if not r.ok), None)
    if failed is not None:
        return replace(c, status="failed", reason=f"the patched script did not run: {failed.error}")
    m = measured(orig, runs, opts.min_gain)
    f = fidelity(orig, runs, c.precision)
    c = replace(c, measured=m, fidelity=f)
    if not f.ok:
        return replace(c, status="rejected", reason=f.reason)
    if m is None or m.comparison.decision != "win":
        shown = m.format() if m else "not measured"
        why = f"{shown} does not clear {1 + opts.min_gain:.2f}x"
        if m is not None and not ab.has_interval(m.comparison.interval):
            # too few rounds for a 95% signed-rank interval: say so, not "does not clear"
            why = (
                f"{m.rounds} rounds cannot give a 95% interval; run --rounds "
                f"{ab.FEWEST_ROUNDS} or more "
                f"(measured {m.ratio:.2f}x over {m.rounds} rounds: unproven, not a loss)"
            )
        if opts.keep_unproven:
            return replace(c, reason=f"{why}; kept (--keep-unproven)")
        return replace(c, status="no-gain", reason=why)
    if c.id in skipped:
        return replace(c, reason=skipped[c.id])
    return c


def _with(plan: Plan, changed: list[Change]) -> Plan:
    by_id = {c.id: c for c in changed}
    return replace(plan, changes=tuple(by_id.get(c.id, c) for c in plan.changes))
