"""Run-level rules about the step's account: global modes left on, forwards that record
autograd graphs for nothing, construction repeated inside the step, float64 compute, garbage
collection, kernel backends switched off.

Where ``check`` switched a mode for a few extra steps (``capture/experiments.py``) the saving
is measured: ``1 - changed / baseline`` (interleaved medians) of the mean step. Elsewhere it is
an estimate whose reason is in ``rules/thresholds.py``, and the evidence says which.
"""

from __future__ import annotations

from typing import Any

from torchdoctor.record.account import DtypeWork
from torchdoctor.record.run import RunRecord
from torchdoctor.rules import mode_fixes as mf
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.account_inputs import Account
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec
from torchdoctor.rules.run_common import make


def _measured(acc: Account, fid: str, step: float) -> tuple[float | None, str, dict[str, Any]]:
    """(saving ms or None, title suffix, evidence) from the toggle of finding ``fid``."""
    e = acc.experiment(fid)
    if e is None or e.ratio is None:
        return None, "", {}
    ratio = e.ratio
    ev = {"measured": e.raw}
    base, changed = e.baseline_median_ms or 0.0, e.changed_median_ms or 0.0
    text = f": measured {base:.1f} ms per step with it, {changed:.1f} ms with {e.toggle}"
    return max(0.0, (1.0 - ratio) * step), text, ev


def anomaly_detection(run: RunRecord) -> list[Finding]:
    """Anomaly detection on during the measured steps; saving measured by switching it off."""
    acc, step = Account.from_record(run), run.step_ms
    share = acc.mode_share("anomaly_detection")
    on = acc.modes.anomaly_detection or share >= th.MODE_ON_SHARE
    if not on or not step:
        return []
    saving, text, ev = _measured(acc, "anomaly-detection", step)
    estimated = saving is None
    if saving is None:
        saving = th.ANOMALY_SAVING * step
    measured_little = not estimated and saving < th.TOGGLE_GAIN * step
    sites = acc.setter_sites("set_detect_anomaly", "detect_anomaly")
    s = spec("anomaly-detection")
    return [
        make(
            run,
            s.id,
            s.format_title(measured=text),
            saving,
            {"sampled_share_on": share, "estimated": estimated, "sites": sites, **ev},
            mf.anomaly_fix(sites),
            where=sites,
            severity="info" if measured_little else None,
        )
    ]


def deterministic_algorithms(run: RunRecord) -> list[Finding]:
    """Deterministic algorithms on; saving measured by switching them off (else 0, info)."""
    acc, step = Account.from_record(run), run.step_ms
    share = acc.mode_share("deterministic_algorithms")
    on = acc.modes.deterministic_algorithms or share >= th.MODE_ON_SHARE
    if not on or not step:
        return []
    saving, text, ev = _measured(acc, "deterministic-algorithms", step)
    measured_gain = saving is not None and saving >= th.TOGGLE_GAIN * step
    sites = acc.setter_sites("use_deterministic_algorithms", value=True)
    s = spec("deterministic-algorithms")
    return [
        make(
            run,
            s.id,
            s.format_title(measured=text or " (cost not measured: --full or torchrun)"),
            saving or 0.0,
            {"sampled_share_on": share, "sites": sites, **ev},
            mf.deterministic_fix(sites, run.gpu is not None),
            where=sites,
            severity=None if measured_gain else "info",
        )
    ]


def few_intra_op_threads(run: RunRecord) -> list[Finding]:
    """Fewer intra-op threads than cores, chosen by the script or its environment, and more
    threads measured faster inside the run."""
    acc, step = Account.from_record(run), run.step_ms
    threads, cores = acc.modes.intra_op_threads, acc.modes.cores_per_rank
    if not step or threads is None or cores is None or threads >= cores:
        return []
    e = acc.experiment("few-intra-op-threads")
    if e is None:
        return []
    saving, text, ev = _measured(acc, "few-intra-op-threads", step)
    pairs = e.pair_ratios
    if (
        saving is None
        or saving < th.THREADS_GAIN * step
        or sum(r < 1 for r in pairs) * 2 <= len(pairs)
    ):
        return []  # more threads were not clearly faster here: the choice stands
    sites = acc.setter_sites("set_num_threads")
    env = acc.modes.thread_env
    s = spec("few-intra-op-threads")
    return [
        make(
            run,
            s.id,
            s.format_title(threads=threads, cores=cores, measured=text),
            saving,
            {"intra_op_threads": threads, "cores_per_rank": cores, "thread_env": env, **ev},
            mf.threads_fix(cores, sites, env),
            where=sites,
        )
    ]


