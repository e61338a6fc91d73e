"""What ``analyze`` imports of the families: the modules that declare trace rules (``LISTED``)
and nothing of the run-only ones, neither their modules nor what only their measure and fix
functions need (``torchdoctor.ab`` with statistics and fractions,
``analysis/memory_growth.py``, the run fixes' ``rules/user_fixes.py``, ``rules/call_sites.py``
and ``rules/optimizer_fixes.py``); everything that lists every finding still sees all of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import corpus_file
from torchdoctor.rules import families

_ANALYZE = """
import json, sys
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.report.render import render_json, render_text
from torchdoctor.report.perfetto import export_trace
report = analyze_path(sys.argv[1])
render_text(report)
export_trace(report.analysis, report.findings, sys.argv[2])  # the Perfetto export too
print(json.dumps([sorted(sys.modules), [f.id for f in report.findings]]))
"""

_RUN_ONLY = {
    "torchdoctor.ab",
    "torchdoctor.stats",
    "torchdoctor.analysis.memory_growth",
    # the run fixes' builders: rules/fixes.py imports them where a run's fix uses them
    "torchdoctor.rules.user_fixes",
    "torchdoctor.rules.call_sites",
    "torchdoctor.rules.optimizer_fixes",
}
_PREFIX = "torchdoctor.rules.families."


def test_analyze_imports_only_the_trace_families(tmp_path: Path) -> None:
    trace = corpus_file("a100_alexnet_syncs_pageable")
    out = subprocess.run(
        [sys.executable, "-c", _ANALYZE, str(trace), str(tmp_path / "t.json")],
        capture_output=True,
        text=True,
        check=True,
    )
    modules, fired = json.loads(out.stdout.strip().splitlines()[-1])
    assert fired, "the probe trace must fire findings (their specs are looked up)"
    loaded = {m.removeprefix(_PREFIX) for m in modules if m.startswith(_PREFIX)}
    trace_modules = set(families.LISTED[families.TraceRule])
    assert trace_modules <= loaded  # the probe saw the trace families load
    assert not {m for m in loaded - trace_modules if not m.startswith("_")}, sorted(loaded)
    assert not set(modules) & _RUN_ONLY, sorted(set(modules) & _RUN_ONLY)


def test_every_kind_still_finds_every_module() -> None:
    import importlib
    import pkgutil

    from torchdoctor.rules import registry

    declared = {
        r.spec.id
        for m in pkgutil.iter_modules(families.__path__)
        if not m.name.startswith("_")
        for r in importlib.import_module(f"{_PREFIX}{m.name}").RULES
    }
    assert len(declared) >= 54 and list(registry.REGISTRY) == list(registry.finding_ids())
    assert set(registry.REGISTRY) == declared
    assert families.RUN_FAMILY_RULES and families.ACCOUNT_FAMILY_RULES
    assert {r.spec.id for r in families.RANKS_FAMILY_RULES} == {"straggler-rank"}
    assert "memory-growth" in {r.spec.id for r in families.RUN_FAMILY_RULES}


def test_a_module_left_out_of_the_listing_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = dict(families.LISTED)
    listed[families.TraceRule] = tuple(n for n in listed[families.TraceRule] if n != "syncs")
    monkeypatch.setattr(families, "LISTED", listed)
    with pytest.raises(TypeError, match=r"add \['syncs'\], drop \[\]"):
        families.check_listing()
    listed[families.TraceRule] = (*listed[families.TraceRule], "syncs", "compiler")
    with pytest.raises(TypeError, match=r"add \[\], drop \['compiler'\]"):
        families.check_listing()


def test_run_only_measurements_still_find_their_modules() -> None:
    from torchdoctor.rules.families import compiler, memory_growth

    assert compiler._repaid_after(1000.0, 10.0) == 100.0
    assert "MiB" in memory_growth.growth_fix([], [{"where": "a.py:3", "bytes": 3 * 2**20}])
