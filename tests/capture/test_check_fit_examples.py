"""``check`` on scripts written for this issue (not the ones the rules were written against):
the top finding is the planted cause and its fix fits the code in front of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.capture.check_helpers import EXAMPLES, check_inprocess
from torchdoctor.code_paths import PACKAGE_DIR


def line_of(name: str, text: str, relative: bool = False) -> str:
    path = EXAMPLES / name
    lines = path.read_text().splitlines()
    line = next(i for i, ln in enumerate(lines, 1) if text in ln)
    shown = os.path.relpath(path) if relative and str(path).startswith(os.getcwd()) else path
    return f"{shown}:{line}"  # fixes show the site relative to the working directory


@pytest.mark.slow
def test_padded_text_loader_fix_keeps_collate_shuffle_drop_last(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "padded_text_loader.py")
    assert r.code == 0, r.stderr
    assert r.top["id"] == "dataloader-config", r.stdout
    # the user's call, batch size given positionally, rebuilt with every argument kept; on few
    # CPUs a comment line after it may say how long the step will still wait
    call, *notes = r.top["fix"].splitlines()
    assert call.startswith("DataLoader(Sentences(), batch_size=24, shuffle=True, ")
    for kept in ("collate_fn=pad_batch", "drop_last=True"):
        assert kept in call
    assert "num_workers=" in call and "num_workers=0" not in call
    assert call.endswith(
        f"# at {line_of('padded_text_loader.py', 'loader = DataLoader(', relative=True)}"
    )
    assert all(n.startswith("# ") for n in notes), notes


@pytest.mark.slow
def test_workers_at_cores_points_at_the_item_cost(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "workers_at_cores.py")
    assert r.code == 0, r.stderr
    assert r.top["id"] == "dataloader-config", r.stdout
    assert "already uses this rank's" in r.top["fix"] and "ms per item" in r.top["fix"]
    # every setting is already there: no rebuilt call, nothing suggested twice
    for already_set in ("DataLoader(", "persistent_workers=True", "prefetch_factor=4"):
        assert already_set not in r.top["fix"]


@pytest.mark.slow
def test_varying_index_width_names_mark_dynamic_idx_1_and_it_works(tmp_path: Path) -> None:
    script = EXAMPLES / "varying_index_width.py"
    r = check_inprocess(tmp_path / "a", script, "--backend", "eager")
    assert r.code == 0, r.stderr
    assert r.top["id"] == "recompiles", r.stdout
    assert r.top["fix"].startswith("torch._dynamo.mark_dynamic(idx, 1)")
    # the JSON verdict sees the run-level finding too, not only the trace's
    assert "Fix first: recompiles" in r.report["verdict"] == r.report["analysis"]["verdict"]
    # the advice applied: the same script with mark_dynamic(idx, 1) stops recompiling
    fixed = check_inprocess(tmp_path / "b", script, "--backend", "eager", "--mark-dynamic")
    assert fixed.run["compile"]["recompiles_in_window"] == 0
    assert fixed.run["compile"]["recompiles"] < r.run["compile"]["recompiles"]


@pytest.mark.slow
def test_compiled_tiny_ops_is_not_told_to_compile(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "compiled_tiny_ops.py", "--backend", "eager")
    assert r.code == 0, r.stderr
    assert r.run["compile"]["compile_calls"][0]["backend"] == "eager"
    for f in r.report["findings"]:
        assert "torch.compile(model" not in f["fix"], f
    top = r.top
    assert top["id"] == "host-bound" and "fused=True" in top["fix"]
    assert "Adam(model.parameters(), lr=1e-3, fused=True)" in top["fix"]  # the script's own call


@pytest.mark.slow
def test_sync_wrappers_add_no_graph_break_and_nothing_points_at_us(tmp_path: Path) -> None:
    script = EXAMPLES / "sync_in_compiled.py"
    r = check_inprocess(tmp_path, script, "--backend", "eager")
    assert r.code == 0, r.stderr
    breaks = r.run["compile"]["graph_breaks"]
    # exactly the user's two host reads, each at its own line
    assert sorted(b["site"] for b in breaks) == sorted(
        [
            line_of("sync_in_compiled.py", "scale = torch.Tensor.item("),
            line_of("sync_in_compiled.py", "widths = "),
        ]
    )
    assert r.run["own_frames"] == {} and r.run["compile"]["traced_with_wrappers_off"] > 0
    text = json.dumps(r.report) + r.stdout
    assert PACKAGE_DIR not in text  # no finding, site or break names a file of ours


@pytest.mark.slow
def test_checkpointed_gemms_name_recomputation_not_overhead(tmp_path: Path) -> None:
    r = check_inprocess(tmp_path, EXAMPLES / "checkpointed_gemms.py", "--dim", "256")
    assert r.code == 0, r.stderr
    ids = [f["id"] for f in r.report["findings"]]
    assert "host-bound" not in ids, r.stdout
    f = next(f for f in r.report["findings"] if f["id"] == "activation-recompute")
    assert f["evidence"]["checkpointed_calls_per_step"] == 4.0
    assert 0.05 < f["share_of_step"] < 0.6  # forward is roughly a third of forward+backward
    assert r.run["ops"]["gemm_share"] > 0.5
