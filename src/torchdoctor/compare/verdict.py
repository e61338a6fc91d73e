"""The one-line verdict and the gate, from the estimates of what the user pays.

The verdict follows the cost that matters to the user: the time to their job's length when it is
known (``--job-steps``, or a run that ran to its end), else whichever of the mean step and the
one-time cost changed most. Every other cost that moved the other way is named in the same line
(with the break-even step count), so the verdict never contradicts the table beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from torchdoctor import ab
from torchdoctor.compare.estimates import (
    MIN_RUNS_FOR_INTERVAL,
    RUN_TO_RUN_PCT,
    Estimate,
    EvidenceKind,
    Quantity,
)
from torchdoctor.compare.explain import Cause, Contention

Direction = Literal["faster", "slower", "no change", "unclear"]

NEGLIGIBLE = 0.01
"""A speed-up within 1% of 1 that no evidence decides is "no clear change"."""
NO_CHANGE_BAND = ab.MIN_GAIN
"""Decided evidence whose whole interval lies within 2% of 1 is "no change" (the gain ``tune``
and ``fix --prove`` ask for: below 2% a change rarely matters)."""
ONE_TIME_MATERIAL_S = 1.0
"""A one-time cost difference under a second never leads the verdict (a first step's jitter)."""
ONE_TIME_MATERIAL_RATIO = 1.5
"""With one run a side (no test), a one-time cost leads only when it changed by 1.5x or more;
with runs or rounds, only when its interval decides."""
OPPOSITE_MEDIAN = 1.1
"""The median step is named in the verdict when it moved 10% or more against the mean step."""


@dataclass(frozen=True)
class Verdict:
    """What the comparison concludes, and how firmly."""

    headline: Estimate
    """The estimate the verdict follows."""
    direction: Direction
    decided: bool
    """Evidence that can support it put the whole interval on one side of 1."""
    text: str
    break_even: int | None
    """Steps after which the side that is slower up front is ahead (None: no crossing, or a
    one-time difference too small to lead or be named: under a second, or under 1.5x untested)."""
    job_steps: int | None
    evidence: EvidenceKind
    run_noise_pct: float
    cause: Cause | None = None
    """The breakdown part that explains the mean step's change, when one does."""
    contention: tuple[Contention, ...] = ()
    """The sides whose runs recorded other work holding the CPU cores."""

    @property
    def new_contended(self) -> Contention | None:
        """NEW's contention: its step times are inflated, so no regression verdict rests on them."""
        return next((c for c in self.contention if c.side == "NEW"), None)

    def slower_beyond(self, max_slower_pct: float) -> bool:
        """NEW is slower by more than ``max_slower_pct`` on the headline cost with the whole
        interval on the slower side (what fails the gate on a side measured cleanly)."""
        e = self.headline
        if not e.has_interval:
            return False
        return e.change_pct > max_slower_pct and e.speedup.high < 1.0

    def gate(self, max_slower_pct: float) -> bool:
        """True (fail) when NEW is slower by more than ``max_slower_pct`` on the headline cost
        and the whole interval lies on the slower side. With one run a side the interval is the
        widened one: only a slowdown beyond the run-to-run allowance fails. Never when NEW ran
        under CPU contention: step times inflated by other work cannot support a regression
        (BASE's contention does not stop it: an inflated BASE hides a slowdown, never makes one)."""
        return self.slower_beyond(max_slower_pct) and self.new_contended is None

    def gate_line(self, max_slower_pct: float) -> str:
        """The gate's outcome, what it gated on, and how weak that is."""
        e = self.headline
        busy = self.new_contended
        if busy is not None and self.slower_beyond(max_slower_pct):
            return (
                f"gate --fail-if-slower {max_slower_pct:g}%: NOT JUDGED, passed ({e.label} "
                f"{e.change_pct:+.1f}%, speed-up {e.speedup.format()}): {busy.text()}, so its "
                "step times are inflated and cannot support a regression verdict. Measure again "
                "where the cores are free."
            )
        outcome = "FAILED" if self.gate(max_slower_pct) else "passed"
        head = (
            f"gate --fail-if-slower {max_slower_pct:g}%: {outcome} ({e.label} {e.change_pct:+.1f}% "
            f"against {max_slower_pct:g}% allowed; speed-up {e.speedup.format()})"
        )
        if self.evidence == "interleaved":
            return f"{head}; gated on {e.n_base} interleaved rounds ({e.test})."
        if self.evidence == "runs":
            why = f"; gated on runs ({e.test}"
            if not e.has_interval:
                return (
                    head
                    + why
                    + f"): it cannot fail with fewer than {MIN_RUNS_FOR_INTERVAL} runs a side."
                )
            return head + why + ")."
        return (
            f"{head}; gated on ONE RUN A SIDE: it fails only for a slowdown beyond the "
            f"+/-{self.run_noise_pct:g}% run-to-run allowance, so smaller regressions pass "
            "unseen. Gate on `compare --rerun` or several runs a side instead."
        )


def _log(e: Estimate) -> float:
    return abs(math.log(e.speedup.ratio)) if e.speedup.ratio > 0 else 0.0


def _material_one_time(one: Estimate) -> bool:
    """A one-time difference worth naming: a second or more, decided when a test can decide
    (runs, rounds), else (one run a side) at least 1.5x."""
    if abs(one.base - one.new) < ONE_TIME_MATERIAL_S:
        return False
    if one.evidence != "one run a side":
        return one.decided
    return max(one.speedup.ratio, 1.0 / one.speedup.ratio) >= ONE_TIME_MATERIAL_RATIO


def headline(est: dict[Quantity, Estimate]) -> Estimate:
    """The cost the verdict follows (see the module docstring)."""
    if "time_to_n" in est:
        return est["time_to_n"]
    step, one = est["mean_step"], est.get("one_time")
    if one is not None and _material_one_time(one) and _log(one) > _log(step):
        return one
    return step


def _direction(e: Estimate) -> Direction:
    r = e.speedup.ratio
    if e.decided:
        return "faster" if r > 1 else "slower"
    band = 1.0 + NO_CHANGE_BAND
    if (
        e.evidence != "one run a side"
        and e.has_interval
        and 1 / band <= e.speedup.low
        and e.speedup.high <= band
    ):
        return "no change"
    if abs(r - 1.0) < NEGLIGIBLE:
        return "unclear"
    return "faster" if r > 1 else "slower"


def _amount(e: Estimate) -> str:
    return (
        f"{e.label} {e.base:.{_digits(e)}f} -> {e.new:.{_digits(e)}f} {e.unit} "
        f"({e.change_pct:+.1f}%, speed-up {e.speedup.format()})"
    )


def _digits(e: Estimate) -> int:
    return 2 if e.unit.startswith("ms") else 1


def _lead(e: Estimate, direction: Direction, explained: bool = False) -> str:
    if direction == "no change":
        return "No change"
    if direction == "unclear":
        return "No clear change"
    return f"NEW {'is' if e.decided or explained else 'looks'} {direction}"


def _explains(cause: Cause | None, head: Estimate, direction: Direction) -> Cause | None:
    """The cause, when the verdict follows the mean step and the cause moved the same way."""
    if cause is None or head.quantity != "mean_step" or direction not in ("faster", "slower"):
        return None
    return cause if (cause.step_delta_ms < 0) == (head.speedup.ratio > 1.0) else None


def _evidence_phrase(e: Estimate, run_noise_pct: float, explained: bool = False) -> str:
    phrase = _test_phrase(e, run_noise_pct)
    if explained and not e.decided:
        return f"{phrase}, but each run's breakdown names the cause"
    return phrase


def _test_phrase(e: Estimate, run_noise_pct: float) -> str:
    if e.evidence == "one run a side":
        if not e.has_interval:
            return "one value a side: not a test"
        if e.speedup.excludes(1.0):
            return (
                f"larger than the +/-{run_noise_pct:g}% run-to-run allowance, but one run a side "
                "is not a test"
            )
        return "one run a side: not a test, and within run-to-run variation"
    if e.decided:
        p = f", p = {e.p_value:.3g}" if e.p_value is not None else ""
        return f"beyond the noise ({e.test}{p})"
    if not e.has_interval:
        return f"undecided ({e.test})"
    if e.evidence == "runs":
        p = f", p = {e.p_value:.3g}" if e.p_value is not None else ""
        return f"within the noise ({e.test}{p})"
    return f"within the noise ({e.test}): more rounds (--rounds) may settle it"


def _opposite(a: Estimate, b: Estimate) -> bool:
    return (a.speedup.ratio > 1.0) != (b.speedup.ratio > 1.0)


def _clauses(est: dict[Quantity, Estimate], head: Estimate, be: int | None) -> list[str]:
    """The costs that moved against the headline, in words."""
    out = []
    step, one = est["mean_step"], est.get("one_time")
    material = one is not None and _material_one_time(one)
    if head.quantity != "one_time" and one is not None and material and _opposite(one, step):
        more = "more" if one.new > one.base else "less"
        ahead = "NEW" if one.new > one.base else "BASE"
        where = f"after {be} steps" if be is not None else "never"
        out.append(
            f"its one-time cost is {abs(one.new - one.base):.1f} s {more} "
            f"({one.base:.1f} -> {one.new:.1f} s): {ahead} is ahead {where}"
        )
    if head.quantity == "one_time" and _opposite(step, one or step):
        slower = "slower" if step.speedup.ratio < 1 else "faster"
        ahead = "BASE" if step.speedup.ratio < 1 else "NEW"
        where = f"after {be} steps" if be is not None else "never"
        out.append(
            f"its steady step is {slower} ({step.base:.2f} -> {step.new:.2f} ms), so {ahead} "
            f"is ahead {where}"
        )
    median = est["median_step"]
    if head.quantity != "one_time" and _opposite(median, step):
        r = median.speedup.ratio
        if max(r, 1 / r) >= OPPOSITE_MEDIAN:
            out.append(
                f"its typical (median) step moved the other way ({median.base:.2f} -> "
                f"{median.new:.2f} ms): the mean counts the rare long steps (epoch starts, "
                "stalls) that the median hides"
            )
    return out


def _contention_clauses(contention: tuple[Contention, ...], head: Estimate) -> list[str]:
    out = []
    for c in contention:
        if c.side == "NEW" and head.speedup.ratio < 1.0:
            out.append(
                f"{c.text()}: its step times are inflated, so this cannot support a regression "
                "verdict"
            )
        else:
            out.append(f"{c.text()}: its step times are inflated")
    return out


def break_even(one: Estimate, step: Estimate) -> int | None:
    """Steps where the two sides' times to N cross (``one``: the one-time cost in s, ``step``:
    the mean step in ms); None when one side is ahead (or level) at every N."""
    crossing = ab.break_even_steps(one.new - one.base, (step.base - step.new) / 1e3, whole=True)
    return crossing or None  # 0: NEW ahead from the start, no crossing


def decide(
    est: dict[Quantity, Estimate],
    job_steps: int | None = None,
    run_noise_pct: float = RUN_TO_RUN_PCT,
    cause: Cause | None = None,
    contention: tuple[Contention, ...] = (),
) -> Verdict:
    """The verdict on these estimates (from :func:`torchdoctor.compare.estimates.estimates`);
    ``cause``: the breakdown part that explains the mean step's change (named when the verdict
    follows the mean step and the cause moved its way); ``contention``: the sides whose runs
    recorded CPU contention (said in the verdict; NEW's keeps the gate from failing)."""
    head = headline(est)
    direction = _direction(head)
    cause = _explains(cause, head, direction)
    one = est.get("one_time")
    step = est["mean_step"]
    be = None
    if one is not None and step.unit == "ms" and _material_one_time(one):
        be = break_even(one, step)
    text = f"{_lead(head, direction, cause is not None)}: {_amount(head)}"
    if head.quantity == "time_to_n":
        text = text.replace("time to N steps", f"time to {job_steps} steps", 1)
    if cause is not None:
        text += f", {cause.text()}"
    text += f"; {_evidence_phrase(head, run_noise_pct, cause is not None)}"
    clauses = _clauses(est, head, be) + _contention_clauses(contention, head)
    if clauses:
        text += "; " + "; ".join(clauses)
    return Verdict(
        head,
        direction,
        head.decided,
        text + ".",
        be,
        job_steps,
        head.evidence,
        run_noise_pct,
        cause,
        contention,
    )
