"""dataloader-config that measured a batch cheaper to make in the training process than to hand
over from workers (``suggested_num_workers`` 0): the patch takes the workers out of the user's
call, as the report's remedy does, never adds ``persistent_workers``/``prefetch_factor`` (minGPT's
Trainer, 4 workers on a 2-core machine, used to get both)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import FindingRef, Refusal, Rewrite, Target
from torchdoctor.fix.registry import CODEMODS
from torchdoctor.record.run import RunRecord

MINGPT = Path(__file__).resolve().parents[1] / "public" / "mingpt_adder" / "mingpt"
CODEMOD = CODEMODS["dataloader-args"]


def finding(site: str, workers: int = 4) -> FindingRef:
    loader = {"num_workers": workers, "batch_size": 32, "call": {"site": site}}
    return FindingRef.from_dict(
        {
            "id": "dataloader-config",
            "evidence": {"suggested_num_workers": 0, "dataloader": loader},
        }
    )


def patched(tmp: Path, source: str, workers: int = 4) -> tuple[Target | Refusal, Any]:
    (tmp / "train.py").write_text(source)
    line = next(i for i, ln in enumerate(source.splitlines(), 1) if "DataLoader(" in ln)
    ctx = FixContext(RunRecord.from_dict({}), str(tmp), str(tmp / "train.py"))
    (target,) = CODEMOD.plan(finding(f"{tmp / 'train.py'}:{line}", workers), ctx)
    if isinstance(target, Refusal):
        return target, None
    return target, CODEMOD.rewrite(source, target)


def test_mingpt_trainer_loader_loses_its_workers(tmp_path: Path) -> None:
    shutil.copytree(MINGPT, tmp_path / "mingpt")
    source = (tmp_path / "mingpt" / "trainer.py").read_text()
    (tmp_path / "train.py").write_text(source)
    line = next(i for i, ln in enumerate(source.splitlines(), 1) if "= DataLoader(" in ln)
    ctx = FixContext(RunRecord.from_dict({}), str(tmp_path), str(tmp_path / "train.py"))
    (target,) = CODEMOD.plan(finding(f"{tmp_path / 'train.py'}:{line}"), ctx)
    assert isinstance(target, Target), target
    out = CODEMOD.rewrite(source, target)
    assert isinstance(out, Rewrite), out
    assert "num_workers=config.num_workers" in source
    assert "num_workers" not in out.source.split("= DataLoader(")[1].split(")\n")[0]
    for never in ("persistent_workers", "prefetch_factor"):
        assert never not in out.source
    # the rest of the file is untouched: only that one argument's line went
    assert len(out.source.splitlines()) == len(source.splitlines()) - 1
    compile(out.source, "trainer.py", "exec")
    # and a second run changes nothing
    again = CODEMOD.rewrite(out.source, target)
    assert isinstance(again, Refusal) and again.already, again


LOOP = """import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x_all = torch.randn(64, 4)
ds = TensorDataset(x_all, x_all @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))
loader = {call}
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
epoch_loss = []
for epoch in range(4):
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    epoch_loss.append(total)
RESULT = (loader.num_workers, epoch_loss[0], epoch_loss[-1])
"""


@pytest.mark.parametrize(
    "call",
    [
        "DataLoader(ds, batch_size=8, num_workers=4, persistent_workers=True, prefetch_factor=4)",
        "DataLoader(ds, 8, True, None, None, 4, None, False)",  # positionals after the workers
        "DataLoader(\n    ds,\n    batch_size=8,\n    num_workers=4,  # workers\n)",
        "DataLoader(ds, num_workers=4, batch_size=8)",
        # spawn_workers_restart.py's call: DataLoader raises for a context without workers
        'DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="spawn")',
    ],
)
def test_patched_loop_runs_without_workers_and_still_trains(tmp_path: Path, call: str) -> None:
    target, out = patched(tmp_path, LOOP.format(call=call))
    assert isinstance(out, Rewrite), (target, out)
    scope: dict[str, Any] = {}
    exec(compile(out.source, "train.py", "exec"), scope)  # the patched script, in process
    workers, first, last = scope["RESULT"]
    assert workers == 0
    assert last < first  # it still trains
    assert "# workers" in out.source or "# workers" not in call  # comments kept


def test_loader_without_workers_is_left_alone(tmp_path: Path) -> None:
    target, _ = patched(tmp_path, LOOP.format(call="DataLoader(ds, batch_size=8)"), workers=0)
    # no workers recorded: nothing to take out (the other remedies of the finding apply)
    assert not (isinstance(target, Target) and "drop" in target.params), target
