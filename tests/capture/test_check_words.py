"""Numbers and words that agree: a title states the saving it is shown with, a recompile title
is one line, Kineto's progress lines stay off standard error, a framework callback's run folder
is named after the script, CPU-only reports have no device columns, and the HTML timeline shows
the rare long step a finding is about."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, check_subprocess
from tests.core.synth import annotation, cpu_op, write_trace
from torchdoctor.commands.check.summary import merge_findings
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.run_rules import run_findings


def _f(fid: str, title: str, ms: float, share: float) -> Finding:
    return Finding(
        id=fid,
        title=title,
        severity="critical",
        saving_ms_per_step=ms,
        share_of_step=share,
        evidence={},
        fix="# fix",
    )


def test_a_title_states_the_saving_it_is_shown_with() -> None:
    run = _f("dataloader-config", "the step waits 494.8 ms (61%) for each batch", 494.8, 0.61)
    trace = _f("data-loading-bound", "Data loading: ...", 771.9, 0.95)
    (f,) = merge_findings([trace], [run])
    assert f.saving_ms_per_step == 771.9 and "771.9 ms per step (95%)" in f.title


def test_a_recompile_title_is_one_line_without_dynamo_padding() -> None:
    reason = (
        "0/0: scale == 0.5                                  # return lin(x) * scale  # "
        't.py:6 in f\nUser stack trace:\n  File "t.py", line 6, in f'
    )
    rec = {
        "steps": {"count": 8, "measured_steps": 3, "mean_step_ms": 5.0},
        "compile": {
            "compiles": 3,
            "recompiles": 2,
            "recompile_events": [
                {
                    "site": "t.py:4",
                    "function": "f",
                    "reason": reason,
                    "changed_values": [{"name": "scale", "value": "0.5", "kind": "float"}],
                }
            ],
        },
    }
    (f,) = [f for f in run_findings(rec) if f.id == "recompiles"]
    assert "\n" not in f.title and f.title.endswith(": scale == 0.5")
    assert f.fix.startswith("scale = torch.tensor(scale)") and "mark_dynamic" not in f.fix


@pytest.mark.slow
def test_kineto_progress_lines_stay_off_standard_error(tmp_path: Path) -> None:
    r = check_subprocess(tmp_path, EXAMPLES / "item_per_step.py")
    assert r.code == 0, r.stderr
    assert "USDT:" not in r.stderr and "profiler_start" not in r.stderr
    assert "torchdoctor: watching" in r.stderr  # our own lines still there


def test_a_callback_run_folder_is_named_after_the_script(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import types

    from torchdoctor.integrations.watch import run_name

    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__="/w/train_gpt.py"))
    assert run_name("GPT") == "train_gpt"
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace())
    monkeypatch.setattr(sys, "argv", [""])
    assert run_name("GPT") == "GPT"  # a notebook: the model's class


def _cpu_trace(path: Path, step_us: list[float]) -> Path:
    events, t = [], 0.0
    for k, dur in enumerate(step_us):
        events.append(annotation(f"ProfilerStep#{k}", t, dur))
        events.append(cpu_op("aten::mm", t + 1, dur - 2))
        t += dur + 1
    return write_trace(path, events)


def test_cpu_only_html_has_no_device_columns_and_shows_the_long_step(tmp_path: Path) -> None:
    from torchdoctor.commands.analyze.trace import analyze_path
    from torchdoctor.report.html_model import page_from_report

    trace = _cpu_trace(tmp_path / "t.json", [1000, 1000, 20000, 1000, 1000])
    page = page_from_report(analyze_path(trace))
    (ops,) = [t for t in page.tables if t.id == "operators"]
    assert not [c for c in ops.columns if "device" in c]
    assert page.timeline is not None and page.timeline["step"] == 2
    assert page.timeline["why"].startswith("the longest step (20.00 ms, 20.0x")
