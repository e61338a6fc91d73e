"""``work-beside-step``: time in the loop that is not training's, found in the sampled line
table (``record/lines.py``).

Each sampled row says which library call its self time was in (``calls``). A call is

- the **step**'s: the model's forward (a module call, ``nn.functional``), backward (autograd),
  the optimizer (``torch.optim``, ``zero_grad``), the input (``torch.utils.data``), AMP, compiled
  code, collectives;
- **beside** it: a copy of state (``copy.deepcopy``, ``Module.state_dict``,
  ``Tensor.__deepcopy__``, pickling), walking a module's parameters, printing tensors;
- the line's **own** (``""``): its Python, or the operators it calls directly;
- another **library**'s, or unknown: never counted either way.

A function of the user's that makes no step call (a helper: ``keep_best``, ``update_ema``)
counts its calls beside the step and its own operators when copies and element-wise updates are
most of them; a function that does make step calls (the loop, a ``train_step``) counts only its
calls beside the step, and the own operators of a line that makes one (a dict of cloned state
tensors built in the loop). The loss written inline, the input built in a ``get_batch`` helper
(indexing, stacking) and a library's own loop are never counted. Plain data; no torch import.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from torchdoctor.record.lines import LineRow, LineTable
from torchdoctor.record.run import RunRecord
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.account_inputs import repeat_sites
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.loop_lines import loop_line_of, vectorise_fix
from torchdoctor.rules.registry import spec
from torchdoctor.rules.run_common import make
from torchdoctor.rules.sites import relative_site

ID = "work-beside-step"

STEP, BESIDE, OWN, LIBRARY = "step", "beside", "own", "library"

_STEP_OWNERS = frozenset(
    {
        "torch:autograd",
        "torch:optim",
        "torch:utils",
        "torch:amp",
        "torch:cuda",
        "torch:distributed",
        "torch:_dynamo",
        "torch:_compile",
        "torch:_functorch",
        "torch:fx",
        "torch:_inductor",
    }
)
_BESIDE_OWNERS = frozenset(
    {
        "stdlib:copy",
        "stdlib:copyreg",
        "stdlib:pickle",
        "stdlib:json",
        "stdlib:logging",
        "torch:_tensor_str",
    }
)
_BESIDE_MODULE = frozenset(
    {
        "state_dict",
        "load_state_dict",
        "_save_to_state_dict",
        "_load_from_state_dict",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "_named_members",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "apply",
        "__deepcopy__",
    }
)
_BESIDE_TENSOR = frozenset(
    {
        "__deepcopy__",
        "__reduce_ex__",
        "_reduce_ex_internal",
        "__setstate__",
        "__repr__",
        "__format__",
        "__str__",
    }
)
# Not ``to`` / ``_to_copy``: a batch moved to the device or cast is the input's work
_COPY_OPS = frozenset({"aten::copy_", "aten::clone", "aten::detach"})
_UPDATE_OPS = _COPY_OPS | frozenset(
    {
        "aten::add",
        "aten::add_",
        "aten::mul",
        "aten::mul_",
        "aten::sub",
        "aten::sub_",
        "aten::lerp",
        "aten::lerp_",
        "aten::addcmul_",
        "aten::zero_",
        "aten::fill_",
        "aten::empty_like",
        "aten::rsub",
    }
)


def call_kind(call: str) -> str:
    """Whose work a row's library call is: ``step``, ``beside``, ``own`` or ``library``."""
    if call == "":
        return OWN
    owner, _, name = call.partition("|")
    method = name.rsplit(".", 1)[-1]
    if owner == "torch:nn":
        if not name.startswith("Module.") or method in ("_wrapped_call_impl", "_call_impl"):
            return STEP  # a module call, nn.functional (losses), nn.utils (gradient clipping)
        return BESIDE if method in _BESIDE_MODULE else STEP if method == "zero_grad" else LIBRARY
    if owner == "torch:_tensor":
        if method == "backward":
            return STEP
        return BESIDE if method in _BESIDE_TENSOR else LIBRARY
    if owner in _STEP_OWNERS or owner.startswith("torch:_dynamo"):
        return STEP
    if owner in _BESIDE_OWNERS:
        return BESIDE
    return LIBRARY


