"""Registry entries of the run-level findings about the host itself: threads waiting for cores,
torch's own warnings, rare long steps, housekeeping calls inside the step, and work beside the
step (a state copy, a parameter-by-parameter update made every step)."""

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
    FindingSpec(
        id="rare-long-steps",
        label="rare long steps",
        title="{k} of {n} steps ran long: step {step} took {ms:.1f} ms against a {median:.1f} ms "
        "median ({ratio:.1f}x), {per_step:.1f} ms per step on average{ran}",
        sources=("run",),
        probe="unscaled",
        severity=SeverityPolicy(),
        threshold=th.RARE_LONG_RATIO,
        fix=static("# run the periodic work in the loop less often, or outside it"),
        explanation="A step many times the median is not the loop's own work: something ran "
        "in it now and then (evaluation, a checkpoint, logging). Its cost per step is its "
        "excess over the median, averaged over the steps.",
        doc_url=f"{D}/profiler.html",
    ),
    FindingSpec(
        id="housekeeping-in-step",
        label="housekeeping in the step",
        title="{what} at {site}: {ms:.1f} ms per step ({share:.0%})",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.HOUSEKEEPING_SHARE,
        fix=static("# call it every N steps, not every step"),
        explanation="Saving a checkpoint or running a full garbage collection is not training "
        "work; done every step it adds its whole time to every step.",
        doc_url=f"{D}/notes/serialization.html",
    ),
    FindingSpec(
        id="work-beside-step",
        label="work beside the step",
        title="{what} at {site} ({function}): {ms:.1f} ms per step ({share:.0%}), outside the "
        "model's forward, backward and the optimizer's step",
        sources=("run",),
        severity=SeverityPolicy(),
        threshold=th.ASIDE_SHARE,
        fix=static("# run it every N steps, or make it cheaper (see the finding's evidence)"),
        explanation="Time in the loop that is not the model's forward or backward, the "
        "optimizer's step or the input: a copy of the weights, a state dict, an average of "
        "the parameters updated tensor by tensor. Done every step it adds its whole time to "
        "every step, and neither the roofline nor a trace calls it waste: the copies are real "
        "work, only not training's.",
        doc_url=f"{D}/optim.html#weight-averaging-swa-and-ema",
    ),
)
