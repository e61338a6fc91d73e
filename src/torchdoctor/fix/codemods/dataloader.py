"""``dataloader-args``: the user's ``DataLoader(...)`` call with workers, persistence, prefetch
and (on CUDA) pinned memory, every other argument kept as written.

The values are check's (``rules/user_fixes.loader_changes``): the same function builds the
text fix of ``dataloader-config``, so the patch and the report never disagree. Workers come
from the finding's ``suggested_num_workers`` (the rank's CPUs, 2 to 8). Workers the call reads
from a setting of the script (``num_workers=args.workers``, nanoGPT-style globals, a config
dict) are set there: the switch on the command line (``--workers 4``), or the setting's default
edited (``fix/switches.py``); any other expression is the user's to change, and refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdoctor.fix import switches
from torchdoctor.fix.codemods.base import (
    located,
    one_site,
    search,
    setting_or_parsed,
)
from torchdoctor.fix.cst_tools import (
    NOT_LITERAL,
    Parsed,
    arg_index,
    has_star_args,
    innermost_spanning,
    literal,
    set_args,
)
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Switch, Target
from torchdoctor.record.run import LoaderConfig
from torchdoctor.rules.families.loader import WORKER_ONLY
from torchdoctor.rules.thresholds import ITEMS_WAIT_SHARE
from torchdoctor.rules.user_fixes import _DL_POSITIONAL as DL_POSITIONAL
from torchdoctor.rules.user_fixes import loader_changes

if TYPE_CHECKING:
    from torchdoctor.fix.context import FixContext

QUALIFIED = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader")
_PIN_ONLY = ("unpinned-non-blocking", "pageable-h2d-copies")


def is_loader_call(p: Parsed, node: cst.CSTNode) -> bool:
    """A call of torch's ``DataLoader`` (however imported)."""
    return isinstance(node, cst.Call) and p.is_call_to(node, QUALIFIED, "DataLoader")


def loader_record(finding: FindingRef, ctx: FixContext) -> LoaderConfig:
    """What check recorded about the loader: the finding's evidence, else the run's first."""
    shown = finding.evidence.get("dataloader")
    if isinstance(shown, dict):
        return LoaderConfig.from_dict(shown)
    loaders = ctx.record.config.dataloaders
    return loaders[0] if loaders else LoaderConfig()


# What the loader's call loses when the finding asks for no workers: the same arguments the
# report's remedy (``rules/families/loader.fewer_workers_fix``) drops.
WORKER_ARGS = WORKER_ONLY


def no_workers(finding: FindingRef, loader: LoaderConfig) -> bool:
    """The finding measured a batch made in the training process cheaper than the hand-off
    from workers (``suggested_num_workers`` 0) for a loader that has workers."""
    return (
        finding.id == "dataloader-config"
        and finding.evidence.get("suggested_num_workers") == 0
        and loader.num_workers > 0
    )


def wanted(finding: FindingRef, loader: LoaderConfig, ctx: FixContext) -> dict[str, str]:
    """The arguments to set (name -> source text), from the finding and the machine."""
    if no_workers(finding, loader):
        return {}
    if finding.id in _PIN_ONLY or (
        finding.id == "dataloader-config" and "suggested_num_workers" not in finding.evidence
    ):
        return {"pin_memory": "True"} if ctx.cuda and not loader.pin_memory else {}
    workers = finding.evidence.get("suggested_num_workers")
    if not isinstance(workers, int):
        workers = max(2, min(8, cpus(loader, ctx)))
    return loader_changes(loader, workers, ctx.cuda)


def cpus(loader: LoaderConfig, ctx: FixContext) -> int:
    """CPUs of the rank that built the loader (as check recorded them)."""
    return loader.cpus_per_rank or loader.cpu_count or ctx.cpus


