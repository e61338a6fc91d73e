"""The scripts of ``examples/unlisted``: each carries one planted mistake that no rule was
written against before the step's account existed (or none: the healthy controls), what
``check`` should name, and the source line it should point at. Shared by
``bench_unlisted_ab.py`` (the measured cost of each mistake) and ``validate_unlisted.py``
(what ``check`` says before and after)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "examples" / "unlisted"


@dataclass(frozen=True)
class Case:
    script: str
    mistake: str
    """The planted mistake, in a few words ('' for a healthy control)."""
    expect: tuple[str, ...]
    """Finding ids that name it (the first is the one we built for it)."""
    line: str
    """Text of the source line the finding or the line table should point at."""
    env: tuple[tuple[str, str], ...] = (("OMP_NUM_THREADS", "1"),)
    """Environment of the runs (one intra-op thread unless the case is about threads)."""

    @property
    def path(self) -> Path:
        return FOLDER / self.script

    @property
    def control(self) -> bool:
        return not self.mistake


CASES: tuple[Case, ...] = (
    Case(
        "anomaly_left_on.py",
        "autograd anomaly detection left on",
        ("anomaly-detection",),
        "set_detect_anomaly(True)",
    ),
    Case(
        "eval_with_grad.py",
        "evaluation loop records autograd graphs",
        ("grad-without-backward",),
        "logits = model(x)",
    ),
    Case(
        "train_val_forward.py",
        "validation forward with grad every step",
        ("grad-without-backward",),
        "val = nn.functional.mse_loss(model(x_val)",
    ),
    Case(
        "optimizer_per_step.py",
        "optimizer rebuilt every step",
        ("repeated-construction",),
        "opt = torch.optim.Adam(model.parameters(), lr=1e-4)  # the planted",
    ),
    Case(
        "layer_in_forward.py",
        "nn.Linear built inside forward()",
        ("repeated-construction",),
        "proj = self.proj if self.fixed else nn.Linear",
    ),
    Case(
        "ema_deepcopy.py",
        "EMA teacher deep-copied every step",
        ("repeated-construction",),
        "teacher = copy.deepcopy(student).requires_grad_(False)  # planted",
    ),
    Case(
        "float64_numpy.py",
        "float64 model and data (numpy default)",
        ("float64-compute",),
        "model = model.double()",
    ),
    Case("gc_every_step.py", "gc.collect() every step", ("gc-in-step",), "gc.collect()  # planted"),
    Case(
        "one_thread.py",
        "torch.set_num_threads(1) on a multi-core CPU",
        ("few-intra-op-threads",),
        "torch.set_num_threads(1)",
        env=(),
    ),
    Case(
        "mkldnn_off.py",
        "oneDNN (mkldnn) switched off",
        ("backend-disabled",),
        "mkldnn.enabled = False",
    ),
    Case(
        "python_metric_loop.py",
        "per-sample Python error report over .tolist()",
        ("unexplained-step-time",),
        "top = sorted(range(len(p)), key=p.__getitem__, reverse=True)[:3]",
    ),
    Case(
        "json_log_every_step.py",
        "whole JSON history rewritten every step",
        ("unexplained-step-time",),
        "json.dump(history, f, indent=2)",
    ),
    Case(
        "checkpoint_every_step.py",
        "checkpoint saved every step",
        ("unexplained-step-time",),
        "torch.save(state, path)",
    ),
    Case(
        "rnn_cell_loop.py",
        "LSTMCell stepped in Python per time step",
        ("module-call-loop", "unexplained-step-time", "host-bound"),
        "hx, cx = self.cell(x[:, i], (hx, cx))",
    ),
    Case(
        "per_sample_loop.py",
        "encoder called once per sample in a Python loop",
        ("module-call-loop",),
        "return torch.stack([enc(x[i]) for i in range(len(x))])",
    ),
    Case(
        "tokenize_in_loop.py",
        "text tokenized in Python inside the loop",
        ("unexplained-step-time", "input-pipeline"),
        "ids = [vocab.get(w.lower()",
    ),
    Case(
        "hooks_pile_up.py",
        "gradient hooks registered every step, never removed",
        ("repeated-construction",),
        "prm.register_hook(clip)  # planted",
    ),
    Case(
        "deterministic_on.py",
        "deterministic algorithms on",
        ("deterministic-algorithms",),
        "use_deterministic_algorithms(True)",
    ),
    Case(
        "iter_per_step.py",
        "next(iter(loader)) every step restarts the workers",
        ("repeated-construction",),
        "x, y = next(iter(loader))  # planted",
    ),
    Case(
        "tensor_from_lists.py",
        "batches built with torch.tensor(list of lists)",
        ("unexplained-step-time", "input-pipeline"),
        "x = torch.tensor([rows[i] for i in idx])",
    ),
    Case(
        "debug_print_every_step.py",
        "debug print of whole tensors every step",
        ("unexplained-step-time", "work-beside-step"),
        'print(f"step {step} logits',
    ),
    Case(
        "ema_param_loop.py",
        "teacher average updated tensor by tensor in a helper",
        ("work-beside-step",),
        "t.copy_(decay * t + (1 - decay) * s)  # planted",
    ),
    Case(
        "snapshot_every_step.py",
        "best weights deep-copied at every improvement",
        ("housekeeping-in-step", "work-beside-step"),
        "return copy.deepcopy(model.state_dict())  # planted",
    ),
    Case(
        "mask_loop.py",
        "padding mask written element by element in a double Python loop",
        ("host-bound", "work-beside-step", "unexplained-step-time"),
        "mask[b, t] = 1.0  # planted",
    ),
    Case(
        "running_sum_loop.py",
        "discounted running sum computed element by element",
        ("work-beside-step", "host-bound", "unexplained-step-time"),
        "out[b, i] += out[b, i + 1]  # planted",
    ),
    Case("control_cnn.py", "", (), ""),
    Case("control_transformer.py", "", (), ""),
    Case("control_inference.py", "", (), ""),
    # compute inside fused operators: the encoder fast path, and a held-out LSTM
    Case("control_encoder_inference.py", "", (), ""),
    Case("control_lstm_inference.py", "", (), ""),
    # intra-op threads waiting for one another on a busy machine: batched conv inference
    Case("control_conv_scoring.py", "", (), ""),
)


def harness_env(case: Case) -> Case:
    """``case`` as the validators run it: a healthy control with the environment's threads (the
    one-thread default is the harness's choice for timing the mistakes on a shared machine; on
    a control with idle cores it would plant a mistake of its own, which ``check`` rightly
    names as few-intra-op-threads)."""
    return replace(case, env=()) if case.control else case


def run_case(
    cmd: list[str], case: Case, cwd: Path, timeout: float, src: Path
) -> subprocess.CompletedProcess[str]:
    """``cmd`` in a fresh process with the case's environment (torchdoctor from ``src``; one
    intra-op thread unless the case sets its own), time-limited: a timeout is exit status 124."""
    env = {**os.environ, "PYTHONPATH": str(src), **dict(case.env)}
    if not case.env:
        env.pop("OMP_NUM_THREADS", None)
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout:.0f} s")
