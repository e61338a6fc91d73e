"""The compiler family (``rules/families/compiler.py``): recompiles, the recompile limit, graph
breaks and compile time the job does not repay, from hand-written check records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import compiler as cc

RECOMPILES, LIMIT, BREAKS, NOT_REPAID = cc.RULES
EVENT = {"site": "train.py:12", "function": "forward", "reason": "tensor 'x' size mismatch"}


def compiled(**stats: Any) -> dict[str, Any]:
    return {"compiled": True, "compile_calls": [{"mode": None}], **stats}


def test_recompiles_after_warm_up_cost_the_measured_steps_and_are_a_warning() -> None:
    rec = record(
        compile=compiled(
            recompiles=3,
            recompile_s=1.5,
            recompiles_in_window=2,
            recompile_s_in_window=0.01,
            recompile_events=[EVENT],
        )
    )
    f = fire(RECOMPILES, rec)
    assert f is not None and f.id == "recompiles"
    # 10 ms of recompiling over the 5 measured steps of 100 ms: 2 ms a step, 2%
    assert f.saving_ms_per_step == pytest.approx(2.0) and f.cost_unit == "step"
    assert f.severity == "warning"  # at any share above the noise floor
    assert f.title.startswith("3 recompiles (1.50 s), 2 after warm-up:")
    assert f.where == ["train.py:12 (forward)"]


def test_recompiles_only_in_warm_up_are_a_cost_of_the_job() -> None:
    stats = compiled(recompiles=2, recompile_s=0.4, recompile_events=[EVENT])
    stopped = fire(RECOMPILES, record(compile=stats))
    assert stopped is not None and stopped.cost_unit == "job" and stopped.one_off_ms == 400.0
    assert stopped.saving_ms_per_step == 0.0 and stopped.severity == "info"
    done = fire(RECOMPILES, {**record(compile=stats), "exit": {"status": "completed"}})
    # the run's own 10 steps share the 400 ms
    assert done is not None and done.saving_ms_per_step == pytest.approx(40.0)
    assert fire(RECOMPILES, record(compile=compiled(recompiles=0))) is None


def test_the_recompile_limit_names_the_function_and_is_quiet_without_a_hit() -> None:
    hit = {"limit": 8, "function": "forward", "site": "train.py:30"}
    f = fire(LIMIT, record(compile=compiled(recompile_limit_hits=[hit])))
    assert f is not None and f.severity == "warning" and f.saving_ms_per_step == 0.0
    assert f.title == "recompile limit (8) hit in forward: it now runs eager, silently"
    assert f.where == ["train.py:30"] and f.fix == cc.limit_fix([])
    assert fire(LIMIT, record(compile=compiled())) is None


def test_the_limits_mark_dynamic_points_at_no_line_inside_the_compiled_function() -> None:
    """examples/check/recompiling_shapes.py: the limit was hit in forward (its def line), and the
    fix is mark_dynamic before each call of it; pasted at forward's line, dynamo rejected it
    (the paste validator: 'fails to run'). The site stays in the evidence."""
    hit = {"limit": 8, "function": "forward", "site": "train.py:18"}
    dims = [{"tensor": "tokens", "dim": 1, "expected": 58, "actual": 28}]
    events = [{"function": "forward", "changed_dims": dims}]
    rec = record(compile=compiled(recompile_limit_hits=[hit], recompile_events=events))
    f = fire(LIMIT, rec)
    assert f is not None and "torch._dynamo.mark_dynamic(tokens, 1)  # before calling" in f.fix
    assert f.where == [] and f.evidence["site"] == "train.py:18"


SCRIPT = """\
import torch


class Net(torch.nn.Module):
    def forward(self, tokens, drop_p):
        return tokens * drop_p


net = torch.compile(Net(), dynamic=False)
for step in range(3):
    batch = torch.ones(2, step + 2)
    rate = 0.1 * step
    print(net(batch, drop_p=rate))
