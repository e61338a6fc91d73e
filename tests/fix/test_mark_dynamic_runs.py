"""``mark-dynamic`` applied to a real script and run, and the fix ``check`` prints for the same
finding pasted where it points and run: ``examples/check/recompiling_shapes.py`` compiles its
model with ``dynamic=False`` and feeds a new sequence length almost every step, so dynamo
recompiles until its limit. ``check`` records the failing guard (``recompiles``), ``fix`` plans
``mark_dynamic`` on that argument from the run, the report prints the same line placed before
the compiled model's call (pasted as ``benchmarks/validate_remedies.py`` pastes it), and the
three versions run under a harness that counts dynamo's graphs and recompiles and records the
losses: one graph instead of one per length up to the limit, the same losses. The dynamo-only
``eager`` backend keeps it fast (the guards, and so the recompiles, are dynamo's whatever the
backend)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fix.patched import REPO, check_and_patch, harnessed_both, run

STEPS = 30
EAGER = ("--backend", "eager")

HARNESS = """
import json, runpy, sys

import torch
import torch._dynamo
from torch._dynamo.utils import counters, get_compilation_metrics

losses = []
backward = torch.Tensor.backward
def recording(self, *a, **k):
    losses.append(float(self.detach()))
    return backward(self, *a, **k)
torch.Tensor.backward = recording
# "a.py,b.py ARGS": each script in turn, dynamo's caches and counters reset before it as in a
# fresh process; one interpreter and one dynamo import (most of a run's time) for all of them
scripts, args = sys.argv[1].split(","), sys.argv[2:]
for script in scripts:
    torch._dynamo.reset()
    counters.clear()
    losses.clear()
    seen = len(get_compilation_metrics())
    torch.manual_seed(0)  # the script draws its tokens unseeded: the same batches in every run
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")
    ids = [str(m.compile_id) for m in get_compilation_metrics()[seen:]]
    print("HARNESS " + json.dumps({"script": script, "losses": losses,
                                   "graphs": counters["stats"]["unique_graphs"],
                                   "recompiles": sum(1 for i in ids if not i.endswith("/0"))}))
"""


def reports(out: str) -> dict[str, Any]:
    """The harness's ``HARNESS {json}`` lines in ``out``, by script."""
    found = [json.loads(t[len("HARNESS ") :]) for t in out.splitlines() if t.startswith("HARNESS ")]
    return {r["script"]: r for r in found}


def paste_printed(tmp: Path, script: str, finding: str, original: str) -> str:
    """The fix the report of the check run in ``tmp/runs`` prints for ``finding``, pasted into
    ``original`` (the script as checked) as the paste validator pastes it: the pasted text."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from validate_remedies import _paste_all

    from torchdoctor.fix.cli import load_run

    (folder,) = (tmp / "runs").iterdir()
    _, findings = load_run(str(folder))
    f = next(f for f in findings if f["id"] == finding)
    assert "before the line at" in f["fix"], f["fix"]
    work = tmp / f"printed-{finding}"
    work.mkdir()
    shutil.copy(tmp / original, work / script)
    done = _paste_all(f["fix"], list(f.get("where") or []), work, work / script)
    assert not isinstance(done, str), done
    kind, _path, pasted, _at, _place = done
    assert kind == "insert"
    return pasted


@pytest.mark.slow
def test_mark_dynamic_patch_and_printed_fix_compile_one_graph_and_train_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "examples" / "check" / "recompiling_shapes.py", tmp_path / "shapes.py")
    shutil.copy(tmp_path / "shapes.py", tmp_path / "original.py")
    (tmp_path / "harness.py").write_text(HARNESS)
    check_and_patch(
        tmp_path,
        monkeypatch,
        "shapes.py",
        ("recompiles", "recompile-limit-hit"),
        "mark-dynamic",
        ("--steps", "40", *EAGER),
    )
    assert "torch._dynamo.mark_dynamic(tokens, 1)" in (tmp_path / "shapes.py").read_text()
    for finding in ("recompiles", "recompile-limit-hit"):
        printed = paste_printed(tmp_path, "shapes.py", finding, "original.py")
        # the line the report prints, right above the compiled model's call, inside the loop
        lines = printed.splitlines()
        i = next(k for k, ln in enumerate(lines) if "mark_dynamic(tokens, 1)" in ln)
        assert "compiled(tokens)" in lines[i + 1] and lines[i].startswith(" " * 12)
    (tmp_path / "printed.py").write_text(printed)

    args = ("--steps", str(STEPS), *EAGER)
    # the patched and the pasted script one after the other in one process, beside the original
    (before, _), (_, out) = harnessed_both(
        tmp_path, "harness.py", "original.py", "shapes.py,printed.py", *args
    )
    after, pasted = reports(out)["shapes.py"], reports(out)["printed.py"]
    # the planted mistake: a graph per new length until the recompile limit (8); patched: one
    assert before["graphs"] >= 8 and before["recompiles"] >= 7, before["graphs"]
    for fixed in (after, pasted):
        assert fixed["graphs"] == 1 and fixed["recompiles"] == 0, fixed["graphs"]
        # every step still trains, with the original's losses (the same operators, one graph)
        assert len(fixed["losses"]) == STEPS
        assert fixed["losses"] == pytest.approx(before["losses"], rel=1e-5)


DROPOUT = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 2)

    def forward(self, x: torch.Tensor, drop_p: float) -> torch.Tensor:
        h = torch.relu(self.a(x))
        h = nn.functional.dropout(h, p=drop_p)
        return self.b(h)


def main() -> None:
    model = Net()
    compiled = torch.compile(model, dynamic=False, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 32), torch.randint(0, 2, (64,))
    for step in range(30):
        p = 0.1 + 0.3 * step / 30  # a dropout schedule: a new rate every step
        loss = nn.functional.cross_entropy(compiled(x, p), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_a_guarded_rates_printed_tensor_form_pasted_before_the_call_stops_the_recompiles(
    tmp_path: Path,
) -> None:
    """A dropout rate passed as a Python float, new every step: dynamo compiles each value in
    (a recompile per step, to the limit). The report prints its tensor form in the caller's
    own name (``p``, not forward's ``drop_p``) before the call; pasted there the recompiles stop
    and the model still trains (where the rate is read, inside forward, it would not help)."""
    (tmp_path / "rate.py").write_text(DROPOUT)
    (tmp_path / "harness.py").write_text(HARNESS)
    run(tmp_path, "-m", "torchdoctor", "check", "--warmup", "3", "--steps", "3", "--out",
        "runs", "rate.py")  # fmt: skip
    shutil.copy(tmp_path / "rate.py", tmp_path / "original.py")
    printed = paste_printed(tmp_path, "rate.py", "recompiles", "original.py")
    assert "        p = torch.tensor(p)  # before the line at rate.py:24" in printed
    (tmp_path / "printed.py").write_text(printed)
    (before, _), (after, _) = harnessed_both(tmp_path, "harness.py", "original.py", "printed.py")
    assert before["recompiles"] >= 7 and after["recompiles"] == 0, (before, after)
    assert len(after["losses"]) == 30 and after["losses"][-1] < after["losses"][0]
