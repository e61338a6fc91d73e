"""Advice that fits the script: a compile the script already has under a setting of its own is
turned on by that setting (``--compile=True`` for nanoGPT's configurator, ``--compile`` for an
argparse flag; the default edited for a plain global or a config dict), and the model behind
``optimizer = model.configure_optimizers(...)`` is found for the compile patch.

Each remedy is applied and run: the switch on the vendored nanoGPT's command line, the edited
default and the inserted ``model.compile()`` in the patched program (the runs that compile are
``slow``: torch.compile of even a tiny model takes tens of seconds on a shared CPU)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TRACES
from tests.public.scripts import prepare
from torchdoctor.fix import planner, switches
from torchdoctor.fix.context import FixContext
from torchdoctor.fix.model import FindingRef
from torchdoctor.record.run import RunRecord

REPO = Path(__file__).resolve().parents[2]
H200_CHAR_EAGER = TRACES / "h200" / "runs" / "nanogpt_char_eager"
needs_cxx = pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")), reason="torch.compile needs a C++ compiler"
)
HOST_BOUND = FindingRef("host-bound", saving_ms_per_step=33.2, evidence={"mean_step_ms": 45.5})
# nanoGPT small on the CPU: the tests/public recipe, fewer iterations, no evaluation inside
TINY_ITERS = ["--max_iters=3", "--eval_interval=1000", "--eval_iters=1"]


def script(tmp: Path, text: str, name: str = "train.py") -> Path:
    p = tmp / name
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def changes(tmp: Path, path: Path, argv: list[str] | None = None) -> list[Any]:
    ctx = FixContext(RunRecord.from_dict({"argv": argv or []}), str(tmp), str(path))
    return [c for c in planner.plan([HOST_BOUND], ctx).changes if c.codemod == "compile-model"]


def one(cs: list[Any]) -> Any:
    assert len(cs) == 1, cs
    return cs[0]


def nanogpt(tmp: Path) -> tuple[Path, list[str]]:
    """The vendored nanoGPT with its synthetic data in ``tmp``; its CPU arguments."""
    _, args, _ = prepare("nanogpt", tmp)
    return tmp / "train.py", args


def run_py(cwd: Path, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def losses(output: str) -> list[float]:
    return [float(x) for x in re.findall(r"^iter \d+: loss ([0-9.]+)", output, re.M)]


# -- nanoGPT: the configurator's --compile=True --------------------------------------------------
def test_nanogpt_compile_is_its_own_switch(tmp_path: Path) -> None:
    path, args = nanogpt(tmp_path)
    c = one(changes(tmp_path, path, args))
    assert c.status == "switch", c
    assert c.switch.add == ("--compile=True",)
    assert "--compile=False" not in c.switch.args and c.switch.args[-1] == "--compile=True"
    # every other word of the run's command line kept, in order
    assert [a for a in args if a != "--compile=False"] == list(c.switch.args[:-1])
    line = next(
        i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("compile = ")
    )
    assert (c.file, c.line) == (str(path), line)
    assert "configurator.py" in c.summary and c.diff == ""


def test_nanogpt_switch_already_on_is_not_proposed(tmp_path: Path) -> None:
    path, args = nanogpt(tmp_path)
    on = [a if a != "--compile=False" else "--compile=True" for a in args]
    c = one(changes(tmp_path, path, on))
    assert c.status == "refused"
    assert "`compile` is True in this run" in c.reason


def test_nanogpt_config_file_setting_is_read(tmp_path: Path) -> None:
    """A config file the configurator execs may turn it off; the switch then comes after it."""
    path, args = nanogpt(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "cpu.py").write_text("compile = False\ndevice = 'cpu'\n")
    argv = ["config/cpu.py", *[a for a in args if not a.startswith("--compile")]]
    s = next(s for s in _settings(path) if s.name == "compile")
    assert switches.value_in_run(s, argv) is False
    assert switches.value_in_run(s, argv[1:]) is True  # its default
    c = one(changes(tmp_path, path, argv))
    assert c.status == "switch" and c.switch.args[0] == "config/cpu.py"
    assert c.switch.args[-1] == "--compile=True"


def _settings(path: Path) -> list[switches.Setting]:
    from torchdoctor.fix.cst_tools import Parsed

    p = Parsed(path.read_text())
    import libcst as cst

    found = [switches.setting_of(p, str(path), n) for n in p.all(cst.Name)]
    return [s for s in found if s is not None]


def test_h200_run_folder_proposes_the_switch(tmp_path: Path, monkeypatch: Any) -> None:
    """``fix --from`` the H200 check of nanoGPT's char model (host bound 73%), read from the
    folder the script is in: the script's own ``--compile=True``, the recorded command line
    kept."""
    if not (H200_CHAR_EAGER / "run.json").is_file():
        pytest.skip(f"H200 run folder not found at {H200_CHAR_EAGER}")
    from torchdoctor.fix.cli import run_fix
    from torchdoctor.fix.options import FixOptions

    nanogpt(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = run_fix(None, [], str(H200_CHAR_EAGER), FixOptions())
    (c,) = [c for c in result.plan.changes if c.codemod == "compile-model"]
    assert c.status == "switch" and c.finding.id == "host-bound"
    assert c.switch.args == (
        "config/train_shakespeare_char.py",
        "--eval_interval=100000",
        "--eval_iters=2",
        "--log_interval=5",
        "--always_save_checkpoint=False",
        "--max_iters=60",
        "--compile=True",
    )
    assert result.patch == ""


@pytest.mark.slow
@needs_cxx
def test_nanogpt_trains_with_the_proposed_switch(tmp_path: Path) -> None:
    """The switch as fix prints it, on the vendored nanoGPT: it compiles and still trains."""
    path, args = nanogpt(tmp_path)
    c = one(changes(tmp_path, path, [*args, *TINY_ITERS]))
    assert c.status == "switch"
    out = run_py(tmp_path, ["train.py", *c.switch.args])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "compiling the model" in out.stdout  # the script's own compile ran
    assert len(losses(out.stdout)) == 4, out.stdout[-2000:]


# -- argparse flags -------------------------------------------------------------------------------
ARGPARSE = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument({flag})
args = parser.parse_args()

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
if {test}:
    model = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(args.steps):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"iter {{step}}: loss {{loss.item():.4f}}")
"""


