"""Fix builders that rewrite the user's own code: the DataLoader call as written, the tensor and
dimension a recompile guard names, the next step for a model that is already compiled.

Pure functions of what ``check`` recorded (plain data, no torch), so each is tested on
hand-written records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchdoctor.rules.call_sites import guarded_dims, local_name
from torchdoctor.rules.sites import relative_site

if TYPE_CHECKING:
    from torchdoctor.record.rows import CompileCall, Optimizer
    from torchdoctor.record.run import LoaderConfig

# DataLoader's positional parameters, in order (torch.utils.data.DataLoader.__init__).
_DL_POSITIONAL = (
    "dataset",
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
)


def loader_changes(loader: LoaderConfig, workers: int, cuda: bool) -> dict[str, str]:
    """Arguments to set (name -> source text); never one the loader already has."""
    out: dict[str, str] = {}
    current = loader.num_workers
    if workers > current:
        out["num_workers"] = str(workers)
    if max(workers, current) > 0:
        if not loader.persistent_workers:
            out["persistent_workers"] = "True"
        explicit = loader.explicit or {}
        if "prefetch_factor" not in explicit and (loader.prefetch_factor or 2) < 4:
            out["prefetch_factor"] = "4"
    if cuda and not loader.pin_memory:
        out["pin_memory"] = "True"
    return out


def _user_arguments(loader: LoaderConfig) -> tuple[str, list[str], dict[str, str]]:
    """The call as the user wrote it (function, positionals, keywords), from source when read,
    else from the recorded argument labels."""
    call = loader.call
    if call is not None and call.kwargs is not None:
        args, kwargs = list(call.args), dict(call.kwargs)
        func = call.func or "DataLoader"
    elif loader.explicit is not None:
        explicit = dict(loader.explicit)
        explicit.pop("dataset", None)
        args, kwargs, func = ["dataset"], explicit, "DataLoader"
    else:  # an older record: only the settings are known
        batch = loader.batch_size
        args, func = ["dataset"], "DataLoader"
        kwargs = {"batch_size": str(batch)} if batch is not None else {}
    # Positionals after the dataset become keywords, so that a change can name them.
    named = dict(zip(_DL_POSITIONAL[1:], args[1:], strict=False))
    return func, args[:1], {**named, **kwargs}


def rebuilt_loader_call(loader: LoaderConfig, changes: Mapping[str, str | None]) -> str:
    """The user's DataLoader call with ``changes`` applied: every other argument kept as
    written (collate_fn, shuffle, sampler, drop_last...), changed values replaced in place,
    an argument changed to None removed (its default is the fix)."""
    func, args, kwargs = _user_arguments(loader)
    if (
        {"persistent_workers", "prefetch_factor"} & {k for k, v in changes.items() if v}
        and "num_workers" not in changes
        and "num_workers" not in kwargs
        and loader.num_workers > 0
    ):
        # the call passed its workers some other way: state them, the options need them
        changes = {**changes, "num_workers": str(loader.num_workers)}
    merged = {**kwargs, **{k: v for k, v in changes.items() if k in kwargs}}
    merged.update({k: v for k, v in changes.items() if k not in kwargs})
    merged = {k: v for k, v in merged.items() if v is not None}
    parts = [*args, *(f"{k}={v}" for k, v in merged.items())]
    text = f"{func}({', '.join(parts)})"
    site = loader.call.site if loader.call is not None else ""
    return text + (f"  # at {relative_site(site)}" if site else "")


def item_cost_ms(loader: LoaderConfig, step_ms: float, wait_ms: float) -> float | None:
    """Estimated cost of one dataset item (ms): with W busy workers a batch arrives every
    step, so an item costs step x W / batch size; with none, the wait is the batch's cost."""
    batch, workers = loader.batch_size, loader.num_workers
    if not batch:
        return None
    return (step_ms * workers if workers else wait_ms) / batch