def _op_share(row: LineRow, ops: frozenset[str]) -> float:
    total = sum(ms for _, ms in row.ops)
    return sum(ms for name, ms in row.ops if name in ops) / total if total else 0.0


def _ms_of(row: LineRow, kind: str) -> float:
    return sum(ms for call, ms in row.calls if call_kind(call) == kind)


@dataclass
class _Group:
    """One helper function (or one line of a function that makes step calls)."""

    function: str
    rows: list[tuple[LineRow, float]] = field(default_factory=list)
    """Each row with the ms per step of it that counts as beside the step."""

    @property
    def ms(self) -> float:
        return sum(ms for _, ms in self.rows)

    @property
    def top(self) -> LineRow:
        return max(self.rows, key=lambda rm: rm[1])[0]


def _groups(table: LineTable) -> list[_Group]:
    by_function: dict[tuple[str, str], list[LineRow]] = defaultdict(list)
    for row in table.rows:
        if row.calls and row.self_ms > 0:
            by_function[(row.file, row.function)].append(row)
    out: list[_Group] = []
    for (_, function), rows in by_function.items():
        if function == "forward" or function.endswith(".forward"):
            # a module's forward runs inside the model call: the step's own work (minGPT's
            # NewGELU.forward is all element-wise operators, not an update beside the step)
            continue
        makes_step_calls = any(_ms_of(r, STEP) > 0 for r in rows)
        if not makes_step_calls:
            group = _Group(function)
            for r in rows:
                own = _ms_of(r, OWN) if _op_share(r, _UPDATE_OPS) >= th.ASIDE_UPDATE_OPS else 0.0
                if _ms_of(r, BESIDE) + own > 0:
                    group.rows.append((r, _ms_of(r, BESIDE) + own))
            if group.rows:
                out.append(group)
            continue
        for r in rows:  # the loop itself: each line on its own
            beside = _ms_of(r, BESIDE)
            if beside > 0:
                own = _ms_of(r, OWN) if _op_share(r, _COPY_OPS) >= th.ASIDE_UPDATE_OPS else 0.0
                out.append(_Group(function, [(r, beside + own)]))
    return out


def _label(call: str) -> str:
    owner, _, name = call.partition("|")
    if owner == "torch:_tensor_str":
        return "printing tensors"
    module = owner.partition(":")[2] if owner.startswith("stdlib:") else ""
    return f"{module}.{name}" if module else name


_COPY_CALLS = frozenset(
    {
        "deepcopy",
        "state_dict",
        "load_state_dict",
        "_save_to_state_dict",
        "_load_from_state_dict",
        "__deepcopy__",
        "__reduce_ex__",
        "_reduce_ex_internal",
        "dumps",
        "loads",
        "dump",
        "load",
    }
)


def _what(group: _Group) -> tuple[str, str]:
    """What the group does, in words, and its kind: ``copy`` (of state), ``update`` (tensor by
    tensor), ``print`` or ``other``."""
    calls: dict[str, float] = defaultdict(float)
    ops: dict[str, float] = defaultdict(float)
    for row, _ in group.rows:
        for call, ms in row.calls:
            if call_kind(call) == BESIDE:
                calls[call] += ms
        for op, ms in row.ops:
            ops[op] += ms
    own = group.ms - sum(calls.values())
    top_ops = [op.removeprefix("aten::") for op, _ in sorted(ops.items(), key=lambda kv: -kv[1])]
    top = max(calls, key=lambda c: calls[c]) if calls else ""
    name = top.rpartition("|")[2].rsplit(".", 1)[-1]
    if top and (calls[top] >= own or not ops):
        if top.startswith("torch:_tensor_str") or name in ("__format__", "__repr__", "__str__"):
            return "printing tensors", "print"
        return _label(top), "copy" if name in _COPY_CALLS else "other"
    # New tensors (clone, detach) are a copy of state; writes into existing ones (copy_, an
    # average written as ``e.copy_(d * e + (1 - d) * p)``, mul_, lerp_) are updates
    new_tensors = sum(ms for op, ms in ops.items() if op in ("aten::clone", "aten::detach"))
    if new_tensors >= 0.5 * sum(ops.values()):
        return f"tensor copies ({', '.join(top_ops[:3])})", "copy"
    return f"tensor-by-tensor updates ({', '.join(top_ops[:3])})", "update"


