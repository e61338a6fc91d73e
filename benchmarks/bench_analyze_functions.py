"""Where ``analyze`` spends its instructions, by Python function: this checkout against a base.

    python benchmarks/bench_analyze_functions.py [--base e78f05f] [--this COMMIT]
        [--trace v100_ddp_compiled_rank1] [--top 40] [--max-calls 60]

``bench_analyze_ab.py --instructions`` says how many more instructions an arm executes;
callgrind alone names only C functions (numpy's gathers, msgspec's decoder, the interpreter
loop), not the Python code that called them. Here each tree's ``analyze --json TRACE`` runs
under callgrind with every torchdoctor function called at most ``--max-calls`` times (counted
in a first plain run) wrapped to call ``os.getppid()`` on entry and exit, and each module's
import marked the same way; callgrind's ``--dump-before='os_getppid*'`` writes one profile per
segment between two marks. A segment's instructions go to the innermost marked function (or
import) open at the time: its *own* instructions, the functions it calls that are not marked
included. The tables list the largest differences, then the C functions inside the largest.
The wrappers add a little to each marked call (a few thousand instructions), the same in both
trees. Takes several minutes (two runs per tree, the marked one under callgrind).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_analyze_ab import _archive, _git
from bench_common import TRACES, compile_bytecode, environment, torchdoctor_cmd

Costs = collections.Counter[str]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[sys.argv.index("--") + 1 :])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="e78f05f", help="the commit to compare with")
    ap.add_argument("--this", default=None, help="a commit to measure instead of the checkout")
    ap.add_argument("--trace", default="v100_ddp_compiled_rank1")
    ap.add_argument("--top", type=int, default=40, help="rows of each table")
    ap.add_argument("--max-calls", type=int, default=60, help="mark functions called this often")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("needs valgrind on PATH")
    trace = TRACES / f"{args.trace}.json.gz"
    if not trace.is_file():
        sys.exit(f"{trace} not found (set TORCHDOCTOR_TRACES)")
    print(environment())
    with tempfile.TemporaryDirectory(prefix="td-fn-") as tmp:
        base_src = _archive(args.base, Path(tmp) / "base")
        this_src = _archive(args.this, Path(tmp) / "this") if args.this else None
        print(compile_bytecode(base_src, *([this_src] if this_src else [])))
        this = args.this or f"the checkout at {_git('rev-parse', '--short', 'HEAD')}"
        got = {}
        for side, src in (("base", base_src), ("this", this_src)):
            work = Path(tmp) / f"run-{side}"
            work.mkdir()
            got[side] = _profile(src, trace, work, args.max_calls)
            print(f"{side}: {sum(got[side][0].values()) / 1e6:.1f}M instructions", flush=True)
    print(f"\n{args.trace}: this ({this}) against {args.base}, millions of instructions")
    _table("own instructions by function or import", got["base"][0], got["this"][0], args.top)
    (_, b_fns), (_, t_fns) = got["base"], got["this"]
    moved = sorted(set(b_fns) | set(t_fns), key=lambda k: -abs(_sum(t_fns, k) - _sum(b_fns, k)))
    for owner in moved[:5]:
        _table(
            f"C functions under {owner}", b_fns.get(owner, Costs()), t_fns.get(owner, Costs()), 8
        )


def _sum(fns: dict[str, Costs], owner: str) -> int:
    return sum(fns.get(owner, Costs()).values())


def _profile(src: Path | None, trace: Path, work: Path, max_calls: int) -> tuple[Costs, dict]:
    """Own instructions per marked function, and the C functions inside each."""
    env_cmd = torchdoctor_cmd(src)
    env = env_cmd[:2] if env_cmd[0] == "env" else []
    child = [*env, sys.executable, str(Path(__file__).resolve()), "--child"]
    argv = ["--", "analyze", "--json", str(trace)]
    labels = work / "labels.json"
    quiet = {"stdout": subprocess.DEVNULL, "check": True}
    os.environ["TORCHDOCTOR_PARALLEL_LOAD"] = "0"  # one process: the children inherit it
    subprocess.run([*child, "count", str(labels), *argv], **quiet)  # type: ignore[call-overload]
    calls = json.loads(labels.with_suffix(".calls").read_text())
    labels.with_suffix(".allowed").write_text(
        json.dumps([k for k, v in calls.items() if v <= max_calls])
    )
    grind = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={work / 'cg'}",
        "--dump-before=os_getppid*",
        "--dump-instr=no",
    ]
    cmd = [*env, *grind, *child[len(env) :], "mark", str(labels), *argv]
    subprocess.run(cmd, stderr=subprocess.DEVNULL, **quiet)  # type: ignore[call-overload]
    return _attribute(work, json.loads(labels.read_text()))


def _attribute(work: Path, events: list[tuple[str, str]]) -> tuple[Costs, dict]:
    """Dump k (1-based) holds what ran before mark k; the file without a number, the rest."""
    own: Costs = Costs()
    fns: dict[str, Costs] = collections.defaultdict(Costs)
    stack: list[str] = []
    for k in range(len(events) + 1):
        owner = stack[-1] if stack else "<outside any marked function>"
        path = work / (f"cg.{k + 1}" if k < len(events) else "cg")
        if path.is_file():
            for fn, n in _c_functions(path).items():
                own[owner] += n
                fns[owner][fn] += n
        if k < len(events):
            kind, name = events[k]
            if kind == "enter":
                stack.append(name)
            else:
                stack.pop()
    return own, fns


_NAMED = re.compile(r"c?fn=\((\d+)\)(?: (.*))?")


def _c_functions(path: Path) -> Costs:
    """Self instructions per C function in one callgrind profile (name compression resolved)."""
    names: dict[str, str] = {}
    out: Costs = Costs()
    current, skip = "?", False
    for line in path.read_text().splitlines():
        if skip:  # the inclusive cost line after calls=
            skip = False
        elif line.startswith(("fn=", "cfn=")):
            m = _NAMED.match(line)
            if m and m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("fn="):
                current = names.get(m.group(1), "?") if m else line[3:]
        elif line.startswith("calls="):
            skip = True
        elif (line[:1].isdigit() or line[:1] in "+-*") and len(parts := line.split()) > 1:
            out[current] += int(parts[-1])
    return out


def _table(title: str, base: Costs, this: Costs, top: int) -> None:
    rows = sorted(set(base) | set(this), key=lambda k: -abs(this[k] - base[k]))[:top]
    print(f"\n{title} (this - base, base, this):")
    for k in rows:
        d, b, t = (this[k] - base[k]) / 1e6, base[k] / 1e6, this[k] / 1e6
        print(f"  {d:+9.2f} {b:9.2f} {t:9.2f}  {k[:110]}")


def _child(mode: str, labels: str, argv: list[str]) -> None:
    """Run ``torchdoctor ARGV`` here with torchdoctor's functions counted or marked."""
    import atexit
    import functools
    import importlib.abc
    import importlib.machinery
    import types

    calls: Costs = Costs()
    events: list[tuple[str, str]] = []
    allowed = set(
        json.loads(Path(labels).with_suffix(".allowed").read_text()) if mode == "mark" else []
    )
    mark = os.getppid  # the C function callgrind dumps before

    def marked(name: str, run: object) -> object:
        events.append(("enter", name))
        mark()
        try:
            return run()  # type: ignore[operator]
        finally:
            events.append(("exit", name))
            mark()

    def wrap(fn: types.FunctionType, name: str) -> object:
        if mode == "count":

            @functools.wraps(fn)
            def counted(*a: object, **k: object) -> object:
                calls[name] += 1
                return fn(*a, **k)

            return counted
        if name not in allowed:
            return fn

        @functools.wraps(fn)
        def with_marks(*a: object, **k: object) -> object:
            return marked(name, lambda: fn(*a, **k))

        return with_marks

    def instrument(mod: types.ModuleType) -> None:
        for attr, val in list(vars(mod).items()):
            if isinstance(val, types.FunctionType) and val.__module__ == mod.__name__:
                setattr(mod, attr, wrap(val, f"{mod.__name__}.{val.__qualname__}"))
            elif isinstance(val, type) and val.__module__ == mod.__name__:
                for a2, v2 in list(vars(val).items()):
                    if isinstance(v2, types.FunctionType) and not a2.startswith("__"):
                        with __import__("contextlib").suppress(AttributeError, TypeError):
                            setattr(val, a2, wrap(v2, f"{mod.__name__}.{v2.__qualname__}"))

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: object, target: object = None) -> object:
            if not name.startswith("torchdoctor"):
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)  # type: ignore[arg-type]
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module: types.ModuleType) -> None:
                if mode == "mark":
                    marked(f"import {name}", lambda: run(module))
                else:
                    run(module)
                instrument(module)

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    def save() -> None:  # analyze leaves through os._exit after running the atexit functions
        out = Path(labels)
        if mode == "count":
            out.with_suffix(".calls").write_text(json.dumps(calls))
        else:
            out.write_text(json.dumps(events))

    sys.meta_path.insert(0, Finder())
    atexit.register(save)
    sys.argv = ["torchdoctor", *argv]
    from torchdoctor.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
