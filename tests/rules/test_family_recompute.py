"""The activation-checkpointing family (``rules/families/recompute.py``), from hand-written check
records."""

from __future__ import annotations

import pytest

from tests.rules.run_records import fire, record
from torchdoctor.rules.families import recompute as rc

(RULE,) = rc.RULES


def test_checkpointed_forwards_cost_their_time_again_in_backward() -> None:
    # 10 calls over the 5 measured steps, 60 ms of checkpointed forward: 12 ms per step
    rec = record(config={"checkpointing": {"calls_measured": 10, "forward_s_measured": 0.06}})
    f = fire(RULE, rec)
    assert f is not None and f.id == "activation-recompute"
    assert f.saving_ms_per_step == pytest.approx(12.0)
    assert f.title == (
        "activation checkpointing recomputes 12.0 ms of forward per step (12% of the step), "
        "2 checkpointed calls per step"
    )
    assert f.evidence["checkpointed_calls_per_step"] == 2.0


def test_a_small_recompute_is_for_the_record_and_none_is_quiet() -> None:
    tiny = record(config={"checkpointing": {"calls_measured": 5, "forward_s_measured": 0.001}})
    f = fire(RULE, tiny)
    assert f is not None and f.severity == "info"  # 0.2 ms of 100: under RECOMPUTE_WARN
    assert fire(RULE, record(config={"checkpointing": {"calls_measured": 0}})) is None
    assert fire(RULE, record()) is None
