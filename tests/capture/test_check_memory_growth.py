"""``check`` on memory that grows every step: a finding with its cost and the line that keeps
the graph, and no such finding on healthy scripts. retain_graph_leak.py is the case the rule
was written against; outputs_kept_for_logging.py (logits kept with their graph) was held out;
each one's --fixed run, well_tuned.py and the unlisted controls stay quiet."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.capture.check_helpers import REPO, CheckRun, check_subprocess

UNLISTED = REPO / "examples" / "unlisted"
OPTS = ["--warmup", "3", "--steps", "4"]
LEAKS = ["retain_graph_leak.py", "outputs_kept_for_logging.py"]
HEALTHY = [
    (UNLISTED / "retain_graph_leak.py", ("--steps", "40", "--fixed")),
    (UNLISTED / "outputs_kept_for_logging.py", ("--steps", "40", "--fixed")),
    (REPO / "examples" / "check" / "well_tuned.py", ("--steps", "40")),
    (UNLISTED / "control_cnn.py", ("--steps", "40")),
    (UNLISTED / "control_transformer.py", ("--steps", "40")),
]
AT_ONCE = 2
"""Checks running at a time: each is one intra-op thread while this process only waits, so
on a 2-core machine two at once take about half the time of one after another. Growth is
read from resident memory, which another process's CPU use does not move."""

Key = tuple[str, tuple[str, ...]]


def _key(script: Path, args: tuple[str, ...]) -> Key:
    return str(script), tuple(args)


@pytest.fixture(scope="module")
def checked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[Path, tuple[str, ...]], CheckRun]]:
    """The check of every case this module's selected tests ask for, started together when the
    first of them runs (``AT_ONCE`` at a time); each test waits for and reads its own run."""
    wanted: list[Key] = []
    for item in request.session.items:
        params = getattr(item, "callspec", None)
        if getattr(item, "module", None) is not request.module or params is None:
            continue
        p = params.params
        args = p.get("args", ("--steps", "40"))
        wanted.append(_key(p["script"] if "args" in p else UNLISTED / p["script"], args))
    pool = ThreadPoolExecutor(max_workers=AT_ONCE)
    runs: dict[Key, Future[CheckRun]] = {}
    for key in dict.fromkeys(wanted):
        out = tmp_path_factory.mktemp(Path(key[0]).stem)
        # A fresh process, as a user runs it: in this one, the heap that earlier tests freed
        # would take a leak's first hundred MiB without the resident memory moving. One
        # intra-op thread: a 2-core machine shared with other tests. The timeout allows for
        # the other runs beside it on a loaded machine.
        runs[key] = pool.submit(
            check_subprocess,
            out,
            key[0],
            *key[1],
            opts=OPTS,
            timeout=600,
            env={"OMP_NUM_THREADS": "1"},
        )

    def run(script: Path, args: tuple[str, ...]) -> CheckRun:
        return runs[_key(script, args)].result()

    yield run
    pool.shutdown(wait=True, cancel_futures=True)


def _growth(r: Any) -> list[dict[str, Any]]:
    assert r.code == 0, r.stderr
    return [f for f in r.report["findings"] if f["id"] == "memory-growth"]


@pytest.mark.slow
@pytest.mark.parametrize("script", LEAKS)
def test_memory_growing_every_step_is_a_finding(checked: Any, script: str) -> None:
    r = checked(UNLISTED / script, ("--steps", "40"))
    (f,) = _growth(r)
    assert f["severity"] in ("warning", "critical")
    growth = f["evidence"]["growth"]
    assert growth["kind"] in ("host", "resident") and growth["mib_per_step"] >= 1.0, growth
    assert "MiB per step" in f["title"] and "runs out in about" in f["title"], f["title"]
    assert ".detach()" in f["fix"]
    # never a clean bill: the leak is named after the verdict, or another finding leads
    assert "But fix: memory growing every step" in r.stdout or "Fix first: " in r.stdout
    assert "No bottleneck worth fixing" not in r.stdout
    if script == "retain_graph_leak.py":
        lines = (UNLISTED / script).read_text().splitlines()
        planted = next(i for i, ln in enumerate(lines, 1) if "retain_graph=True)" in ln)
        assert any(w.endswith(f"{script}:{planted}") for w in f["where"]), f["where"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args"), HEALTHY, ids=lambda v: v.name if isinstance(v, Path) else " ".join(v)
)
def test_healthy_memory_stays_quiet(checked: Any, script: Path, args: tuple[str, ...]) -> None:
    r = checked(script, args)
    assert _growth(r) == [], r.run.get("memory_steps")
    assert r.run["memory_steps"]["rss_bytes"], "the column was recorded"