@pytest.mark.parametrize(
    ("flag", "test", "argv", "expected"),
    [
        ('"--compile", action="store_true"', "args.compile", ["--steps", "3"], ("--steps", "3", "--compile")),
        ('"--no-compile", dest="compile", action="store_false"', "args.compile", ["--no-compile"], ()),
        ('"--eager", action="store_true"', "not args.eager", ["--eager", "--steps", "2"], ("--steps", "2")),
        ('"--compile", action=argparse.BooleanOptionalAction, default=False', "args.compile", [], ("--compile",)),
        ('"--compile", type=int, default=0', "args.compile", ["--compile", "0"], ("--compile", "1")),
    ],
)  # fmt: skip
def test_argparse_flag_is_the_switch(
    tmp_path: Path, flag: str, test: str, argv: list[str], expected: tuple[str, ...]
) -> None:
    path = script(tmp_path, ARGPARSE.format(flag=flag, test=test))
    c = one(changes(tmp_path, path, argv))
    assert c.status == "switch", c
    assert c.switch.args == expected
    assert c.switch.line == 6  # the add_argument call


def test_argparse_flag_already_given_is_refused(tmp_path: Path) -> None:
    path = script(
        tmp_path, ARGPARSE.format(flag='"--compile", action="store_true"', test="args.compile")
    )
    c = one(changes(tmp_path, path, ["--compile"]))
    assert c.status == "refused" and "is True in this run" in c.reason


