"""The housekeeping family (``rules/families/housekeeping.py``): ``torch.save``,
``gc.collect()`` and deep copies timed in (nearly) every step, a finding per call site; calls
made now and then, or too cheap, stay quiet. Hand-written check records."""

from __future__ import annotations

from typing import Any

from tests.rules.run_records import record
from torchdoctor.record.run import RunRecord
from torchdoctor.rules.families import housekeeping
from torchdoctor.rules.run_common import family_findings

(RULE,) = housekeeping.RULES


def _call(what: str, site: str, seconds: float, calls: int) -> dict[str, Any]:
    return {"what": what, "site": site, "seconds": seconds, "calls": calls}


def _found(*calls: dict[str, Any]) -> list[Any]:
    rec = record(config={"housekeeping": list(calls)})  # 5 measured steps of 100 ms
    return family_findings(RULE, RunRecord.from_dict(rec))


def test_a_finding_per_call_made_every_step() -> None:
    fs = _found(
        _call("torch.save", "/w/train.py:40", 0.1, 5),
        _call("gc.collect", "/w/train.py:41", 0.025, 5),
    )
    assert [f.title for f in fs] == [
        "torch.save every step at /w/train.py:40: 20.0 ms per step (20%)",
        "gc.collect() every step at /w/train.py:41: 5.0 ms per step (5%)",
    ]
    assert fs[0].where == ["/w/train.py:40"] and "step % 1000 == 0" in fs[0].fix
    assert "in place of the line at /w/train.py:40:" in fs[0].fix  # where the block goes
    assert fs[0].evidence["calls_per_step"] == 1.0


def test_rare_cheap_or_unknown_calls_are_quiet() -> None:
    assert _found(_call("torch.save", "/w/t.py:1", 0.1, 2)) == []  # 0.4 per step < 0.5
    assert _found(_call("torch.save", "/w/t.py:1", 0.005, 5)) == []  # 1% < 2%
    assert _found(_call("os.fsync", "/w/t.py:1", 0.1, 5)) == []  # not a call it words
