"""Work in the loop that is not training's: a snapshot of the weights taken every step (timed
exactly, tensor by tensor), an average of the parameters updated tensor by tensor (sampled), and
the cases that must stay quiet (the loss written inline, the input built in a helper).

Each of these was a clean bill before: the copies are real memory traffic, so the roofline
called the step efficient, and torch's own Python under a ``deepcopy`` counted as framework
overhead."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import check_inprocess
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.aside_rules import BESIDE, LIBRARY, OWN, STEP, call_kind
from torchdoctor.rules.families import beside_step
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_common import family_findings

HERE = __file__


def work_beside_step(run: RunRecord) -> list[Finding]:
    """The family's findings on ``run``, as ``check`` makes them."""
    return family_findings(beside_step.RULES[0], run)


def test_library_calls_are_told_apart() -> None:
    assert call_kind("torch:nn|Module._wrapped_call_impl") == STEP
    assert call_kind("torch:nn|cross_entropy") == STEP  # nn.functional: the loss
    assert call_kind("torch:nn|clip_grad_norm_") == STEP
    assert call_kind("torch:nn|Module.zero_grad") == STEP
    assert call_kind("torch:_tensor|Tensor.backward") == STEP
    assert call_kind("torch:optim|Optimizer.profile_hook_step.<locals>.wrapper") == STEP
    assert call_kind("torch:utils|_BaseDataLoaderIter.__next__") == STEP
    assert call_kind("stdlib:copy|deepcopy") == BESIDE
    assert call_kind("torch:nn|Module.state_dict") == BESIDE
    assert call_kind("torch:_tensor|Tensor.__deepcopy__") == BESIDE
    assert call_kind("") == OWN
    assert call_kind("pkg:transformers|Trainer.train") == LIBRARY
    assert call_kind("torch:_tensor|Tensor.__rsub__") == LIBRARY  # 1 - x: arithmetic


def _row(site: str, function: str, ms: float, calls: list[Any], ops: list[Any]) -> dict[str, Any]:
    return {
        "site": site,
        "function": function,
        "code": "",
        "self_ms": ms,
        "inclusive_ms": ms,
        "calls": calls,
        "ops": ops,
    }


def _record(
    rows: list[dict[str, Any]],
    step_ms: float = 10.0,
    repeats: list[dict[str, Any]] | None = None,
    **config: Any,
) -> RunRecord:
    """Five measured steps sampled every 0.5 ms (100 samples)."""
    lines = {"samples": 100, "interval_s": 0.0005, "steps": 5, "ms_per_step": step_ms}
    return RunRecord.from_dict(
        {
            "steps": {"measured_steps": 5, "mean_step_ms": step_ms},
            "lines": {**lines, "rows": rows},
            "config": config,
            **({"repeats": repeats} if repeats is not None else {}),
        }
    )


LOOP = [
    _row("t.py:20", "<module>", 4.0, [["torch:_tensor|Tensor.backward", 4.0]], [["aten::mm", 4]]),
    _row(
        "t.py:18",
        "<module>",
        2.0,
        [["torch:nn|Module._wrapped_call_impl", 1.5], ["", 0.5]],
        [["aten::linear", 1.5], ["aten::mul", 0.5]],
    ),
    _row("t.py:21", "<module>", 1.0, [["torch:optim|Optimizer.step", 1.0]], [["aten::add_", 1]]),
]


def test_a_helper_updating_tensors_one_by_one_is_work_beside_the_step() -> None:
    ema = _row("t.py:14", "update_ema", 3.0, [["", 3.0]], [["aten::mul", 1.8], ["aten::add", 1.2]])
    only_copy = _row("t.py:14", "update_ema", 3.0, [["", 3.0]], [["aten::copy_", 3.0]])
    (g,) = work_beside_step(_record([*LOOP, only_copy]))  # copy_ writes in place: an update
    assert "tensor-by-tensor updates (copy_)" in g.title
    (f,) = work_beside_step(_record([*LOOP, ema]))
    assert f.id == "work-beside-step" and f.saving_ms_per_step == pytest.approx(3.0)
    assert "at t.py:14 (update_ema)" in f.title and "tensor-by-tensor updates (mul, add)" in f.title
    assert "_foreach_lerp_" in (f.fix or "") and f.where == ["t.py:14"]


def test_a_modules_own_forward_is_the_step() -> None:
    """minGPT's NewGELU.forward is all element-wise operators, like an EMA update, but it runs
    inside the model call: the step's own work, never beside it."""
    ops = [["aten::mul", 1.8], ["aten::add", 1.2], ["aten::tanh", 0.5]]
    gelu = _row("model.py:27", "NewGELU.forward", 3.5, [["", 3.5]], ops)
    assert work_beside_step(_record([*LOOP, gelu])) == []
    helper = _row("model.py:27", "new_gelu", 3.5, [["", 3.5]], ops)  # the same as a helper
    assert [f.id for f in work_beside_step(_record([*LOOP, helper]))] == ["work-beside-step"]


def test_a_helper_building_the_input_and_the_inline_loss_stay_quiet() -> None:
    """Indexing and stacking in a ``get_batch`` helper is the input; the loop's own ``mul`` on
    the loss line (0.5 ms, 5%) is the loss: neither is beside the step."""
    batch = _row(
        "t.py:8", "get_batch", 3.0, [["", 3.0]], [["aten::index", 2.0], ["aten::stack", 1]]
    )
    assert work_beside_step(_record([*LOOP, batch])) == []
    # the batch moved to the device in the helper (nanoGPT's get_batch): the input, not a copy
    to = [["aten::_to_copy", 2.0], ["aten::to", 1.0]]
    assert work_beside_step(_record([*LOOP, _row("t.py:9", "get_batch", 3.0, [["", 3]], to)])) == []


