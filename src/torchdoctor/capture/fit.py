"""Make the trace analyser's findings fit the run ``check`` watched: a fix that says
``torch.compile(model)`` for a model the script already compiles becomes the next step that
applies, one for a model it does not compile says after which line of the script
(``place_compile``), a statement whose names the script lacks is a comment
(``capture/fit_names.py``), and no finding points into torchdoctor's own code."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchdoctor.capture.fit_names import fit_names
from torchdoctor.capture.own_frames import is_ours
from torchdoctor.record.lines import LineRow, LineTable
from torchdoctor.record.rows import Optimizer
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.optimizer_fixes import for_loop_optimizers
from torchdoctor.rules.thresholds import WARNING_SHARE
from torchdoctor.rules.user_fixes import compiled_next_step

_COMPILE_ADVICE = "torch.compile(model"


def _next_step(run: RunRecord) -> str:
    c = run.compile
    optim = for_loop_optimizers(run)
    sites = len({b.site for b in c.graph_breaks})
    return compiled_next_step(c.compile_calls, sites, run.gpu is not None, optim)


def _input_pipeline(f: Finding, lines: LineTable) -> Finding | None:
    """The trace's ``input-pipeline`` finding seen through the line table: time the collector
    took is not the input pipeline (a ``gc.collect()`` at the end of a step shows in the
    trace as the next step starting outside torch), and the user's lines outside torch
    operators are where the batch is produced. None when nothing is left of it."""
    if not lines.rows:
        return f
    step = f.saving_ms_per_step / f.share_of_step if f.share_of_step else 0.0
    saving = max(0.0, f.saving_ms_per_step - lines.gc_ms_per_step)
    if not step or saving < WARNING_SHARE * step:
        return None
    where = f.where or [
        r.site
        for r in sorted(lines.rows, key=lambda r: -_outside_ops(r))[:3]
        if _outside_ops(r) > 0
    ]
    changes: dict[str, Any] = {}
    row = next((r for r in lines.rows if where and r.site == where[0]), None)
    if row is not None and _outside_ops(row) > 0:
        changes["title"] = f.title + _measured_at(row)
        blocking = _blocking_call(row)
        if blocking is not None and not f.evidence.get("dataloader_in_trace"):
            # not a batch being produced: the loop waits in a sleep or I/O at the user's line
            from torchdoctor.rules.mode_fixes import unexplained_fix

            changes["fix"] = unexplained_fix(blocking, row.site, [])
    return dataclasses.replace(
        f,
        saving_ms_per_step=round(saving, 4),
        share_of_step=round(saving / step, 4),
        where=where,
        **changes,
    )


_OUTSIDE_OPS = {
    "Python": "runs Python",
    "I/O": "is in file or socket I/O",
    "sleep/wait": "sleeps or waits",
}


def _measured_at(row: LineRow) -> str:
    """What the line table sampled at the wait's main line, for the title: the largest of its
    time outside torch operators, at that line (``; at data.py:10 (fetch) the loop sleeps or
    waits``). A sleep in a helper the loop calls is named as a sleep, not as a batch made."""
    top = max(_OUTSIDE_OPS, key=lambda k: row.under.get(k, 0.0))
    name = f"{Path(row.file).name}:{row.site.rpartition(':')[2]}"
    in_function = f" ({row.function})" if row.function and row.function != "<module>" else ""
    return f"; at {name}{in_function} the loop {_OUTSIDE_OPS[top]}"


def _blocking_call(row: LineRow) -> str | None:
    """The category (``sleep/wait`` or ``I/O``) when the main line of the wait spends most of
    its time outside torch in a sleep or a wait, or in file or socket I/O, rather than in
    Python making a batch."""
    outside = _outside_ops(row)
    for category in ("sleep/wait", "I/O"):
        if row.under.get(category, 0.0) >= 0.5 * outside:
            return category
    return None


def _op_lines(lines: LineTable) -> list[str]:
    """The user's lines under which most operator time runs (where the small operators come
    from: a forward, a hook, a print that formats a tensor element by element)."""

    def ops_ms(row: LineRow) -> float:
        return row.under.get("torch ops", 0.0)

    return [r.site for r in sorted(lines.rows, key=lambda r: -ops_ms(r))[:3] if ops_ms(r) > 0]


def _outside_ops(row: LineRow) -> float:
    return sum(row.under.get(k, 0.0) for k in _OUTSIDE_OPS)


def _restarts_workers(findings: list[Finding]) -> bool:
    """A repeated-construction finding says the DataLoader's workers restart every step."""
    for f in findings:
        if f.id == "repeated-construction":
            rows = f.evidence.get("constructions") or []
            if any(r.get("kind") == "dataloader iterator" for r in rows):
                return True
    return False