def _fix(function: str, site: str, code: str, kind: str) -> str:
    where = f"# {function} at {site}: {code}" if code else f"# {function} at {site}"
    if kind == "print":
        return (
            f"{where}\n# print or log every N steps, and a number, not a tensor:\n"
            "if step % 100 == 0:\n"
            "    print(f'step {step} loss {loss.item():.4f}')"
        )
    if kind == "copy":
        return (
            f"{where}\n"
            "# copy the state only when the copy is needed (at evaluation, every N steps), and\n"
            "# into the tensors kept from the first copy (no new state allocated each time):\n"
            "if step % 100 == 0:\n"
            "    with torch.no_grad():\n"
            "        for kept, t in zip(snapshot.values(), model.state_dict().values()):\n"
            "            kept.copy_(t)"
        )
    if kind == "update":
        return (
            f"{where}\n"
            "# one foreach call updates a whole list of tensors (an EMA: e = d * e + (1 - d) * p):\n"
            "with torch.no_grad():\n"
            "    torch._foreach_lerp_(ema_params, model_params, 1 - decay)  # lists of tensors\n"
            "# or keep the average with torch.optim.swa_utils.AveragedModel(\n"
            "#     model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(decay));\n"
            "# other updates: torch._foreach_copy_, _foreach_mul_, _foreach_add_ on lists"
        )
    return f"{where}\n# run it every N steps, not every step:\nif step % 100 == 0:\n    ..."


def work_beside_step(run: RunRecord) -> list[Finding]:
    """Helpers and calls in the loop that are not the step's own work, holding
    ``ASIDE_SHARE`` of the step or more; saving (ms/step): their sampled time per step."""
    table, step = run.lines, run.step_ms
    if not table.rows or not step or not table.ms_per_step:
        return []
    s = spec(ID)
    threshold = s.threshold if s.threshold is not None else th.ASIDE_SHARE
    # The table's ms per step are of its own (median-based) step: as shares of the mean step.
    scale = step / table.ms_per_step
    timed = {  # deep copies timed exactly at these lines: housekeeping-in-step reports them
        str(r.get("site"))
        for r in (run.raw.get("config") or {}).get("housekeeping") or []
        if isinstance(r, dict) and r.get("what") == "copy.deepcopy"
    }
    # constructions repeated at a line (a module deep-copied, an optimizer rebuilt) are
    # repeated-construction's
    timed |= repeat_sites(run)
    out = []
    for group in _groups(table):
        if any(r.site in timed for r, _ in group.rows):
            continue
        ms = group.ms * scale
        if ms / step < threshold or table.samples_in(group.ms) < th.ASIDE_MIN_SAMPLES:
            continue
        top = group.top
        site = relative_site(top.site)
        what, kind = _what(group)
        loop = loop_line_of(top, table.ms_per_step)
        if loop is not None:  # a per-element Python loop, not an update of a list of tensors
            what = f"a per-element Python loop ({what.partition('(')[2].rstrip(')')})"
        function = "top level" if group.function == "<module>" else group.function
        out.append(
            make(
                run,
                ID,
                s.format_title(what=what, function=function, site=site, ms=ms, share=ms / step),
                ms,
                {
                    "function": group.function,
                    "lines": [
                        {
                            "site": r.site,
                            "code": r.code,
                            "ms_per_step": round(m * scale, 4),
                            "calls": [[c, ms] for c, ms in r.calls],
                            "ops": [[o, ms] for o, ms in r.ops],
                        }
                        for r, m in group.rows
                    ],
                    "samples": round(table.samples_in(group.ms), 1),
                },
                vectorise_fix(loop) if loop is not None else _fix(function, site, top.code, kind),
                where=[r.site for r, _ in group.rows],
            )
        )
    return out
