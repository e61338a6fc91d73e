"""torch.compile watching: dynamo's log messages parsed, and a real compile on the CPU."""

from __future__ import annotations

import time

import pytest

from torchdoctor.capture.compile_watch import CompileWatch, short_reason
from torchdoctor.record.typed import recorded

GB_MESSAGE = (
    "Graph break in user code at /src/model.py:19\n"
    "Graph Break Reason: Encountered graph break when attempting to trace CALL\n\n"
    "Data-dependent branching\n"
    "  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`).\n"
    "  Hint: Use torch.cond\n"
)
LIMIT_MESSAGE = (
    "torch._dynamo hit config.recompile_limit (8)\n"
    "   function: 'forward' (/src/model.py:18)\n"
    "   last reason: 0/7: tensor 'tokens' size mismatch at index 1. expected 93, actual 138\n"
    'To log all recompilation reasons, use TORCH_LOGS="recompiles".'
)


def test_graph_break_message() -> None:
    w = CompileWatch()
    w.on_log("torch._dynamo.symbolic_convert.__graph_breaks", GB_MESSAGE)
    w.on_log("torch._dynamo.symbolic_convert.__graph_breaks", GB_MESSAGE)
    assert w.graph_breaks == {
        (
            "/src/model.py:19",
            "Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`).",
        ): 2
    }


def test_recompile_limit_message() -> None:
    w = CompileWatch()
    w.on_log("torch._dynamo.convert_frame", LIMIT_MESSAGE)
    w.on_log("torch._dynamo.convert_frame", "some other warning")
    assert [recorded(h) for h in w.limit_hits] == [
        {
            "limit": 8,
            "function": "forward",
            "site": "/src/model.py:18",
            "last_reason": "0/7: tensor 'tokens' size mismatch at index 1. expected 93, actual 138",
        }
    ]


def test_short_reason_without_explanation() -> None:
    assert short_reason("Graph Break Reason\nCall to print\n  Hint: x") == "Call to print"


@pytest.mark.slow
def test_real_compile_recompiles_and_breaks() -> None:
    import torch

    watch = CompileWatch()
    watch.install()
    try:

        def f(x: torch.Tensor) -> torch.Tensor:
            y = x * 2
            if y.sum() > 0:  # graph break
                y = y + 1
            return y

        cf = torch.compile(f, dynamic=False, backend="eager")
        cf(torch.ones(4))
        window = time.time()
        cf(torch.ones(5))  # recompiles: new size
        cf(torch.ones(5))
    finally:
        watch.uninstall()
    snap = watch.snapshot(window)
    assert snap.recompiles >= 1 and snap.recompiles_in_window == snap.recompiles
    reasons = [e.reason for e in snap.recompile_events]
    assert any("size mismatch" in r and "expected 4, actual 5" in r for r in reasons)
    assert snap.recompile_events[0].site.endswith(f"{__file__}:{f.__code__.co_firstlineno}")
    assert snap.recompile_events[0].changed_dims[0]["dim"] == 0
    (gb,) = {b.site for b in snap.graph_breaks}
    # run.json's compile section: its keys in the order they have always been written
    assert list(recorded(snap)) == [
        "compiles",
        "compile_s",
        "recompiles",
        "recompile_s",
        "recompiles_in_window",
        "recompile_s_in_window",
        "recompile_events",
        "compile_calls",
        "graph_breaks",
        "recompile_limit_hits",
        "traced_with_wrappers_off",
    ]
    assert list(recorded(snap)["recompile_events"][0]) == [
        "compile_id",
        "function",
        "site",
        "reason",
        "seconds",
        "changed_dims",
        "changed_values",
    ]
    assert gb == f"{__file__}:{f.__code__.co_firstlineno + 2}"
    # handlers are gone: later compiles are not recorded
    before = dict(watch.graph_breaks)
    torch.compile(f, backend="eager")(torch.ones(3))
    assert watch.graph_breaks == before
