"""graph-breaks' fix (``rules/graph_break_fixes.py``): the user's line at each break rewritten
where a rewrite keeps the graph whole (a host read kept a tensor, a branch on a tensor's value
made a ``torch.where``), advice with its place otherwise; pasted where it points, the compiled
program has no graph break left and still trains."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.rules.run_records import record
from torchdoctor.rules.graph_break_fixes import graph_break_fix
from torchdoctor.rules.run_rules import run_findings

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "check"

# Written for this test, not for the rewrites: a decorated function (no module), other names
UNSEEN = textwrap.dedent(
    """\
    import torch

    weight = torch.randn(12, 6, requires_grad=True)
    opt = torch.optim.SGD([weight], lr=0.05)


    @torch.compile(backend="eager")
    def score(x):
        logits = x @ weight
        top = logits.max().item()
        if logits.mean() > 0:
            logits = logits * 2
        return (logits - top).logsumexp(-1).mean()


    x = torch.randn(32, 12)
    for _ in range(6):
        loss = score(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)


# Written for the uses check: the read's value only meets tensors (arithmetic; the name is
# reassigned before its branch), so the rewrite stays code
KEPT = textwrap.dedent(
    """\
    import torch

    w = torch.randn(10, 4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.05)


    @torch.compile(backend="eager")
    def loss_fn(x, y):
        logits = x @ w
        margin = (logits.max(-1).values - logits.min(-1).values).mean().item()
        temp = 1 + margin / 4
        loss = torch.nn.functional.cross_entropy(logits / temp, y)
        margin = 0.5
        if margin > 0.1:
            loss = loss * 2
        return loss


    x, y = torch.randn(16, 10), torch.randint(0, 4, (16,))
    for _ in range(6):
        loss = loss_fn(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)

# ... and where the host needs the number: appended to a list that json writes at the end
NEEDED = textwrap.dedent(
    """\
    import json

    import torch

    w = torch.randn(10, 4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.05)
    history = []


    @torch.compile(backend="eager")
    def loss_fn(x, y):
        logits = x @ w
        peak = logits.abs().max().item()
        history.append(peak)
        return torch.nn.functional.cross_entropy(logits / peak, y)


    x, y = torch.randn(16, 10), torch.randint(0, 4, (16,))
    for _ in range(6):
        loss = loss_fn(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(json.dumps({"mean_peak": sum(history) / len(history)}))
    """
)

# Each read below is used as a Python number once, in a different way
USES = textwrap.dedent(
    """\
    def shapes(x, hist, log):
        a = x.mean().item()
        print(f"mean {a * 2:.3f}")
        b = x.max().item()
        if x.min() < b:
            x = x * 2
        c = x.sum().item()
        total = 0.0
        total += c
        log["total"] = total
        d = x.std().item()
        e = d
        hist.append("%.2f" % e)
        n = int(x.numel() * x.mean().item())
        k = x.sum().item()
        return x[:k], a * x
    """
)


def _line(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def _code(fix: str) -> list[str]:
    return [ln for ln in fix.splitlines() if ln.strip() and not ln.startswith("#")]


def test_a_host_read_stays_a_tensor_in_place_of_the_users_line(tmp_path: Path) -> None:
    script = tmp_path / "m.py"
    script.write_text((EXAMPLES / "sync_in_compiled.py").read_text())
    item, tolist = _line(script, "scale = torch.Tensor.item("), _line(script, "widths = ")
    fix = graph_break_fix(
        [
            {"site": f"{script}:{tolist}", "reason": "Operator `aten._local_scalar_dense`"},
            {"site": f"{script}:{item}", "reason": "Unsupported Tensor.item() call"},
        ]
    )
    widths, scale = _code(fix)
    assert widths.startswith(
        f"widths = (h > 0).sum(0).detach()  # in place of the line at {script}:{tolist}: a tensor"
    )
    assert scale.startswith(
        f"scale = h.abs().mean().detach()  # in place of the line at {script}:{item}: a tensor"
    )
    # a break at that line for another reason (dynamo names what broke): no rewrite
    other = graph_break_fix([{"site": f"{script}:{item}", "reason": "call_function print"}])
    assert _code(other) == []
    # the check is a comment that names no torch.compile(model...) call: a compiled run's
    # report does not take the fix for compile advice and replace it (capture/fit.py)
    assert "torch.compile(model" not in fix and "fullgraph=True" in fix


def test_a_branch_becomes_where_only_when_the_break_is_the_branch(tmp_path: Path) -> None:
    script = tmp_path / "m.py"
    script.write_text(UNSEEN)
    at = _line(script, "if logits.mean()")
    branch = {"site": f"{script}:{at}", "reason": "Data-dependent branching"}
    (code,) = _code(graph_break_fix([branch]))
    assert code.startswith(
        f"logits = torch.where(logits.mean() > 0, logits * 2, logits)  # in place of the line "
        f"at {script}:{at}"
    )
    other = {"site": f"{script}:{at}", "reason": "call_function print"}
    fix = graph_break_fix([other])
    assert _code(fix) == [] and f"# change the line at {script}:{at}" in fix  # advice


def test_a_read_the_function_needs_as_a_number_is_advice_naming_the_use(tmp_path: Path) -> None:
    script = tmp_path / "m.py"
    script.write_text(USES)

    def fix_at(text: str) -> str:
        return graph_break_fix([{"site": f"{script}:{_line(script, text)}", "reason": "item"}])

    for read, use, how in [
        ("a = ", 'print(f"mean', "formatted"),  # through the arithmetic inside the f-string
        ("b = ", "if x.min() < b", "a branch"),
        ("c = ", 'log["total"]', "stored in log['total']"),  # through the += accumulator
        ("d = ", "hist.append", "formatted"),  # through the copy e = d
        ("k = ", "return x[:k]", "an index"),
    ]:
        fix = fix_at(read)
        assert _code(fix) == [], fix  # nothing paste-ready
        first = fix.splitlines()[0]
        assert first.startswith(f"# the line at {script}:{_line(script, read)} reads "), first
        assert f"{script}:{_line(script, use)} ({how})" in first, first
    # a read inside a call (not assigned whole) has no rewrite: the plain advice
    assert _code(fix_at("n = int(")) == []
    # KEPT's read meets tensors only (the name is reassigned before its branch): code
    script.write_text(KEPT)
    (code,) = _code(fix_at("margin = (logits"))
    assert code.startswith("margin = (logits.max(-1).values - logits.min(-1).values).mean()")


def test_an_unknown_line_or_unreadable_source_is_advice_with_its_place() -> None:
    fix = graph_break_fix([{"site": "/nowhere/model.py:19", "reason": "print. more"}])
    assert _code(fix) == []
    assert fix.splitlines()[0].startswith("# change the line at /nowhere/model.py:19 so dynamo")
    assert "(print)" in fix


def test_a_compiled_runs_report_keeps_the_graph_break_fix(tmp_path: Path) -> None:
    """The fix used to say ``model = torch.compile(model, fullgraph=True)``: check's fitting
    took it for compile advice and printed the already-compiled next step in its place (on
    sync_in_compiled.py a fused SGD at the optimizer's line, which removes no break)."""
    from torchdoctor.capture.fit import fit_to_run

    script = tmp_path / "m.py"
    script.write_text(UNSEEN)
    site = f"{script}:{_line(script, 'top = ')}"
    rec = record(
        compile={
            "compiles": 2,
            "compile_calls": [{"mode": None}],
            "graph_breaks": [{"site": site, "reason": "Tensor.item", "count": 6}],
        },
        config={"optimizers": [{"class": "SGD", "impl": "for-loop"}]},
    )
    (f,) = [f for f in fit_to_run(run_findings(rec), rec) if f.id == "graph-breaks"]
    (code,) = _code(f.fix)
    assert code.startswith(f"top = logits.max().detach()  # in place of the line at {site}: ")


BREAKS = textwrap.dedent(
    """\
    import runpy, sys, torch
    from torch._dynamo.utils import counters
    steps = []
    def count(cls):
        step = cls.step
        def counted(self, *a, **k):
            steps.append(1)
            return step(self, *a, **k)
        cls.step = counted
    count(torch.optim.SGD)
    count(torch.optim.AdamW)
    sys.argv = [sys.argv[1], "--backend", "eager", "--steps", "6"]
    g = runpy.run_path(sys.argv[0], run_name="__main__")
    print(len(counters["resumes"]), len(steps))  # a frame resumed after each break site
    """
)


def _breaks_and_steps(*scripts: Path) -> list[tuple[int, int]]:
    """(frames resumed after a break, optimizer steps) of each script, run at once: each is
    one process on one core, so two take about the time of one on a 2-core machine."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BREAKS, str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=script.parent,
        )
        for script in scripts
    ]
    try:
        counts = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-2000:]
            breaks, steps = out.split()[-2:]
            counts.append((int(breaks), int(steps)))
        return counts
    finally:  # none left running when one failed
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "lines", "reason"),
    [
        ("sync_in_compiled.py", ("scale = torch.Tensor.item(", "widths = "), "Tensor.item"),
        ("graph_breaks.py", ("if h.mean() > 0.1",), "Data-dependent branching"),
        ("unseen.py", ("top = ", "if logits.mean()"), "Data-dependent branching"),
        ("kept.py", ("margin = (logits",), "Tensor.item"),
    ],
)
def test_the_pasted_fix_leaves_no_graph_break_and_trains(
    tmp_path: Path, name: str, lines: tuple[str, ...], reason: str
) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from validate_remedies import _paste_all

    script = tmp_path / name
    written = {"unseen.py": UNSEEN, "kept.py": KEPT}
    source = written[name] if name in written else (EXAMPLES / name).read_text()
    script.write_text(source)
    sites = [f"{script}:{_line(script, text)}" for text in lines]
    fix = graph_break_fix([{"site": s, "reason": reason} for s in sites])
    pasted = _paste_all(fix, sites, tmp_path, script)
    assert not isinstance(pasted, str), pasted
    original = tmp_path / "original" / name  # the unpasted script runs beside the pasted one
    original.parent.mkdir()
    original.write_text(source)
    script.write_text(pasted[2])
    before, after = _breaks_and_steps(original, script)
    assert before[0] >= len(lines) and before[1] == 6  # the planted breaks, every step trains
    assert after == (0, 6)


@pytest.mark.slow
def test_a_tensor_where_the_host_needs_the_number_would_fail_so_it_is_advice(
    tmp_path: Path,
) -> None:
    script = tmp_path / "needed.py"
    script.write_text(NEEDED)
    assert _breaks_and_steps(script)[0][0] >= 1  # the planted read breaks the graph
    site = f"{script}:{_line(script, 'peak = ')}"
    fix = graph_break_fix([{"site": site, "reason": "Tensor.item"}])
    assert _code(fix) == [], fix
    assert f"{script}:{_line(script, 'history.append')} (stored with .append())" in fix
    # what the rewrite alone would print, pasted: the program fails at its json line
    script.write_text(NEEDED.replace(".max().item()", ".max().detach()"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "not JSON serializable" in out.stderr, out.stderr[-2000:]
