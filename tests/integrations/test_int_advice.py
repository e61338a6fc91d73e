"""Framework-phrased fixes: every entry names a registered finding, the rewrite keeps the
loop-level fix, and findings without an entry pass through unchanged. No framework needed."""

from __future__ import annotations

import pytest

from torchdoctor.rules.finding import Finding
from torchdoctor.rules.framework_advice import LIGHTNING, TRANSFORMERS, rewrite
from torchdoctor.rules.registry import REGISTRY


def _finding(fid: str, **evidence: object) -> Finding:
    return Finding(fid, "t", "warning", 1.0, 0.1, dict(evidence), "loop fix")  # type: ignore[arg-type]


@pytest.mark.parametrize("table", [LIGHTNING, TRANSFORMERS], ids=["lightning", "transformers"])
def test_every_entry_is_a_registered_finding(table: dict[str, object]) -> None:
    assert set(table) <= set(REGISTRY)


def test_rewrite_uses_the_measured_worker_count_and_keeps_the_loop_fix() -> None:
    out = rewrite(_finding("dataloader-config", suggested_num_workers=6), "transformers")
    assert out.fix.startswith("TrainingArguments(..., dataloader_num_workers=6,")
    assert out.evidence == {"suggested_num_workers": 6, "pytorch_fix": "loop fix"}
    assert 'precision="bf16-mixed"' in rewrite(_finding("fp32-on-bf16-gpu"), "lightning").fix
    assert "bf16=True" in rewrite(_finding("fp32-on-bf16-gpu"), "transformers").fix


def test_findings_without_an_entry_and_unknown_frameworks_pass_through() -> None:
    f = _finding("memory-pressure")
    assert rewrite(f, "lightning") is f
    assert rewrite(_finding("tf32-off"), "keras").fix == "loop fix"


def test_each_framework_fix_is_declared_by_its_finding_registry_entry() -> None:
    loader = dict(REGISTRY["dataloader-config"].frameworks)
    assert loader["lightning"] is LIGHTNING["dataloader-config"]
    assert loader["transformers"] is TRANSFORMERS["dataloader-config"]
    # the recompiles entry phrases the fix for the Trainer's torch_compile only
    assert [name for name, _ in REGISTRY["recompiles"].frameworks] == ["transformers"]
    assert "recompiles" in TRANSFORMERS and "recompiles" not in LIGHTNING
