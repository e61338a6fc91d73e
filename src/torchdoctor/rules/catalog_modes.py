"""The registry entry of the step's account (``torchdoctor check``): time no finding explains.

It stays here, not in a family module, because its rule (``rules/account_rules.py``) judges the
merged findings of every rank, not one run record. The mode, repeated-work, float64 and gc
findings are families (``rules/families/``)."""

from __future__ import annotations

from torchdoctor.rules import mode_fixes as mf
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy

TUNING = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"

MODE_SPECS: tuple[FindingSpec, ...] = (
    FindingSpec(
        id="unexplained-step-time",
        label="unexplained step time",
        title="{share:.0%} of the step ({ms:.1f} ms) is not explained: it runs at {eff} of this "
        "machine's roofline; most time at {site} ({what})",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.UNEXPLAINED_SHARE,
        fix=mf.unexplained_fix,
        explanation="No named cause accounts for this time, and the step is far from what the "
        "hardware can do for its work (its FLOPs and bytes at the measured rates). The line "
        "table says where the time goes and what runs there.",
        doc_url=TUNING,
    ),
)
