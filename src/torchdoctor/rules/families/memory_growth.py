"""``memory-growth``: resident or device memory rising with the step count
(``analysis/memory_growth.py`` fits it), with its cost: MiB per step, what that comes to over
the job when the script names its length, and how soon the memory still free runs out.

The saving is not time (0 ms): the finding is a risk, kept at its severity (warning; critical
when the job as the script names it would run out of memory). The fix points at the lines of
the script that typically keep a graph alive (``retain_graph=True``, a loss summed as a
tensor), and on CUDA with ``--memory`` at what the allocator's history says holds the memory.
"""

from __future__ import annotations

import ast
import linecache
from typing import TYPE_CHECKING, Any

from torchdoctor.record.values import as_dict
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, SeverityPolicy

if TYPE_CHECKING:
    from torchdoctor.analysis.memory_growth import GrowthFit
    from torchdoctor.record.run import RunRecord

_WORDS = {
    "host": "host memory in use (malloc's, where CPU tensors live)",
    "resident": "resident memory",
    "device": "device memory",
}
GIB = 2**30


def leaking_fits(record: RunRecord | dict[str, Any]) -> list[GrowthFit]:
    """The fits of ``record``'s memory columns that pass every threshold (``record``: the run,
    or the ``run.json`` document the capture side is writing)."""
    # imported here, with statistics: analyze loads this module but never measures it
    from torchdoctor.analysis.memory_growth import growth_of

    if isinstance(record, dict):
        from torchdoctor.record.run import RunRecord

        record = RunRecord.from_dict(record)
    steps = record.steps
    tail = record.options.full and not steps.experiment_steps
    # steps that compiled grow by the compiler's code and graphs: recompiles has that cause
    compiled = [
        int(s)
        for key in ("clean", "after")
        for s in (as_dict(steps.timed.get(key)).get("compiled_steps") or [])
        if isinstance(s, int)
    ]
    fits = growth_of(record.memory_steps, steps.schedule or {}, tail, compiled)
    return [
        f
        for f in fits
        if f.bytes_per_step >= th.MEMORY_GROWTH_PER_STEP
        and f.rising_share >= th.MEMORY_GROWTH_RISING
        and f.fitted_growth_bytes >= th.MEMORY_GROWTH_MIN_BYTES
    ]


def _keeps_graph(node: ast.AST) -> str | None:
    """What a statement does that typically keeps a step's graph alive, None if nothing."""
    if isinstance(node, ast.Call) and any(
        k.arg == "retain_graph" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in node.keywords
    ):
        return "retain_graph=True keeps this step's graph and its saved activations"
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        added = node.value
    elif (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.BinOp)
        and isinstance(node.value.op, ast.Add)
        and isinstance(node.value.left, ast.Name)
        and node.value.left.id == node.targets[0].id
    ):
        added = node.value.right
    else:
        return None
    if isinstance(added, ast.Name) and "loss" in added.id.lower():
        return "sums the loss as a tensor: each step's graph stays referenced"
    return None


def graph_keeping_lines(script: str | None) -> list[tuple[str, str]]:
    """Lines of the script that typically keep a step's graph alive: ``retain_graph=True``
    and a loss summed as a tensor (``total += loss``, ``total = total + loss``), as
    (``file:line``, what it does)."""
    if not script:
        return []
    try:
        tree = ast.parse("".join(linecache.getlines(script)))
    except (SyntaxError, ValueError):
        return []
    found = {
        (node.lineno, what)
        for node in ast.walk(tree)
        if (what := _keeps_graph(node)) is not None and hasattr(node, "lineno")
    }
    return [(f"{script}:{line}", what) for line, what in sorted(found)][:4]


