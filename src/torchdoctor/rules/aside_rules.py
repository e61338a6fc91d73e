"""Whose work a sampled line's time is (``record/lines.py``), for ``work-beside-step``: time in the
loop that is not training's (its family is ``rules/families/beside_step.py``).

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
from torchdoctor.rules import thresholds as th

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
class Group:
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


def groups(table: LineTable) -> list[Group]:
    """The helpers (and lines of the loop) whose sampled time is beside the step."""
    by_function: dict[tuple[str, str], list[LineRow]] = defaultdict(list)
    for row in table.rows:
        if row.calls and row.self_ms > 0:
            by_function[(row.file, row.function)].append(row)
    out: list[Group] = []
    for (_, function), rows in by_function.items():
        if function == "forward" or function.endswith(".forward"):
            # a module's forward runs inside the model call: the step's own work (minGPT's
            # NewGELU.forward is all element-wise operators, not an update beside the step)
            continue
        makes_step_calls = any(_ms_of(r, STEP) > 0 for r in rows)
        if not makes_step_calls:
            group = Group(function)
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
                out.append(Group(function, [(r, beside + own)]))
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


def what_of(group: Group) -> tuple[str, str]:
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
