"""``scripts/patched_run.py`` (the public-script table's patched runs) finds a patch that never
runs, and the table's check of a patch against the report's remedy finds one that says
otherwise: both on small sources written here, in this process (no subprocess)."""

from __future__ import annotations

import difflib
import sys
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import patched_run  # noqa: E402
from public_scripts_table import _disagrees  # noqa: E402

ORIGINAL = """def configure(model):
    opt = make(model)
    return opt


def loader(ds):
    return DataLoader(
        ds,
        batch_size=8,
        num_workers=4,
    )
"""
# compile inserted after the method's return (never runs); workers taken out (runs)
PATCHED = """def configure(model):
    opt = make(model)
    return opt
    model.compile()


def loader(ds):
    return DataLoader(
        ds,
        batch_size=8,
    )
"""


def _fix_doc(tmp: Path) -> dict[str, Any]:
    (tmp / "train.py").write_text(PATCHED)
    old, new = ORIGINAL.splitlines(keepends=True), PATCHED.splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(old, new, "a/train.py", "b/train.py", n=2))
    first, second = diff.split("@@ -", 2)[1:]
    head = diff.split("@@ -", 1)[0]
    return {
        "changes": [
            {"id": "c1", "status": "patched", "file": "train.py", "summary": "model.compile()",
             "diff": head + "@@ -" + first},
            {"id": "c2", "status": "patched", "file": "train.py",
             "summary": "DataLoader(without num_workers)", "diff": head + "@@ -" + second},
            {"id": "c3", "status": "refused", "file": "train.py", "diff": ""},
        ]
    }  # fmt: skip


def test_changed_lines_are_the_added_ones_or_the_line_before_a_removal() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -3,3 +3,3 @@\n a\n-b\n+c\n d\n@@ -10,2 +10,1 @@\n e\n-f\n"
    assert patched_run.changed_lines(diff) == [4, 10]


def test_a_patch_after_a_return_never_runs_and_one_in_the_call_does(tmp_path: Path) -> None:
    rows = patched_run.watched(_fix_doc(tmp_path), tmp_path)
    assert [r["id"] for r in rows] == ["c1", "c2"]  # the refused change is not watched
    assert rows[0]["spans"] == [(4, 4)]
    assert rows[1]["spans"] == [(8, 11)]  # the whole return statement holding the call
    scope: dict[str, Any] = {"make": lambda m: m, "DataLoader": lambda ds, **kw: kw}
    code = compile(PATCHED, str((tmp_path / "train.py").resolve()), "exec")
    tracer = patched_run._Tracer(rows)
    sys.settrace(tracer.global_trace)
    try:
        exec(code, scope)
        scope["configure"](object())
        assert scope["loader"]([1]) == {"batch_size": 8}
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    assert [r["ran"] for r in rows] == [False, True]


def test_a_patch_that_says_other_than_the_report_is_found() -> None:
    remedy = (
        "DataLoader(self.train_dataset, shuffle=False, batch_size=config.batch_size)  # at t.py:68\n"
        "# no workers: a batch costs 0.49 ms to make in the training process"
    )
    # minGPT's loader patch before the codemod followed the finding
    assert _disagrees("DataLoader(persistent_workers=True, prefetch_factor=4)", remedy)
    assert not _disagrees("DataLoader(without num_workers, persistent_workers)", remedy)
    assert _disagrees("DataLoader(without batch_size)", remedy)
    fused = "torch.optim.AdamW(groups, lr=lr, fused=True)  # at model.py:257"
    assert not _disagrees("AdamW(..., fused=True)", fused)
    assert _disagrees("AdamW(..., foreach=True)", fused)


def test_a_change_is_found_where_another_change_above_it_moved_it() -> None:
    # each change's diff is against the original: compile inserted above the optimizer moved it
    final = ["model = Net()", "model.compile()", "opt = Adam(model.parameters(), fused=True)"]
    assert patched_run.located(final, 2, "opt = Adam(model.parameters(), fused=True)") == 3
    assert patched_run.located(final, 2, "model.compile()") == 2
    assert patched_run.located(final, 2, "gone()") == 2