def dataloader_user_fix(
    loader: LoaderConfig,
    workers: int,
    cuda: bool,
    step_ms: float,
    wait_ms: float,
    item_ms: float | None = None,
    at_cpus: str = "more workers will not help (unless items wait on I/O)",
) -> str:
    """The fix for a loader that keeps the step waiting, built from the user's call;
    ``item_ms`` is the measured cost of an item (the estimate from the step time otherwise);
    ``at_cpus``: why more workers than the CPUs will not help (what was measured, if known)."""
    changes = loader_changes(loader, workers, cuda)
    current = loader.num_workers
    cpus = loader.cpus_per_rank or loader.cpu_count
    lines = []
    if current >= workers:
        if item_ms is not None:
            per_item = f" ({item_ms:.3f} ms per item, measured)"
        else:
            cost = item_cost_ms(loader, step_ms, wait_ms)
            per_item = f" (about {cost:.2f} ms per item, if every worker is busy)" if cost else ""
        lines.append(
            f"# num_workers={current} already uses this rank's {cpus} CPUs: {at_cpus}. "
            f"Make each item cheaper{per_item}: "
            "pre-process once and store the result, decode/augment on the GPU, or batch the "
            "work in collate_fn."
        )
    if changes:
        lines.append(rebuilt_loader_call(loader, changes))
    if "num_workers" in changes:
        if item_ms is None:
            item_ms = item_cost_ms(loader, step_ms, wait_ms)
        left = wait_left(loader, workers, step_ms, wait_ms, item_ms)
        if left is not None:
            lines.append(
                f"# the training process keeps one of the {cpus} CPUs: {workers} worker(s) make "
                f"a batch about every {left[0]:.1f} ms against {max(step_ms - wait_ms, 0.0):.1f} "
                f"ms of compute, so the step will still wait about {left[1]:.1f} ms: make each "
                "item cheaper too (pre-process once and store the result, or batch the work in "
                "collate_fn)"
            )
    return "\n".join(lines)


def wait_left(
    loader: LoaderConfig, workers: int, step_ms: float, wait_ms: float, item_ms: float | None
) -> tuple[float, float] | None:
    """(ms between batches from ``workers`` workers, ms the step still waits for each) when
    they share the CPUs the training process leaves (it keeps one busy computing): a batch
    costs ``item_ms`` x batch size on one CPU, and the workers run on at most ``cpus - 1``
    CPUs at once. None when the wait would be gone (under ``DATA_WAIT_MIN_MS``) or the item's
    cost, the batch size or the CPU count is unknown."""
    from torchdoctor.rules.thresholds import DATA_WAIT_MIN_MS

    batch, cpus = loader.batch_size, loader.cpus_per_rank or loader.cpu_count
    if not batch or not cpus or item_ms is None or workers < 1:
        return None
    parallel = min(workers, cpus - 1)
    compute = max(step_ms - wait_ms, 0.0)
    per_batch = item_ms * batch / parallel if parallel >= 1 else item_ms * batch
    still = per_batch if parallel < 1 else max(0.0, per_batch - compute)
    return (per_batch, still) if still >= DATA_WAIT_MIN_MS else None


def reason_line(reason: str) -> str:
    """A recompile reason on one line for a title: the first guard failure, without its
    compile id, dynamo's padded source comment and the user stack that follow it."""
    first = next((ln.strip() for ln in reason.splitlines() if ln.strip()), "")
    first = re.sub(r"^\d+/\d+: ", "", first.split("  #", 1)[0].strip())
    return first if len(first) <= 160 else first[:157] + "..."


def _before_calls(
    line: str, name: str, dim: int | None, calls: Sequence[Mapping[str, Any]], why: str
) -> list[str]:
    """``line`` (code on the argument ``name``) once per call of the compiled model that passes
    it: in the user's own expression there and placed before that call; [] when none does."""
    out = []
    for c in calls:
        if local_name(str(c["name"])) != name or c.get("dim") != dim:
            continue
        expr = str(c["expr"]).replace("\\", "\\\\")  # as written: no escapes read in it
        text = re.sub(rf"(?<![\w.]){re.escape(name)}(?!\w)", expr, line)
        out.append(f"{text}  # before the line at {c['site']} (the compiled model's call): {why}")
    return out