@pytest.mark.slow
@needs_cxx
def test_argparse_switch_runs(tmp_path: Path) -> None:
    path = script(
        tmp_path, ARGPARSE.format(flag='"--compile", action="store_true"', test="args.compile")
    )
    c = one(changes(tmp_path, path, ["--steps", "3"]))
    out = run_py(tmp_path, [path.name, *c.switch.args])
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(losses(out.stdout)) == 3


# -- settings the command line does not reach: the default edited ---------------------------------
GLOBAL = """
import torch

USE_COMPILE = False  # flip for speed
STEPS = 3

model = torch.nn.Linear(8, 1)
if USE_COMPILE:
    model.compile()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(STEPS):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"iter {step}: loss {loss.item():.4f}")
"""

CONFIG_DICT = """
import torch

config = {
    "steps": 3,
    "compile": False,  # torch.compile the model
}
model = torch.nn.Linear(8, 1)
model = torch.compile(model) if config.get("compile") else model
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(config["steps"]):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"iter {step}: loss {loss.item():.4f}")
"""


@pytest.mark.parametrize(
    ("text", "before", "after"),
    [
        (GLOBAL, "USE_COMPILE = False  # flip for speed", "USE_COMPILE = True  # flip for speed"),
        (
            CONFIG_DICT,
            '    "compile": False,  # torch.compile the model',
            '    "compile": True,  # torch.compile the model',
        ),
    ],
)
def test_setting_in_the_code_is_edited_in_place(
    tmp_path: Path, text: str, before: str, after: str
) -> None:
    path = script(tmp_path, text)
    c = one(changes(tmp_path, path))
    assert c.status == "patched", c
    assert f"\n-{before}\n" in c.diff
    added = [t for t in c.diff.splitlines() if t.startswith("+") and not t.startswith("+++")]
    assert added == [f"+{after}"]  # one line changed, nothing inserted
    # a second run over the patched file changes nothing
    files, _ = planner.compose(planner.plan([HOST_BOUND], _ctx(tmp_path, path)), [c])
    path.write_text(files[str(path)])
    again = one(changes(tmp_path, path))
    assert again.status == "refused" and "no compile was recorded" in again.reason


def _ctx(tmp: Path, path: Path) -> FixContext:
    return FixContext(RunRecord.from_dict({}), str(tmp), str(path))


@pytest.mark.slow
@needs_cxx
def test_edited_default_runs(tmp_path: Path) -> None:
    path = script(tmp_path, GLOBAL)
    c = one(changes(tmp_path, path))
    files, _ = planner.compose(planner.plan([HOST_BOUND], _ctx(tmp_path, path)), [c])
    path.write_text(files[str(path)])
    out = run_py(tmp_path, [path.name])
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(losses(out.stdout)) == 3


def test_compile_under_a_condition_that_is_no_setting_is_refused_with_where(
    tmp_path: Path,
) -> None:
    path = script(
        tmp_path,
        """
        import os
        import torch

        model = torch.nn.Linear(8, 1)
        if os.environ.get("FAST") == "1":
            model = torch.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        """,
    )
    c = one(changes(tmp_path, path))
    assert c.status == "refused" and c.diff == ""
    assert 'compiles at train.py:6 only when `os.environ.get("FAST") == "1"` is true' in c.reason


