"""Helpers the run family modules share (not a family: the package skips ``_`` modules).

The record's types are imported when a run rule measures, never when the package loads:
``analyze`` imports every family module and never reads a run record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.account_inputs import Account


def account(run: RunRecord) -> Account:
    """The step's account inputs of ``run`` (``rules/account_inputs.py``)."""
    from torchdoctor.rules.account_inputs import Account

    return Account.from_record(run)


def toggled(acc: Account, fid: str, step: float) -> tuple[float | None, str, dict[str, Any]]:
    """(saving ms or None, title suffix, evidence) from the toggle ``check`` ran for finding
    ``fid`` (``capture/experiments.py``): ``1 - changed / baseline`` of the step, interleaved
    medians; None when it was not measured (--full, torchrun)."""
    e = acc.experiment(fid)
    if e is None or e.ratio is None:
        return None, "", {}
    base, changed = e.baseline_median_ms or 0.0, e.changed_median_ms or 0.0
    text = f": measured {base:.1f} ms per step with it, {changed:.1f} ms with {e.toggle}"
    return max(0.0, (1.0 - e.ratio) * step), text, {"measured": e.raw}


def short(site: str) -> str:
    """``train.py:42`` for a full path."""
    file, _, line = site.rpartition(":")
    return f"{file.rsplit('/', 1)[-1]}:{line}" if file else site


def code_at(acc: Account, site: str) -> str | None:
    """The source text of the line table's row at ``site`` (None when it was not sampled)."""
    row = acc.row(site)
    return row.code if row else None
