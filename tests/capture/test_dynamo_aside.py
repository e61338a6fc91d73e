"""``check``'s tensor-method wrappers are invisible to torch.compile: a compiled script has the
graph breaks under ``check`` that it has without torchdoctor, counted by dynamo's own counters
in the script's process (``capture/dynamo_aside.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.capture.check_helpers import REPO, check_subprocess

# Unbound tensor methods, which plain torch keeps in the graph under capture_scalar_outputs=True;
# one break of the user's own, so that the counts are not empty.
SCRIPT = textwrap.dedent(
    """\
    import json
    import sys

    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.config.capture_scalar_outputs = True
    w = torch.randn(16, 16, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.01)


    @torch.compile(backend="eager")
    def loss_of(x):
        h = x @ w
        scale = torch.Tensor.item(h.abs().mean())
        n = len(torch.Tensor.tolist((h > 0).sum(0)))
        h = torch.Tensor.to(h, torch.float64).float()
        torch._dynamo.graph_break()
        return (h * scale).square().mean() + n


    x = torch.randn(8, 16)
    for _ in range(40):
        loss = loss_of(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with open(sys.argv[1], "w") as f:  # check may end the script before its last step
            json.dump(dict(counters["graph_break"]), f)
    """
)


@pytest.mark.slow
def test_a_compiled_script_has_the_same_graph_breaks_under_check(tmp_path: Path) -> None:
    script = tmp_path / "scalars.py"
    script.write_text(SCRIPT)
    plain, checked = tmp_path / "plain.json", tmp_path / "checked.json"
    run = subprocess.run(
        [sys.executable, str(script), str(plain)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    r = check_subprocess(tmp_path / "runs", script, str(checked), timeout=300)
    assert r.code == 0, r.stderr[-2000:]
    without, under = json.loads(plain.read_text()), json.loads(checked.read_text())
    assert sum(without.values()) >= 1  # the user's own
    # before: dynamo's tensor-method cache, built at torch.compile(...) with our wrappers on,
    # lacked TensorBase.item, so the unbound call was a skipped builtin under check only
    assert under == without
    own = next(i for i, ln in enumerate(SCRIPT.splitlines(), 1) if "graph_break()" in ln)
    assert [b["site"] for b in r.run["compile"]["graph_breaks"]] == [f"{script}:{own}"]
