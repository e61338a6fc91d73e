"""Two remedies that used to be wrong on some runs, each shown by running the pasted or patched
script here, on a CPU.

- The bf16 autocast ``check`` prints for ``fp32-on-bf16-gpu`` (a CUDA run) names the device the
  script's step copies its batch to (``torch.device(device).type``), as ``fix``'s
  ``bf16-autocast`` codemod does, and wraps the user's own forward and loss: pasted into the
  script, the forward runs in bf16 wherever the script runs (it used to be ``'cuda'``, which on a
  CPU is disabled with a warning and shows nothing).
- The DataLoader remedies (the text of ``data-loading-bound`` and the ``dataloader-args`` patch)
  leave ``pin_memory`` out on a run without CUDA: ``pin_memory=True`` there makes torch warn
  ("no accelerator is found") and pins nothing. A CUDA record still gets ``pin_memory=True``.

Each runs on ``tests/fix/fixtures/gpu-runs/classifier_device_var.py`` (the script the codemod
was written against) and on ``fixtures/cpu-remedies/regressor_torch_device.py``, written apart
(``dev = torch.device(...)``, a positional ``torch.utils.data.DataLoader(ds, 24, True)``, the
copies and the loss inside a function, ``tb.to(device=dev)``).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fix.patched import run
from torchdoctor.fix import planner
from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import FindingRef
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.families import loading, waits
from torchdoctor.rules.run_rules import run_findings

FIXTURES = Path(__file__).parent / "fixtures"
CLASSIFIER = FIXTURES / "gpu-runs" / "classifier_device_var.py"
REGRESSOR = FIXTURES / "cpu-remedies" / "regressor_torch_device.py"
H200 = {
    "device": {"name": "NVIDIA H200", "bf16_tensor_cores": True, "tf32_capable": True},
    "memory": {"peak_reserved_bytes": 0},
}
PIN_WARNING = "'pin_memory' argument is set as true but no accelerator"

HARNESS = """
import json, runpy, sys, warnings

import torch

# torch's warning for pin_memory without an accelerator is an error here
warnings.filterwarnings("error", message=".*'pin_memory' argument", category=UserWarning)
losses, dtypes, step = [], [], []
torch.nn.modules.module.register_module_forward_hook(
    lambda m, a, o: step.append(str(o.dtype)) if isinstance(m, torch.nn.Linear) else None
)
backward = torch.Tensor.backward
def recording(self, *a, **k):
    losses.append(float(self.detach()))
    dtypes.append(sorted(set(step)))
    step.clear()
    return backward(self, *a, **k)
torch.Tensor.backward = recording
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("HARNESS " + json.dumps({"losses": losses, "linear_dtypes": dtypes,
                               "cuda": torch.cuda.is_available()}))
