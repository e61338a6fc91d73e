"""Registry entries of the run-level findings (``torchdoctor check``)."""

from __future__ import annotations

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy

D = fx.DOCS

RUN_SPECS: tuple[FindingSpec, ...] = (
    FindingSpec(
        id="dataloader-config",
        label="data loading (DataLoader settings)",
        title="the step waits {wait:.1f} ms ({share:.0%}) for each batch (num_workers={workers})",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.DATA_WAIT_SHARE,
        fix=fx.dataloader_fix,
        explanation="Worker processes prepare the next batches while the model trains.",
        doc_url=f"{D}/data.html#multi-process-data-loading",
        knobs=("num_workers",),
        aliases=("data-loading-bound",),
        codemods=("dataloader-args", "non-blocking-copies"),
    ),
)
