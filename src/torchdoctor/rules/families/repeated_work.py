"""Work repeated inside the step (``torchdoctor check``): objects built every step that belong
before the loop (an optimizer, a module, a model copy, a DataLoader or its iterator, a hook),
and a module stepped over the slices of one tensor in a Python loop.

The construction watch (``capture/construction.py``) times each construction at its line; the
forward watch counts the calls of one module instance from one line on slices of a tensor.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._run import account, code_at, toggled
from torchdoctor.rules.sites import short_site
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, SeverityPolicy, Variant

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.account_inputs import Account

_WHY = {
    "optimizer": "rebuilt every step it also throws away its state (momentum, Adam's moments)",
    "module": "a module built in the step gets fresh random weights every time and is never "
    "trained",
    "module.to": "inside the loop move only the batch",
    "dataloader": "persistent_workers=True keeps its workers between epochs",
}
"""Why each kind belongs before the loop, said beside the user's own line."""
_MOVE_LINE = {
    "module": "  # move this line to __init__ (or before the loop): " + _WHY["module"],
    "dataloader": "  # move this line before the loop (" + _WHY["dataloader"] + ")",
    "optimizer": "  # move this line before the loop: " + _WHY["optimizer"] + "; a learning "
    "rate that changes per step: set it in the optimizer's param_groups, or a "
    "torch.optim.lr_scheduler",
    "module.to": "  # move this line before the loop; " + _WHY["module.to"],
}
"""Where the user's own line is a statement of its own, the fix is that line, moved."""
_ADVICE = {
    "optimizer": "# build the {what} once, before the loop (or in __init__), and reuse it: "
    + _WHY["optimizer"],
    "module": "# build the {what} once, in __init__ (or before the loop): " + _WHY["module"],
    "module.to": "# move the model to its device once, before the loop; " + _WHY["module.to"],
    "copy": "# keep one average, built once before the loop, instead of copying {model} every "
    "step: ema = torch.optim.swa_utils.AveragedModel({model}, multi_avg_fn="
    "torch.optim.swa_utils.get_ema_multi_avg_fn(0.999)); then ema.update_parameters({model}) "
    "each step",
    "dataloader": "# build the DataLoader once, outside the loop (" + _WHY["dataloader"] + ")",
    "dataloader iterator": "# call iter({loader}) once, before the loop (it = iter({loader}), "
    "then next(it) each step), or loop `for batch in {loader}:`: iter() starts the worker "
    "processes again every time, so next(iter({loader})) in the loop pays their start-up every "
    "step (persistent_workers=True keeps them between epochs)",
    "hook": "# call {what} once, outside the loop, and keep its handle (handle.remove() when "
    "done): hooks registered every step pile up and every backward runs all of them",
}
"""What to change where the line cannot simply move (it returns the object, or is part of a
larger expression, or was not read): said in words with the user's own names, never as code
that would not run where it is pasted."""
_ARG = re.compile(r"(?:deepcopy|iter)\(\s*([A-Za-z_][\w.]*)\s*\)")


def _own_statement(code: str) -> bool:
    """Whether ``code`` is one simple statement that can move as it is: an assignment or a
    bare call (not a ``return``, not a block header, not part of a larger statement)."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return False
    return len(body) == 1 and isinstance(body[0], ast.Assign | ast.AnnAssign | ast.Expr)


def _names(code: str, kind: str) -> dict[str, str]:
    m = _ARG.search(code)
    name = m.group(1) if m else ""
    return {"model": name or "the model", "loader": name or "loader"}


def repeat_fix(rows: list[dict[str, Any]]) -> str:
    """One entry per kind of construction, at its site: the user's own line, to move, where it
    is a statement of its own; else what to change, in words with the user's names."""
    out = []
    for r in rows[:4]:
        kind = str(r["kind"])
        what = str(r.get("what") or "")
        if kind == "hook":
            what = what.split(".")[-1]
        code = str(r.get("code") or "").strip()
        if kind in _MOVE_LINE and code and not code.startswith("#") and _own_statement(code):
            out.append(code + _MOVE_LINE[kind] + f"\n# (now at {r['site']})")
            continue
        template = _ADVICE.get(kind, "# move {what} out of the loop")
        text = template.format(what=what or kind, **_names(code, kind))
        if code and kind in _MOVE_LINE:
            text += f" (this line builds it every step: `{code}`)"
        out.append(text + f"\n# (now at {r['site']})")
    return "\n".join(out)


