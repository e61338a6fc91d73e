"""The finding registry: every entry complete, every place that needs a finding reads from it."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from torchdoctor.record.run import LoaderConfig, RunRecord
from torchdoctor.rules import registry, thresholds
from torchdoctor.rules.finding import FINDING_IDS, Finding
from torchdoctor.rules.spec import FindingSpec, SeverityPolicy, static
from torchdoctor.tune import space

SPECS = list(registry.REGISTRY.values())


@pytest.mark.parametrize("s", SPECS, ids=[s.id for s in SPECS])
def test_every_entry_is_complete(s: FindingSpec) -> None:
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", s.id)
    assert s.label and s.title and s.explanation and registry.sources(s.id)
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
    from torchdoctor.commands.check.summary import SAME_PROBLEM

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


def test_noise_floor_demotes_everything_but_risks() -> None:
    from torchdoctor.rules.run_common import make

    rec = RunRecord.from_dict({"steps": {"mean_step_ms": 100.0}})
    # 0.5 ms of a 100 ms step, asked for as a warning: demoted
    f = make(rec, "unpinned-non-blocking", "t", 0.5, {}, severity="warning")
    assert f.severity == "info"
    f = make(rec, "unpinned-non-blocking", "t", 1.0, {}, severity="warning")
    assert f.severity == "warning"
    # a risk keeps its severity at no saving at all
    assert make(rec, "out-of-memory", "t", 0.0, {}).severity == "critical"
    assert make(rec, "fp16-without-grad-scaler", "t", 0.0, {}).severity == "warning"


def test_data_parallel_saves_the_same_in_analyze_and_check(tmp_path: Path) -> None:
    """nn.DataParallel seen in a trace and in a check record of the same step."""
    from tests.core.synth import annotation, cpu_op, launched, write_trace
    from torchdoctor.commands.analyze.trace import analyze_path
    from torchdoctor.rules.run_rules import run_findings

    ev = [
        annotation("ProfilerStep#1", 0, 10_000),
        cpu_op("DataParallel.forward", 10, 9000),
        *launched("gemm", 20, 30, 9000, 1),
    ]
    trace = analyze_path(write_trace(tmp_path / "dp.json", ev))
    (from_trace,) = [f for f in trace.findings if f.id == "data-parallel"]
    step_ms = trace.analysis.mean_step_ms  # 9.03: the last step ends with its last kernel
    record = {"steps": {"mean_step_ms": step_ms}, "config": {"data_parallel": [{}]}}
    (from_run,) = run_findings(record)
    assert from_trace.saving_ms_per_step == pytest.approx(from_run.saving_ms_per_step, abs=1e-3)
    assert from_trace.saving_ms_per_step == pytest.approx(0.23 * 9.03, abs=1e-3)


def test_thresholds_survive_copy_and_pickle() -> None:
    import copy
    import pickle

    t = thresholds.KERNEL_LATENCY_US
    for clone in (copy.copy(t), copy.deepcopy({"x": t})["x"], pickle.loads(pickle.dumps(t))):
        assert clone == t and clone.reason == t.reason