def test_a_state_copy_built_in_the_loop_counts_the_line_with_its_clones() -> None:
    snap = _row(
        "t.py:25",
        "<module>",
        2.0,
        [["torch:nn|Module.state_dict", 0.4], ["", 1.6]],
        [["aten::clone", 1.6]],
    )
    (f,) = work_beside_step(_record([*LOOP, snap]))
    assert f.saving_ms_per_step == pytest.approx(2.0)
    assert "tensor copies (clone) at t.py:25 (top level)" in f.title
    assert "kept.copy_(t)" in (f.fix or "")


def test_below_the_threshold_or_timed_exactly_it_stays_quiet() -> None:
    small = _row("t.py:14", "update_ema", 0.5, [["", 0.5]], [["aten::mul", 0.5]])  # 5% of 10 ms
    assert work_beside_step(_record([*LOOP, small])) == []
    copy_row = _row("t.py:11", "keep_best", 3.0, [["stdlib:copy|deepcopy", 3.0]], [])
    (f,) = work_beside_step(_record([*LOOP, copy_row]))
    assert f.title.startswith("copy.deepcopy at t.py:11 (keep_best)")
    timed = [{"what": "copy.deepcopy", "site": "t.py:11", "calls": 20, "seconds": 0.015}]
    assert work_beside_step(_record([*LOOP, copy_row], housekeeping=timed)) == []
    # a module deep-copied at that line: repeated-construction's
    repeats = [{"kind": "copy", "site": "t.py:11", "calls": 5, "seconds": 0.01}]
    assert work_beside_step(_record([*LOOP, copy_row], repeats=repeats)) == []
    shown = _row("t.py:31", "main", 3.0, [["torch:_tensor|Tensor.__format__", 3.0]], [])
    (p,) = work_beside_step(_record([*LOOP, shown]))
    assert p.title.startswith("printing tensors at t.py:31 (main)") and "loss.item()" in (
        p.fix or ""
    )


def test_deep_copies_of_tensors_are_timed_at_the_users_line() -> None:
    torch = pytest.importorskip("torch")
    from torchdoctor.capture.housekeeping import HousekeepingWatch
    from torchdoctor.record.typed import recorded

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    original = torch.Tensor.__deepcopy__
    watch = HousekeepingWatch()
    watch.install()
    try:
        copy.deepcopy(model.state_dict())  # not measuring yet: not recorded
        watch.measuring = True
        line = sys._getframe().f_lineno + 1
        state = copy.deepcopy(model.state_dict())
        twin = copy.deepcopy(model)
    finally:
        watch.uninstall()
    assert torch.Tensor.__deepcopy__ is original
    rows = {r.site: r for r in watch.snapshot()}
    assert rows[f"{HERE}:{line}"].calls == 4  # four tensors, one call each
    assert f"{HERE}:{line + 1}" not in rows  # a module's copy: repeated-construction's
    assert all(r.what == "copy.deepcopy" and r.seconds > 0 for r in rows.values())
    # run.json's row: the keys the housekeeping rule has always read, in their order
    assert list(recorded(rows[f"{HERE}:{line}"])) == ["what", "site", "calls", "seconds"]
    for a, b in zip(state.values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    assert isinstance(twin[0].weight, torch.nn.Parameter)


def test_torchs_own_files_are_told_apart_before_torch_is_imported() -> None:
    """The watcher is built before the script imports torch; torch's files were then labelled
    an ordinary package (``pkg:torch``), and every torch Python frame (a tensor's deepcopy, its
    printing) counted as framework overhead."""
    code = textwrap.dedent(
        """
        import sys
        from torchdoctor.code_paths import CodePaths
        paths = CodePaths()
        assert "torch" not in sys.modules
        import torch._tensor, torch._tensor_str
        print(paths.detail(torch._tensor.__file__), paths.detail(torch._tensor_str.__file__))
        """
    )
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["torch:_tensor", "torch:_tensor_str"]


SNAPSHOT = """
import copy
import torch
from torch import nn

model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(6)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 256)
for step in range(30):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    best = copy.deepcopy(model.state_dict())  # a snapshot, every step
"""

EMA = """
import copy
import torch
from torch import nn

model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(8)])
ema = copy.deepcopy(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 512)


def update_ema(decay=0.99):
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.copy_(e * decay + p * (1 - decay))
            e.mul_(1.0)
            e.add_(p, alpha=0.0)


for step in range(40):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    update_ema()
"""


@pytest.mark.slow
def test_check_names_a_state_dict_copied_every_step(tmp_path: Path) -> None:
    script = tmp_path / "snapshot.py"
    script.write_text(SNAPSHOT)
    r = check_inprocess(tmp_path / "out", script, opts=["--warmup", "3", "--steps", "4"])
    (f,) = [f for f in r.report["findings"] if f["id"] == "housekeeping-in-step"]
    assert f["title"].startswith("copy.deepcopy of tensors every step at ")
    assert f["where"] == [f"{script}:14"] and f["evidence"]["calls_per_step"] == 12
    assert "No findings" not in r.stdout


@pytest.mark.slow
def test_check_names_an_average_updated_tensor_by_tensor(tmp_path: Path) -> None:
    script = tmp_path / "ema.py"
    script.write_text(EMA)
    r = check_inprocess(tmp_path / "out", script, opts=["--warmup", "3", "--steps", "10"])
    (f,) = [f for f in r.report["findings"] if f["id"] == "work-beside-step"]
    assert " (update_ema): " in f["title"], f["title"]
    assert {line["site"] for line in f["evidence"]["lines"]} <= {
        f"{script}:{n}" for n in (14, 15, 16, 17)
    }
    assert "_foreach_lerp_" in f["fix"]