_SEQUENCE_MODULE = {"LSTMCell": "LSTM", "GRUCell": "GRU", "RNNCell": "RNN"}


def loop_fix(module: str, site: str, cell: bool) -> str:
    """One call over the whole tensor instead of a Python loop over its slices at ``site``,
    said in words: the record knows the module's class, not its attribute or its sizes, so no
    code is offered that would not run where it is pasted."""
    if cell:
        seq = _SEQUENCE_MODULE.get(module, "LSTM")
        return (
            f"# replace the nn.{module} stepped over the sequence at {site} by one nn.{seq} "
            f"with the cell's sizes (nn.{seq}(input_size, hidden_size, batch_first=True), built "
            f"in __init__), called once on the whole sequence: out, state = rnn(seq)\n"
            "# (a loop is needed only when each step's input depends on the previous output)"
        )
    return (
        f"# call the {module} once on the whole batch instead of once per slice at {site} "
        "(the loop's module applied to the stacked input)\n"
        "# (per-sample code that cannot batch: torch.func.vmap(fn)(x))"
    )


CONSTRUCTION_SPEC = FindingSpec(
    id="repeated-construction",
    label="construction repeated inside the step",
    title="{what} built {per_step:.1f}x per step inside the loop at {site}",
    severity=SeverityPolicy(floor="warning"),
    threshold=th.REPEAT_PER_STEP,
    fix=repeat_fix,
    explanation="Work that builds the same object every step (an optimizer, a module, a "
    "model copy, a DataLoader, a hook) belongs before the loop; rebuilt, it costs its "
    "construction every step and often loses state (optimizer moments, trained weights).",
    doc_url=f"{fx.DOCS}/optim.html#how-to-use-an-optimizer",
    variants=(
        (
            "state",  # an optimizer rebuilt every step: its step() creates its state again
            Variant(
                title="{what} built {per_step:.1f}x per step inside the loop at {site}; its "
                "step() re-creates the optimizer's state: {state_ms:.1f} ms per step"
            ),
        ),
    ),
)


def _per_step_minimum(kind: str) -> float:
    """How often a kind must be built per measured step to be inside the loop: a DataLoader
    iterator nearly every step (``ITER_PER_STEP``: fewer is an epoch loop), the rest at the
    spec's threshold."""
    if kind == "dataloader iterator":
        return float(th.ITER_PER_STEP)
    return float(CONSTRUCTION_SPEC.threshold or 0.0)


