"""Registry entries of the run-level findings about the host itself: threads waiting for cores,
torch's own warnings, rare long steps, and housekeeping calls inside the step."""

from __future__ import annotations

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy, static

D = fx.DOCS

HOST_SPECS: tuple[FindingSpec, ...] = (
    FindingSpec(
        id="cpu-oversubscribed",
        label="more threads than free cores",
        title="{threads} intra-op threads{workers} on {free:.1f} free of {cores} cores: the "
        "same work ran {ratio:.1f}x slower than with {k} thread(s)",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.OVERSUBSCRIBED_RATIO,
        fix=fx.cpu_threads_fix,
        explanation="Each parallel operator splits its work over the intra-op threads and waits "
        "for the last one; a thread without a core stalls all of them, so threads beyond the "
        "free cores (other jobs, DataLoader workers) make every operator slower, not faster.",
        doc_url=f"{D}/notes/cpu_threading_torchscript_inference.html",
    ),
    FindingSpec(
        id="torch-warning",
        label="a torch warning",
        title="torch warned: {text}",
        sources=("run",),
        severity=SeverityPolicy(fixed="info"),
        threshold=None,
        fix=static("# see the warning's text"),
        explanation="torch printed this warning while the script built its DataLoader "
        "iterator; the fix is the setting it names.",
        doc_url=f"{D}/data.html#multi-process-data-loading",
    ),
)
