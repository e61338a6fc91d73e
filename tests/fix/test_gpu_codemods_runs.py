"""The three codemods that only a CUDA run proposes (``tf32-matmul``, ``bf16-autocast``'s edit,
``non-blocking-copies``), planned from a GPU run's record and applied to small scripts written
as users write them (``device = "cuda" if torch.cuda.is_available() else "cpu"``,
``tests/fix/fixtures/gpu-runs/``); the patched script then runs here, on the CPU, beside the
original, under a harness that records each step's state and loss.

What a CPU shows: the patched lines run, the remedy's state is in force inside the step
(``get_float32_matmul_precision() == "high"``; under the autocast, each ``Linear`` of the
forward returns bfloat16 and the backward runs outside it; ``non_blocking=True`` on every batch
copy), and the script still trains (the loss falls; the original's losses where the change is
arithmetic the CPU does not have). What needs a GPU and is not claimed: that TF32 or bf16 tensor
cores run the matmuls, that the pinned batches' copies overlap the previous step's kernels
(here no batch is pinned: torch pins only where an accelerator exists), and the time saved.

The record is written here, with the device marked as an H200; the recorded H200 run of
nanoGPT (``../shared/traces/h200/runs``) plans the same patches (skipped when absent).
"""

from __future__ import annotations

import json
import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TRACES
from tests.fix.patched import harnessed
from torchdoctor.fix import planner
from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import FindingRef
from torchdoctor.record.run import RunRecord

SCRIPTS = Path(__file__).parent / "fixtures" / "gpu-runs"
H200_RUN = TRACES / "h200" / "runs" / "nanogpt_char_eager" / "run.json"
H200 = {
    "gpu": {
        "device": {
            "name": "NVIDIA H200",
            "capability": "9.0",
            "bf16_tensor_cores": True,
            "tf32_capable": True,
            "count": 1,
        }
    }
}

HARNESS = """
import json, runpy, sys

import torch
from torch.utils.data import DataLoader

steps, linear_dtypes, copies, loaders = [], [], [], []
def linear_out(module, args, out):
    linear_dtypes.append(str(out.dtype))
torch.nn.modules.module.register_module_forward_hook(
    lambda m, a, o: linear_out(m, a, o) if isinstance(m, torch.nn.Linear) else None
)
backward = torch.Tensor.backward
def recording(self, *a, **k):  # the step's state, read where the script's step runs
    steps.append({
        "loss": float(self.detach()),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "autocast_at_backward": torch.is_autocast_enabled("cpu"),
        "linear_dtypes": sorted(set(linear_dtypes)),
    })
    linear_dtypes.clear()
    return backward(self, *a, **k)
torch.Tensor.backward = recording
to = torch.Tensor.to
def copying(self, *a, **k):
    if k.get("non_blocking"):
        copies.append(self.is_pinned())
    return to(self, *a, **k)
torch.Tensor.to = copying
loader_iter = DataLoader.__iter__
def iterating(self):
    loaders.append({"pin_memory": self.pin_memory, "num_workers": self.num_workers})
    return loader_iter(self)
DataLoader.__iter__ = iterating
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("HARNESS " + json.dumps({"steps": steps, "non_blocking_copies": copies,
                               "loaders": loaders, "cuda": torch.cuda.is_available()}))
"""


def plan(script: Path, finding: FindingRef, record: dict[str, Any]) -> planner.Plan:
    ctx = FixContext(RunRecord.from_dict(record), str(script.parent), str(script))
    return planner.plan([finding], ctx)


def patched_text(script: Path, finding: FindingRef, record: dict[str, Any]) -> str:
    """The script with every change ``fix`` plans for ``finding`` on ``record``'s machine."""
    p = plan(script, finding, record)
    assert p.patched and all(c.status == "patched" for c in p.changes), p.changes
    files, skipped = planner.compose(p, p.patched)
    assert not skipped and list(files) == [str(script)]
    return files[str(script)]


def loader_finding(name: str, fid: str, **evidence: Any) -> FindingRef:
    """``fid`` about the one ``DataLoader(...)`` call of script ``name``: 0 workers, pageable
    (its site relative to the run's folder, as check records it)."""
    lines = (SCRIPTS / name).read_text().splitlines()
    line = next(i for i, ln in enumerate(lines, 1) if "= DataLoader(" in ln)
    raw = {"num_workers": 0, "pin_memory": False, "cpus_per_rank": 2, "batch_size": 32}
    raw["call"] = {"site": f"{name}:{line}"}
    return FindingRef(fid, evidence={"mean_step_ms": 20.0, "dataloader": raw, **evidence})


TF32 = FindingRef("tf32-off", evidence={"mean_step_ms": 20.0})
BF16 = FindingRef("fp32-on-bf16-gpu", evidence={"mean_step_ms": 20.0})
CASES = {  # codemod -> (script, finding, arguments of the run)
    "tf32": ("regression_env_first.py", TF32, ("--steps", "30")),
    "bf16": ("classifier_device_var.py", BF16, ("3",)),
}


