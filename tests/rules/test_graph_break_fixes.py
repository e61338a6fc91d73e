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


def _breaks_and_steps(script: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", BREAKS, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=script.parent,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    breaks, steps = out.stdout.split()[-2:]
    return int(breaks), int(steps)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "lines", "reason"),
    [
        ("sync_in_compiled.py", ("scale = torch.Tensor.item(", "widths = "), "Tensor.item"),
        ("graph_breaks.py", ("if h.mean() > 0.1",), "Data-dependent branching"),
        ("unseen.py", ("top = ", "if logits.mean()"), "Data-dependent branching"),
    ],
)
def test_the_pasted_fix_leaves_no_graph_break_and_trains(
    tmp_path: Path, name: str, lines: tuple[str, ...], reason: str
) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from validate_remedies import _paste_all

    script = tmp_path / name
    script.write_text(UNSEEN if name == "unseen.py" else (EXAMPLES / name).read_text())
    before = _breaks_and_steps(script)
    assert before[0] >= len(lines) and before[1] == 6  # the planted breaks, every step trains
    sites = [f"{script}:{_line(script, text)}" for text in lines]
    fix = graph_break_fix([{"site": s, "reason": reason} for s in sites])
    pasted = _paste_all(fix, sites, tmp_path, script)
    assert not isinstance(pasted, str), pasted
    script.write_text(pasted[2])
    assert _breaks_and_steps(script) == (0, 6)
