"""The probe effect: how much ``check``'s own instruments changed the step they measured, and
the findings brought back to the step the script runs without them.

``check`` times a clean window first (steps with nothing armed but their boundaries: CUDA
events on a GPU, the host clock on a CPU), then profiles (the profiler, on a GPU sync-debug
mode, the line sampler), then times a few clean steps again. The profiler costs the CPU a few
microseconds per operator and leaves kernel durations alone, so under it a GPU-bound step can
look host-bound: the trace shows a starved GPU the real run does not have.

What this module does with that, after the rules ran on the instrumented window:

- the report's step is the clean window's median, with an interval (order statistics);
- each window's median over the clean one, and whether it is slower beyond noise;
- savings measured in the instrumented window are scaled to the clean step: GPU kernel time is
  kept as the trace measured it (the profiler does not slow kernels), the rest of a GPU step
  (and the whole of a CPU step) by how much the clean step's host part is smaller;
- on a GPU, "host bound" is only said when the clean window shows the GPU waiting for the
  host: its saving is at most the clean step less the GPU's busy time, and none when the GPU
  finished every clean step behind the host (a positive host lead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchdoctor import stats
from torchdoctor.record.values import as_dict
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.registry import REGISTRY, spec

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord

MIN_CLEAN_STEPS = 3
"""Fewer clean steps than this have no median worth reporting: the instrumented one stands."""
SLOWER_RATIO = 1.15
"""A window this much slower than the clean step is said in the report's text."""
NOISE_RATIO = 1.05
"""Below this ratio a window is never called slower, whatever the test says."""
GPU_BOUND_LEAD_MS = 0.5
"""A host lead above this (and above ``GPU_BOUND_LEAD_SHARE`` of the step) at most step ends:
the GPU still had queued work when the CPU finished the step."""
GPU_BOUND_LEAD_SHARE = 0.05


def _probe_ids(role: str) -> frozenset[str]:
    """The registered findings whose spec says ``probe=role`` (``spec.ProbeScaling``)."""
    return frozenset(s.id for s in REGISTRY.values() if s.probe == role)


KERNEL_TIME_IDS = _probe_ids("kernel")
"""Findings whose saving is GPU kernel time as the trace measured it: the profiler does not
slow kernels, so these stand as measured."""
UNSCALED_IDS = _probe_ids("unscaled")
"""Findings judged on un-instrumented steps, one-off costs of the job, and risks: never scaled."""
DATA_IDS = _probe_ids("data")
"""Waiting for batches: measured again in the clean window by the step clock."""
HOST_BOUND = "host-bound"


@dataclass(frozen=True)
class WindowEffect:
    """One instrumented or after window against the clean step."""

    name: str
    """``profiled`` or ``after``."""
    instruments: str
    """What ran in it, in words."""
    median_ms: float
    ratio: float
    """Its median over the clean median."""
    slower: bool
    """Slower beyond noise (a rank test at 5% and at least ``NOISE_RATIO``)."""