def fit_to_run(findings: list[Finding], record: dict[str, Any]) -> list[Finding]:
    """``findings`` with fixes adapted to what the run already does and our frames removed."""
    run = RunRecord.from_dict(record)
    if _restarts_workers(findings):
        # The batches wait for workers that start again every step: more workers (the
        # DataLoader fix) would make it worse; the repeated-construction finding has the fix.
        findings = [f for f in findings if f.id not in ("dataloader-config", "data-loading-bound")]
    out = []
    for f in findings:
        if f.id in ("dataloader-config", "data-loading-bound"):
            f = _preempted_wait(f, run)
        if f.id == "input-pipeline":
            if run.steps.source == "forward":
                # a step timed by the model's calls opens inside the call: the time before its
                # first operator is the model's own Python (host-bound's), and the next input
                # is made at the step's end, not its start
                continue
            fitted = _input_pipeline(f, run.lines)
            if fitted is None:
                continue
            f = fitted
        if f.id == "host-bound" and not f.where:
            f = dataclasses.replace(f, where=_op_lines(run.lines))
        changes: dict[str, Any] = {}
        if run.compile.compiled and _COMPILE_ADVICE in f.fix:
            changes["fix"] = _next_step(run)
        fix = _fit_fix(f, run)
        if fix is not None and fix != f.fix:
            changes["fix"] = fix
        if not run.compile.compiled:  # a compiled model's fix replaces its own compile call
            placed = place_compile(changes.get("fix", f.fix), run.config.optimizers)
            if placed != changes.get("fix", f.fix):
                changes["fix"] = placed
        named = fit_names(changes.get("fix", f.fix), run.script)
        if named != changes.get("fix", f.fix):
            changes["fix"] = named
        where = [w for w in f.where if not is_ours(w)]
        if where != f.where:
            changes["where"] = where
        out.append(dataclasses.replace(f, **changes) if changes else f)
    return _without_duplicate_input(out)


def _preempted_wait(f: Finding, run: RunRecord) -> Finding:
    """A loader finding as info where other processes held the cores (``cpu_rules.contention``)
    and the typical step (the median after the first) waited under ``DATA_WAIT_MIN_MS``: its
    mean is a few fetches preempted for tens of ms, not the loader (a healthy control's index
    lookup, 0.4 ms in most steps, read 12.5 ms on average with the main thread waiting for a
    core 91% of the window). Workers started again each epoch wait in a few steps by nature:
    that wording is kept."""
    from statistics import median

    from torchdoctor.rules.cpu_rules import contention
    from torchdoctor.rules.thresholds import DATA_WAIT_MIN_MS

    waits = list(run.steps.data_wait_ms)[1:]
    if f.severity == "info" or len(waits) < 3 or "restart_ms_per_step" in f.evidence:
        return f
    from torchdoctor.rules.families.loader import withheld_wait

    held = withheld_wait(run)
    if held is not None:
        # the run judged the wait the CPU's (its fetches sampled waiting for a core); the
        # trace's finding of the same problem, merged into it, cannot tell and does not raise it
        note = ""
        if "core_wait_ms_per_step" not in f.evidence:
            note = f" ({held[1]:.1f} ms of it waiting for a CPU core other processes held)"
        return dataclasses.replace(f, severity="info", title=f.title + note)
    if "batch_every_ms" in f.evidence:
        # the run judged the workers to keep up (loader's hand-off wording): the trace's finding
        # merged into it sees only the wait, and no setting of the loader removes what is left
        return dataclasses.replace(f, severity="info", saving_ms_per_step=0.0, share_of_step=0.0)
    busy = contention(run.cpu)
    typical = median(waits)
    if busy is None or typical >= DATA_WAIT_MIN_MS:
        return f
    note = f" (the typical step waited {typical:.1f} ms: the mean is fetches preempted; {busy})"
    return dataclasses.replace(f, severity="info", title=f.title + note)


