"""Registry entry of the finding read from a folder of ranks (trace findings are in
``rules/families/``, each beside its rule)."""

from __future__ import annotations

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy, static

D = fx.DOCS

RANK_SPECS: tuple[FindingSpec, ...] = (
    FindingSpec(
        id="straggler-rank",
        label="a straggler rank",
        title="Straggler: rank {rank} works {excess:.1f} ms per step longer than the median rank "
        "({ratio:.0%})",
        sources=("ranks",),
        severity=SeverityPolicy(th.STRAGGLER, th.STRAGGLER_CRITICAL, floor="warning"),
        threshold=th.STRAGGLER,
        fix=static(fx.STRAGGLER),
        explanation="Collectives wait for the slowest rank, so every rank runs at its speed.",
        doc_url=f"{D}/notes/ddp.html",
    ),
)
