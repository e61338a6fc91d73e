"""The device-to-device copy family (``rules/families/device_copies.py``), and the family
mechanism it shows: the spec's threshold decides, the registry lists it, ``analyze`` runs it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file, corpus_report
from tests.core.synth import annotation, cpu_op, kernel, launched, runtime, write_trace
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.rules.families import FAMILY_RULES
from torchdoctor.rules.families import device_copies as dc
from torchdoctor.rules.registry import REGISTRY
from torchdoctor.rules.spec import Measured, TraceRule
from torchdoctor.rules.trace_rules import family_finding

RECSYS = "v100_recsys_train_rank1"


def _step(t0: float, c: int, copy_us: float) -> list[dict[str, Any]]:
    """A 100 µs kernel, then inside aten::contiguous a D2D copy alone on the stream, then a
    second kernel: the copy sits on the device's critical path."""
    return [
        *launched("gemm", t0 + 0, t0 + 10, 100, corr=c + 1),
        cpu_op("aten::contiguous", t0 + 20, 40),
        cpu_op("aten::clone", t0 + 21, 38),
        cpu_op("aten::copy_", t0 + 22, 36),
        runtime("cudaMemcpyAsync", t0 + 23, 30, corr=c + 2),
        kernel(
            "Memcpy DtoD (Device -> Device)",
            t0 + 110,
            copy_us,
            corr=c + 2,
            cat="gpu_memcpy",
            bytes=8 << 20,
        ),
        *launched("gemm2", t0 + 60, t0 + 110 + copy_us, 100, corr=c + 3),
    ]


def _trace(tmp_path: Path, copy_us: float, steps: int = 3) -> Path:
    step_us = 400.0
    ev: list[dict[str, Any]] = []
    for i in range(steps):
        ev.append(annotation(f"ProfilerStep#{i}", i * step_us, step_us))
        ev.extend(_step(i * step_us, 100 * i, copy_us))
    return write_trace(tmp_path / f"d2d_{copy_us:.0f}.json", ev)


def test_a_copy_alone_on_the_device_is_named_with_the_operator_that_asked(tmp_path: Path) -> None:
    r = analyze_path(_trace(tmp_path, copy_us=80.0))
    f = next(f for f in r.findings if f.id == "device-copies")
    # 80 µs of the 400 µs step: the copy runs with nothing beside it
    assert f.saving_ms_per_step == pytest.approx(0.08, abs=1e-3)
    assert f.severity == "warning" and "most from aten::clone" in f.title
    assert f.evidence["copies_per_step"] == 1 and f.evidence["bytes_per_step"] == 8 << 20
    assert f.where[0] == "aten::clone"  # not the aten::copy_ that carried it out
    assert "model = torch.compile(model)" in f.fix  # an eager step: compiling folds copies


def test_below_the_specs_threshold_nothing_fires(tmp_path: Path) -> None:
    # 12 µs of a 400 µs step: 3%, under the 5% the spec sets
    r = analyze_path(_trace(tmp_path, copy_us=12.0))
    assert "device-copies" not in [f.id for f in r.findings]


@pytest.mark.slow
def test_the_real_recsys_trace_copies_a_tenth_of_its_step() -> None:
    """Checked against the raw JSON: the copies' bytes per step, and an exclusive time never
    above their summed durations."""
    path = corpus_file(RECSYS)
    r = analyze_path(path)
    f = next(f for f in r.findings if f.id == "device-copies")
    raw = json.loads(gzip.decompress(path.read_bytes()))
    steps = [
        e for e in raw["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]  # fmt: skip
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    copies = [
        e for e in raw["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "Memcpy")
        and "DtoD" in e.get("name", "") and lo <= e["ts"] < hi
    ]  # fmt: skip
    n = r.analysis.n_steps
    assert f.evidence["bytes_per_step"] == pytest.approx(
        sum(e["args"].get("bytes", 0) for e in copies) / n, rel=1e-6
    )
    assert 0 < f.saving_ms_per_step <= sum(e["dur"] for e in copies) / 1e3 / n
    assert 0.05 <= f.share_of_step < 0.25 and f.severity == "warning"
    # the step replays CUDA graphs (it is compiled already): no compile advice
    assert "torch.compile" not in f.fix and "already replays graphs" in f.fix


def test_a_corpus_trace_under_the_threshold_stays_quiet() -> None:
    r = corpus_report("v100_ddp_compiled_rank1")
    assert "device-copies" not in [f.id for f in r.findings]


def test_every_family_spec_is_registered_and_in_documentation_order() -> None:
    ids = list(REGISTRY)
    for rule in FAMILY_RULES:
        assert REGISTRY[rule.spec.id] is rule.spec
    assert dc.RULES[0] in FAMILY_RULES
    assert ids.index("device-copies") < ids.index("out-of-memory")  # trace findings first


def _fake(value: float) -> TraceRule:
    m = Measured(value, 1.0, 0.5, {"ms": 1.0, "share": 0.5, "count": 1, "op": "x"}, {})
    return TraceRule(dc.SPEC, lambda a: m)


def test_the_threshold_on_the_spec_decides(tmp_path: Path) -> None:
    a = analyze_path(_trace(tmp_path, copy_us=80.0)).analysis
    t = float(dc.SPEC.threshold or 0)
    assert family_finding(_fake(t * 0.99), a) is None
    f = family_finding(_fake(t), a)
    assert f is not None and f.title == dc.SPEC.format_title(ms=1.0, share=0.5, count=1, op="x")
    assert f.fix == dc.SPEC.fix()