def _without_duplicate_input(findings: list[Finding]) -> list[Finding]:
    """Drop ``input-pipeline`` when its main line is another finding's: the time at the start
    of the step outside torch is that finding's cause (hooks registered every step, a copy of
    the model), named there with its own fix."""
    inputs = [f for f in findings if f.id == "input-pipeline" and f.where]
    if not inputs:
        return findings
    named = {w for f in findings if f.id != "input-pipeline" for w in f.where}
    return [f for f in findings if not (f in inputs and f.where[0] in named)]


def _fit_fix(f: Finding, run: RunRecord) -> str | None:
    """The trace analyser's fixed texts made to fit the run: DDP under gradient accumulation
    gets no_sync (its all-reduce runs once per micro-batch), and a CPU run's input fixes lose
    pin_memory and get workers for the CPUs this rank has."""
    from torchdoctor.rules import fixes as fx

    if f.id == "exposed-communication" and run.config.ddp:
        k = run.config.micro_batches_per_step
        if k >= 1.5:
            if "skew_wait_ms_per_step" in f.evidence:  # fewer collectives: fewer waits too
                return fx.no_sync_fix(k) + "\n# and the late rank's extra work:\n" + f.fix
            return fx.no_sync_fix(k)
    if f.id in ("input-pipeline", "data-loading-bound") and run.gpu is None:
        from torchdoctor.capture.cpu_usage import usable_cores

        asked = next((d.cpus for d in run.config.dataloaders), 0)
        cpus = max(1, min(8, int(asked or usable_cores())))
        text = f.fix.replace(", pin_memory=True", "").replace("pin_memory=True, ", "")
        text = text.replace("num_workers=min(8, os.cpu_count())", f"num_workers={cpus}")
        return text.replace("num_workers=4", f"num_workers={cpus}")
    return None


_COMPILE_LINE = re.compile(r"^(?P<name>\w+) = torch\.compile\((?P=name)\)(?P<rest>[^\n]*)$", re.M)
_PARAMS = re.compile(r"^(?P<name>\w+)\.parameters\(\)$")


def place_compile(fix: str, optimizers: Sequence[Optimizer]) -> str:
    """``fix`` with its ``model = torch.compile(model)`` line told where it goes: after the
    statement that last binds that model before the optimizer call that takes its parameters
    (``SGD(net.parameters(), ...)`` at FILE:LINE, in the same function), and named for it
    (``net = torch.compile(net)``). Unchanged when the line already has a place, or no recorded
    optimizer call names a model the script binds by a plain name."""
    m = _COMPILE_LINE.search(fix)
    if m is None or " at " in m.group("rest"):
        return fix
    for opt in optimizers:
        if opt.call is None:
            continue
        args, site = opt.call.args, opt.call.site
        model = _PARAMS.match(args[0]) if args else None
        path, _, line = site.rpartition(":")
        if model is None or not line.isdigit():
            continue
        after = _binding_line(path, int(line), model.group("name"))
        if after is None:
            continue
        from torchdoctor.rules.sites import relative_site

        name, rest = model.group("name"), m.group("rest").lstrip()
        why = rest[1:].strip() if rest.startswith("#") else rest
        where = relative_site(f"{path}:{after}")
        text = f"{name} = torch.compile({name})  # after the line at {where}" + (
            f": {why}" if why else ""
        )
        return fix[: m.start()] + text + fix[m.end() :]
    return fix


def _binding_line(path: str, line: int, name: str) -> int | None:
    """The last line of the statement that last binds ``name`` before ``line`` in the function
    (or module) around ``line`` of ``path``; None when none does or the file cannot be read."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    scope: ast.AST = tree
    for n in ast.walk(tree):
        end = getattr(n, "end_lineno", None) or 0
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.lineno <= line <= end:
            scope = n  # ast.walk goes outside in: the innermost function is the last one
    best: ast.stmt | None = None
    for n in _own_nodes(scope):
        if (
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
            and (n.end_lineno or n.lineno) < line
            and (best is None or n.lineno > best.lineno)
        ):
            best = n
    return (best.end_lineno or best.lineno) if best is not None else None


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside the functions and classes defined inside it."""
    out, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        n = todo.pop()
        out.append(n)
        if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(n))
    return out