"""


def harnessed(tmp: Path, scripts: list[str]) -> list[dict[str, Any]]:
    """Each of ``scripts`` (in ``tmp``) run under the harness at the same time: its losses and
    the dtypes its ``Linear`` layers returned in each step."""
    (tmp / "harness.py").write_text(HARNESS)

    def one(name: str) -> dict[str, Any]:
        out = run(tmp, "harness.py", name, "2").stdout
        line = next(t for t in out.splitlines() if t.startswith("HARNESS "))
        return dict(json.loads(line[len("HARNESS ") :]))

    with ThreadPoolExecutor(len(scripts)) as pool:
        got = list(pool.map(one, scripts))
    assert not any(g["cuda"] for g in got)  # a CPU's view
    return got


def trains(got: dict[str, Any]) -> None:
    losses = got["losses"]
    assert len(losses) >= 16 and all(math.isfinite(v) for v in losses), losses
    tail = len(losses) // 5
    assert sum(losses[-tail:]) < 0.8 * sum(losses[:tail]), losses


# -- the bf16 autocast check prints ----------------------------------------------------------
def bf16_fix(script: Path) -> str:
    """The fix ``check`` prints for fp32 GEMMs on an H200 run of ``script``."""
    ops = {"gemm_share": 0.6, "gemm_share_basis": "device"}
    rec = {
        "script": str(script),
        "steps": {"count": 15, "measured_steps": 10, "mean_step_ms": 20.0},
        "gpu": H200,
        "ops": ops,
        "config": {"backend_flags": {"tf32_matmul": True}},
    }
    (f,) = [f for f in run_findings(rec) if f.id == "fp32-on-bf16-gpu"]
    return f.fix


def paste_wrap(source: str, fix: str) -> str:
    """The fix's ``with`` header over the user's own statements, pasted at its ``# at
    FILE:LINE``: those lines (the body, as the fix repeats them) replaced by header and body."""
    header, *body = [ln for ln in fix.splitlines() if ln.startswith(("with ", "    "))]
    line = int(re.search(r"# at \S+:(\d+)", header).group(1))  # type: ignore[union-attr]
    lines = source.splitlines()
    indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
    mine = textwrap.dedent("\n".join(lines[line - 1 : line - 1 + len(body)])).splitlines()
    assert [ln[4:] for ln in body] == mine, (body, mine)  # the fix repeats the user's lines
    header = re.sub(r"  # at \S+$", "", header)  # where to paste, not code
    new = [indent + header, *(indent + ln for ln in body)]
    return "\n".join(lines[: line - 1] + new + lines[line - 1 + len(body) :]) + "\n"


@pytest.mark.parametrize(
    ("script", "device"), [(CLASSIFIER, "device"), (REGRESSOR, "dev")], ids=["classifier", "new"]
)
def test_printed_bf16_autocast_names_the_scripts_device(script: Path, device: str) -> None:
    fix = bf16_fix(script)
    assert f"torch.autocast(device_type=torch.device({device}).type, dtype=torch.bfloat16)" in fix
    assert '"cuda"' not in fix and "'cuda'" not in fix


def test_printed_bf16_autocast_without_a_readable_script_is_cuda() -> None:
    """A CUDA run whose script cannot be read: ``"cuda"`` (the run was on CUDA)."""
    fix = bf16_fix(Path("/nowhere/train.py"))
    assert 'torch.autocast(device_type="cuda", dtype=torch.bfloat16)' in fix


@pytest.mark.slow
def test_printed_bf16_autocast_pasted_runs_in_bf16_on_a_cpu(tmp_path: Path) -> None:
    """Both scripts, with the printed text pasted around their own forward and loss: every
    ``Linear`` of every forward returns bf16 here, on a CPU (the originals: fp32), the backward
    runs outside the autocast, and the loss falls."""
    names = []
    for script in (CLASSIFIER, REGRESSOR):
        shutil.copy(script, tmp_path / script.name)
        pasted = paste_wrap(script.read_text(), bf16_fix(tmp_path / script.name))
        (tmp_path / f"pasted_{script.name}").write_text(pasted)
        names += [script.name, f"pasted_{script.name}"]
    got = harnessed(tmp_path, names)
    for before, after in (got[0:2], got[2:4]):
        assert {d for s in before["linear_dtypes"] for d in s} == {"torch.float32"}
        assert all(s == ["torch.bfloat16"] for s in after["linear_dtypes"]), after
        trains(before)
        trains(after)


# -- pin_memory on a run without CUDA -------------------------------------------------------
def data_loading_fix(gpu: bool) -> str:
    """The fix of ``data-loading-bound`` for a trace with or without a GPU (a loop that waits
    15 of 20 ms per step for its batch)."""
    a = SimpleNamespace(
        mean_step_ms=20.0,
        has_gpu=gpu,
        total=SimpleNamespace(idle_ms={"data_loading": 150.0}),
        per_step_ms=lambda ms: ms / 10,
    )
    m = loading.data_loading(a)  # type: ignore[arg-type]
    assert m is not None
    return loading.DATA_SPEC.fix(**m.fix)  # type: ignore[misc]


def test_data_loading_text_pins_only_with_a_gpu() -> None:
    assert "pin_memory" not in data_loading_fix(gpu=False)
    assert "pin_memory=True" in data_loading_fix(gpu=True)


def input_pipeline_fix(gpu: bool) -> str:
    """The fix of ``input-pipeline`` for a trace with or without a GPU (each of 4 steps opens
    with 6 of 20 ms outside torch operators)."""
    part = SimpleNamespace(idle_ms={"input_pipeline": 6.0}, share=lambda ms: ms / 20.0)
    a = SimpleNamespace(
        mean_step_ms=20.0,
        has_gpu=gpu,
        n_steps=4,
        per_step=[part] * 4,
        total=SimpleNamespace(idle_ms={"input_pipeline": 24.0}),
        per_step_ms=lambda ms: ms / 4,
        activity=SimpleNamespace(dataloader=([],)),
    )
    m = waits.input_pipeline(a)  # type: ignore[arg-type]
    assert m is not None
    return waits.INPUT_SPEC.fix(**m.fix)  # type: ignore[misc]


def test_input_pipeline_text_pins_only_with_a_gpu() -> None:
    assert "pin_memory" not in input_pipeline_fix(gpu=False)
    assert "pin_memory=True" in input_pipeline_fix(gpu=True)


def loader_finding(script: Path, fid: str) -> FindingRef:
    """``fid`` about the one DataLoader of ``script``: no workers, unpinned, 2 suggested."""
    lines = script.read_text().splitlines()
    line = next(i for i, ln in enumerate(lines, 1) if "DataLoader(" in ln and "=" in ln)
    raw = {"num_workers": 0, "pin_memory": False, "cpus_per_rank": 2, "batch_size": 32}
    raw["call"] = {"site": f"{script.name}:{line}"}
    evidence = {"mean_step_ms": 20.0, "dataloader": raw, "suggested_num_workers": 2}
    return FindingRef(fid, evidence=evidence)


def patched(script: Path, finding: FindingRef, record: dict[str, Any]) -> str:
    ctx = FixContext(RunRecord.from_dict(record), str(script.parent), str(script))
    p = planner.plan([finding], ctx)
    done = [c for c in p.changes if c.codemod == "dataloader-args"]
    assert [c.status for c in done] == ["patched"], p.changes
    files, _ = planner.compose(p, done)
    return files[str(script)]


@pytest.mark.parametrize("fid", ["dataloader-config", "data-loading-bound"])
@pytest.mark.parametrize("script", [CLASSIFIER, REGRESSOR], ids=["classifier", "new"])
def test_loader_patch_pins_only_on_a_cuda_record(tmp_path: Path, script: Path, fid: str) -> None:
    shutil.copy(script, tmp_path / script.name)
    finding = loader_finding(tmp_path / script.name, fid)
    cpu = patched(tmp_path / script.name, finding, {})
    assert "num_workers=2" in cpu and "pin_memory" not in cpu
    cuda = patched(tmp_path / script.name, finding, {"gpu": H200})
    assert "pin_memory=True" in cuda


@pytest.mark.slow
def test_loader_remedies_on_a_cpu_run_warn_nothing_and_train(tmp_path: Path) -> None:
    """The patch of each script from a CPU record and the printed ``data-loading-bound`` text
    pasted in place of a loader of the shape it names run with torch's pin_memory warning
    made an error; each trains. The same text with ``pin_memory=True`` (the old one) fails."""
    names = []
    for script in (CLASSIFIER, REGRESSOR):
        shutil.copy(script, tmp_path / script.name)
        finding = loader_finding(tmp_path / script.name, "dataloader-config")
        (tmp_path / f"patched_{script.name}").write_text(
            patched(tmp_path / script.name, finding, {})
        )
        names.append(f"patched_{script.name}")
    shape = CLASSIFIER.read_text().replace(
        "loader = DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True)",
        "import os\ndataset, bs = TensorDataset(features, labels), 32\nLOADER",
    )
    assert "LOADER" in shape
    pasted = shape.replace("LOADER", data_loading_fix(gpu=False))
    (tmp_path / "pasted.py").write_text(pasted)
    (tmp_path / "pasted_input.py").write_text(shape.replace("LOADER", input_pipeline_fix(False)))
    for got in harnessed(tmp_path, [*names, "pasted.py", "pasted_input.py"]):
        trains(got)
    old = shape.replace("LOADER", data_loading_fix(gpu=True))
    (tmp_path / "old.py").write_text(old)
    with pytest.raises(AssertionError, match="pin_memory"):
        harnessed(tmp_path, ["old.py"])


@pytest.mark.parametrize("script", [CLASSIFIER, REGRESSOR], ids=["classifier", "new"])
def test_printed_autocast_and_the_codemods_patch_agree(tmp_path: Path, script: Path) -> None:
    """``fix``'s bf16-autocast patch of the script and the text ``check`` prints, pasted, are
    the same program (the codemod's comment aside): one definition of the step's forward."""
    shutil.copy(script, tmp_path / script.name)
    finding = FindingRef("fp32-on-bf16-gpu", evidence={"mean_step_ms": 20.0})
    record = RunRecord.from_dict({"gpu": H200})
    ctx = FixContext(record, str(tmp_path), str(tmp_path / script.name))
    p = planner.plan([finding], ctx)
    assert [c.status for c in p.changes] == ["patched"], p.changes
    files, _ = planner.compose(p, p.patched)
    patch = re.sub(r"  # torchdoctor: .*", "", files[str(tmp_path / script.name)])
    pasted = paste_wrap(script.read_text(), bf16_fix(tmp_path / script.name))
    assert pasted == patch