"""


def test_the_printed_mark_dynamic_and_tensor_form_go_before_the_compiled_models_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both go where fix's mark-dynamic codemod puts its call (the same finder): before the line
    that calls the compiled model, on the user's own argument there (``batch``, ``rate``), not
    the compiled function's parameter names (``tokens``, ``drop_p``) nor inside it."""
    (tmp_path / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    dims = [{"tensor": "tokens", "dim": 1, "expected": 2, "actual": 3}]
    values = [{"name": "drop_p", "value": "0.1", "kind": "float"}]
    event = {"function": "forward", "site": f"{tmp_path}/train.py:5", "changed_dims": dims,
             "changed_values": values}  # fmt: skip
    hit = {"limit": 8, "function": "forward", "site": f"{tmp_path}/train.py:5"}
    stats = compiled(recompiles=2, recompile_s=0.2, recompiles_in_window=1,
                     recompile_s_in_window=0.1, recompile_events=[event],
                     recompile_limit_hits=[hit])  # fmt: skip
    rec = {**record(compile=stats), "script": "train.py"}
    for rule in (RECOMPILES, LIMIT):
        f = fire(rule, rec)
        assert f is not None
        lines = f.fix.splitlines()
        assert lines[0].startswith(
            "rate = torch.tensor(rate)  # before the line at train.py:13 (the compiled model's "
            "call): the Python float passed as 'drop_p'"
        ), f.fix
        assert lines[1].startswith(
            "torch._dynamo.mark_dynamic(batch, 1)  # before the line at train.py:13"
        ), f.fix
    # no call to be found (the script is not there): the guard's own names, unplaced
    (tmp_path / "train.py").unlink()
    f = fire(RECOMPILES, rec)
    assert f is not None and "before the line" not in f.fix
    assert f.fix.startswith("drop_p = torch.tensor(drop_p)  # the Python float passed as")


def test_graph_breaks_claim_a_share_per_location_up_to_half_the_step() -> None:
    breaks = [{"site": f"train.py:{i}", "reason": f"print {i}"} for i in (5, 5, 9)]
    f = fire(BREAKS, record(compile=compiled(graph_breaks=breaks)))
    assert f is not None and f.id == "graph-breaks" and f.severity == "warning"
    assert f.saving_ms_per_step == pytest.approx(10.0)  # two locations, 5% of 100 ms each
    assert f.where == ["train.py:5", "train.py:9"] and "train.py:5" in f.fix
    many = [{"site": f"train.py:{i}", "reason": "r"} for i in range(20)]
    capped = fire(BREAKS, record(compile=compiled(graph_breaks=many)))
    assert capped is not None and capped.saving_ms_per_step == pytest.approx(50.0)
    assert fire(BREAKS, record(compile=compiled())) is None


def test_a_compile_longer_than_the_job_is_not_repaid() -> None:
    def run(compile_s: float) -> dict[str, Any]:
        # 100 steps of 100 ms; the first one also holds the compile
        times = [compile_s * 1e3 + 100.0] + [100.0] * 99
        steps = {"mean_step_ms": 100.0, "measured_steps": 5, "count": 100, "step_ms": times}
        calls = [{"mode": "max-autotune"}]
        return {
            "steps": steps,
            "compile": compiled(compile_s=compile_s, compile_calls=calls),
            "exit": {"status": "completed"},
        }

    f = fire(NOT_REPAID, run(15.0))
    assert f is not None and f.cost_unit == "job" and f.one_off_ms == 15000.0
    assert f.title.startswith("torch.compile took 15.0 s for a job of 100 steps (100 steps run)")
    # 15 s of compile against 10 s of steps; spread: what it costs beyond them per step
    assert f.saving_ms_per_step == pytest.approx((15000.0 - 10000.0) / 100)
    assert "not mode='max-autotune'" in f.fix and f.break_even_steps == 150.0
    assert fire(NOT_REPAID, run(9.0)) is None  # 9 s within the 10 s of steps


def test_a_stopped_run_of_unknown_length_is_told_the_break_even() -> None:
    f = fire(NOT_REPAID, record(compile=compiled(compile_s=20.0)))
    assert f is not None and f.severity == "info" and f.saving_ms_per_step == 0.0
    assert f.title == (
        "torch.compile took 20.0 s, as long as 200 steps of 100.0 ms: a job shorter than "
        "that never repays it"
    )
    # 5 s is 50 steps: under COMPILE_BREAK_EVEN_STEPS, not worth saying
    assert fire(NOT_REPAID, record(compile=compiled(compile_s=5.0))) is None


def test_a_guard_in_a_frame_dynamo_did_not_name_joins_its_tensors_named_function() -> None:
    """One merge for the printed fix and the codemod (``call_sites.guarded_dims``): a recompile
    whose frame dynamo left unnamed (``?:0``) adds its sizes to the function that another
    event names for the same tensor, whichever dimension changed; dynamo's ``L['tokens']`` is
    the function's ``tokens``. A tensor no placed event names keeps its own site."""
    from torchdoctor.rules.call_sites import guarded_dims

    def dim(tensor: str, d: int, expected: int, actual: int) -> dict[str, Any]:
        return {"tensor": tensor, "dim": d, "expected": expected, "actual": actual}

    rows = [
        ("forward", "train.py:6", dim("L['tokens']", 1, 58, 28)),
        ("", "?:0", dim("tokens", 1, 28, 91)),
        ("", "?:0", dim("tokens", 0, 8, 4)),
        ("", "?:0", dim("mask", 1, 3, 5)),
        ("", "?:0", dim("ids", 0, 7, 7)),
    ]
    assert guarded_dims(rows, lambda site: site == "train.py:6") == {
        ("forward", "train.py:6", "tokens", 1): [58, 28, 91],
        ("forward", "train.py:6", "tokens", 0): [8, 4],
        ("", "?:0", "mask", 1): [3, 5],
        ("", "?:0", "ids", 0): [7],  # a size seen twice in one row is one size
    }
    # the printed fix takes the same merge: one line per (tensor, dim), the sizes in order
    from torchdoctor.rules.user_fixes import recompile_user_fix

    events = [{"function": fn, "site": site, "changed_dims": [d]} for fn, site, d in rows]
    assert recompile_user_fix(events, "").splitlines()[:5] == [
        "torch._dynamo.mark_dynamic(tokens, 1)  # before calling forward(): dim 1 of the tensor "
        "passed as 'tokens' took sizes 58, 28, 91",
        "torch._dynamo.mark_dynamic(tokens, 0)  # before calling forward(): dim 0 of the tensor "
        "passed as 'tokens' took sizes 8, 4",
        "torch._dynamo.mark_dynamic(mask, 1)  # before calling it(): dim 1 of the tensor "
        "passed as 'mask' took sizes 3, 5",
        "torch._dynamo.mark_dynamic(ids, 0)  # before calling it(): dim 0 of the tensor "
        "passed as 'ids' took sizes 7",
        "# or pad/bucket that dimension to a few fixed sizes",
    ]