def run_patched(
    tmp: Path, name: str, findings: list[FindingRef], *args: str
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], str]]]:
    """The original of script ``name`` and its copy patched for each of ``findings``, run at
    the same time under the harness (it records states and losses, no times): the original's
    record, and each patched copy's record and text."""
    shutil.copy(SCRIPTS / name, tmp / "original.py")
    (tmp / "harness.py").write_text(HARNESS)
    texts = []
    for k, finding in enumerate(findings):
        shutil.copy(SCRIPTS / name, tmp / name)  # the run's sites name the script
        texts.append(patched_text(tmp / name, finding, H200))
        (tmp / f"patched{k}.py").write_text(texts[-1])
    copies = ["original.py", *(f"patched{k}.py" for k in range(len(findings)))]
    with ThreadPoolExecutor(len(copies)) as pool:
        runs = [pool.submit(harnessed, tmp, "harness.py", c, *args) for c in copies]
        before, *after = [r.result()[0] for r in runs]
    assert not any(r["cuda"] for r in (before, *after))  # what follows is a CPU's view
    return before, list(zip(after, texts, strict=True))


def losses(run: dict[str, Any]) -> list[float]:
    return [s["loss"] for s in run["steps"]]


def trains(run: dict[str, Any], steps: int) -> None:
    got = losses(run)
    assert len(got) == steps and all(math.isfinite(v) for v in got), got
    tail = max(2, steps // 5)
    assert sum(got[-tail:]) < 0.8 * sum(got[:tail]), got  # it still learns


@pytest.mark.slow
def test_tf32_is_set_after_a_late_torch_import_and_in_force_in_the_step(tmp_path: Path) -> None:
    """The script sets its environment before importing torch: the line goes after the import
    of torch (it used to go after ``import os``, where ``torch`` is not yet defined)."""
    before, [(after, text)] = run_patched(
        tmp_path, "regression_env_first.py", [TF32], "--steps", "30"
    )
    assert text.index("import torch\n") < text.index("torch.set_float32_matmul_precision(")
    assert {s["matmul_precision"] for s in before["steps"]} == {"highest"}
    assert {s["matmul_precision"] for s in after["steps"]} == {"high"}
    trains(after, 30)
    # no TF32 unit on this CPU: "high" is fp32 arithmetic here, the original's losses
    assert losses(after) == pytest.approx(losses(before), rel=1e-4)


@pytest.mark.slow
def test_bf16_autocast_follows_the_scripts_device_and_still_trains(tmp_path: Path) -> None:
    """The autocast names the script's own device (``torch.device(device).type``), so on this
    CPU its forward runs in bf16 too (a hard-coded ``"cuda"`` autocast is disabled here, with a
    warning, and would show nothing); on a GPU the same line is ``"cuda"``."""
    before, [(after, text)] = run_patched(tmp_path, "classifier_device_var.py", [BF16], "3")
    assert "torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)" in text
    steps = 3 * 16  # 512 samples, batches of 32
    assert {d for s in before["steps"] for d in s["linear_dtypes"]} == {"torch.float32"}
    # every Linear of every forward returned bf16; the backward ran outside the autocast
    assert all(s["linear_dtypes"] == ["torch.bfloat16"] for s in after["steps"]), after["steps"]
    assert not any(s["autocast_at_backward"] for s in after["steps"])
    trains(after, steps)
    trains(before, steps)
    # bf16 arithmetic: near the fp32 losses, not equal to them
    assert losses(after) != losses(before)
    assert losses(after) == pytest.approx(losses(before), abs=0.05)


@pytest.mark.slow
def test_non_blocking_copies_of_a_pinned_loader_run_on_a_cpu(tmp_path: Path) -> None:
    """On the CUDA record the loader findings pin the loader (``pin_memory=True``) and make the
    batch copies ``non_blocking=True``; ``dataloader-config`` also adds workers. On a CPU the
    loader runs unpinned (torch pins only with an accelerator), and every batch copy is
    non-blocking. Pinning alone leaves the losses the original's; with the workers the first
    epoch's are (persistent workers keep one shuffling iterator across epochs, so later
    epochs draw another order from the same seed)."""
    name = "classifier_device_var.py"
    pinned = loader_finding(name, "pageable-h2d-copies")
    workers = loader_finding(name, "dataloader-config", suggested_num_workers=2)
    before, [(pin, pin_text), (work, work_text)] = run_patched(
        tmp_path, name, [pinned, workers], "3"
    )
    copies = "x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"
    assert copies in pin_text and copies in work_text
    assert "shuffle=True, pin_memory=True)" in pin_text
    assert "num_workers=2, persistent_workers=True, prefetch_factor=4, pin_memory=True" in work_text
    steps, epoch = 3 * 16, 16  # 512 samples, batches of 32
    assert before["non_blocking_copies"] == []
    for run, workers_n in ((pin, 0), (work, 2)):
        # both batch tensors of every step, none pinned here (a GPU machine pins them)
        assert run["non_blocking_copies"] == [False] * (2 * steps)
        assert {(d["pin_memory"], d["num_workers"]) for d in run["loaders"]} == {(True, workers_n)}
        trains(run, steps)
    assert losses(pin) == losses(before)
    assert losses(work)[:epoch] == losses(before)[:epoch]


def test_the_recorded_h200_run_plans_the_same_patches(tmp_path: Path) -> None:
    """The H200 run of nanoGPT (``check``'s run.json) is a CUDA record with bf16 and TF32
    tensor cores: each script gets the patch the written record gives."""
    if not H200_RUN.is_file():
        pytest.skip(f"H200 run folder not found at {H200_RUN} (set TORCHDOCTOR_TRACES)")
    record = json.loads(H200_RUN.read_text())
    assert record["gpu"]["device"]["name"] == "NVIDIA H200"
    for name, finding, _ in CASES.values():
        shutil.copy(SCRIPTS / name, tmp_path / name)
        assert patched_text(tmp_path / name, finding, record) == patched_text(
            tmp_path / name, finding, H200
        )
    name = "classifier_device_var.py"
    finding = loader_finding(name, "pageable-h2d-copies")
    assert patched_text(tmp_path / name, finding, record) == patched_text(
        tmp_path / name, finding, H200
    )


def test_nothing_is_planned_from_a_cpu_run() -> None:
    """The same scripts and findings from a CPU run's record: no change (the refusal says why,
    or nothing is proposed): the run tests above rest on the GPU record."""
    for name, finding, _ in CASES.values():
        assert not plan(SCRIPTS / name, finding, {}).patched
    name = "classifier_device_var.py"
    p = plan(SCRIPTS / name, loader_finding(name, "pageable-h2d-copies"), {})
    assert not p.patched


NON_BLOCKING_LOOP = """import torch
from tqdm import tqdm

loader = torch.utils.data.DataLoader(ds)


def evaluate(model, device, host):
    for i, (x, y) in enumerate(tqdm(loader)):
        x, y = x.to(device), y.to(device)
        y = model(x).argmax(1).to(host) == y.to(host)
        mask = i.cuda(0, True)
"""


def test_non_blocking_reaches_through_tqdm_and_only_the_batch_copies(tmp_path: Path) -> None:
    """A loop over ``enumerate(tqdm(loader))`` is the loader's loop (it used to find no copy);
    only each variable's first copy, from the host, becomes non-blocking: ``y.to(host)`` after
    ``y`` was moved may copy to the host, where a non-blocking copy is read before it lands; a
    ``non_blocking`` given by position is not passed again (a TypeError)."""
    from torchdoctor.fix.codemods.non_blocking import CODEMOD
    from torchdoctor.fix.model import Rewrite, Target

    (tmp_path / "train.py").write_text(NON_BLOCKING_LOOP)
    lines = NON_BLOCKING_LOOP.splitlines()
    raw = {"num_workers": 0, "pin_memory": False, "call": {"site": "train.py:4"}}
    finding = FindingRef("pageable-h2d-copies", evidence={"mean_step_ms": 20.0, "dataloader": raw})
    ctx = FixContext(RunRecord.from_dict(H200), str(tmp_path), str(tmp_path / "train.py"))
    (target,) = CODEMOD.plan(finding, ctx)
    assert isinstance(target, Target), target
    assert lines[target.line - 1].lstrip().startswith("for i, (x, y) in enumerate(tqdm(loader))")
    out = CODEMOD.rewrite(NON_BLOCKING_LOOP, target)
    assert isinstance(out, Rewrite), out
    changed = [ln for ln in out.source.splitlines() if ln not in lines]
    assert changed == [
        "        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"
    ]
    compile(out.source, "train.py", "exec")


@pytest.mark.parametrize(
    ("own", "already"),
    [
        ("torch.backends.cuda.matmul.allow_tf32 = False", False),
        ('torch.set_float32_matmul_precision("highest")', False),
        ('torch.backends.cuda.matmul.fp32_precision = "ieee"', False),
        ('torch.backends.cuda.matmul.fp32_precision = "tf32"', True),
        ("torch.backends.cuda.matmul.allow_tf32=True", True),
    ],
)
def test_tf32_defers_to_the_scripts_own_setting(own: str, already: bool) -> None:
    """A script that sets the fp32 matmul precision itself, after the imports: the line the
    codemod adds there would be undone by the script's (it used to be added anyway when the
    script turned TF32 off); the refusal names the script's line."""
    from torchdoctor.fix.model import Refusal, Target
    from torchdoctor.fix.registry import CODEMODS

    src = f"import torch\n\nmodel = torch.nn.Linear(4, 4)\n{own}\n"
    out = CODEMODS["tf32-matmul"].rewrite(src, Target("tf32-matmul", "/nowhere.py", 1))
    assert isinstance(out, Refusal) and out.already is already, out
    assert already or f"(line 4: `{own}`)" in out.reason