class DataLoaderArgs:
    id = "dataloader-args"
    title = "DataLoader workers, persistence, prefetch, pinned memory"
    precision = "fp32"

    def plan(self, finding: FindingRef, ctx: FixContext) -> list[Target | Refusal | Switch]:
        loader = loader_record(finding, ctx)
        changes = wanted(finding, loader, ctx)
        if no_workers(finding, loader):
            return [self._drop_workers(loader, ctx)]
        if not changes:
            cur = loader.num_workers
            why = (
                f"num_workers={cur} already uses this rank's {cpus(loader, ctx)} CPUs: more workers "
                "will not help; make each item cheaper (pre-process once, decode on the GPU)"
                if cur
                else "the loader already has the settings this finding asks for"
            )
            share = finding.evidence.get("on_cpu_share")
            if cur and isinstance(share, float) and share < ITEMS_WAIT_SHARE:
                why = (
                    f"num_workers={cur} already, for items that wait: read each batch's items "
                    "concurrently inside the dataset (a thread pool) or in one batched read"
                )
            return [Refusal(why, already=bool(cur) or bool(loader.raw))]
        site = loader.call.site if loader.call is not None else ""
        if site:
            where = located(ctx, str(site))
            if isinstance(where, Refusal):
                return [where]
            file, line = where
        else:
            hit = one_site(
                search(ctx, ctx.files(), cst.Call, is_loader_call), ctx, "DataLoader(...)"
            )
            if isinstance(hit, Refusal):
                return [hit]
            file, line = hit.file, hit.line
        by_setting = self._workers_setting(ctx, file, line, changes)
        if by_setting is not None:
            return by_setting
        return [Target(self.id, file, line, {"changes": changes})]

    def _drop_workers(self, loader: LoaderConfig, ctx: FixContext) -> Target | Refusal:
        """The loader's call without its workers (and the options that need them), as the
        report's remedy reads: never more workers or a longer prefetch, which the finding
        measured to cost more than making each batch in the training process."""
        site = loader.call.site if loader.call is not None else ""
        if not site:
            return Refusal("check did not record where the DataLoader is built")
        where = located(ctx, str(site))
        if isinstance(where, Refusal):
            return where
        return Target(self.id, where[0], where[1], {"drop": list(WORKER_ARGS)})

    def _workers_setting(
        self, ctx: FixContext, file: str, line: int, changes: dict[str, str]
    ) -> list[Target | Refusal | Switch] | None:
        """Workers the call reads from a setting of the script: that setting (a switch, or its
        default edited), and the other arguments as an edit without the worker-only ones
        (``persistent_workers``/``prefetch_factor`` make DataLoader raise if the script runs
        without the switch); None when workers are not read from a setting."""
        p = ctx.parsed(file)
        if p is None or "num_workers" not in changes:
            return None
        call = innermost_spanning(p, [c for c in p.all(cst.Call) if is_loader_call(p, c)], line)
        i = arg_index(call, "num_workers", DL_POSITIONAL) if call is not None else None
        if call is None or i is None:
            return None
        s = switches.setting_of(p, file, call.args[i].value)
        if s is None:
            return None
        workers = int(changes["num_workers"])
        now = switches.value_in_run(s, ctx.argv)
        if isinstance(now, int) and not isinstance(now, bool) and now >= workers:
            return [Refusal(f"{s.spelled} is already {now} in this run", already=True)]
        out: list[Target | Refusal | Switch] = []
        switch = switches.switch_to(s, workers, ctx.argv, ctx.rel(s.file))
        if switch is not None:
            out.append(switch)
        else:
            out.append(Target(self.id, s.file, s.line, {"setting": s.name, "value": workers}))
        worker_only = ("num_workers", "persistent_workers", "prefetch_factor")
        rest = {k: v for k, v in changes.items() if k not in worker_only}
        if rest:
            out.append(Target(self.id, file, line, {"changes": rest}))
        return out

    def rewrite(self, source: str, target: Target) -> Rewrite | Refusal:
        p = setting_or_parsed(source, target)
        if not isinstance(p, Parsed):
            return p
        calls = [c for c in p.all(cst.Call) if is_loader_call(p, c)]
        call = innermost_spanning(p, calls, target.line)
        if call is None:
            other = [c for c in p.all(cst.Call) if p.spans(c, target.line) and p.imported_from(c)]
            lib = next(
                (p.imported_from(c) for c in other if "DataLoader" in (p.imported_from(c) or "")),
                None,
            )
            if lib:
                return Refusal(f"the loader at line {target.line} is {lib}, not torch's DataLoader")
            return Refusal(f"no DataLoader(...) call at line {target.line}")
        if has_star_args(call):
            return Refusal("the call passes *args / **kwargs: its arguments are built at run time")
        if "drop" in target.params:
            return _dropped(p, call, list(target.params["drop"]))
        todo: dict[str, str] = {}
        for name, code in target.params["changes"].items():
            i = arg_index(call, name, DL_POSITIONAL)
            if i is None:
                todo[name] = code
                continue
            now = literal(call.args[i].value)
            if now is NOT_LITERAL:
                return Refusal(
                    f"{name} is set from `{p.code_of(call.args[i].value)}`: set it to {code} "
                    "where that value comes from"
                )
            new = literal(cst.parse_expression(code))
            if name == "num_workers" and isinstance(now, int) and now >= new:
                continue
            if name == "prefetch_factor" and isinstance(now, int) and now >= new:
                continue
            if now != new:
                todo[name] = code
        if _workers_after(call, todo) == 0:
            # persistent_workers / prefetch_factor without workers make DataLoader raise
            todo = {
                k: v for k, v in todo.items() if k not in ("persistent_workers", "prefetch_factor")
            }
        if not todo:
            return Refusal("the DataLoader call already passes these arguments", already=True)
        summary = ", ".join(f"{k}={v}" for k, v in todo.items())
        return Rewrite(
            p.replace(call, set_args(call, todo, DL_POSITIONAL)), f"DataLoader({summary})"
        )


def _dropped(p: Parsed, call: cst.Call, names: list[str]) -> Rewrite | Refusal:
    """``call`` without the arguments ``names`` (their defaults: no workers); a positional
    ``num_workers`` with positionals after it becomes ``0`` in place."""
    args = list(call.args)
    gone = []
    for name in names:
        i = arg_index(call.with_changes(args=args), name, DL_POSITIONAL)
        if i is None:
            continue
        if args[i].keyword is None and any(a.keyword is None for a in args[i + 1 :]):
            args[i] = args[i].with_changes(value=cst.Integer("0"))
        else:
            last = i == len(args) - 1
            removed = args.pop(i)
            if last and args:
                args[-1] = args[-1].with_changes(
                    comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg
                )
        gone.append(name)
    if not gone:
        return Refusal("the DataLoader call already runs without workers", already=True)
    new = call.with_changes(args=args)
    return Rewrite(p.replace(call, new), f"DataLoader(without {', '.join(gone)})")


def _workers_after(call: cst.Call, todo: dict[str, str]) -> int | None:
    """num_workers once the edit is made (None when the call sets it from an expression)."""
    if "num_workers" in todo:
        return int(todo["num_workers"])
    i = arg_index(call, "num_workers", DL_POSITIONAL)
    if i is None:
        return 0
    now = literal(call.args[i].value)
    return now if isinstance(now, int) else None


CODEMOD = DataLoaderArgs()
