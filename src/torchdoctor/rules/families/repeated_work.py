"""Work repeated inside the step (``torchdoctor check``): objects built every step that belong
before the loop (an optimizer, a module, a model copy, a DataLoader or its iterator, a hook),
and a module stepped over the slices of one tensor in a Python loop.

The construction watch (``capture/construction.py``) times each construction at its line; the
forward watch counts the calls of one module instance from one line on slices of a tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._run import account, code_at, short
from torchdoctor.rules.spec import FindingSpec, Measured, RunRule, SeverityPolicy, Variant

if TYPE_CHECKING:
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.account_inputs import Account

_REPEAT_FIX = {
    "optimizer": "optimizer = torch.optim.{what}(model.parameters(), ...)  # once, before the "
    "loop: rebuilt every step it also throws away its state (momentum, Adam's moments)",
    "module": "# build the {what} once, in __init__ (or before the loop): a module built in the "
    "step gets fresh random weights every time and is never trained",
    "module.to": "model.to(device)  # once, before the loop; inside it move only the batch",
    "copy": "ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn="
    "torch.optim.swa_utils.get_ema_multi_avg_fn(0.999))  # once; then ema.update_parameters("
    "model) each step, instead of copying the model",
    "dataloader": "# build the DataLoader once, outside the loop "
    "(persistent_workers=True keeps its workers between epochs)",
    "dataloader iterator": "it = iter(loader)  # once (or loop `for batch in loader:`); "
    "iter() starts the worker processes again every time: next(iter(loader)) in the loop pays "
    "their start-up every step (persistent_workers=True keeps them between epochs)",
    "hook": "# call {what} once, outside the loop, and keep its handle (handle.remove() when "
    "done): hooks registered every step pile up and every backward runs all of them",
}
_MOVE_LINE = {
    "module": "  # move this line to __init__ (or before the loop): a module built in the step "
    "gets fresh random weights every time and is never trained",
    "dataloader": "  # move this line before the loop (persistent_workers=True keeps its workers "
    "between epochs)",
}
"""Where the user's own line is known, the fix is that line, moved."""


def repeat_fix(rows: list[dict[str, Any]]) -> str:
    """One line per kind of construction, at its site: the user's own line where it is known
    (``code``) for what only their arguments can build, else the pattern."""
    out = []
    for r in rows[:4]:
        kind = str(r["kind"])
        what = str(r.get("what") or "")
        if kind == "hook":
            what = what.split(".")[-1]
        code = str(r.get("code") or "").strip()
        if kind in _MOVE_LINE and code and not code.startswith("#"):
            out.append(code + _MOVE_LINE[kind] + f"\n# (now at {r['site']})")
            continue
        template = _REPEAT_FIX.get(kind, "# move {what} out of the loop")
        out.append(template.format(what=what or "...") + f"\n# (now at {r['site']})")
    return "\n".join(out)


_SEQUENCE_MODULE = {"LSTMCell": "LSTM", "GRUCell": "GRU", "RNNCell": "RNN"}


def loop_fix(module: str, site: str, cell: bool) -> str:
    """One call over the whole tensor instead of a Python loop over its slices at ``site``."""
    if cell:
        seq = _SEQUENCE_MODULE.get(module, "LSTM")
        return (
            f"self.rnn = nn.{seq}(input_size, hidden_size, batch_first=True)  # in __init__, "
            f"instead of the nn.{module}\n"
            f"out, state = self.rnn(x)  # the whole sequence in one call, instead of the loop at "
            f"{site}\n"
            "# (a loop is needed only when each step's input depends on the previous output)"
        )
    return (
        f"out = model(x)  # the {module}, called once on the whole batch instead of once per "
        f"slice at {site}\n"
        "# (per-sample code that cannot batch: torch.func.vmap(fn)(x))"
    )


CONSTRUCTION_SPEC = FindingSpec(
    id="repeated-construction",
    label="construction repeated inside the step",
    title="{what} built {per_step:.1f}x per step inside the loop at {site}",
    sources=("run",),
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
    title: dict[str, Any] = {
        "what": f"{top.what or top.kind} ({top.kind})",
        "per_step": top.calls / measured,
        "site": short(top.site),
        "state_ms": state_ms,
    }
    evidence: dict[str, Any] = {"constructions": [r.raw for r in rows], "measured_steps": measured}
    if state_ms > 0:
        evidence.update(
            construction_ms_per_step=round(saving, 4),
            state_init_ms_per_step=round(state_ms, 4),
            saving_from="construction timed at its line + the state-creating operators "
            "(zeros_like, clone...) inside Optimizer.step in the trace (a lower bound: the "
            "Python that makes the state is not counted)",
        )
    return Measured(
        value=max(r.calls / measured for r in rows),
        saving_ms=saving + state_ms,
        share=(saving + state_ms) / step,
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
    sources=("run",),
    severity=SeverityPolicy(),
    threshold=None,
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
    forward_ms = acc.inclusive_ms(site)
    training = top.grad_calls * 2 > top.calls
    factor = float(th.LOOP_SAVING) if training else float(th.LOOP_SAVING) / 3
    saving = min(step, factor * forward_ms)
    cell = top.cell
    return Measured(
        value=float(top.calls),
        saving_ms=saving,
        share=saving / step,
        title={
            "module": top.module,
            "calls": top.calls,
            "site": short(site),
            "over": "time steps" if cell else "slices (samples?)",
        },
        evidence={
            "loops": [r.raw for r in loops],
            "site": site,
            "forward_ms_per_step": round(forward_ms, 4),
            "training": training,
            "estimated": True,
        },
        fix={"module": top.module, "site": short(site), "cell": cell},
        where=tuple(r.site for r in loops[:4]),
    )


RULES = (
    RunRule(CONSTRUCTION_SPEC, measure_construction),
    RunRule(LOOP_SPEC, measure_loop),
)
