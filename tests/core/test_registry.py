"""The finding registry: every entry complete, every place that needs a finding reads from it."""

from __future__ import annotations

import re
import string

import pytest

from torchdoctor.rules import registry, thresholds
from torchdoctor.rules.finding import FINDING_IDS, Finding
from torchdoctor.rules.run_inputs import LoaderConfig, RunRecord
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy, static
from torchdoctor.tune import space

SPECS = list(registry.REGISTRY.values())


@pytest.mark.parametrize("s", SPECS, ids=[s.id for s in SPECS])
def test_every_entry_is_complete(s: FindingSpec) -> None:
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", s.id)
    assert s.label and s.title and s.explanation and s.sources
    assert s.doc_url.startswith("https://")
    assert set(s.knobs) <= set(space.KNOB_NAMES), s.knobs
    assert set(s.aliases) <= set(registry.REGISTRY) and s.id not in s.aliases
    if s.threshold is not None:
        assert s.threshold.reason  # a threshold always says why it sits there


def test_titles_are_templates_with_named_fields() -> None:
    for s in SPECS:
        fields = [f for _, f, _, _ in string.Formatter().parse(s.title) if f is not None]
        assert all(f and not f.isdigit() for f in fields), (s.id, fields)


def test_ids_come_from_the_registry() -> None:
    assert set(FINDING_IDS) == set(registry.REGISTRY)
    with pytest.raises(ValueError, match="unknown finding id"):
        Finding("not-registered", "t", "info", 0.0, 0.0, {}, "")


def test_duplicate_ids_are_refused() -> None:
    s = SPECS[0]
    with pytest.raises(ValueError, match="registered twice"):
        registry._index((s,), (s,))


def test_tune_knobs_and_check_aliases_read_the_registry() -> None:
    assert registry.knobs_by_finding() == space.FINDING_KNOBS
    assert space.FINDING_KNOBS["pageable-h2d-copies"] == ("pin_memory",)
    assert registry.alias_map()["data-loading-bound"] == "dataloader-config"
    from torchdoctor.capture.summary import SAME_PROBLEM

    assert registry.alias_map() == SAME_PROBLEM


def test_severity_policy() -> None:
    p = SeverityPolicy(0.05, 0.25, floor="warning")
    assert [p.grade(x) for x in (0.0, 0.05, 0.3)] == ["warning", "warning", "critical"]
    assert SeverityPolicy(fixed="info").grade(0.9) == "info"
    assert SeverityPolicy().grade(0.049) == "info"


def test_every_threshold_has_a_reason() -> None:
    found = thresholds.all_thresholds()
    assert len(found) > 20
    for name, t in found.items():
        assert isinstance(t, float) and len(t.reason) > 10, name


def test_fix_builders_take_typed_inputs() -> None:
    loader = LoaderConfig.from_dict({"num_workers": 0, "batch_size": 64, "pin_memory": False})
    fix = registry.spec("dataloader-config").fix(loader, 4, True)
    assert "batch_size=64" in fix and "num_workers=4" in fix and "pin_memory=True" in fix
    assert "batch_size=64" in registry.spec("dataloader-config").fix(loader, 2, False)
    assert "float16" in registry.spec("fp32-gemm-no-tensor-cores").fix(False)
    assert static("x")(1, a=2) == "x"


def test_run_record_reads_partial_documents() -> None:
    rec = RunRecord.from_dict({"steps": {"step_ms": [10.0, 30.0]}, "gpu": {}, "ops": None})
    assert rec.step_ms == 20.0 and rec.gpu is None and rec.ops == {} and not rec.completed
    assert RunRecord.from_dict({}).config.data_parallel is None