# -- the model behind configure_optimizers --------------------------------------------------------
MODEL_PY = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    def forward(self, x):
        return self.body(x)

    def configure_optimizers(self, lr):
        groups = [{"params": [p for p in self.parameters() if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in self.parameters() if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr)
"""

TRAIN_PY = """
import torch
from net import Net

model = Net()
model.to("cpu")
optimizer = model.configure_optimizers(lr=1e-3)
for step in range(3):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"iter {step}: loss {loss.item():.4f}")
"""


@needs_cxx
def test_model_behind_configure_optimizers_is_compiled_after_the_call(tmp_path: Path) -> None:
    script(tmp_path, MODEL_PY, "net.py")
    path = script(tmp_path, TRAIN_PY)
    c = one(changes(tmp_path, path))
    assert c.status == "patched", c
    assert (c.file, c.line) == (str(path), 4)  # after `model = Net()`, the model's last binding
    assert "+model.compile()" in c.diff and "net.py" not in c.diff


@pytest.mark.parametrize(
    ("train", "why"),
    [
        (TRAIN_PY.replace("optimizer = model.configure_optimizers(lr=1e-3)", "optimizer = None"),
         "never called in the user's files"),
        (TRAIN_PY.replace("model.configure_optimizers(lr=1e-3)",
                          "model.configure_optimizers(lr=1e-3)\nother = Net().configure_optimizers(lr=1.0)"),
         "called at train.py:6, train.py:7"),
    ],
)  # fmt: skip
@needs_cxx
def test_configure_optimizers_without_one_named_caller_is_refused(
    tmp_path: Path, train: str, why: str
) -> None:
    script(tmp_path, MODEL_PY, "net.py")
    path = script(tmp_path, train)
    c = one(changes(tmp_path, path))
    assert c.status == "refused"
    assert "`Net.configure_optimizers` (net.py:15)" in c.reason and why in c.reason


@needs_cxx
def test_optimizer_returned_by_a_function_is_not_compiled_after_the_return(
    tmp_path: Path,
) -> None:
    path = script(
        tmp_path,
        """
        import torch

        def build(model):
            return torch.optim.AdamW(model.parameters(), lr=1e-3)

        net = torch.nn.Linear(8, 1)
        opt = build(net)
        """,
    )
    c = one(changes(tmp_path, path))
    assert c.status == "refused" and "built in a `return` at train.py:4" in c.reason


def _without_own_compile(train: Path) -> None:
    """nanoGPT's train.py with its `if compile:` block taken out (a script that never compiles)."""
    lines = train.read_text().splitlines(keepends=True)
    start = next(i for i, t in enumerate(lines) if t.startswith("if compile:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    train.write_text("".join(lines[:start] + lines[end:]))


@needs_cxx
def test_nanogpt_without_its_switch_gets_a_compile_patch(tmp_path: Path) -> None:
    path, args = nanogpt(tmp_path)
    _without_own_compile(path)
    c = one(changes(tmp_path, path, args))
    assert c.status == "patched", c
    anchor = path.read_text().splitlines()[c.line - 1]
    assert anchor.startswith("optimizer = model.configure_optimizers(")
    assert "+model.compile()" in c.diff


@pytest.mark.slow
@needs_cxx
def test_nanogpt_compile_patch_trains(tmp_path: Path) -> None:
    """The compile patch applied to nanoGPT (its own switch taken out): it still trains, and
    its first losses match the eager run's (same seed; compile changes no arithmetic here)."""
    path, args = nanogpt(tmp_path)
    _without_own_compile(path)
    argv = [*args, *TINY_ITERS]
    c = one(changes(tmp_path, path, argv))
    files, _ = planner.compose(planner.plan([HOST_BOUND], _ctx(tmp_path, path)), [c])
    patched = tmp_path / "train_patched.py"  # beside the original: the same data and config
    patched.write_text(files[str(path)])
    # the eager run beside the compiled one (one intra-op thread each: two cores, one each);
    # neither writes a checkpoint in 3 iterations
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [
        subprocess.Popen(
            [sys.executable, name, *argv],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("train.py", patched.name)
    ]
    try:
        (eager, eager_err), (compiled, err) = [p.communicate(timeout=600) for p in runs]
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert runs[0].returncode == 0, eager_err[-3000:]
    assert runs[1].returncode == 0, err[-3000:]
    got, want = losses(compiled), losses(eager)
    assert len(got) == 4 and got == pytest.approx(want, rel=1e-3), (got, want)


# -- what fix prints, and what --prove runs -------------------------------------------------------
def test_switch_is_printed_as_a_command_and_kept_out_of_the_patch(tmp_path: Path) -> None:
    from torchdoctor.fix.render import FixResult, summary_lines, to_dict

    path, args = nanogpt(tmp_path)
    ctx = FixContext(RunRecord.from_dict({"argv": args}), str(tmp_path), str(path))
    result = FixResult(planner.plan([HOST_BOUND], ctx), str(path), None)
    assert result.patch == "" and result.kept == []
    text = "\n".join(summary_lines(result))
    assert "use the switch    host-bound -> compile-model at train.py:" in text
    run_line = next(t for t in text.splitlines() if t.strip().startswith("run: "))
    assert run_line.strip().split()[1:3] == ["python", "train.py"]
    assert run_line.endswith("--gradient_accumulation_steps=1 --compile=True")
    doc = to_dict(result)
    (c,) = [c for c in doc["changes"] if c["codemod"] == "compile-model"]
    assert c["status"] == "switch" and c["switch"]["add"] == ["--compile=True"]
    assert c["switch"]["file"] == "train.py" and doc["patch"] == ""


def test_prove_runs_a_switch_with_its_arguments(tmp_path: Path) -> None:
    """The arm of a switch runs the script with the switch's arguments; the arm of all changes
    with every switch's words and none of the words they replace."""
    from torchdoctor.fix.prove import together_args

    path, args = nanogpt(tmp_path)
    ctx = FixContext(RunRecord.from_dict({"argv": args}), str(tmp_path), str(path))
    c = one([c for c in planner.plan([HOST_BOUND], ctx).changes if c.switch is not None])
    both = together_args(args, [c])
    assert both is not None and both == c.switch.args
    assert together_args(args, []) is None


def test_an_arm_with_arguments_runs_with_them(tmp_path: Path) -> None:
    from torchdoctor.fix import prove

    opts = prove.ProveOptions()
    run = ["--compile=False"]
    switched = prove.version_arm("c1", "train.py", run, {}, ("--compile=True",), opts, tmp_path)
    original = prove.version_arm("original", "train.py", run, {}, None, opts, tmp_path)
    assert [switched.spec["args"], original.spec["args"]] == [["--compile=True"], run]


# -- DataLoader workers read from a setting --------------------------------------------------------
LOADER = """
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("-j", "--workers", type=int, default=0, help="loader processes")
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()

ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=args.workers)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if __name__ == "__main__":
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"iter {step}: loss {loss.item():.4f}")
    print("workers", loader.num_workers)
"""


def loader_changes_of(
    tmp: Path, path: Path, argv: list[str], gpu: dict[str, Any] | None = None
) -> list[Any]:
    raw = {"num_workers": 0, "pin_memory": False, "cpus_per_rank": 2, "batch_size": 16}
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "DataLoader(ds" in t)
    raw["call"] = {"site": f"{path.name}:{line}"}
    f = FindingRef(
        "dataloader-config",
        saving_ms_per_step=5.0,
        evidence={"mean_step_ms": 20.0, "dataloader": raw, "suggested_num_workers": 2},
    )
    record: dict[str, Any] = {"argv": argv, **({"gpu": gpu} if gpu else {})}
    ctx = FixContext(RunRecord.from_dict(record), str(tmp), str(path))
    return [c for c in planner.plan([f], ctx).changes if c.codemod == "dataloader-args"]


def test_loader_workers_from_argparse_are_the_switch(tmp_path: Path) -> None:
    path = script(tmp_path, LOADER)
    c = one(loader_changes_of(tmp_path, path, ["--workers", "0", "--epochs", "1"]))
    assert c.status == "switch" and c.switch.add == ("--workers", "2")
    assert c.switch.args == ("--epochs", "1", "--workers", "2")
    assert (c.switch.setting, c.switch.line) == ("args.workers", 6)
    out = run_py(tmp_path, [path.name, *c.switch.args])
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(losses(out.stdout)) == 4 and "workers 2" in out.stdout


def test_loader_switch_on_a_gpu_keeps_pinning_as_an_edit_without_worker_only_args(
    tmp_path: Path,
) -> None:
    """pin_memory is an edit; persistent_workers/prefetch_factor are left out (with the
    script's default of 0 workers they make DataLoader raise)."""
    path = script(tmp_path, LOADER)
    gpu = {"device": {"name": "NVIDIA H200", "bf16_tensor_cores": True}}
    sw, edit = loader_changes_of(tmp_path, path, ["-j", "0"], gpu)
    assert sw.status == "switch" and sw.switch.args == ("--workers", "2")
    assert edit.status == "patched" and "pin_memory=True" in edit.diff
    assert "persistent_workers" not in edit.diff and "prefetch_factor" not in edit.diff


def test_loader_workers_already_at_the_switch_value_are_already_done(tmp_path: Path) -> None:
    path = script(tmp_path, LOADER)
    c = one(loader_changes_of(tmp_path, path, ["--workers=4"]))
    assert c.status == "already" and "args.workers is already 4" in c.reason


def test_loader_workers_from_a_configurator_global(tmp_path: Path) -> None:
    nanogpt(tmp_path)  # its configurator.py, beside the script
    text = LOADER.replace(
        'parser = argparse.ArgumentParser()\nparser.add_argument("-j", "--workers", type=int, '
        'default=0, help="loader processes")\nparser.add_argument("--epochs", type=int, '
        "default=1)\nargs = parser.parse_args()\n",
        "num_workers = 0\nepochs = 1\nexec(open('configurator.py').read())\n",
    )
    text = text.replace("args.workers", "num_workers").replace("args.epochs", "epochs")
    path = script(tmp_path, text, "loop.py")
    c = one(loader_changes_of(tmp_path, path, ["--num_workers=0", "--epochs=1"]))
    assert c.status == "switch" and c.switch.add == ("--num_workers=2",)
    assert c.switch.args == ("--epochs=1", "--num_workers=2")
    out = run_py(tmp_path, [path.name, *c.switch.args])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Overriding: num_workers = 2" in out.stdout and "workers 2" in out.stdout


# -- autocast in the dtype a setting picks (nanoGPT's --dtype) -----------------------------------
H200 = {"device": {"name": "NVIDIA H200", "bf16_tensor_cores": True, "tf32_capable": True}}


def test_nanogpt_fp32_on_a_bf16_gpu_is_its_dtype_switch(tmp_path: Path) -> None:
    """nanoGPT run with --dtype=float32 on a bf16 GPU: its own autocast (ptdtype picked by
    the dtype setting) in bf16 is `--dtype=bfloat16`, not a second autocast around the step.
    Applied on the CPU (where nanoGPT's autocast context is a no-op), it still trains."""
    path, args = nanogpt(tmp_path)
    assert "--dtype=float32" in args
    f = FindingRef("fp32-on-bf16-gpu", saving_ms_per_step=5.0, evidence={"mean_step_ms": 20.0})
    ctx = FixContext(RunRecord.from_dict({"argv": args, "gpu": H200}), str(tmp_path), str(path))
    c = one([c for c in planner.plan([f], ctx).changes if c.codemod == "bf16-autocast"])
    assert c.status == "switch" and c.switch.add == ("--dtype=bfloat16",)
    assert "--dtype=float32" not in c.switch.args
    line = next(
        i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("dtype = ")
    )
    assert c.switch.line == line
    out = run_py(tmp_path, ["train.py", *c.switch.args[:-1], *TINY_ITERS, c.switch.args[-1]])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Overriding: dtype = bfloat16" in out.stdout and len(losses(out.stdout)) == 4


def test_nanogpt_already_in_bf16_is_not_switched_again(tmp_path: Path) -> None:
    path, args = nanogpt(tmp_path)
    argv = [a if a != "--dtype=float32" else "--dtype=bfloat16" for a in args]
    f = FindingRef("fp32-on-bf16-gpu", saving_ms_per_step=5.0, evidence={"mean_step_ms": 20.0})
    ctx = FixContext(RunRecord.from_dict({"argv": argv, "gpu": H200}), str(tmp_path), str(path))
    c = one([c for c in planner.plan([f], ctx).changes if c.codemod == "bf16-autocast"])
    assert c.status == "refused" and "already runs in dtype='bfloat16'" in c.reason