def value_guard_fix(events: list[dict[str, Any]], calls: Sequence[Mapping[str, Any]] = ()) -> str:
    """For guards on Python values (``scale == 0.5``): what stops the recompiles. A float or
    int passed as a tensor is an input, not a constant; mark_dynamic applies to tensors only.
    ``calls``: where the compiled model is called with each value (its tensor form goes there)."""
    values: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    for e in events:
        for v in e.get("changed_values") or []:
            seen = values.setdefault(local_name(v["name"]), [])
            if v["value"] not in seen:
                seen.append(v["value"])
            kinds[local_name(v["name"])] = v["kind"]
    lines = []
    for name, seen in values.items():
        shown = ", ".join(seen[:4]) + (", ..." if len(seen) > 4 else "")
        if kinds[name] in ("float", "int"):
            why = (
                f"the Python {kinds[name]} passed as '{name}' is compiled in as a constant "
                f"({shown}): every new value recompiles; as a tensor it is an input"
            )
            line = f"{name} = torch.tensor({name})"
            lines += _before_calls(line, name, None, calls, why) or [f"{line}  # {why}"]
        else:
            lines.append(
                f"# '{name}' was compiled in as a constant ({shown}): keep it fixed, or branch "
                "on it outside the compiled function"
            )
    return "\n".join(lines)


def recompile_user_fix(
    events: list[dict[str, Any]], fallback: str, calls: Sequence[Mapping[str, Any]] = ()
) -> str:
    """``mark_dynamic`` for each (tensor, dimension) the guards say changed, with the values
    seen; the tensor form of a guarded Python value; ``fallback`` when neither was named.
    ``calls`` (``rules/call_sites.guarded_calls``): where the compiled model is called
    with each guarded argument; each line is placed before that call, in the user's name for
    the argument (inside the compiled function dynamo rejects mark_dynamic, and a value made a
    tensor there is still compiled in)."""
    rows = [(str(e.get("function") or ""), d) for e in events for d in e.get("changed_dims") or []]
    # one line per (tensor, dim), whichever function guarded it (each line goes before every
    # call passing that name); it names the first function seen
    seen = guarded_dims((("", "", d) for _, d in rows), placed=bool)
    functions = {local_name(str(d["tensor"])): fn for fn, d in reversed(rows)}
    values = value_guard_fix(events, calls)
    if not seen:
        return values or fallback
    lines = [values] if values else []
    for (_, _, tensor, dim), sizes in seen.items():
        shown = ", ".join(str(s) for s in sizes[:4]) + (", ..." if len(sizes) > 4 else "")
        why = f"dim {dim} of the tensor passed as '{tensor}' took sizes {shown}"
        line = f"torch._dynamo.mark_dynamic({tensor}, {dim})"
        lines += _before_calls(line, tensor, dim, calls, why) or [
            f"{line}  # before calling {functions.get(tensor) or 'it'}(): {why}"
        ]
    lines.append("# or pad/bucket that dimension to a few fixed sizes")
    return "\n".join(lines)


def compiled_next_step(
    calls: Sequence[CompileCall],
    graph_break_sites: int,
    cuda: bool,
    for_loop_optim: Sequence[Optimizer],
) -> str:
    """For an already compiled model: the next step that applies (never torch.compile again).
    ``for_loop_optim``: the run's optimizer records whose implementation is the for-loop one."""
    from torchdoctor.rules.optimizer_fixes import optimizer_line

    modes = {c.mode for c in calls} or {None}
    lines = []
    if graph_break_sites:
        lines.append(
            f"# the model is compiled but breaks into pieces at {graph_break_sites} place(s): "
            "fix the graph breaks first (see graph-breaks), check with fullgraph=True"
        )
    if cuda and not modes & {"reduce-overhead", "max-autotune"}:
        lines.append(
            'model = torch.compile(model, mode="reduce-overhead")  # already compiled: add CUDA '
            "graphs, which replay the step's launches at once"
        )
    lines += [line for line in map(optimizer_line, for_loop_optim[:2]) if line]
    if not lines:
        lines.append(
            "# already compiled: raise the work per operator instead (a larger batch, or "
            "gradient accumulation over fewer, larger micro-batches)"
        )
    return "\n".join(lines)