def grad_without_backward(run: RunRecord) -> list[Finding]:
    """Outermost forwards whose recorded graphs never reached a backward."""
    acc, step = Account.from_record(run), run.step_ms
    unreached = acc.forwards.unreached
    if not unreached or not step:
        return []
    sites = [r.site for r in unreached]
    saving, text, ev = _measured(acc, "grad-without-backward", step)
    estimated = saving is None
    if saving is None:  # not measured (--full, torchrun): the estimate
        saving = th.NO_GRAD_SAVING * sum(acc.inclusive_ms(site) for site in sites)
    # Measured without a clear gain (a forward of large operators gains little on a CPU): for
    # the record; the graph still holds the activations in memory until it is freed.
    little = not estimated and saving < th.TOGGLE_GAIN * step
    code = {site: _code(acc, site) for site in sites}
    s = spec("grad-without-backward")
    calls = sum(r.graphs for r in unreached)
    return [
        make(
            run,
            s.id,
            s.format_title(n=calls, sites=", ".join(_short(x) for x in sites[:2]), measured=text),
            saving,
            {"forwards": [r.raw for r in unreached], "sites": sites, "estimated": estimated, **ev},
            mf.no_grad_fix(sites, code),
            where=sites,
            severity="info" if little else None,
        )
    ]


def repeated_construction(run: RunRecord) -> list[Finding]:
    """Objects built at one line at least every other measured step; saving: their time."""
    acc, step = Account.from_record(run), run.step_ms
    measured = run.steps.measured_steps
    if not acc.repeats or not measured or not step:
        return []
    rows = [
        r
        for r in acc.repeats
        if r.calls / measured
        >= (th.ITER_PER_STEP if r.kind == "dataloader iterator" else th.REPEAT_PER_STEP)
    ]
    if not rows:
        return []
    saving, state_ms = 0.0, 0.0
    for r in rows:
        timed = r.seconds * 1e3 / measured
        saving += max(timed, acc.inclusive_ms(r.site) if r.kind in ("module", "copy") else 0.0)
        if r.kind == "optimizer":
            # the cost lands in step(): a new optimizer creates its state (Adam's moments,
            # SGD's momentum buffers) on its first step, every step when rebuilt every step
            state_ms += _state_init_ms(run) * min(1.0, r.calls / measured)
        if r.kind == "dataloader iterator":
            # the first batch from new workers waits for them to start: the data wait
            saving += run.steps.mean_data_wait_ms * min(1.0, r.calls / measured)
        if r.kind == "hook":
            # Hooks registered every step pile up: by step k, k of them run where one would.
            piled = max(1.0, float(run.steps.count) * min(1.0, r.calls / measured))
            saving += _function_ms(acc, r.hook_functions) * (1.0 - 1.0 / piled)
    top = rows[0]
    s = spec("repeated-construction")
    what = f"{top.what or top.kind} ({top.kind})"
    title = s.format_title(what=what, per_step=top.calls / measured, site=_short(top.site))
    evidence: dict[str, Any] = {"constructions": [r.raw for r in rows], "measured_steps": measured}
    if state_ms > 0:
        title += f"; its step() re-creates the optimizer's state: {state_ms:.1f} ms per step"
        evidence.update(
            construction_ms_per_step=round(saving, 4),
            state_init_ms_per_step=round(state_ms, 4),
            saving_from="construction timed at its line + the state-creating operators "
            "(zeros_like, clone...) inside Optimizer.step in the trace (a lower bound: the "
            "Python that makes the state is not counted)",
        )
    return [
        make(
            run,
            s.id,
            title,
            saving + state_ms,
            evidence,
            mf.repeat_fix([{**r.raw, "code": _row_code(acc, r.site)} for r in rows]),
            where=[r.site for r in rows[:8]],
        )
    ]


def _state_init_ms(run: RunRecord) -> float:
    """Per step: the trace's state-creating operators inside ``Optimizer.step``
    (``capture/trace_ops.py``); 0 when the trace was not read."""
    value = run.ops.get("optimizer_state_init_ms_per_step")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def module_call_loop(run: RunRecord) -> list[Finding]:
    """A module instance called ``LOOP_CALLS`` times or more from one user line in a step, on
    slices of one tensor (an RNN cell over time steps, a model over samples); saving: an
    estimate from the loop line's forward time (``LOOP_SAVING``)."""
    acc, step = Account.from_record(run), run.step_ms
    loops = [r for r in acc.forwards.loops if r.sliced or r.cell]
    if not loops or not step:
        return []
    top = loops[0]
    site = top.site
    forward_ms = acc.inclusive_ms(site)
    training = top.grad_calls * 2 > top.calls
    factor = float(th.LOOP_SAVING) if training else float(th.LOOP_SAVING) / 3
    saving = min(step, factor * forward_ms)
    cell = top.cell
    s = spec("module-call-loop")
    return [
        make(
            run,
            s.id,
            s.format_title(
                module=top.module,
                calls=top.calls,
                site=_short(site),
                over="time steps" if cell else "slices (samples?)",
            ),
            saving,
            {
                "loops": [r.raw for r in loops],
                "site": site,
                "forward_ms_per_step": round(forward_ms, 4),
                "training": training,
                "estimated": True,
            },
            mf.loop_fix(top.module, _short(site), cell),
            where=[r.site for r in loops[:4]],
        )
    ]


