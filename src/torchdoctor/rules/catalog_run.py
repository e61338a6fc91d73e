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
    FindingSpec(
        id="memory-growth",
        label="memory growing every step",
        title="{kind} grows {mib:.1f} MiB per step (it rose after {rising:.0%} of "
        "{steps} clean steps): {projection}",
        sources=("run",),
        severity=SeverityPolicy(fixed="warning", risk=True),
        threshold=th.MEMORY_GROWTH_PER_STEP,
        fix=fx.memory_growth_fix,
        explanation="Something keeps each step's tensors alive into the next (a graph kept by "
        "retain_graph=True, a loss summed as a tensor, outputs kept with their graph): memory "
        "grows until the process is killed or the device runs out.",
        doc_url=f"{D}/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
    ),
)
