"""Registry entry of torch's own warnings (``torch-warning``). The other findings about the host
are families (``rules/families/``: cpu_threads, long_steps, housekeeping, beside_step)."""

from __future__ import annotations

from torchdoctor.rules import fixes as fx
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy, static

D = fx.DOCS

HOST_SPECS: tuple[FindingSpec, ...] = (
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