def float64_compute(run: RunRecord) -> list[Finding]:
    """Most of the counted work in float64; saving: FP64_SAVING of the operator time."""
    acc, step = Account.from_record(run), run.step_ms
    by = acc.roofline.by_dtype
    flops = sum(v.flops for v in by.values())
    nbytes = sum(v.bytes for v in by.values())
    fp64 = by.get("fp64") or DtypeWork()
    basis, share = "FLOPs", (fp64.flops / flops if flops else 0.0)
    if not flops and nbytes:
        basis, share = "bytes moved", fp64.bytes / nbytes
    if share < th.FP64_SHARE or not step:
        return []
    ops_ms = acc.lines.categories.get("torch ops") or 0.0
    if not ops_ms:
        ops_ms = run.op_summary.op_time_ms_per_step or step
    sites = acc.setter_sites("set_default_dtype") + acc.setter_sites("double")
    s = spec("float64-compute")
    return [
        make(
            run,
            s.id,
            s.format_title(share=share, basis=basis),
            th.FP64_SAVING * share * ops_ms,
            {
                "fp64_share": share,
                "basis": basis,
                "by_dtype": acc.roofline.by_dtype_raw,
                "sites": sites,
            },
            mf.fp64_fix(sites),
            where=sites,
        )
    ]


def gc_in_step(run: RunRecord) -> list[Finding]:
    """Garbage collection above GC_SHARE of the step (timed by gc callbacks)."""
    acc, step = Account.from_record(run), run.step_ms
    ms = acc.lines.gc_ms_per_step
    if not step or ms < th.GC_SHARE * step:
        return []
    rows = [r for r in acc.lines.rows if r.under.get("gc")]
    rows.sort(key=lambda r: -r.under["gc"])
    explicit = [r.site for r in rows if "gc.collect" in r.code]
    # the housekeeping watch saw every gc.collect() call and its site, sampled or not
    called = (run.raw.get("config") or {}).get("housekeeping") or []
    explicit += [
        str(r["site"])
        for r in called
        if isinstance(r, dict) and r.get("what") == "gc.collect" and r.get("site")
        if str(r["site"]) not in explicit
    ]
    how = f": gc.collect() at {_short(explicit[0])}" if explicit else " (automatic collections)"
    s = spec("gc-in-step")
    return [
        make(
            run,
            s.id,
            s.format_title(ms=ms, share=ms / step, how=how),
            ms,
            {
                "gc_ms_per_step": ms,
                "collections": acc.lines.gc_collections,
                "sites": [r.site for r in rows[:5]],
            },
            mf.gc_fix(explicit),
            where=explicit or [r.site for r in rows[:3]],
        )
    ]


def backend_disabled(run: RunRecord) -> list[Finding]:
    """oneDNN off on a CPU run, cuDNN off on a CUDA run."""
    acc, step = Account.from_record(run), run.step_ms
    if not step:
        return []
    cuda = run.gpu is not None
    name = "cudnn" if cuda else "mkldnn"
    enabled = acc.modes.enabled(name)
    if enabled is not False or (name == "mkldnn" and acc.modes.mkldnn_available is False):
        return []
    saving, text, ev = _measured(acc, "backend-disabled", step)
    gain = saving is not None and saving >= th.TOGGLE_GAIN * step
    s = spec("backend-disabled")
    return [
        make(
            run,
            s.id,
            s.format_title(name=name, measured=text or " (cost not measured)"),
            saving or 0.0,
            {"backend": name, **ev},
            mf.backend_fix(name),
            severity=None if gain else "info",
        )
    ]


def _function_ms(acc: Account, functions: tuple[tuple[str, str], ...]) -> float:
    """ms per step inside these (file, function) pairs: the inclusive time of their lines."""
    wanted = set(functions)
    return sum(row.inclusive_ms for row in acc.lines.rows if (row.file, row.function) in wanted)


def _code(acc: Account, site: str) -> str:
    row = acc.row(site)
    return row.code if row else ""


def _row_code(acc: Account, site: str) -> str | None:
    """The row's source text as ``repeat_fix`` takes it (None when the line was not sampled)."""
    row = acc.row(site)
    return row.code if row else None


def _short(site: str) -> str:
    """``train.py:42`` for a full path."""
    file, _, line = site.rpartition(":")
    return f"{file.rsplit('/', 1)[-1]}:{line}" if file else site


MODE_RULES = (
    anomaly_detection,
    deterministic_algorithms,
    few_intra_op_threads,
    grad_without_backward,
    repeated_construction,
    module_call_loop,
    float64_compute,
    gc_in_step,
    backend_disabled,
)