def measure_construction(run: RunRecord) -> Measured | None:
    """Objects built at one line often enough per measured step to be inside the loop
    (``value``: the most often built, per step); saving: their time, and what rebuilding
    costs besides (an optimizer's state, new workers' first batch, hooks piling up)."""
    acc, step = account(run), run.step_ms
    measured = run.steps.measured_steps
    if not acc.repeats or not measured or not step:
        return None
    rows = [r for r in acc.repeats if r.calls / measured >= _per_step_minimum(r.kind)]
    if not rows:
        return None
    saving, state_ms = 0.0, 0.0
    for r in rows:
        timed = r.seconds * 1e3 / measured
        saving += max(
            timed, acc.lines.inclusive_ms(r.site) if r.kind in ("module", "copy") else 0.0
        )
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
    title: dict[str, Any] = {
        "what": f"{top.what or top.kind} ({top.kind})",
        "per_step": top.calls / measured,
        "site": short_site(top.site),
        "state_ms": state_ms,
    }
    evidence: dict[str, Any] = {"constructions": [r.raw for r in rows], "measured_steps": measured}
    kept_ms, _, measured_ev = toggled(acc, CONSTRUCTION_SPEC.id, step)
    saving_from = (
        "construction timed at its line + the state-creating operators (zeros_like, clone...) "
        "inside Optimizer.step in the trace (a lower bound: the Python that makes the state is "
        "not counted)"
    )
    if kept_ms is not None and any(r.kind == "optimizer" for r in rows):
        # check ran steps with the optimizer's state kept from one to the next, interleaved
        # with the script's own: what rebuilding costs where it lands (step() creating the
        # state again and whatever its first step does besides). The trace's state operators
        # stay the floor: four pairs of steps on a busy machine can read less than they cost.
        evidence.update(measured_ev, trace_state_init_ms_per_step=round(state_ms, 4))
        state_ms = max(kept_ms, state_ms)
        saving_from = (
            "construction timed at its line + what the step saved with the optimizer's state "
            "kept from step to step (check's extra steps, interleaved with the script's own; "
            "never under the state-creating operators inside Optimizer.step in the trace)"
        )
    if state_ms > 0:
        evidence.update(
            construction_ms_per_step=round(saving, 4),
            state_init_ms_per_step=round(state_ms, 4),
            saving_from=saving_from,
        )
    title["state_ms"] = state_ms
    return Measured(
        value=max(r.calls / measured for r in rows),
        saving_ms=saving + state_ms,
        title=title,
        evidence=evidence,
        fix={"rows": [{**r.raw, "code": code_at(acc, r.site)} for r in rows]},
        where=tuple(r.site for r in rows[:8]),
        variant="state" if state_ms > 0 else None,
    )


def _state_init_ms(run: RunRecord) -> float:
    """Per step: the trace's state-creating operators inside ``Optimizer.step``
    (``capture/trace_ops.py``); 0 when the trace was not read."""
    value = run.ops.get("optimizer_state_init_ms_per_step")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def _function_ms(acc: Account, functions: tuple[tuple[str, str], ...]) -> float:
    """ms per step inside these (file, function) pairs: the inclusive time of their lines."""
    wanted = set(functions)
    return sum(row.inclusive_ms for row in acc.lines.rows if (row.file, row.function) in wanted)


LOOP_SPEC = FindingSpec(
    id="module-call-loop",
    label="a module stepped in a Python loop",
    title="{module} called {calls} times per step at {site}, each on a slice of a larger tensor: "
    "a Python loop over {over}",
    fix=loop_fix,
    explanation="Each call runs the module's small operators (and, when training, their "
    "backward, which also adds every slice's gradient into a full-size zero tensor) one "
    "slice at a time. One call over the whole sequence (nn.LSTM / nn.GRU / nn.RNN, one "
    "fused kernel) or the whole batch does the same work in a few large operators.",
    doc_url=f"{fx.DOCS}/generated/torch.nn.LSTM.html",
)


def measure_loop(run: RunRecord) -> Measured | None:
    """A module instance called ``LOOP_CALLS`` times or more from one user line in a step, on
    slices of one tensor (an RNN cell over time steps, a model over samples; any one fires);
    saving: an estimate from the loop line's forward time (``LOOP_SAVING``)."""
    acc, step = account(run), run.step_ms
    loops = [r for r in acc.forwards.loops if r.sliced or r.cell]
    if not loops or not step:
        return None
    top = loops[0]
    site = top.site
    forward_ms = acc.lines.inclusive_ms(site)
    training = top.grad_calls * 2 > top.calls
    factor = float(th.LOOP_SAVING) if training else float(th.LOOP_SAVING) / 3
    saving = min(step, factor * forward_ms)
    cell = top.cell
    return Measured(
        value=float(top.calls),
        saving_ms=saving,
        title={
            "module": top.module,
            "calls": top.calls,
            "site": short_site(site),
            "over": "time steps" if cell else "slices (samples?)",
        },
        evidence={
            "loops": [r.raw for r in loops],
            "site": site,
            "forward_ms_per_step": round(forward_ms, 4),
            "training": training,
            "estimated": True,
        },
        fix={"module": top.module, "site": short_site(site), "cell": cell},
        where=tuple(r.site for r in loops[:4]),
    )


RULES = (
    RunRule(CONSTRUCTION_SPEC, measure_construction),
    RunRule(LOOP_SPEC, measure_loop),
)
