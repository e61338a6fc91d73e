"""The float64 family (``rules/families/float64.py``), from hand-written check records."""

from __future__ import annotations

import pytest

from tests.rules.run_records import fire, lines, record, row, with_threshold
from torchdoctor.rules.families import float64 as f64

(RULE,) = f64.RULES


def work(fp64_flops: float, fp32_flops: float, fp64_bytes: float = 0.0) -> dict:
    return {
        "work": {
            "by_dtype": {
                "fp64": {"flops": fp64_flops, "bytes": fp64_bytes},
                "fp32": {"flops": fp32_flops, "bytes": 1e6},
            }
        }
    }


def test_most_flops_in_float64_fire_with_half_their_operator_time() -> None:
    rec = record(roofline=work(3e9, 1e9), lines=lines([row("t.py:5", **{"torch ops": 60.0})]))
    f = fire(RULE, rec)
    assert f is not None and f.title == "75% of the step's FLOPs are float64"
    # FP64_SAVING (half) of 75% of the 60 ms inside operators
    assert f.saving_ms_per_step == pytest.approx(22.5) and f.severity == "warning"
    assert f.evidence["basis"] == "FLOPs" and f.evidence["fp64_share"] == 0.75
    # the model alone in float32 would refuse the float64 inputs: words for both, no half fix
    assert all(ln.startswith("#") for ln in f.fix.splitlines())
    assert "model.float()" in f.fix and "torch.from_numpy(a).float()" in f.fix


def test_a_step_without_matmuls_is_judged_on_bytes() -> None:
    rec = record(roofline=work(0.0, 0.0, fp64_bytes=3e6))
    f = fire(RULE, rec)
    assert f is not None and f.title == "75% of the step's bytes moved are float64"


def test_a_float64_minority_is_quiet() -> None:
    rec = record(roofline=work(4e9, 6e9))
    assert fire(RULE, rec) is None  # 40%: under the spec's half
    assert fire(with_threshold(RULE, 0.4), rec) is not None
