"""The garbage-collection family (``rules/families/gc_in_step.py``), from hand-written check
records."""

from __future__ import annotations

from tests.rules.run_records import fire, lines, record, row, with_threshold
from torchdoctor.rules.families import gc_in_step as gcs

(RULE,) = gcs.RULES


def test_gc_collect_in_the_loop_is_named_at_its_line() -> None:
    rows = [row("/w/t.py:50", code="gc.collect()", gc=12.0), row("/w/t.py:9", gc=3.0)]
    f = fire(RULE, record(lines=lines(rows, gc_ms_per_step=15.0)))
    assert f is not None and f.id == "gc-in-step"
    assert f.title == "garbage collection takes 15.0 ms per step (15%): gc.collect() at t.py:50"
    assert f.saving_ms_per_step == 15.0 and f.where == ["/w/t.py:50"]
    assert f.evidence["sites"] == ["/w/t.py:50", "/w/t.py:9"]
    assert f.fix.startswith("# delete gc.collect() from the loop (at /w/t.py:50)")


def test_a_collect_seen_by_the_housekeeping_watch_though_not_sampled() -> None:
    rec = record(
        lines=lines([row("/w/t.py:9", gc=8.0)], gc_ms_per_step=8.0),
        config={"housekeeping": [{"what": "gc.collect", "site": "/w/t.py:61"}]},
    )
    f = fire(RULE, rec)
    assert f is not None and f.where == ["/w/t.py:61"] and "at t.py:61" in f.title


def test_automatic_collections_under_the_specs_share_are_quiet() -> None:
    rec = record(lines=lines([row("/w/t.py:9", gc=4.0)], gc_ms_per_step=4.0))
    assert fire(RULE, rec) is None  # 4%: under GC_SHARE's 5%
    f = fire(with_threshold(RULE, 0.04), rec)
    assert f is not None and "(automatic collections)" in f.title and "gc.freeze()" in f.fix