def _free_bytes(fit: GrowthFit, memory: dict[str, Any]) -> int | None:
    if fit.kind == "device":
        total = memory.get("device_total_bytes")
        return int(total) - fit.last_bytes if isinstance(total, int) else None
    free = memory.get("available_bytes")
    return int(free) if isinstance(free, int) else None


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _cost(run: RunRecord, fit: GrowthFit) -> tuple[str, dict[str, Any], bool]:
    """The projection in words, its numbers, and whether the job runs out of memory."""
    from torchdoctor.rules.one_off import job_steps

    memory = run.memory_steps
    evidence: dict[str, Any] = {}
    parts = []
    job = job_steps(run)
    done = len(memory.get("rss_bytes") or memory.get("cuda_allocated_bytes") or [])
    job_growth = None
    if job is not None:
        steps, how = job
        job_growth = fit.bytes_per_step * max(0, steps - done)
        evidence.update(job_steps=steps, job_known_from=how, job_growth_bytes=round(job_growth))
        parts.append(f"{job_growth / GIB:.1f} GiB more by the job's end ({how})")
    free = _free_bytes(fit, memory)
    exhausts = False
    if free is not None and free > 0:
        n = free / fit.bytes_per_step
        evidence.update(free_bytes=free, steps_to_exhaust=round(n))
        when = f"about {n:,.0f} steps"
        if run.step_ms:
            seconds = n * run.step_ms / 1e3
            evidence["seconds_to_exhaust"] = round(seconds, 1)
            when += f", {_duration(seconds)}"
        parts.append(f"the {free / GIB:.1f} GiB still free runs out in {when}")
        exhausts = job_growth is not None and job_growth >= free
    return "; ".join(parts) or "it grows for as long as the job runs", evidence, exhausts


def growth_fix(sites: list[tuple[str, str]], holders: list[dict[str, Any]]) -> str:
    """What keeps each step's tensors alive (``fixes.memory_growth_fix`` at the script's
    ``sites``), and on CUDA with --memory what the allocator's history says holds the memory."""
    from torchdoctor.analysis.memory_growth import MIB

    fix = fx.memory_growth_fix(sites)
    if holders:
        fix += "\n# what holds the device memory (allocation sites, --memory): " + "; ".join(
            f"{h['where']} {h.get('bytes', 0) / MIB:.0f} MiB" for h in holders[:3]
        )
    return fix


SPEC = FindingSpec(
    id="memory-growth",
    label="memory growing every step",
    title="{kind} grows {mib:.1f} MiB per step (it rose after {rising:.0%} of "
    "{steps} clean steps): {projection}",
    severity=SeverityPolicy(fixed="warning", risk=True),
    threshold=th.MEMORY_GROWTH_PER_STEP,
    fix=growth_fix,
    explanation="Something keeps each step's tensors alive into the next (a graph kept by "
    "retain_graph=True, a loss summed as a tensor, outputs kept with their graph): memory "
    "grows until the process is killed or the device runs out.",
    doc_url=f"{fx.DOCS}/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
)


def measure(run: RunRecord) -> tuple[Measured, ...]:
    """Each memory column rising with the step count over the clean steps (``value``: its
    slope in bytes per step), a finding each; saving 0 ms (a risk), critical when the job as
    the script names it would run out of memory."""
    from torchdoctor.analysis.memory_growth import MIB

    out = []
    sites = graph_keeping_lines(run.script)
    for fit in leaking_fits(run):
        projection, cost, exhausts = _cost(run, fit)
        title = {
            "kind": _WORDS[fit.kind],
            "mib": fit.bytes_per_step / MIB,
            "rising": fit.rising_share,
            "steps": fit.steps,
            "projection": projection,
        }
        snapshot = run.memory_steps.get("snapshot") or {}
        holders = snapshot.get("top_holders") or [] if fit.kind == "device" else []
        where = [s for s, _ in sites] + [str(h["where"]) for h in holders if h.get("where")]
        evidence = {"growth": fit.to_dict(), **cost}
        if holders:
            evidence["held_by"] = holders
        out.append(
            Measured(
                value=fit.bytes_per_step,
                title=title,
                evidence=evidence,
                fix={"sites": sites, "holders": holders},
                where=tuple(where),
                least="critical" if exhausts else None,
            )
        )
    return tuple(out)


RULES = (RunRule(SPEC, measure),)
