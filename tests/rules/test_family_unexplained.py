"""The unexplained-time family (``rules/families/unexplained.py``): the step's account leaves
time no finding claims, far from the roofline; the lines holding it name where it goes and
what to look at first. Hand-written accounts (``rules/account_rules.StepAccount``)."""

from __future__ import annotations

from dataclasses import replace

from tests.rules.run_records import record
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.account_rules import StepAccount, TopLine
from torchdoctor.rules.families import unexplained
from torchdoctor.rules.run_common import make

(RULE,) = unexplained.RULES

POOL = TopLine(
    "/w/infer.py:34", "main", "y = pool(x)", 60.0, 60.0, 55.0, "torch ops", ["aten::max_pool2d"]
)


def _account(unexplained_ms: float, lines: list[TopLine]) -> StepAccount:
    """A 100 ms step whose roofline is 10 ms."""
    return StepAccount(
        step_ms=100.0,
        roofline_ms=10.0,
        efficiency=0.1,
        flops_share=0.5,
        bytes_share=0.5,
        attainable="measured",
        allowance_ms=10.0,
        named_ms=100.0 - 10.0 - unexplained_ms,
        contention_ms=0.0,
        unexplained_ms=unexplained_ms,
        explained=False,
        top_lines=lines,
    )


def test_time_no_finding_claims_is_named_at_its_line() -> None:
    m = RULE.measure((_account(60.0, [POOL]), 100.0))
    assert m is not None and RULE.fires(m)
    s = RULE.spec
    assert s.format_title(**m.title) == (
        "60% of the step (60.0 ms) is not explained: it runs at 10% of this machine's "
        "roofline; most time at infer.py:34 (torch ops: aten::max_pool2d)"
    )
    assert m.saving_ms == 60.0 and m.where == ("/w/infer.py:34",)
    assert "channels_last" in s.fix(**m.fix)
    f = make(RunRecord.from_dict(record()), s.id, "t", m.saving_ms, m.evidence, fix="x")
    assert f.severity == "critical"  # 60% of the step


def test_an_explained_step_or_one_with_nothing_to_point_at_is_quiet() -> None:
    m = RULE.measure((_account(5.0, [POOL]), 100.0))
    assert m is not None and not RULE.fires(m)  # 5%, under UNEXPLAINED_SHARE
    blind = replace(_account(60.0, []), roofline_ms=None)
    assert RULE.measure((blind, 100.0)) is None  # neither counted nor sampled
    assert RULE.measure((None, 100.0)) is None


def _code(fix: str) -> list[str]:
    """The lines a reader would paste: those that are not comments."""
    return [ln for ln in fix.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_a_recurrent_or_1d_line_is_not_told_channels_last() -> None:
    """A conv + LSTM tagger: its backward line runs the LSTM's backward first, its forward line
    Conv1d (3-D tensors, which channels_last leaves as they are). The fix pasted after
    ``loss.backward()`` converted the model every step (then repeated-construction) and named
    an ``images`` the script does not have; neither line is told the memory format now."""
    from torchdoctor.rules.mode_fixes import unexplained_fix

    back = ["aten::mkldnn_rnn_layer_backward", "aten::convolution_backward"]
    rnn = unexplained_fix("torch ops", "conv_lstm_step.py:32", back)
    assert "channels_last" not in rnn and "recurrent layer" in rnn
    assert "aten::mkldnn_rnn_layer_backward" in rnn.splitlines()[0]
    conv1d = unexplained_fix(
        "torch ops", "conv_lstm_step.py:19", ["aten::conv1d", "aten::batch_norm"]
    )
    assert "channels_last" not in conv1d
    assert _code(rnn) == [] and _code(conv1d) == []


def test_channels_last_is_said_once_before_the_loop_not_pasted_at_the_line() -> None:
    """Where the memory format applies it is advice with its place (after the model is built,
    before the loop), never code that a paste at the line would run every step."""
    from torchdoctor.rules.mode_fixes import unexplained_fix

    fix = unexplained_fix("torch ops", "infer.py:34", ["aten::max_pool2d", "aten::conv2d"])
    assert _code(fix) == []
    assert "before the loop: model = model.to(memory_format=torch.channels_last)" in fix


def test_a_line_of_torch_ops_on_a_busy_machine_runs_torch_ops() -> None:
    """The line's wait for a core is no part of what runs under it: a line that mostly waited
    is still named for the operators it ran (it was called plain Python)."""
    from torchdoctor.record.lines import LineRow
    from torchdoctor.rules.account_rules import main_category

    row = LineRow(
        "/w/t.py:32",
        "<module>",
        "loss.backward()",
        648.0,
        648.0,
        under={"CPU contention": 563.3, "torch ops": 84.5},
    )
    assert main_category(row) == "torch ops"


def test_channels_last_advice_followed_where_it_says_trains_in_that_format() -> None:
    """The advice's two statements, put where it says (the model's once, before the loop; the
    batch's in the loop) in a small image model: the weights and batches are channels_last
    and the loss falls."""
    import re

    import torch
    from torch import nn

    from torchdoctor.rules.mode_fixes import unexplained_fix

    fix = unexplained_fix("torch ops", "train.py:30", ["aten::max_pool2d", "aten::conv2d"])
    once = re.search(r"before the loop: (.+)$", fix, re.M)
    each = re.search(r"as it arrives: (.+)$", fix, re.M)
    assert once and each
    torch.manual_seed(0)
    scope: dict[str, object] = {"torch": torch}
    scope["model"] = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 4)
    )
    exec(once.group(1), scope)  # the printed advice, as a user applies it
    model = scope["model"]
    assert isinstance(model, nn.Module)
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x0, y = torch.randn(16, 3, 16, 16), torch.randint(0, 4, (16,))
    losses = []
    for _ in range(20):
        scope["x"] = x0
        exec(each.group(1), scope)
        x = scope["x"]
        assert isinstance(x, torch.Tensor) and x.is_contiguous(memory_format=torch.channels_last)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
