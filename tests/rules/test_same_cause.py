"""One finding per cause: ``rules/same_cause.py`` folds two findings one cause fired at one site
(``gc.collect()`` as housekeeping and as garbage collection; an epoch restart as the loader's
finding and as rare long steps), and leaves them apart when the sites or mechanisms differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchdoctor.rules.finding import Finding
from torchdoctor.rules.same_cause import fold_same_cause

SITE = "/w/train.py:12"
LOOP = "/w/train.py:17"


def _f(
    id_: str, saving: float, evidence: dict[str, Any], where: list[str], sev: str = "warning"
) -> Finding:
    return Finding(
        id=id_,  # type: ignore[arg-type]
        title=id_,
        severity=sev,  # type: ignore[arg-type]
        saving_ms_per_step=saving,
        share_of_step=saving / 100.0,
        evidence={"mean_step_ms": 100.0, **evidence},
        fix="# fix",
        where=where,
    )


def _housekeeping(what: str = "gc.collect", site: str = SITE) -> Finding:
    return _f("housekeeping-in-step", 40.0, {"call": {"what": what, "site": site}}, [site])


def _gc(site: str = SITE, ms: float = 45.0) -> Finding:
    return _f("gc-in-step", ms, {"gc_ms_per_step": ms}, [site], sev="critical")


def test_gc_collect_reported_once_with_both_evidences() -> None:
    (f,) = fold_same_cause([_housekeeping(), _gc()], {})
    assert f.id == "housekeeping-in-step"  # it names the call and its line
    assert f.evidence["gc-in-step_evidence"]["gc_ms_per_step"] == 45.0
    assert f.saving_ms_per_step == 45.0  # the larger, not 85: one time measured twice
    assert f.severity == "critical"
    assert f.where == [SITE]


@pytest.mark.parametrize(
    "pair",
    [
        (lambda: _housekeeping("torch.save"), lambda: _gc()),  # another mechanism
        (lambda: _housekeeping(), lambda: _gc(site="/w/train.py:30")),  # another line
    ],
)
def test_other_sites_or_mechanisms_stay_apart(pair: Any) -> None:
    a, b = pair[0](), pair[1]()
    assert [f.id for f in fold_same_cause([a, b], {})] == [a.id, b.id]


def _record(inner_by_step: dict[int, str]) -> dict[str, Any]:
    samples = {
        str(step): [{"stack": [f"{line} in main", "/w/train.py:40 in <module>"], "samples": 30}]
        for step, line in inner_by_step.items()
    }
    return {
        "repeats": [{"kind": "dataloader iterator", "site": LOOP, "calls": 2}],
        "monitor": {"long_step_samples": samples},
    }


def _rare(steps: dict[int, float]) -> Finding:
    ev = {"long_steps": [{"step": s, "ms": ms} for s, ms in steps.items()], "median_step_ms": 10.0}
    return _f("rare-long-steps", 20.0, ev, [f"{LOOP} in main"])


def _restart() -> Finding:
    ev = {"data_wait_ms_per_step": 50.0, "restart_ms_per_step": 60.0}
    return _f("dataloader-config", 50.0, ev, [], sev="critical")


def test_host_time_spent_printing_is_the_print_not_compile() -> None:
    # debug_print_every_step.py: printing tensors every step formats them with thousands of
    # tiny operators; host-bound named the print line first and prescribed compile, which
    # fix then patched in while the print stayed
    work = _f("work-beside-step", 62.8, {"function": "main"}, [LOOP], sev="critical")
    host = _f("host-bound", 11.4, {"top_level_ops_per_step": 16979}, [LOOP + " in main", SITE])
    (kept,) = fold_same_cause([work, host], {})
    assert kept.id == "work-beside-step" and kept.saving_ms_per_step == pytest.approx(62.8)
    assert "host-bound_evidence" in kept.evidence and kept.where[0] == LOOP and SITE in kept.where


@pytest.mark.parametrize(
    ("first", "saving"),
    [(SITE, 11.4), (LOOP, 80.0)],  # host-bound's ops elsewhere; or more than the work covers
)
def test_host_time_elsewhere_stays_its_own_finding(first: str, saving: float) -> None:
    work = _f("work-beside-step", 62.8, {}, [LOOP], sev="critical")
    host = _f("host-bound", saving, {}, [first])
    assert {f.id for f in fold_same_cause([work, host], {})} == {"work-beside-step", "host-bound"}


def test_epoch_restart_reported_once() -> None:
    rec = _record({6: LOOP, 11: LOOP, 13: "/w/train.py:19"})
    rare = _rare({6: 300.0, 11: 280.0, 13: 60.0})  # the small one: noise at another line
    (f,) = fold_same_cause([_restart(), rare], rec)
    assert f.id == "dataloader-config"
    assert f.evidence["rare-long-steps_evidence"]["long_steps"][0]["step"] == 6
    # the loader's saving is the data wait, rare-long-steps the rest of the long steps
    assert f.saving_ms_per_step == pytest.approx(70.0)
    assert f.share_of_step == pytest.approx(0.70)


def test_long_steps_elsewhere_are_not_the_restart() -> None:
    rec = _record({6: "/w/train.py:25", 11: "/w/train.py:25", 13: LOOP})  # an evaluation
    rare = _rare({6: 300.0, 11: 280.0, 13: 60.0})
    assert [f.id for f in fold_same_cause([_restart(), rare], rec)] == [
        "dataloader-config",
        "rare-long-steps",
    ]


def test_long_steps_the_watcher_never_saw_are_not_the_restart() -> None:
    # a loaded machine's long steps in mid-epoch (steps 5 and 33 of 5-batch epochs, the main
    # thread waiting for a core): the watcher judged them by its median as they ran and took no
    # sample, so nothing places them at the loop's line; the restart is reported by the loader
    rec = _record({6: LOOP, 11: LOOP})
    rare = _rare({5: 227.6, 33: 237.9})
    assert [f.id for f in fold_same_cause([_restart(), rare], rec)] == [
        "dataloader-config",
        "rare-long-steps",
    ]


def test_epoch_starts_beside_unsampled_noise_are_the_restart() -> None:
    # under load: three epoch starts long beyond their data wait, sampled at the loop's line,
    # and more excess in steps the watcher never saw run long (judged by the median before
    # them): the restart is reported once, not again as rare long steps
    rec = _record({6: LOOP, 31: LOOP, 36: LOOP})
    steps = {2: 62.4, 4: 65.4, 5: 54.2, 6: 80.9, 18: 56.4, 19: 46.6, 24: 81.5, 31: 102.1, 36: 48.3}
    (f,) = fold_same_cause([_restart(), _rare(steps)], rec)
    assert f.id == "dataloader-config" and "rare-long-steps_evidence" in f.evidence
    # long steps sampled elsewhere still count against the restart
    rec = _record({n: LOOP if n in (6, 31, 36) else "/w/train.py:25" for n in steps})
    assert len(fold_same_cause([_restart(), _rare(steps)], rec)) == 2


def test_workers_kept_across_epochs_are_not_the_restart() -> None:
    loader = _f("dataloader-config", 50.0, {"data_wait_ms_per_step": 50.0}, [])
    rec = _record({6: LOOP})
    assert len(fold_same_cause([loader, _rare({6: 300.0})], rec)) == 2


GC_EVERY_STEP = """
import gc
import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
junk = [[i] * 4 for i in range(20000)]  # objects for the collector to walk
for step in range(30):
    loss = model(torch.randn(16, 64)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    gc.collect()
"""

RESTART_EVERY_EPOCH = """
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.randn(32), i % 4


def init(_):
    time.sleep(0.3)  # a worker slow to start (imports, opening files)


model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(Items(), batch_size=8, num_workers=1, worker_init_fn=init)
for epoch in range(8):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


@pytest.mark.slow
def test_check_reports_a_gc_collect_once(tmp_path: Path) -> None:
    from tests.capture.check_helpers import check_inprocess

    script = tmp_path / "train.py"
    script.write_text(GC_EVERY_STEP)
    r = check_inprocess(tmp_path / "runs", script)
    assert r.code == 0, r.stderr
    ids = [f["id"] for f in r.report["findings"]]
    assert "gc-in-step" not in ids, ids
    (f,) = [f for f in r.report["findings"] if f["id"] == "housekeeping-in-step"]
    assert f["title"].startswith("gc.collect() every step at "), f["title"]
    assert "train.py:13:" in f["title"], f["title"]
    assert "gc-in-step_evidence" in f["evidence"]


RESTART_IDS = ("repeated-construction", "dataloader-config")


@pytest.mark.slow
def test_check_reports_an_epoch_restart_once(tmp_path: Path) -> None:
    from tests.capture.check_helpers import check_inprocess

    script = tmp_path / "train.py"
    script.write_text(RESTART_EVERY_EPOCH)
    opts = ["--warmup", "3", "--steps", "5"]  # the window holds one epoch start
    r = check_inprocess(tmp_path / "runs", script, opts=opts)
    assert r.code == 0, r.stderr
    ids = [f["id"] for f in r.report["findings"]]
    # the epoch starts: the steps whose batch waited for the new workers' 0.3 s start
    waits = r.run["steps"]["data_wait_ms"]
    starts = {n for n, w in enumerate(waits, 1) if w >= 200.0}
    assert len(starts) >= 6, waits  # 8 epochs of 5 batches; the run's first steps are its own
    # never as rare long steps beside the restart's finding. On a loaded machine other steps may
    # run long (the main thread waiting for a core half the window): those are not the restart
    # and may be reported apart, where the watcher did not see them run long as they ran
    for f in (f for f in r.report["findings"] if f["id"] == "rare-long-steps"):
        long = {row["step"] for row in f["evidence"]["long_steps"]}
        assert not long & starts, (sorted(long), sorted(starts))
    # the restart, once: the workers started again (or the iterator rebuilt) at the loop's line
    kept = [f for f in r.report["findings"] if f["id"] in RESTART_IDS]
    assert len(kept) == 1, ids
    (line,) = [n for n, t in enumerate(RESTART_EVERY_EPOCH.splitlines(), 1) if "in loader" in t]
    assert any(f"train.py:{line}" in w for w in kept[0]["where"]), kept[0]["where"]
    # the long epoch-start steps, when they were long beyond their data wait, are in it
    folded = [f["id"] for f in r.report["findings"] if "rare-long-steps_evidence" in f["evidence"]]
    assert folded in ([], [kept[0]["id"]]), ids
