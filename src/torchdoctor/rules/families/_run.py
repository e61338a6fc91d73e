"""Helpers the run family modules share (not a family: the package skips ``_`` modules).

The record's types are imported when a run rule measures, never when the package loads:
``analyze`` imports every family module and never reads a run record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchdoctor.record.account import Experiment
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.account_inputs import Account


def account(run: RunRecord) -> Account:
    """The step's account inputs of ``run`` (``rules/account_inputs.py``)."""
    from torchdoctor.rules.account_inputs import Account

    return Account.from_record(run)


PAIR_CONFIDENCE = 0.8
"""Coverage asked of the pairs' interval: four pairs give one at 87.5% (their lowest and
highest ratio), none at 90% or more."""


def toggled(
    acc: Account, fid: str, step: float, net: bool = True
) -> tuple[float | None, str, dict[str, Any]]:
    """(saving ms or None, title suffix, evidence) from the toggle ``check`` ran for finding
    ``fid`` (``capture/experiments.py``): ``1 - r`` of the step, ``r`` the typical ratio
    (changed / baseline) of the interleaved pairs, each two adjacent steps under the same load
    (the Hodges-Lehmann estimate of ``stats.paired_ratio_interval``, with its interval); the
    two arms' medians where no pair was kept. None when it was not measured (--full, torchrun).
    ``net``: read the pairs net of each step's wait for a core where recorded (a mode's own
    cost); False for a toggle whose question is the cores themselves (more threads)."""
    e = acc.experiment(fid)
    if e is None or e.ratio is None:
        return None, "", {}
    base, changed = e.baseline_median_ms or 0.0, e.changed_median_ms or 0.0
    text = f": measured {base:.1f} ms per step with it, {changed:.1f} ms with {e.toggle}"
    ev: dict[str, Any] = {"measured": e.raw}
    pairs, net = _pairs(e, net)
    ratio = e.ratio
    if len(pairs) >= 2:
        from torchdoctor.stats import paired_ratio_interval

        iv = paired_ratio_interval(pairs, [1.0] * len(pairs), confidence=PAIR_CONFIDENCE)
        ratio = iv.ratio
        faster = sum(r < 1 for r in pairs)
        basis = ", net of the waits for a core" if net else ""
        text += f" (per pair{basis} {iv.format()}, {faster} of {len(pairs)} faster)"
        ev["pairs_net_of_core_wait"] = net
        ev["pair_ratio"] = round(iv.ratio, 4)
        ev["pair_interval"] = None if iv.confidence == 0 else [round(iv.low, 4), round(iv.high, 4)]
        ev["pair_interval_confidence"] = round(iv.confidence, 4)
    return max(0.0, (1.0 - ratio) * step), text, ev


def _pairs(e: Experiment, net: bool = True) -> tuple[list[float], bool]:
    """The pairs' ratios the decision reads, and whether they are net of each step's wait for
    a core: net where every clean pair has that reading (a step that waited most of its time
    for a core measures the scheduler more than the mode), else the steps' own."""
    nets = [r for r in e.net_pair_ratios if r > 0] if net else []
    if nets and len(nets) == len(e.pair_ratios):
        return nets, True
    return [r for r in e.pair_ratios if r > 0], False


def measured_gain(acc: Account, fid: str, step: float) -> bool | None:
    """Whether the toggle for ``fid`` measured a gain (``gain_verdict``); None when it was not
    measured."""
    return gain_verdict(acc, fid, step)[0]


def gain_verdict(acc: Account, fid: str, step: float) -> tuple[bool | None, str]:
    """(whether the toggle for ``fid`` measured a gain, the title's words for a toggle that
    did not): a gain is the typical pair at least ``TOGGLE_GAIN`` of the step faster, and, with
    the pairs net of each step's wait for a core, their interval (``PAIR_CONFIDENCE``; four
    pairs: their lowest and highest ratio) wholly below 1: no pair says "no change" once the
    scheduler's stalls are taken out (fewer than four give no interval: no gain). Without that
    reading, more pairs faster than not: a pair stalled by the scheduler is to be expected on a
    busy machine. Never decided on how busy the machine was: both steps of a pair ran under the
    same load. (None, why) when it was not measured: the record's reason where a toggle was
    skipped or failed, else that no extra steps ran."""
    from torchdoctor.rules import thresholds as th

    saving, _, _ = toggled(acc, fid, step)
    e = acc.experiment(fid)
    if saving is None or e is None:
        return None, f" (cost not measured: {why_not_measured(acc, fid)})"
    pairs, net = _pairs(e)
    if saving <= 0:
        return False, "; the typical pair no faster: within this run's noise (info)"
    if saving < th.TOGGLE_GAIN * step:
        return False, (
            f"; {saving / step:.0%} of the step, under the {th.TOGGLE_GAIN:.0%} that "
            "counts as a gain: within this run's noise (info)"
        )
    if not net:
        gain = not pairs or 2 * sum(r < 1 for r in pairs) > len(pairs)
        return gain, "" if gain else "; no more pairs faster than not: within noise (info)"
    from torchdoctor.stats import paired_ratio_interval

    iv = paired_ratio_interval(pairs, [1.0] * len(pairs), confidence=PAIR_CONFIDENCE)
    if iv.high < 1.0:
        return True, ""
    return False, "; not every pair faster net of the waits for a core: within noise (info)"


def why_not_measured(acc: Account, fid: str) -> str:
    """The record's reason the toggle for ``fid`` measured nothing, in words."""
    e = next((e for e in acc.experiments if e.id == fid), None)
    if e is None:
        return "no extra steps ran: --full, torchrun, or the script ended first"
    if e.skipped:
        return e.skipped
    return f"switching it failed: {e.error}" if e.error else "no clean pair of steps"


def contended(run: RunRecord) -> str | None:
    """Why the run's cores were not free, other processes holding them
    (``rules/cpu_rules.contention``: its step times are inflated), or None."""
    from torchdoctor.rules.cpu_rules import contention

    return contention(run.cpu)


def code_at(acc: Account, site: str) -> str | None:
    """The source text of the line table's row at ``site`` (None when it was not sampled)."""
    row = acc.lines.row(site)
    return row.code if row else None
