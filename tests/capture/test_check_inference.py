"""``check`` on inference scripts: steps from top-level model calls, and the signal stepping
aside for training loops."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import check_inprocess
from torchdoctor.record.rows import ForwardCalls
from torchdoctor.record.run import RunRecord
from torchdoctor.record.typed import recorded

DECODER = """
import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x):
        h = self.n1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


class Decoder(nn.Module):
    def __init__(self, vocab=256, d=64, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def generate(model, ids, new_tokens):
    out = []
    for _ in range(new_tokens):
        logits = model(ids[:, -32:])
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(int(nxt.item()))  # the line the per-token sync points at
        ids = torch.cat([ids, nxt], dim=1)
    return out


model = Decoder().eval()
with {context}:
    print(generate(model, torch.randint(0, 256, (1, 8)), 30))
"""
ITEM_LINE = 1 + DECODER.splitlines().index(
    "        out.append(int(nxt.item()))  # the line the per-token sync points at"
)


def _script(tmp_path: Path, context: str) -> Path:
    path = tmp_path / "decode.py"
    path.write_text(DECODER.replace("{context}", context))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("context", ["torch.inference_mode()", "torch.enable_grad()"])
def test_generate_loop_steps_are_model_calls(tmp_path: Path, context: str) -> None:
    # with autograd recording too: the steps are there for a no-grad finding to use
    run = check_inprocess(tmp_path / "out", _script(tmp_path, context))
    assert run.code == 0, run.stdout + run.stderr
    steps = run.run["steps"]
    assert steps["source"] == "forward"
    # 3 warm-up, 8 clean, the profiler's own step, 3 profiled, 5 clean again, then the steps
    # that measure grad mode off (with autograd on)
    assert steps["count"] - steps["experiment_steps"] == 20 and steps["profiled_steps"] == 3
    assert steps["clean"]["steps"] == 8 and steps["after"]["steps"] == 5
    if context == "torch.enable_grad()":
        toggles = [e for e in run.run["experiments"] if e["id"] == "grad-without-backward"]
        # measured, or skipped with its reason (uneven steps on a loaded machine)
        assert steps["experiment_steps"] > 0 or (toggles and toggles[0].get("skipped"))
        assert any(f["id"] == "grad-without-backward" for f in run.report["findings"])
    assert run.run["config"]["forward_steps"]["model"] == "Decoder"
    analysis = run.report["analysis"]
    assert analysis["steps"]["source"] == "profiler-step" and analysis["steps"]["count"] == 3
    assert analysis["serving"] is not None  # the trace carries the model-call step mark
    assert analysis["verdict"].startswith("model-call steps: 3 steps")
    syncs = next(f for f in run.report["findings"] if f["id"] == "host-syncs-in-step")
    assert syncs["evidence"]["syncs_per_step"] == 1
    assert syncs["where"] == [f"{tmp_path / 'decode.py'}:{ITEM_LINE}"]


@pytest.mark.slow
def test_training_loop_is_still_counted_by_optimizer_steps(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(20):
                loss = model(torch.randn(4, 8)).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
            """
        )
    )
    run = check_inprocess(tmp_path / "out", script)
    assert run.code == 0, run.stdout
    assert run.run["steps"]["source"] == "optimizer"
    assert run.run["steps"]["signal_switches"] == []  # no forward step was ever ticked
    # the first backward pass through the model's output turned the signal off
    assert run.run["config"]["forward_steps"] == {
        "top_level_calls": 1,
        "model": None,
        "backward_seen": True,
    }


class FakeClock:
    def __init__(self) -> None:
        self.ticks: list[str] = []
        self.source: str | None = None
        self.errors: list[str] = []

    def tick(self, source: str) -> None:
        self.ticks.append(source)
        self.source = self.source or source


def test_only_top_level_calls_of_the_model_tick_and_the_patch_narrows() -> None:
    import torch

    from torchdoctor.capture.forward_steps import ForwardSteps

    original = torch.nn.Module.__call__
    clock = FakeClock()
    steps = ForwardSteps(clock)  # type: ignore[arg-type]
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    probe = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    steps.install()
    try:
        model(x)  # its two children are nested: one top-level call
        probe(x)  # a top-level call of another module: counted while discovering
        model(x)  # the model is known now: only its class keeps the wrapper
        assert torch.nn.Module.__call__ is original
        assert "__call__" in vars(torch.nn.Sequential)
        assert clock.ticks == []  # a step is ticked when the model's next call begins
        probe(x)  # no longer counted
        model(x)  # ends the step of the previous model call: the first tick
        model(x)
        seen: list[int] = []
        t = threading.Thread(target=lambda: seen.append(len(model(x))))
        t.start()
        t.join()  # another thread's calls never tick
        bad = torch.nn.Sequential(torch.nn.Linear(3, 3))
        with pytest.raises(RuntimeError):
            bad(x)  # a failing forward does not tick
    finally:
        steps.uninstall()
    assert clock.ticks == ["forward"] * 2
    assert steps.snapshot() == ForwardCalls(5, "Sequential", False)
    # recorded with the keys run.json has always had, in their order, and read back typed
    was = recorded(steps.snapshot())
    assert list(was.items()) == [
        ("top_level_calls", 5),
        ("model", "Sequential"),
        ("backward_seen", False),
    ]
    assert RunRecord.from_dict({"config": {"forward_steps": was}}).config.forward_steps == (
        ForwardCalls(5, "Sequential", False, raw=was)
    )
    assert "__call__" not in vars(torch.nn.Sequential) and torch.nn.Module.__call__ is original


@pytest.mark.slow
def test_compiled_model_keeps_one_graph_and_ticks(tmp_path: Path) -> None:
    script = tmp_path / "compiled.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            from torch._dynamo.utils import counters
            counters.clear()  # other checks may have run in this process before
            model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()),
                                  backend="eager")
            with torch.no_grad():
                for _ in range(12):
                    model(torch.randn(4, 8))
            print("GRAPHS", counters["stats"]["unique_graphs"], dict(counters["graph_break"]))
            """
        )
    )
    run: Any = check_inprocess(
        tmp_path / "out", script, opts=["--warmup", "3", "--steps", "3", "--full"]
    )
    assert run.code == 0, run.stdout + run.stderr
    assert run.run["steps"]["source"] == "forward"
    assert "GRAPHS 1 {}" in run.stdout  # our wrapper added no graph, no break, no recompile