@dataclass(frozen=True)
class ProbeEffect:
    """The clean step, each window's ratio to it, and what the findings became."""

    clean_ms: float
    low_ms: float
    high_ms: float
    """An order-statistics interval of the clean median (``confidence``)."""
    confidence: float
    steps: int
    clock: str
    """``cuda-events`` or ``host``."""
    windows: tuple[WindowEffect, ...]
    host_lead_ms: float | None = None
    """Median host lead over the clean steps (GPU only)."""
    gpu_bound: bool | None = None
    """The GPU finished the clean steps behind the host (None on a CPU)."""
    gpu_busy_ms: float | None = None
    """The GPU's busy time per step: from the kernel window (CUDA activity only) when it ran,
    else from the trace's kernels."""
    gpu_busy_source: str = "trace"
    host_scale: float = 1.0
    """What the savings measured in the instrumented window were multiplied by."""
    changed: tuple[str, ...] = ()
    """One line per finding the clean window changed or removed."""
    verdict_differs: bool = False
    """The top finding under the instruments is not the top finding of the clean step."""
    instrumented_top: str | None = None
    pooled: bool = False
    """Fewer than 3 clean steps were steady (the others compiled): the step time pools the
    steady clean steps with the ones after the instruments."""

    @property
    def profiled(self) -> WindowEffect | None:
        return next((w for w in self.windows if w.name == "profiled"), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``report.json``'s ``probe_effect``."""
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        """The report's lines: the clean step, each window's ratio, what changed."""
        where = "CUDA events at step boundaries" if self.clock == "cuda-events" else "host clock"
        which = "steady steps (clean and after)" if self.pooled else "clean steps"
        out = [
            f"step time: {self.clean_ms:.2f} ms, median of {self.steps} {which} "
            f"[{self.low_ms:.2f}-{self.high_ms:.2f}] ({where}, no instrument armed)"
        ]
        if self.pooled:
            out.append("  (the clean steps compiled: they are not the steady step)")
        for w in self.windows:
            what = "slower beyond noise" if w.slower else "within noise"
            out.append(
                f"  {w.name} window ({w.instruments}): {w.median_ms:.2f} ms, "
                f"{w.ratio:.2f}x the clean step, {what}"
            )
        p = self.profiled
        if p is not None and p.ratio > SLOWER_RATIO:
            out.append(
                f"  the instruments slowed the step {p.ratio:.2f}x: savings measured under them "
                "are scaled to the clean step"
                + (" (GPU kernel time kept as measured)" if self.gpu_busy_ms is not None else "")
            )
        after = next((w for w in self.windows if w.name == "after"), None)
        if after is not None and after.slower and after.ratio > SLOWER_RATIO:
            out.append(
                f"  the steps after the instruments stayed {after.ratio:.2f}x slower (the "
                "profiler's after-effect): time a change in a fresh process, not after a profile"
            )
        if self.host_lead_ms is not None:
            state = (
                "GPU-bound: it finished each step after the CPU had dispatched it"
                if self.gpu_bound
                else "the GPU caught up with the CPU at step ends (it waited for the host)"
            )
            busy = (
                f", GPU busy {self.gpu_busy_ms:.2f} ms per step ({self.gpu_busy_source})"
                if self.gpu_busy_ms
                else ""
            )
            out.append(f"  host lead {self.host_lead_ms:+.2f} ms{busy}: {state}")
        out.extend(f"  {c}" for c in self.changed)
        if self.verdict_differs and self.instrumented_top:
            out.append(
                f"  under the instruments alone the top finding would have been "
                f"{self.instrumented_top}"
            )
        return out


def _steady(window: Mapping[str, Any], key: str = "step_ms", strict: bool = False) -> list[float]:
    """A timed window's values less its steps that compiled; not ``strict``: all of them when
    fewer than 3 are left."""
    values = [float(x) for x in window.get(key) or []]
    first = int(window.get("first_step") or 0)
    compiled = {int(n) - first for n in window.get("compiled_steps") or []}
    steady = [v for i, v in enumerate(values) if i not in compiled]
    return steady if strict or len(steady) >= MIN_CLEAN_STEPS else values


def _run(record: Mapping[str, Any]) -> RunRecord:
    from torchdoctor.record.run import RunRecord

    return RunRecord.from_dict(dict(record))


def _instruments(run: RunRecord) -> str:
    """What was armed in the profiled window: the switchboard's record when there is one."""
    sched = run.steps.schedule or {}
    log = sched.get("instruments")
    if isinstance(log, list) and log:
        armed = [
            str(name)
            for entry in log
            if isinstance(entry, dict) and entry.get("window") in ("profiled", "measured")
            for name in entry.get("armed") or []
        ]
        if armed:
            return ", ".join(dict.fromkeys(armed))
    cuda = run.gpu is not None
    parts = ["profiler" + (" (CPU + CUDA)" if cuda else "")]
    if cuda and not sched.get("sync_debug"):
        parts.append("sync-debug mode")
    if run.lines.samples:
        parts.append("line sampler")
    if run.options.profile_memory:
        parts.append("memory recording")
    return ", ".join(parts)


def _kernel_window(kernels: Any) -> tuple[list[float], float | None]:
    """The kernel window's steps and the GPU's busy time per step in it (GPU only)."""
    kernels = kernels or {}
    if not isinstance(kernels, dict):
        return [], None
    gpu = kernels.get("gpu") or {}
    busy = gpu.get("gpu_busy_ms_per_step") if isinstance(gpu, dict) else None
    return _steady(kernels), float(busy) if isinstance(busy, int | float) else None


def measure(record: Mapping[str, Any], gpu_busy_ms: float | None = None) -> ProbeEffect | None:
    """The probe effect of one rank's ``run.json`` record; None without a clean window of at
    least ``MIN_CLEAN_STEPS`` steps. ``gpu_busy_ms``: the trace's kernel time per step."""
    run = _run(record)
    steps = run.steps
    clean = as_dict(steps.timed.get("clean"))
    after = as_dict(steps.timed.get("after"))
    ms = _steady(clean, strict=True)
    after_ms = _steady(after)
    pooled = False
    if len(ms) < MIN_CLEAN_STEPS:  # the clean steps compiled: the ones after are clean too
        ms, after_ms, pooled = ms + _steady(after, strict=True), [], True
    if len(ms) < MIN_CLEAN_STEPS:
        return None
    mid = stats.median(ms)
    low, high, conf = stats.median_interval(ms)
    windows: list[WindowEffect] = []
    if steps.window is not None:
        first, last = steps.window
        prof = list(steps.step_ms[first - 1 : last])
        # the first recorded step still pays the profiler's start (CUPTI buffers, its first
        # flush): an instrument's start is not the user's step
        own = set(steps.own_steps)
        prof = [t for i, t in enumerate(prof, first) if i not in own] or prof
        if len(prof) >= 3:
            prof = prof[1:]
        if prof:
            windows.append(_effect("profiled", _instruments(run), prof, ms))
    kernel_ms, kernel_busy = _kernel_window(steps.timed.get("kernels"))
    if kernel_ms:
        windows.append(_effect("kernels", "profiler, CUDA activity only", kernel_ms, ms))
    if after_ms:
        windows.append(_effect("after", "none, after the instruments", after_ms, ms))
    lead = _steady(clean, "host_lead_ms", strict=True) + (
        _steady(after, "host_lead_ms", strict=True) if pooled else []
    )
    lead_ms = stats.median(lead) if lead else None
    gpu_bound = None
    if lead_ms is not None:
        margin = max(GPU_BOUND_LEAD_MS, GPU_BOUND_LEAD_SHARE * mid)
        gpu_bound = sum(1 for x in lead if x > margin) > len(lead) / 2
    return ProbeEffect(
        clean_ms=mid,
        low_ms=low,
        high_ms=high,
        confidence=conf,
        steps=len(ms),
        clock=str(clean.get("clock") or "host"),
        windows=tuple(windows),
        host_lead_ms=lead_ms,
        gpu_bound=gpu_bound,
        gpu_busy_ms=kernel_busy
        if kernel_busy is not None
        else (gpu_busy_ms if run.gpu is not None else None),
        gpu_busy_source="kernel window" if kernel_busy is not None else "trace",
        pooled=pooled,
    )


def _effect(
    name: str, instruments: str, ms: Sequence[float], clean: Sequence[float]
) -> WindowEffect:
    med = stats.median(ms)
    ratio = med / stats.median(clean) if stats.median(clean) > 0 else 1.0
    slower = False
    if ratio >= NOISE_RATIO and len(ms) >= 3:
        slower = stats.mann_whitney(ms, clean).p_value < 0.05
    elif ratio >= NOISE_RATIO:  # too few for the test: beyond the clean median's interval
        slower = med > stats.median_interval(clean)[1]
    return WindowEffect(name, instruments, med, ratio, slower)


def _data_scale(record: Mapping[str, Any]) -> float | None:
    """Clean data wait over the instrumented window's (None when either is unknown or 0)."""
    steps = _run(record).steps
    waits = list(steps.data_wait_ms)
    clean = as_dict(steps.timed.get("clean"))
    window = steps.window
    first = int(clean.get("first_step") or 0)
    n = len(clean.get("step_ms") or [])
    if not waits or not first or window is None:
        return None
    c = waits[first - 1 : first - 1 + n]
    w = waits[window[0] - 1 : window[1]]
    if not c or not w:
        return None
    cw, ww = sum(c) / len(c), sum(w) / len(w)
    return cw / ww if ww > 0 else None


def _host_scale(effect: ProbeEffect) -> float:
    """What a host-side saving measured under the instruments is multiplied by (<= 1)."""
    p = effect.profiled
    if p is None or p.median_ms <= 0:
        return 1.0
    busy = effect.gpu_busy_ms or 0.0
    window_host = p.median_ms - busy
    clean_host = max(0.0, effect.clean_ms - busy)
    if window_host <= 0:
        return 1.0
    return max(0.0, min(1.0, clean_host / window_host))


def _graded(f: Finding, share: float) -> str:
    """The finding's severity for its new share, never more severe than it was."""
    try:
        policy = spec(f.id).severity
    except Exception:
        return f.severity
    if policy.fixed is not None or policy.risk:
        return f.severity
    order = ["critical", "warning", "info"]
    new = policy.floored(policy.grade(share), share)
    return max(f.severity, new, key=order.index)


def apply(
    findings: list[Finding], effect: ProbeEffect, record: Mapping[str, Any]
) -> tuple[list[Finding], ProbeEffect]:
    """The findings scaled to the clean step (see the module docstring), ranked again, and the
    effect with what changed."""
    scale = _host_scale(effect)
    data = _data_scale(record)
    step = effect.clean_ms
    out: list[Finding] = []
    changed: list[str] = []
    for f in findings:
        new = _rescaled(f, effect, scale, data)
        if new is None:
            why = "the GPU did not wait for the host" if f.id == HOST_BOUND else "too small there"
            changed.append(
                f"{f.id}: not in the clean steps ({f.saving_ms_per_step:.1f} ms per step under "
                f"the instruments; {why})"
            )
            continue
        if abs(new - f.saving_ms_per_step) > 0.15 * max(f.saving_ms_per_step, 1e-9):
            share = min(1.0, new / step) if step > 0 else f.share_of_step
            note = (
                f" [{f.saving_ms_per_step:.1f} ms per step under the instruments; "
                f"{new:.1f} ms in the clean step]"
            )
            changed.append(f"{f.id}: {f.saving_ms_per_step:.1f} -> {new:.1f} ms per step")
            f = dataclasses.replace(
                f,
                title=f.title + note,
                saving_ms_per_step=new,
                share_of_step=share,
                severity=_graded(f, share),  # type: ignore[arg-type]
                evidence={**f.evidence, "instrumented_saving_ms": round(f.saving_ms_per_step, 3)},
            )
        elif step > 0:
            f = dataclasses.replace(f, share_of_step=min(1.0, f.saving_ms_per_step / step))
        out.append(f)
    ranked = rank_findings(out)
    before = rank_findings(list(findings))
    top_before = next((f.id for f in before if f.severity != "info"), None)
    top_after = next((f.id for f in ranked if f.severity != "info"), None)
    effect = dataclasses.replace(
        effect,
        host_scale=round(scale, 4),
        changed=tuple(changed),
        verdict_differs=top_before != top_after,
        instrumented_top=top_before,
    )
    return ranked, effect


def _rescaled(f: Finding, effect: ProbeEffect, scale: float, data: float | None) -> float | None:
    """The finding's saving in the clean step; None when the clean step disproves it or a
    wait for batches there is under its spec's gate on the saving."""
    saving = f.saving_ms_per_step
    if f.id in UNSCALED_IDS or "measured" in f.evidence or f.cost_unit != "step":
        return saving  # a one-off cost is time of the job, not of the instrumented step
    gpu = effect.gpu_busy_ms is not None
    if gpu and f.id in KERNEL_TIME_IDS:
        return saving
    if f.id in DATA_IDS and data is not None:
        saving = min(saving * data, effect.clean_ms)
        # the spec's gate on the wait held before scaling: a wait workers cannot remove is as
        # small in the clean step (two_loaders.py: a 0.32 ms 'saving' on a 0.32 ms step)
        gate = next((g.minimum for g in spec(f.id).gates if g.key == "ms"), 0.0)
        return saving if saving >= gate else None
    saving *= scale
    if f.id == HOST_BOUND and effect.host_lead_ms is not None:
        if effect.gpu_bound:
            return None
        idle = max(0.0, effect.clean_ms - (effect.gpu_busy_ms or 0.0))
        saving = min(saving, idle)
        if saving < float(th.HOST_WARN) * effect.clean_ms:
            return None
    return saving


def effect_from_dict(d: Mapping[str, Any]) -> ProbeEffect:
    """``report.json``'s ``probe_effect`` typed again (the inverse of ``to_dict``)."""
    windows = tuple(
        WindowEffect(
            str(w["name"]),
            str(w["instruments"]),
            float(w["median_ms"]),
            float(w["ratio"]),
            bool(w["slower"]),
        )
        for w in d.get("windows") or []
    )
    fields = {f.name for f in dataclasses.fields(ProbeEffect)} - {"windows", "changed"}
    rest = {k: v for k, v in d.items() if k in fields}
    return ProbeEffect(**rest, windows=windows, changed=tuple(d.get("changed") or ()))
