"""``check`` on inference whose compute sits inside fused operators: the encoder fast path
(``aten::_transformer_encoder_layer_fwd``, the case the FLOP formulas were written against) and
an LSTM (``aten::lstm``, held out: not looked at while writing them) count their FLOPs and get
no unexplained-step finding; a step that is slow for a reason (hundreds of tiny operators)
still gets one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import EXAMPLES, REPO, CheckRun, check_inprocess, unlisted_check

UNLISTED = REPO / "examples" / "unlisted"
OPTS = ["--warmup", "3", "--steps", "4"]


def run(shared_check: Callable[..., CheckRun], script: Path) -> CheckRun:
    """The control's run that tests/capture/test_check_unlisted.py keeps quiet (its 40 steps
    or 30: check stops the script after its 21st either way)."""
    r = unlisted_check(shared_check, script)
    assert r.code == 0, r.stdout + r.stderr
    return r


def ids(r: CheckRun) -> list[str]:
    return [f["id"] for f in r.report["findings"]]


def fused_flops(r: CheckRun, op: str) -> float:
    work: dict[str, Any] = r.run["roofline"]["work"]
    return sum(o["flops"] for o in work["top_ops"] if o["op"] == op)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "op", "flops"),
    [
        # 4 layers x 3,355,443,200 (tests/capture/test_op_flops.py works one layer out by hand)
        ("control_encoder_inference.py", "aten::_transformer_encoder_layer_fwd", 13_421_772_800),
        # 32 x 48 positions; weights 1024x128 + 3 x 1024x256
        ("control_lstm_inference.py", "aten::lstm.input", 2 * 1536 * (131072 + 3 * 262144)),
    ],
)
def test_fused_inference_is_explained(
    shared_check: Callable[..., CheckRun], script: str, op: str, flops: int
) -> None:
    r = run(shared_check, UNLISTED / script)
    assert fused_flops(r, op) == flops
    assert "unexplained-step-time" not in ids(r), r.stdout
    assert r.run["roofline"]["work"]["uncounted_compute_ops"] == {}


@pytest.mark.slow
def test_a_step_of_tiny_operators_is_still_unexplained(
    shared_check: Callable[..., CheckRun],
) -> None:
    r = shared_check(EXAMPLES / "tiny_ops.py", "--steps", "30", opts=OPTS)  # test_tiny_ops's run
    assert r.code == 0, r.stdout + r.stderr
    assert "unexplained-step-time" in ids(r), r.stdout


CUSTOM_OP = """
import torch
from torch import nn


@torch.library.custom_op("tdcheck::fused_mlp", mutates_args=())
def fused_mlp(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) @ w.t()


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(512, 2048))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_mlp(x, self.w)


model = Mlp().eval()
with torch.inference_mode():
    for _ in range(30):
        model(torch.randn(256, 512)).sum()
"""


@pytest.mark.slow
def test_a_dominant_custom_operator_is_taken_as_compute(tmp_path: Path) -> None:
    script = tmp_path / "custom_op.py"
    script.write_text(CUSTOM_OP)
    r = check_inprocess(tmp_path / "out", script, opts=OPTS)
    assert r.code == 0, r.stdout + r.stderr
    assert r.run["roofline"]["work"]["uncounted_compute_ops"] == {"tdcheck::fused_mlp": 1}
    assumed = r.report["account"]["assumed_compute"]
    assert assumed["op"] == "tdcheck::fused_mlp" and assumed["share_of_ops"] >= 0.5
    assert "unexplained-step-time" not in ids(r), r.stdout
    assert "tdcheck::fused_mlp" in r.stdout and "taken as compute" in r.stdout
